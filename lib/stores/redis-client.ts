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

/**
 * Whether `err` is an Error named `name`, or made by a class of that name or
 * one it extends: node-redis 5+ answers an error reply with a SimpleError or
 * BlobError (which extend ErrorReply), whose `name` stays 'Error'.
 */
function isErrorOf(err: unknown, ...names: string[]): boolean {
  if (!(err instanceof Error)) return false;
  if (names.includes(err.name)) return true;
  for (let proto: object | null = Object.getPrototypeOf(err); proto !== null && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    const ctor = (proto as { constructor?: { name?: unknown } }).constructor;
    if (typeof ctor?.name === 'string' && names.includes(ctor.name)) return true;
  }
  return false;
}

/** An error reply from Redis (ioredis's ReplyError, node-redis's ErrorReply and its SimpleError, BlobError): it answered. */
export function isErrorReply(err: unknown): boolean {
  return isErrorOf(err, 'ReplyError', 'ErrorReply');
}

/**
 * The client's own timeout: ioredis's commandTimeout (a plain Error, "Command timed out"), node-redis's
 * TimeoutError. Either rejects the call while the command may still wait on the connection for its answer.
 */
export function isClientTimeout(err: unknown): boolean {
  return (err instanceof Error && err.message === 'Command timed out') || isErrorOf(err, 'TimeoutError');
}

/**
 * A node-redis client (4+), not an ioredis one: it has `isOpen`, and no
 * `defineCommand`. rate-limiter-flexible must be told (its
 * `useRedisPackage`): it knows node-redis only by the class name of v4's
 * clients ('Commander'); v5's are made by a `class extends` of another
 * name, and taken for ioredis, every count failed with a TypeError.
 */
export function isNodeRedis(client: unknown): boolean {
  const c = client as { isOpen?: unknown; defineCommand?: unknown } | null;
  return typeof c?.isOpen === 'boolean' && typeof c.defineCommand !== 'function';
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
    // ioredis: closes the socket and connects again at once (its retryStrategy after that); node-redis has no such call
    ...(typeof (client as { disconnect?: unknown }).disconnect === 'function' && typeof (client as { status?: unknown }).status === 'string'
      ? { reconnect: () => (client as { disconnect(reconnect: boolean): void }).disconnect(true) }
      : {}),
  };
}

/** The settings of the gate of a Redis client, the same for every part on it (sharedServiceGate()). */
export function redisGateOptions(client: unknown): { name: string; deadlineMs: number; client: ServiceClient } {
  return { name: 'Redis', deadlineMs: REDIS_DEADLINE_MS, client: redisServiceClient(client) };
}
