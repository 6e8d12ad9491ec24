/**
 * The default single-use memory for DPoP proof `jti`s, in this process. The
 * contract (ReplayStore) is in stores/types.ts; the store shared over Redis
 * is stores/redis-replay.ts.
 */
import type { ReplayStore } from '../stores/types';

export type { ReplayStore };

export interface MemoryReplayStoreOptions {
  /**
   * Most keys remembered at once (the default 250 000 is about 27 MB: 107
   * bytes a key with its Map entry and heap slot, heap measured after a
   * full GC): 830 proofs per second over a 300 s window. When it is full
   * of unexpired keys, those that expire first are forgotten and the acceptance window
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
 * (key, expiry in seconds) pairs in a binary min-heap by expiry: the pair
 * expiring first is always at the top, whatever order the keys came in (a
 * proof's expiry follows its client's clock, so keys from clients whose
 * clocks lag arrive out of order). Two arrays, doubled when full and halved
 * when under a quarter used: about 12 bytes a pair. Keys mostly arrive
 * expiring last, so a push rarely moves up more than a level; a pop walks
 * down the tree, about 18 levels at 250 000 pairs.
 */
class ExpiryHeap {
  private keys: (string | undefined)[] = new Array<string | undefined>(16).fill(undefined);
  private expiries = new Int32Array(16);
  size = 0;

  push(key: string, expiry: number): void {
    if (this.size === this.keys.length) this.resize(this.keys.length * 2);
    const { keys, expiries } = this;
    let i = this.size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (expiries[parent] <= expiry) break;
      keys[i] = keys[parent];
      expiries[i] = expiries[parent];
      i = parent;
    }
    keys[i] = key;
    expiries[i] = expiry;
  }

  /** The key of the pair expiring first; only while size > 0. */
  firstKey(): string {
    return this.keys[0]!;
  }

  firstExpiry(): number {
    return this.expiries[0];
  }

  /** Removes the pair expiring first; only while size > 0. */
  pop(): void {
    const { keys, expiries } = this;
    const last = --this.size;
    const key = keys[last];
    const expiry = expiries[last];
    keys[last] = undefined;
    if (last > 0) {
      let i = 0;
      for (;;) {
        let child = 2 * i + 1;
        if (child >= last) break;
        if (child + 1 < last && expiries[child + 1] < expiries[child]) child++;
        if (expiries[child] >= expiry) break;
        keys[i] = keys[child];
        expiries[i] = expiries[child];
        i = child;
      }
      keys[i] = key;
      expiries[i] = expiry;
    }
    if (keys.length > 1024 && this.size < keys.length / 4) this.resize(keys.length / 2);
  }

  private resize(capacity: number): void {
    const keys = new Array<string | undefined>(capacity).fill(undefined);
    for (let i = 0; i < this.size; i++) keys[i] = this.keys[i];
    const expiries = new Int32Array(capacity);
    expiries.set(this.expiries.subarray(0, this.size));
    this.keys = keys;
    this.expiries = expiries;
  }
}

/**
 * A process-local ReplayStore: a Map from key to expiry, and the same pairs
 * in a heap by expiry, from whose top the expired keys are dropped as new
 * ones come. Every key it holds is unexpired, so a full store only has to
 * forget the key that expires first. (Keys used to be kept in insertion
 * order, first in the Map's own order, then in a ring: a key from a client
 * whose clock lags expires before keys that came earlier, so when full the
 * store walked the whole Map for expired keys, 11-40 ms at 250 000 keys.)
 * It protects one instance only; several instances need a shared store
 * (RedisReplayStore, stores/redis-replay.ts) to refuse a proof replayed to another instance.
 */
export class MemoryReplayStore implements ReplayStore {
  private bound: number;
  private readonly now: () => number;
  /** Key → expiry in seconds from `base`, rounded up: small integers keep entries small. */
  private readonly entries = new Map<string, number>();
  /** The same keys and expiries (each key once), the first to expire on top. */
  private readonly heap = new ExpiryHeap();
  private readonly base: number;
  /** Epoch ms: every key forgotten to make room expired by then (see forgottenUntil). */
  private forgotten = Number.NEGATIVE_INFINITY;

  constructor(options: MemoryReplayStoreOptions = {}) {
    this.bound = Math.max(1, Math.floor(options.max ?? 250_000));
    this.now = options.now ?? Date.now;
    this.base = this.now();
  }

  /** Most keys remembered at once. */
  get max(): number {
    return this.bound;
  }

  /**
   * Raises the bound to `max` when that is more, never lowers it: for a store
   * shared by callers that each asked for a bound (the standalone
   * requireBearer()s of a process), so each gets at least its own. Keys
   * forgotten before stay forgotten: proofs that old are still refused.
   */
  raiseMax(max: number): void {
    this.bound = Math.max(this.bound, Math.floor(max));
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
    // after trim() every key still held is unexpired
    if (this.entries.has(key)) return false;
    if (expiresAt <= now) return true; // nothing left to protect
    if (this.entries.size >= this.bound) this.forgetFirstToExpire();
    // the heap holds it as an Int32 (68 years from start): the Map gets the same value
    const expiry = Math.min(Math.ceil((expiresAt - this.base) / 1000), 0x7fffffff);
    this.entries.set(key, expiry);
    this.heap.push(key, expiry);
    return true;
  }

  /**
   * Full of unexpired keys: forgets the one that expires first and from then
   * on refuses every key that expires no later than it does. Any key that
   * expires later and was seen before is still here: keys are only ever
   * forgotten through this, or once expired.
   */
  private forgetFirstToExpire(): void {
    const expiry = this.heap.firstExpiry();
    this.entries.delete(this.heap.firstKey());
    this.heap.pop();
    this.forgotten = Math.max(this.forgotten, this.toMs(expiry));
  }

  private toMs(relativeSeconds: number): number {
    return this.base + relativeSeconds * 1000;
  }

  /** Drops every expired key (each key is dropped once). */
  private trim(now: number): void {
    while (this.heap.size > 0 && this.toMs(this.heap.firstExpiry()) <= now) {
      this.entries.delete(this.heap.firstKey());
      this.heap.pop();
    }
  }
}
