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
   * Most keys remembered at once (the default 250 000 is about 27 MB: 107
   * bytes a key with its Map entry and queue slot, heap measured after a
   * full GC): 830 proofs per second over a 300 s window. When it is full
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
 * A first-in first-out queue of (key, expiry in seconds) pairs: a ring of
 * two arrays whose size is a power of two, doubled when full and halved when
 * under a quarter used, so it costs about 12 bytes a pair.
 */
class KeyQueue {
  private keys: (string | undefined)[] = new Array<string | undefined>(16).fill(undefined);
  private expiries = new Int32Array(16);
  private head = 0;
  size = 0;

  push(key: string, expiry: number): void {
    if (this.size === this.keys.length) this.resize(this.keys.length * 2);
    const i = (this.head + this.size) & (this.keys.length - 1);
    this.keys[i] = key;
    this.expiries[i] = expiry;
    this.size++;
  }

  /** The oldest pair's key; only while size > 0. */
  oldestKey(): string {
    return this.keys[this.head]!;
  }

  oldestExpiry(): number {
    return this.expiries[this.head];
  }

  shift(): void {
    this.keys[this.head] = undefined;
    this.head = (this.head + 1) & (this.keys.length - 1);
    this.size--;
    if (this.keys.length > 1024 && this.size < this.keys.length / 4) this.resize(this.keys.length / 2);
  }

  private resize(capacity: number): void {
    const keys = new Array<string | undefined>(capacity).fill(undefined);
    const expiries = new Int32Array(capacity);
    const mask = this.keys.length - 1;
    for (let n = 0; n < this.size; n++) {
      const i = (this.head + n) & mask;
      keys[n] = this.keys[i];
      expiries[n] = this.expiries[i];
    }
    this.keys = keys;
    this.expiries = expiries;
    this.head = 0;
  }
}

/**
 * A process-local ReplayStore: a Map from key to expiry, and the keys in
 * insertion order in a queue of their own, trimmed from its oldest end as
 * keys expire. (The Map's own insertion order served as that queue before:
 * V8 leaves a deleted entry as a hole that every walk from the start has to
 * step over until the table is rebuilt, so reading the oldest entry cost
 * 8-14 µs a proof at 100-800 proofs a second, 100 µs when full.) It
 * protects one instance only; several instances need a shared store
 * (RedisReplayStore) to refuse a proof replayed to another instance.
 */
export class MemoryReplayStore implements ReplayStore {
  readonly max: number;
  private readonly now: () => number;
  /** Key → expiry in seconds from `base`, rounded up: small integers keep entries small. */
  private readonly entries = new Map<string, number>();
  /** Keys and their expiries in insertion order; a pair whose key now maps to another expiry (or none) is stale. */
  private readonly queue = new KeyQueue();
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
    // the queue holds it as an Int32 (68 years from start): the Map gets the same value
    const expiry = Math.min(Math.ceil((expiresAt - this.base) / 1000), 0x7fffffff);
    this.entries.set(key, expiry);
    this.queue.push(key, expiry);
    return true;
  }

  /**
   * Full of unexpired keys: forgets the one remembered longest and from then
   * on refuses every key that expires no later than it does. Any key that
   * expires later and was seen before is still here: keys are only ever
   * forgotten through this, or once expired.
   */
  private forgetOldest(): void {
    while (this.queue.size > 0) {
      const key = this.queue.oldestKey();
      const expiry = this.queue.oldestExpiry();
      this.queue.shift();
      if (this.entries.get(key) !== expiry) continue; // stale: dropped or remembered again since
      this.entries.delete(key);
      this.forgotten = Math.max(this.forgotten, this.toMs(expiry));
      return;
    }
  }

  private toMs(relativeSeconds: number): number {
    return this.base + relativeSeconds * 1000;
  }

  /** Drops the expired keys at the oldest end (each key is dropped once: constant time per insert on average). */
  private trim(now: number): void {
    while (this.queue.size > 0) {
      const expiry = this.queue.oldestExpiry();
      if (this.toMs(expiry) > now) return;
      const key = this.queue.oldestKey();
      this.queue.shift();
      if (this.entries.get(key) === expiry) this.entries.delete(key);
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
