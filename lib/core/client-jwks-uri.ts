import type { KeyObject } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { DpopAlgorithm } from '../jwt/algorithms';
import { checkPublicJwk, jwkList } from '../jwt/public-jwk';
import { readCapped } from '../shared/http-body';

/** Bounds on fetching a client's jwks_uri. */
export const JWKS_URI_TIMEOUT_MS = 5_000;
export const JWKS_URI_MAX_BYTES = 64 * 1024;

const keySetTooLarge = (maxBytes: number): Error => new Error(`the key set is larger than ${maxBytes} bytes`);
/** A fetched set is used this long before it is fetched again. */
export const JWKS_URI_MAX_AGE_MS = 5 * 60_000;
/** An unknown kid refetches the set at most once per cooldown. */
export const JWKS_URI_COOLDOWN_MS = 30_000;

const LOOPBACK = /^(localhost|127(?:\.\d{1,3}){3}|\[::1\])$/i;

/**
 * A client's jwks_uri, checked for registration: an absolute https URL, or
 * http on a loopback host (tests, a sidecar); no credentials or fragment.
 * Throws a TypeError with a one-line reason.
 */
export function checkJwksUri(value: unknown): string {
  let url: URL;
  try {
    url = new URL(String(value));
  } catch {
    throw new TypeError(`jwks_uri must be an absolute URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && LOOPBACK.test(url.hostname))) {
    throw new TypeError('jwks_uri must be https (http only on a loopback host)');
  }
  if (url.username || url.password || url.hash) throw new TypeError('jwks_uri must not carry credentials or a fragment');
  return url.toString();
}

export type RemoteKey = { key: KeyObject; alg: DpopAlgorithm };

interface Entry {
  byKid: Map<string, RemoteKey>;
  fetchedAt: number;
  inFlight: Promise<void> | undefined;
}

export interface RemoteClientKeysOptions {
  now: () => number;
  fetch?: typeof fetch;
  timeoutMs?: number;
  maxBytes?: number;
  maxAgeMs?: number;
  cooldownMs?: number;
}

/**
 * Public keys published by clients at their jwks_uri: fetched with a timeout
 * and a size cap, no redirects, cached per URI; an unknown kid refetches at
 * most once per cooldown, and concurrent requests share one fetch.
 */
export class RemoteClientKeys {
  private readonly sets = new LRUCache<string, Entry>({ max: 1000 });
  private readonly o: Required<Omit<RemoteClientKeysOptions, 'fetch'>> & { fetch?: typeof fetch };

  constructor(options: RemoteClientKeysOptions) {
    this.o = {
      timeoutMs: JWKS_URI_TIMEOUT_MS,
      maxBytes: JWKS_URI_MAX_BYTES,
      maxAgeMs: JWKS_URI_MAX_AGE_MS,
      cooldownMs: JWKS_URI_COOLDOWN_MS,
      ...options,
    };
  }

  /**
   * The keys of the set at `uri`, fetched when not cached or too old, and
   * refetched (once per cooldown) when `kid` is not in it. Rejects when a
   * needed fetch fails.
   */
  async keys(uri: string, kid: string | undefined): Promise<Map<string, RemoteKey>> {
    let entry = this.sets.get(uri);
    const now = this.o.now();
    if (!entry || now - entry.fetchedAt > this.o.maxAgeMs) {
      const current = this.entry(uri, entry);
      // a set fetched before stays in use when a refresh fails
      await this.refresh(uri, current).catch((err: unknown) => {
        if (current.byKid.size === 0) throw err;
      });
      return current.byKid;
    }
    if (kid !== undefined && !entry.byKid.has(kid) && (entry.inFlight || now - entry.fetchedAt >= this.o.cooldownMs)) {
      const current = entry;
      await this.refresh(uri, current).catch(() => undefined);
      return current.byKid;
    }
    return entry.byKid;
  }

  private entry(uri: string, previous: Entry | undefined): Entry {
    if (previous) return previous;
    const created: Entry = { byKid: new Map(), fetchedAt: Number.NEGATIVE_INFINITY, inFlight: undefined };
    this.sets.set(uri, created);
    return created;
  }

  /** One fetch per URI at a time: concurrent callers join it. */
  private refresh(uri: string, entry: Entry): Promise<void> {
    entry.inFlight ??= (async () => {
      try {
        const response = await (this.o.fetch ?? fetch)(uri, {
          headers: { accept: 'application/jwk-set+json, application/json' },
          redirect: 'error',
          signal: AbortSignal.timeout(this.o.timeoutMs),
        });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        const document: unknown = JSON.parse(await readCapped(response, this.o.maxBytes, keySetTooLarge));
        const byKid = new Map<string, RemoteKey>();
        for (const jwk of jwkList(document).slice(0, 32)) {
          const checked = checkPublicJwk(jwk);
          if (typeof checked !== 'string') byKid.set(checked.jwk.kid, { key: checked.key, alg: checked.alg });
        }
        entry.byKid = byKid;
      } finally {
        // a failed fetch counts too: the cooldown holds for a broken URI as well
        entry.fetchedAt = this.o.now();
        entry.inFlight = undefined;
      }
    })();
    return entry.inFlight;
  }
}
