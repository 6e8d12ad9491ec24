import type { StoredToken, TokenStore } from './store';

/** The commands used, as an ioredis client (or a cluster) has them. */
export interface RedisLike {
  get(key: string): Promise<string | null>;
  set(key: string, value: string, mode: 'PX', ttlMs: number): Promise<unknown>;
  del(key: string): Promise<number>;
}

export interface RedisTokenStoreOptions {
  /** A connected ioredis client; this package never opens one itself. */
  client: RedisLike;
  /** Key prefix (default `ecc:token:`). */
  prefix?: string;
}

function isStoredToken(v: unknown): v is StoredToken {
  const t = v as StoredToken;
  return (
    typeof t === 'object' && t !== null &&
    typeof t.accessToken === 'string' && typeof t.tokenType === 'string' && typeof t.scope === 'string' &&
    Number.isFinite(t.expiresAt) && Number.isFinite(t.lifetime)
  );
}

/** A TokenStore on Redis: one string key per token, expiring with the token (`SET … PX`). */
export function redisTokenStore(options: RedisTokenStoreOptions): TokenStore {
  const client = options?.client;
  if (!client || typeof client.get !== 'function' || typeof client.set !== 'function' || typeof client.del !== 'function') {
    throw new TypeError('redisTokenStore() needs { client }: an ioredis client');
  }
  const prefix = options.prefix ?? 'ecc:token:';
  return {
    async get(key) {
      const raw = await client.get(prefix + key);
      if (raw === null) return undefined;
      let value: unknown;
      try {
        value = JSON.parse(raw);
      } catch {
        return undefined;
      }
      return isStoredToken(value) ? value : undefined;
    },
    async set(key, token, ttlMs) {
      if (ttlMs < 1) return;
      await client.set(prefix + key, JSON.stringify(token), 'PX', Math.ceil(ttlMs));
    },
    async delete(key) {
      await client.del(prefix + key);
    },
  };
}
