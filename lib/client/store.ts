/** A token as the shared store keeps it. */
export interface StoredToken {
  accessToken: string;
  tokenType: string;
  scope: string;
  /** Epoch milliseconds. */
  expiresAt: number;
  /** The token's whole lifetime in milliseconds (skew and refresh window are derived from it). */
  lifetime: number;
}

/**
 * What `TokenStore.get()` finds: the token as stored and, when the store can
 * tell, how long it still keeps it.
 */
export interface FoundToken extends StoredToken {
  /**
   * Optional: milliseconds the store still keeps this entry (Redis: the
   * key's PTTL, read with the value). It bounds the token's expiry: the
   * entry's time to live counts from its write, where `expiresAt` is the
   * writer's clock, which may run ahead of this instance's.
   */
  ttlMs?: number;
}

/**
 * Ends a lock taken with `TokenStore.lock()`. `failed`: no token came of it
 * (the request or the write failed), so callers waiting on the lock should
 * ask on their own (see `lock()`).
 */
export type ReleaseLock = (failed?: boolean) => Promise<void>;

/**
 * A store shared by several processes (e.g. Redis) under the in-process cache.
 * Entries live until the token expires (`ttlMs`); a store that fails is
 * skipped with a `store.error` event, never fails a call.
 */
export interface TokenStore {
  /** The entry of `key`, with `ttlMs` when the store can tell what is left of it. */
  get(key: string): Promise<FoundToken | null | undefined>;
  set(key: string, token: StoredToken, ttlMs: number): Promise<void>;
  delete(key: string): Promise<void>;
  /**
   * Optional: a lock on `key` for at most `ttlMs`, so that of several
   * processes missing the same token at once one asks the token endpoint and
   * the others read its answer here. Resolves to the release when this caller
   * took the lock, `null` when another holds it. The lock must end by itself
   * after `ttlMs` (a holder that dies holds nobody up for longer), and a
   * release must never end a lock that another caller has taken since.
   * After `release(true)` it may answer `'failed'` for a short while (a
   * second is enough): the waiting callers then ask side by side at once,
   * where with `null` they would take the lock one after another.
   */
  lock?(key: string, ttlMs: number): Promise<ReleaseLock | null | 'failed'>;
}
