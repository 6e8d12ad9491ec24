/**
 * Single-use memory for DPoP proof `jti`s (RFC 9449 §11.1): remembers a key
 * until `expiresAt` (epoch ms). `consume` answers true when the key was not
 * remembered yet (first use) and records it in the same step, so two
 * requests racing with one proof cannot both see true.
 */
export interface ReplayStore {
  consume(key: string, expiresAt: number): Promise<boolean> | boolean;
  /**
   * For a bounded store that had to forget keys to make room: epoch ms at or
   * before which a key may have been forgotten. A proof expiring by then can
   * no longer be told from a replay; verifyDpopProof refuses it as too old
   * (and consume() answers false for it).
   */
  readonly forgottenUntil?: number;
}

export interface MemoryReplayStoreOptions {
  /**
   * Most keys remembered at once (the default 250 000 is about 20 MB at 77
   * bytes each): 830 proofs per second over a 300 s window. When it is full
   * of unexpired keys, the oldest are forgotten and the acceptance window
   * shrinks to what the store still holds: a proof old enough that its key
   * may have been forgotten is refused as too old (`iat_too_old`), so none
   * can be replayed, while fresh proofs (a client signs one per request)
   * keep being accepted. At 5 000 proofs a second the default still holds
   * the last 50 s. Memory stays bounded whatever the rate.
   */
  max?: number;
  now?: () => number;
}

/**
 * A process-local ReplayStore: a Map in insertion order, trimmed from its
 * oldest end as keys expire. It protects one instance only; several
 * instances need a shared store (RedisReplayStore) to refuse a proof
 * replayed to another instance.
 */
export class MemoryReplayStore implements ReplayStore {
  readonly max: number;
  private readonly now: () => number;
  /** Seconds from `base`, rounded up: small integers keep entries small. */
  private readonly entries = new Map<string, number>();
  private readonly base: number;
  /** When full, no sweep before this (epoch ms): the earliest expiry seen by the last sweep. */
  private nextSweep = Number.NEGATIVE_INFINITY;
  /** Epoch ms: every key forgotten to make room expired by then (see forgottenUntil). */
  private forgotten = Number.NEGATIVE_INFINITY;

  constructor(options: MemoryReplayStoreOptions = {}) {
    this.max = Math.max(1, Math.floor(options.max ?? 250_000));
    this.now = options.now ?? Date.now;
    this.base = this.now();
  }

  get size(): number {
    return this.entries.size;
  }

  get forgottenUntil(): number | undefined {
    return this.forgotten === Number.NEGATIVE_INFINITY ? undefined : this.forgotten;
  }

  consume(key: string, expiresAt: number): boolean {
    const now = this.now();
    this.trim(now);
    // its key may have been forgotten: it cannot be told from a replay
    if (expiresAt <= this.forgotten) return false;
    const previous = this.entries.get(key);
    if (previous !== undefined) {
      if (this.toMs(previous) > now) return false;
      this.entries.delete(key);
    }
    if (expiresAt <= now) return true; // nothing left to protect
    if (this.entries.size >= this.max && !this.sweep(now)) this.forgetOldest();
    this.entries.set(key, Math.ceil((expiresAt - this.base) / 1000));
    return true;
  }

  /**
   * Full of unexpired keys: forgets the one remembered longest and from then
   * on refuses every key that expires no later than it does. Any key that
   * expires later and was seen before is still here: keys are only ever
   * forgotten through this, or once expired.
   */
  private forgetOldest(): void {
    const oldest = this.entries.entries().next();
    if (oldest.done) return;
    this.entries.delete(oldest.value[0]);
    this.forgotten = Math.max(this.forgotten, this.toMs(oldest.value[1]));
  }

  private toMs(relativeSeconds: number): number {
    return this.base + relativeSeconds * 1000;
  }

  /** Drops up to two expired keys from the oldest end: keeps pace with one insert per call. */
  private trim(now: number): void {
    for (let i = 0; i < 2; i++) {
      const oldest = this.entries.entries().next();
      if (oldest.done || this.toMs(oldest.value[1]) > now) return;
      this.entries.delete(oldest.value[0]);
    }
  }

  /** Drops every expired key; true when room was made. At most once until the earliest expiry. */
  private sweep(now: number): boolean {
    if (now < this.nextSweep) return false;
    let earliest = Number.POSITIVE_INFINITY;
    for (const [key, expiry] of this.entries) {
      const at = this.toMs(expiry);
      if (at <= now) this.entries.delete(key);
      else if (at < earliest) earliest = at;
    }
    this.nextSweep = earliest;
    return this.entries.size < this.max;
  }
}

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
 * Redis errors propagate (the caller answers 503).
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
