/**
 * DPoP proof replay (RFC 9449 §11.1) shared by every instance on one Redis:
 * the ReplayStore that create-issuer and requireBearer() pick when given a
 * Redis client (`dpop.redis`, `dpopProofs.redis`).
 */
import type { ReplayStore } from './types';

/** The one ioredis call the Redis store makes (an ioredis `Redis` or `Cluster` fits). */
export interface RedisSetNxClient {
  set(key: string, value: string, px: 'PX', milliseconds: number, nx: 'NX'): Promise<'OK' | null>;
}

export interface RedisReplayStoreOptions {
  client: RedisSetNxClient;
  /** Prepended to every key; default `ecc:dpop:`. */
  prefix?: string;
  now?: () => number;
}

/**
 * A ReplayStore shared by every instance on one Redis: `SET key 1 PX ttl
 * NX`, atomic, so a proof replayed to another instance is refused too.
 * Redis errors propagate (the caller answers 503). It sets no deadline of
 * its own: the issuer and requireBearer() call it through the gate of its
 * Redis client (ReplayStoreHealth.monitor), which gives up on a stalled
 * Redis after the deadline and knows which commands are still unanswered.
 */
export class RedisReplayStore implements ReplayStore {
  private readonly client: RedisSetNxClient;
  private readonly prefix: string;
  private readonly now: () => number;

  constructor(options: RedisReplayStoreOptions) {
    this.client = options.client;
    this.prefix = options.prefix ?? 'ecc:dpop:';
    this.now = options.now ?? Date.now;
  }

  async consume(key: string, expiresAt: number): Promise<boolean> {
    const ttl = Math.ceil(expiresAt - this.now());
    if (ttl <= 0) return true;
    return (await this.client.set(this.prefix + key, '1', 'PX', ttl, 'NX')) === 'OK';
  }
}
