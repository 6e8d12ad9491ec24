/**
 * What the gate of a Redis client (core/service-gate.ts) reads of the
 * client itself, an ioredis or node-redis client: whether it is one
 * connection or a cluster, whether it is connected, when it has made its
 * connection again, which rejections are Redis's answers and which its own
 * timeouts. Nothing here changes the client or its options.
 */
import { REDIS_DEADLINE_MS } from './redis-deadline';
import type { ServiceClient } from './types';

interface EventSource {
  on(event: 'ready', listener: () => void): unknown;
}

/** What tells whether a client is connected (ioredis's `status`, node-redis's `isReady`), and whether it is a cluster. */
interface ClientShape {
  readonly status: unknown;
  readonly isReady: unknown;
  /** ioredis: true on a Cluster, false on a Redis. */
  readonly isCluster: unknown;
  /** node-redis: a cluster's. */
  readonly getSlotMaster: unknown;
}

/** An ioredis Cluster, or a node-redis cluster: calls go to one connection per shard. */
export function isRedisCluster(client: unknown): boolean {
  const { isCluster, getSlotMaster } = client as Partial<ClientShape>;
  return isCluster === true || typeof getSlotMaster === 'function';
}

/** An error reply from Redis (ioredis's ReplyError, node-redis's ErrorReply): it answered. */
export function isErrorReply(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const names = [err.name, err.constructor?.name];
  return names.includes('ReplyError') || names.includes('ErrorReply');
}

/**
 * The client's own timeout: ioredis's commandTimeout (a plain Error, "Command timed out"), node-redis's
 * TimeoutError. Either rejects the call while the command may still wait on the connection for its answer.
 */
export function isClientTimeout(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  return err.message === 'Command timed out' || err.name === 'TimeoutError' || err.constructor?.name === 'TimeoutError';
}

/** The ServiceClient of `client` (an ioredis or node-redis client; anything else: nothing to read). */
export function redisServiceClient(client: unknown): ServiceClient {
  const events = client as Partial<EventSource>;
  return {
    oneConnection: !isRedisCluster(client),
    // ioredis and node-redis say 'ready' on every connection made, once what it had held is resent (or dropped)
    onConnect: (listener) => {
      if (typeof events.on === 'function') events.on('ready', listener);
    },
    connected: () => {
      const { status, isReady } = client as Partial<ClientShape>;
      if (typeof status === 'string') return status === 'ready';
      if (typeof isReady === 'boolean') return isReady;
      return true;
    },
    isReply: isErrorReply,
    isClientTimeout,
  };
}

/** The settings of the gate of a Redis client, the same for every part on it (sharedServiceGate()). */
export function redisGateOptions(client: unknown): { name: string; deadlineMs: number; client: ServiceClient } {
  return { name: 'Redis', deadlineMs: REDIS_DEADLINE_MS, client: redisServiceClient(client) };
}
