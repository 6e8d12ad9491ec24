import { createCipheriv, createDecipheriv, KeyObject, randomBytes } from 'node:crypto';
import type { FoundToken, ReleaseLock, StoredToken, TokenStore } from './store';

/** A MULTI … EXEC as ioredis chains it: the commands queued, sent in one round trip. */
export interface RedisMulti {
  get(key: string): RedisMulti;
  pttl(key: string): RedisMulti;
  exec(): Promise<Array<[Error | null, unknown]> | null>;
}

/** The commands used, as an ioredis client (or a cluster) has them. */
export interface RedisLike {
  get(key: string): Promise<string | null>;
  /**
   * For reading a token with what is left of its key's time to live (GET and
   * PTTL in one MULTI, one round trip), which bounds its expiry; a client
   * without it reads with GET alone.
   */
  multi?(): RedisMulti;
  set(key: string, value: string, mode: 'PX', ttlMs: number): Promise<unknown>;
  del(key: string): Promise<number>;
  /** For the lock (two short scripts); a client without it gives a store without a lock. */
  eval?(script: string, numKeys: number, ...args: string[]): Promise<unknown>;
}

export interface RedisTokenStoreOptions {
  /** A connected ioredis client; this package never opens one itself. */
  client: RedisLike;
  /** Key prefix (default `ecc:token:`). */
  prefix?: string;
  /**
   * Several processes missing the same token at once make one token request
   * between them, the others reading its answer (default true). Off: each
   * process asks for its own.
   */
  lock?: boolean;
  /**
   * Encrypt the tokens kept in Redis (AES-256-GCM): 32 bytes (a Buffer, a
   * secret KeyObject, or their hex, base64 or base64url text). A list: the
   * first encrypts, every one decrypts (to change keys without losing the
   * tokens stored). Present but undefined is an error. Without it
   * Redis holds bearer tokens in clear, readable by whoever reads Redis.
   */
  encryptionKey?: EncryptionKey | EncryptionKey[];
}

export type EncryptionKey = Buffer | Uint8Array | ArrayBuffer | KeyObject | string;

/** Stored values of an encrypting store start with this, then base64url(iv ‖ ciphertext ‖ tag). */
const SEALED = 'v1.';

/** The 32 bytes of one key, or a TypeError naming it: text must be exactly 32 bytes' worth of hex, base64url or base64. */
function keyBytes(key: unknown, i: number): Buffer {
  const name = `redisTokenStore(): encryptionKey${i < 0 ? '' : `[${i}]`}`;
  let bytes: Buffer;
  if (typeof key === 'string') {
    const text = key.trim();
    if (/^[0-9a-fA-F]{64}$/.test(text)) bytes = Buffer.from(text, 'hex');
    else if (/^[A-Za-z0-9_-]{43}$/.test(text)) bytes = Buffer.from(text, 'base64url');
    else if (/^[A-Za-z0-9+/]{43}=$/.test(text)) bytes = Buffer.from(text, 'base64');
    else throw new TypeError(`${name} must be 32 bytes: as text, 64 hex digits, 43 base64url or 44 base64 characters (e.g. openssl rand -base64 32)`);
  } else if (key instanceof KeyObject) {
    if (key.type !== 'secret') throw new TypeError(`${name}: a KeyObject must be a secret key (createSecretKey())`);
    bytes = key.export();
  } else if (key instanceof Uint8Array || key instanceof ArrayBuffer) {
    bytes = Buffer.from(key as Uint8Array);
  } else {
    throw new TypeError(`${name} must be 32 bytes (a Buffer, a secret KeyObject, or hex, base64 or base64url text), got ${key === null ? 'null' : typeof key}`);
  }
  if (bytes.length !== 32) throw new TypeError(`${name} must be 32 bytes (AES-256), got ${bytes.length}`);
  return bytes;
}

/**
 * Seals and opens stored values with AES-256-GCM; the Redis key is the
 * additional data, so a value copied under another key does not open.
 */
function sealer(option: EncryptionKey | EncryptionKey[]): { seal(name: string, text: string): string; open(name: string, value: string): string } {
  const keys = Array.isArray(option) ? option.map((key, i) => keyBytes(key, i)) : [keyBytes(option, -1)];
  if (keys.length === 0) throw new TypeError('redisTokenStore(): encryptionKey is an empty list');
  return {
    seal(name, text) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', keys[0], iv).setAAD(Buffer.from(name));
      const sealed = Buffer.concat([iv, cipher.update(text, 'utf8'), cipher.final(), cipher.getAuthTag()]);
      return SEALED + sealed.toString('base64url');
    },
    open(name, value) {
      const sealed = value.startsWith(SEALED) ? Buffer.from(value.slice(SEALED.length), 'base64url') : undefined;
      if (sealed !== undefined && sealed.length > 28) {
        for (const key of keys) {
          try {
            const decipher = createDecipheriv('aes-256-gcm', key, sealed.subarray(0, 12)).setAAD(Buffer.from(name));
            decipher.setAuthTag(sealed.subarray(sealed.length - 16));
            return Buffer.concat([decipher.update(sealed.subarray(12, sealed.length - 16)), decipher.final()]).toString('utf8');
          } catch {
            // not this key: try the next
          }
        }
      }
      throw new Error('a stored token could not be decrypted: written in clear or with an encryption key this instance does not have');
    },
  };
}

