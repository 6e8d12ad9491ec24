import type { KeyObject } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import type { DpopAlgorithm } from '../jwt/algorithms';
import { checkPublicJwk, jwkList } from '../jwt/public-jwk';
import { readCapped } from '../shared/http-body';
import { clip } from '../shared/visible-text';

/** Bounds on fetching a client's jwks_uri. */
export const JWKS_URI_TIMEOUT_MS = 5_000;
export const JWKS_URI_MAX_BYTES = 64 * 1024;

const keySetTooLarge = (maxBytes: number): Error => new Error(`the key set is larger than ${maxBytes} bytes`);
/** A fetched set is used this long before it is fetched again. */
export const JWKS_URI_MAX_AGE_MS = 5 * 60_000;
/** An unknown kid refetches the set at most once per cooldown. */
export const JWKS_URI_COOLDOWN_MS = 30_000;

const LOOPBACK = /^(localhost|127(?:\.\d{1,3}){3}|\[::1\])$/i;

/** The longest jwks_uri registered, as for a resource (RFC 8707); checked before and after normalizing. */
export const JWKS_URI_MAX_LENGTH = 2048;

const JWKS_URI_TOO_LONG = `jwks_uri is too long (at most ${JWKS_URI_MAX_LENGTH} characters)`;

/**
 * A client's jwks_uri, checked for registration: an absolute https URL, or
 * http on a loopback host (tests, a sidecar); no credentials or fragment; at
 * most JWKS_URI_MAX_LENGTH characters. Throws a TypeError with a one-line reason.
 */
export function checkJwksUri(value: unknown): string {
  // before parsing: the message of a value that is no URL repeats it
  if (String(value).length > JWKS_URI_MAX_LENGTH) throw new TypeError(JWKS_URI_TOO_LONG);
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
  // percent-encoding may lengthen it
  const normalized = url.toString();
  if (normalized.length > JWKS_URI_MAX_LENGTH) throw new TypeError(JWKS_URI_TOO_LONG);
  return normalized;
}

export type RemoteKey = { key: KeyObject; alg: DpopAlgorithm };

/**
 * A client's jwks_uri could not be fetched because its host is down or
 * failing (network error, timeout, HTTP 5xx, 429): an outage of the client's
 * key host, not a wrong key. `retryAfterMs`: until the next fetch may be tried.
 */
export class JwksUriUnavailableError extends Error {
  constructor(
    readonly uri: string,
    /** The last fetch's error, e.g. `fetch failed: connect ECONNREFUSED 127.0.0.1:8443` or `HTTP 502`. */
    readonly reason: string,
    readonly retryAfterMs: number,
    /** True for the first caller refused in this outage (log it once), false for the others. */
    readonly firstOfOutage: boolean,
  ) {
    super(`jwks_uri unavailable: ${reason}`);
    this.name = 'JwksUriUnavailableError';
  }
}

/** A fetch that failed because the host is down or failing, as opposed to one that got an unusable key set. */
class Outage extends Error {}

/**
 * The message of a fetch error with its cause (fetch says only "fetch
 * failed"), at most 200 characters (never half a surrogate pair); not
 * escaped: the log line escapes it. Read by shape: fetch's errors may come
 * from another realm.
 */
function describe(err: unknown): string {
  const message = (e: unknown): string | undefined => {
    if (!e || typeof e !== 'object') return undefined;
    const { message: m, code } = e as { message?: unknown; code?: unknown };
    return typeof m === 'string' && m !== '' ? m : typeof code === 'string' ? code : undefined;
  };
  const own = message(err) ?? String(err);
  const cause = message((err as { cause?: unknown } | undefined)?.cause);
  return clip(cause ? `${own}: ${cause}` : own, 200, '');
}

interface LastError {
  message: string;
  /** The host is down or failing (an outage), rather than serving an unusable set. */
  outage: boolean;
  /** When the first failed fetch of this run of failures happened. */
  since: number;
  failures: number;
  /** Whether a caller was already told of this outage as its first. */
  reported: boolean;
}

interface Entry {
  byKid: Map<string, RemoteKey>;
  fetchedAt: number;
  inFlight: Promise<void> | undefined;
  /** Set while the last fetch failed; cleared by a successful one. */
  lastError: LastError | undefined;
}

export interface RemoteClientKeysOptions {
  now: () => number;
  fetch?: typeof fetch;
  timeoutMs?: number;
  maxBytes?: number;
  maxAgeMs?: number;
  cooldownMs?: number;
  /** Told when a jwks_uri that was failing (an outage) is fetched again: how long it was down and how many fetches failed. */
  onRecovered?: (uri: string, downMs: number, failures: number) => void;
}

/**
 * Public keys published by clients at their jwks_uri: fetched with a timeout
 * and a size cap, no redirects, cached per URI; an unknown kid refetches at
 * most once per cooldown, and concurrent requests share one fetch. While the
 * last fetch failed, a set that cannot answer (no kid asked for in it) is
 * refused with the fetch's error (JwksUriUnavailableError for an outage),
 * never answered as a set without the key; the URI is tried again once per
 * cooldown.
 */
