/**
 * A store shared by several processes (e.g. Redis) under the in-process cache.
 * Entries live until the token expires (`ttlMs`); a store that fails is
 * skipped with a `store.error` event, never fails a call.
 */
export interface StoredToken {
  accessToken: string;
  tokenType: string;
  scope: string;
  /** Epoch milliseconds. */
  expiresAt: number;
  /** The token's whole lifetime in milliseconds (skew and refresh window are derived from it). */
  lifetime: number;
}

export interface TokenStore {
  get(key: string): Promise<StoredToken | null | undefined>;
  set(key: string, token: StoredToken, ttlMs: number): Promise<void>;
  delete(key: string): Promise<void>;
}