function isStoredToken(v: unknown): v is StoredToken {
  const t = v as StoredToken;
  return (
    typeof t === 'object' && t !== null &&
    typeof t.accessToken === 'string' && typeof t.tokenType === 'string' && typeof t.scope === 'string' &&
    Number.isFinite(t.expiresAt) && Number.isFinite(t.lifetime)
  );
}

/** Takes the lock (1), or says it is held (0) or was let go by a holder that failed (2). */
const LOCK = `if redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 1 end
local held = redis.call('get', KEYS[1])
if held and string.sub(held, 1, 7) == 'failed:' then return 2 end
return 0`;

/**
 * Ends the lock only while it still holds this holder's value (one that
 * expired and was taken since is left alone): deleted, or (ARGV[2] set)
 * marked failed for that many milliseconds.
 */
const RELEASE = `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then return redis.call('del', KEYS[1]) end
redis.call('set', KEYS[1], 'failed:' .. ARGV[1], 'PX', ARGV[2])
return 1`;

/** How long waiters are told that the last holder failed: longer than their longest pause between looks (250 ms). */
const FAILED_MARK_MS = 1000;

/**
 * A TokenStore on Redis: one string key per token, expiring with the token
 * (`SET … PX`), its value sealed with `encryptionKey` when given, read with
 * what is left of its time to live (`GET` and `PTTL` in one `MULTI`); the lock
 * is a key of its own beside it (`SET … PX … NX` with a random value in a
 * script, released by a compare-and-delete script that may leave a
 * `failed:` mark for a second instead).
 */
export function redisTokenStore(options: RedisTokenStoreOptions): TokenStore {
  const client = options?.client;
  if (!client || typeof client.get !== 'function' || typeof client.set !== 'function' || typeof client.del !== 'function') {
    throw new TypeError('redisTokenStore() needs { client }: an ioredis client');
  }
  if (options.lock !== undefined && typeof options.lock !== 'boolean') throw new TypeError('redisTokenStore(): lock must be true or false');
  const prefix = options.prefix ?? 'ecc:token:';
  if ('encryptionKey' in options && (options.encryptionKey === undefined || options.encryptionKey === null)) {
    // most often an unset environment variable: storing bearer tokens in clear must be a choice, not an accident
    throw new TypeError(`redisTokenStore(): encryptionKey is ${options.encryptionKey}; leave the option out to store tokens in clear`);
  }
  const crypt = options.encryptionKey === undefined ? undefined : sealer(options.encryptionKey);
  const store: TokenStore = {
    async get(key): Promise<FoundToken | undefined> {
      const name = prefix + key;
      let raw: string | null;
      let ttlMs: number | undefined;
      if (typeof client.multi === 'function') {
        // the value and what is left of its key's life, in one round trip and one moment
        const replies = await client.multi().get(name).pttl(name).exec();
        if (!replies) throw new Error('MULTI (GET, PTTL) was aborted');
        const [[getError, value], [ttlError, ttl]] = replies;
        if (getError) throw getError;
        raw = value === null || value === undefined ? null : String(value);
        // (-1: no expiry, -2: gone; an error in PTTL alone leaves the expiry unbounded by it)
        if (!ttlError && typeof ttl === 'number' && ttl >= 0) ttlMs = ttl;
      } else {
        raw = await client.get(name);
      }
      if (raw === null) return undefined;
      // an entry that does not open is an error (store.error says why), not a silent miss
      if (!crypt && raw.startsWith(SEALED)) throw new Error('a stored token is sealed and this store has no encryptionKey');
      const text = crypt ? crypt.open(name, raw) : raw;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        value = undefined;
      }
      // (the value itself is never put in the message: it may hold a token)
      if (!isStoredToken(value)) throw new Error('a stored value is not a token record (not JSON, or missing fields): it was not written by this package, or was damaged');
      const { accessToken, tokenType, scope, expiresAt, lifetime } = value;
      return { accessToken, tokenType, scope, expiresAt, lifetime, ttlMs };
    },
    async set(key, token, ttlMs) {
      if (ttlMs < 1) return;
      const name = prefix + key;
      const text = JSON.stringify(token);
      await client.set(name, crypt ? crypt.seal(name, text) : text, 'PX', Math.ceil(ttlMs));
    },
    async delete(key) {
      await client.del(prefix + key);
    },
  };
  const evalScript = client.eval;
  if (options.lock === false || typeof evalScript !== 'function') return store;
  store.lock = async (key, ttlMs): Promise<ReleaseLock | null | 'failed'> => {
    const lockKey = `${prefix}lock:${key}`;
    const holder = randomBytes(16).toString('base64url');
    const taken = Number(await evalScript.call(client, LOCK, 1, lockKey, holder, String(Math.max(1, Math.ceil(ttlMs)))));
    if (taken === 2) return 'failed';
    if (taken !== 1) return null;
    return async (failed) => {
      await evalScript.call(client, RELEASE, 1, lockKey, holder, failed ? String(FAILED_MARK_MS) : '');
    };
  };
  return store;
}