export class RemoteClientKeys {
  private readonly sets = new LRUCache<string, Entry>({ max: 1000 });
  private readonly o: Required<Omit<RemoteClientKeysOptions, 'fetch' | 'onRecovered'>> & Pick<RemoteClientKeysOptions, 'fetch' | 'onRecovered'>;

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
   * refetched (once per cooldown) when `kid` is not in it or the last fetch
   * failed. Rejects with JwksUriUnavailableError when the host is down or
   * failing and the set held cannot answer, with an Error for a set that
   * came but cannot be used (too large, not JSON, HTTP 4xx). `heldBackMs`:
   * when `kid` is not in the set and the cooldown kept this call from
   * fetching it again, how long until a call may (0 otherwise); a client
   * that publishes a new key and signs with it at once is refused until
   * then, though nothing says its assertion is forged.
   */
  async keys(uri: string, kid: string | undefined): Promise<{ byKid: Map<string, RemoteKey>; heldBackMs: number }> {
    const previous = this.sets.get(uri);
    const now = this.o.now();
    const entry = this.entry(uri, previous);
    const stale = !previous || now - entry.fetchedAt > this.o.maxAgeMs;
    const missing = kid !== undefined && !entry.byKid.has(kid);
    const mayRefetch = entry.inFlight !== undefined || now - entry.fetchedAt >= this.o.cooldownMs;
    // a set fetched before stays in use when a refresh fails, as far as it can answer
    const fetching = stale || ((missing || entry.lastError) && mayRefetch);
    if (fetching) await this.refresh(uri, entry).catch(() => undefined);
    const failed = entry.lastError;
    if (failed && (kid === undefined ? entry.byKid.size === 0 : !entry.byKid.has(kid))) {
      if (!failed.outage) throw new Error(failed.message);
      const first = !failed.reported;
      failed.reported = true;
      const retryAfterMs = Math.max(1000, entry.fetchedAt + this.o.cooldownMs - this.o.now());
      throw new JwksUriUnavailableError(uri, failed.message, retryAfterMs, first);
    }
    const heldBackMs = missing && !fetching ? Math.max(0, entry.fetchedAt + this.o.cooldownMs - this.o.now()) : 0;
    return { byKid: entry.byKid, heldBackMs };
  }

  private entry(uri: string, previous: Entry | undefined): Entry {
    if (previous) return previous;
    const created: Entry = { byKid: new Map(), fetchedAt: Number.NEGATIVE_INFINITY, inFlight: undefined, lastError: undefined };
    this.sets.set(uri, created);
    return created;
  }

  private async fetchSet(uri: string): Promise<Map<string, RemoteKey>> {
    let response: Response;
    try {
      response = await (this.o.fetch ?? fetch)(uri, {
        headers: { accept: 'application/jwk-set+json, application/json' },
        // a redirect is answered, not followed: the set must be at the registered URL (below: a failure, not an outage)
        redirect: 'manual',
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
    } catch (err) {
      // refused, reset, DNS, TLS, timed out: the host, not the set
      throw new Outage(describe(err));
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => undefined);
      const redirected = response.type === 'opaqueredirect' || (response.status >= 300 && response.status < 400);
      const message = redirected ? `HTTP ${response.status || 'redirect'}: redirects are not followed; register the URL the keys are at` : `HTTP ${response.status}`;
      throw response.status >= 500 || response.status === 429 || response.status === 408 ? new Outage(message) : new Error(message);
    }
    let text: string;
    try {
      text = await readCapped(response, this.o.maxBytes, keySetTooLarge);
    } catch (err) {
      if ((err as Error | undefined)?.message === keySetTooLarge(this.o.maxBytes).message) throw err;
      throw new Outage(describe(err)); // the connection broke or timed out while the body came
    }
    const document: unknown = JSON.parse(text);
    const byKid = new Map<string, RemoteKey>();
    for (const jwk of jwkList(document).slice(0, 32)) {
      const checked = checkPublicJwk(jwk);
      if (typeof checked !== 'string') byKid.set(checked.jwk.kid, { key: checked.key, alg: checked.alg });
    }
    return byKid;
  }

  /** One fetch per URI at a time: concurrent callers join it. */
  private refresh(uri: string, entry: Entry): Promise<void> {
    entry.inFlight ??= (async () => {
      try {
        entry.byKid = await this.fetchSet(uri);
        const was = entry.lastError;
        entry.lastError = undefined;
        if (was?.outage) this.o.onRecovered?.(uri, this.o.now() - was.since, was.failures);
      } catch (err) {
        const outage = err instanceof Outage;
        const was = entry.lastError;
        const same = was !== undefined && was.outage === outage;
        entry.lastError = {
          message: describe(err),
          outage,
          since: same ? was.since : this.o.now(),
          failures: same ? was.failures + 1 : 1,
          reported: same ? was.reported : false,
        };
        throw err;
      } finally {
        // a failed fetch counts too: the cooldown holds for a broken URI as well
        entry.fetchedAt = this.o.now();
        entry.inFlight = undefined;
      }
    })();
    return entry.inFlight;
  }
}
