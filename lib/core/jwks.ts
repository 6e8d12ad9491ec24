import { createPublicKey } from 'node:crypto';
import type { JsonWebKey } from '../jwt/jwk';
import { TemporarilyUnavailableError } from '../errors';
import { readCapped } from '../shared/http-body';
import { FollowUp } from '../shared/follow-up';
import { SIGNING_ALGORITHMS, type KeyResolver, type LoadedKey, type PublicJwk } from './keys';
import { UnknownKidGate } from './unknown-kid-gate';

const ALLOWED = new Set<string>(SIGNING_ALGORITHMS);

function inferAlg(jwk: JsonWebKey): string | undefined {
  if (typeof jwk.alg === 'string') return jwk.alg;
  if (jwk.kty === 'EC' && jwk.crv === 'P-256') return 'ES256';
  if (jwk.kty === 'RSA') return 'RS256';
  return undefined;
}

/**
 * Turns a JWK Set into verification keys. Keys that are not signature keys,
 * lack a `kid` or use an algorithm outside the allowlist are skipped; private
 * members are ignored.
 */
export function loadJwks(document: unknown): Map<string, LoadedKey> {
  const keys = new Map<string, LoadedKey>();
  const list = (document as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list)) throw new TypeError('a JWK Set needs a "keys" array');
  for (const jwk of list as JsonWebKey[]) {
    if (!jwk || typeof jwk !== 'object' || typeof jwk.kid !== 'string') continue;
    const alg = inferAlg(jwk);
    if (!alg || !ALLOWED.has(alg) || (jwk.use !== undefined && jwk.use !== 'sig')) continue;
    const pub: JsonWebKey =
      jwk.kty === 'EC' ? { kty: 'EC', crv: jwk.crv, x: jwk.x, y: jwk.y } : { kty: jwk.kty, n: jwk.n, e: jwk.e };
    let publicKey;
    try {
      publicKey = createPublicKey({ key: pub, format: 'jwk' });
    } catch {
      continue;
    }
    const full: PublicJwk = { ...pub, kid: jwk.kid, alg, use: 'sig' };
    keys.set(jwk.kid, { kid: jwk.kid, alg, publicKey, jwk: full, activatesAt: 0, retiredAt: null });
  }
  return keys;
}

/**
 * The fresh set, with the objects of keys that did not change kept: the
 * verifier's cache counts a token only while its key object is still
 * published, so a periodic refetch must not invalidate every cached token.
 */
function keepUnchanged(previous: Map<string, LoadedKey>, fresh: Map<string, LoadedKey>): Map<string, LoadedKey> {
  for (const [kid, key] of fresh) {
    const old = previous.get(kid);
    if (old && JSON.stringify(old.jwk) === JSON.stringify(key.jwk)) fresh.set(kid, old);
  }
  return fresh;
}

/** Keys given up front (`requireBearer({ keys })`). */
export class StaticKeys implements KeyResolver {
  constructor(private readonly keys: Map<string, LoadedKey>) {}
  peek(kid: string): LoadedKey | undefined {
    return this.keys.get(kid);
  }
  resolve(kid: string): LoadedKey | undefined {
    return this.keys.get(kid);
  }
}

export interface RemoteJwksOptions {
  /** Shortest time between two fetches, in ms. */
  cooldownMs: number;
  /** Age after which the set is refetched in the background on next use, in ms. */
  maxAgeMs: number;
  timeoutMs: number;
  now: () => number;
  fetch?: typeof fetch;
}

/** The largest JWKS read (a set of 100 RSA-4096 keys is about 90 KB). */
const JWKS_MAX_BYTES = 1024 * 1024;

/** Longest wait before a failed JWKS fetch is tried again (shorter when the cooldown is). */
const FAILED_FETCH_RETRY_MS = 5_000;

/**
 * The issuer's JWKS fetched over HTTP and cached. An unknown `kid` triggers a
 * refetch, unless a refetch in the last cooldown already failed to find a
 * kid; concurrent misses share one fetch. So a new key is found at once,
 * while a flood of made-up kids costs one fetch per cooldown. A fetch that
 * failed (the JWKS could not be had) is tried again after at most
 * FAILED_FETCH_RETRY_MS, which is what the 503 meanwhile says in Retry-After:
 * a key rotated in during an outage is found soon after it ends. The set is
 * also refreshed in the background once older than `maxAgeMs`, on cache hits
 * too (peek() with the time). The unknown-kid rules are an UnknownKidGate's,
 * as KeyRing's are; unlike KeyRing, an unknown kid joins a fetch under way
 * whatever the gate says.
 */
export class RemoteJwks implements KeyResolver {
  private keys = new Map<string, LoadedKey>();
  private fetchedAt = 0;
  /** When the fetch of the set held now started: what it holds is at least that recent. */
  private heldFrom = 0;
  /** The fetch that follows the one in flight (see refetch()). */
  private readonly afterFetch = new FollowUp();
  private lastAttempt = Number.NEGATIVE_INFINITY;
  private readonly unknownKids: UnknownKidGate;
  /** Whether the last fetch of any kind (a background refresh too) failed. */
  private lastFetchFailed = false;
  private inFlight: Promise<void> | undefined;

  constructor(
    readonly uri: string,
    private readonly options: RemoteJwksOptions,
  ) {
    this.unknownKids = new UnknownKidGate({ cooldownMs: options.cooldownMs, failedRetryMs: this.failedRetryMs(), now: options.now });
  }

  /** The key without fetching; with `now` (a cache hit's clock), a set older than maxAgeMs is refreshed in the background. */
  peek(kid: string, now?: number): LoadedKey | undefined {
    if (now !== undefined && now - this.fetchedAt > this.options.maxAgeMs && this.canRefresh(now)) this.refresh().catch(() => undefined);
    return this.keys.get(kid);
  }

  resolve(kid: string): LoadedKey | undefined | Promise<LoadedKey | undefined> {
    const key = this.keys.get(kid);
    const now = this.options.now();
    if (key) {
      if (now - this.fetchedAt > this.options.maxAgeMs && this.canRefresh(now)) this.refresh().catch(() => undefined);
      return key;
    }
    if (!this.inFlight) {
      const gate = this.unknownKids.check(now);
      // within the cooldown: a set that did not have the kid says so
      if (gate === 'unknown') return undefined;
      // the last fetch failed: a set that could not be fetched cannot tell, so 503 until it may be tried again
      if (gate === 'failed') throw this.unavailable(this.unknownKids.failure, this.unknownKids.retryInMs(now));
    }
    return this.refresh().then(
      () => this.unknownKids.fetched(this.keys.get(kid)),
      (err: unknown) => {
        this.unknownKids.fetchFailed(err);
        throw this.unavailable(err, this.failedRetryMs());
      },
    );
  }

  private failedRetryMs(): number {
    return Math.min(this.options.cooldownMs, FAILED_FETCH_RETRY_MS);
  }

  /** A 503 whose Retry-After says when the JWKS will be asked again. */
  private unavailable(err: unknown, waitMs: number): TemporarilyUnavailableError {
    return new TemporarilyUnavailableError('the authorization server keys cannot be fetched; retry later', {
      detail: `JWKS fetch from ${this.uri} failed: ${err instanceof Error ? err.message : String(err)}`,
      cause: err,
      retryAfter: waitMs / 1000,
      dependency: 'jwks',
    });
  }

  /**
   * The key for a document the issuer signed and this process asked for
   * (its revocation list): fetched now when unknown, whatever the cooldown,
   * which only holds back kids that requests bring. The list comes from a
   * configured URL at most once a poll, so this costs at most a fetch per
   * poll; without it, made-up kids in requests would keep a list signed by
   * a new key from being verified until the cooldown ran out.
   */
  async resolveListed(kid: string): Promise<LoadedKey | undefined> {
    const held = this.keys.get(kid);
    if (held) return held;
    await this.refetch();
    return this.keys.get(kid);
  }

  /**
   * What the issuer's signed revocation list says it publishes (`kids`, as
   * of `asOfMs`). When the held set differs and was fetched before then, it
   * is fetched again now, whatever the cooldown:
   * - a held key the list does not name was removed (a revoked signing
   *   key, a pruned one): the fetch drops it, and the tokens it signed,
   *   cached ones included, are refused;
   * - a key the list names and the set lacks was added (a rotation): the
   *   fetch has it before its first token, even while made-up kids hold
   *   back the fetches an unknown kid would make.
   * A set fetched since is newer than the list and is kept. Answers the
   * fetch started, if any.
   */
  listed(kids: readonly string[], asOfMs: number): Promise<void> | undefined {
    if (this.heldFrom >= asOfMs) return undefined;
    const named = new Set(kids);
    const differs = named.size !== this.keys.size || kids.some((kid) => !this.keys.has(kid));
    return differs ? this.refetch().catch(() => undefined) : undefined;
  }

  /**
   * A fetch that starts after this call (one in flight may have started
   * before the change that asks for it: then one more follows it, shared),
   * asking caches on the way to revalidate (the JWKS is served with
   * max-age=60).
   */
  private refetch(): Promise<void> {
    return this.afterFetch.run(this.inFlight, () => this.refresh(true));
  }

  /** Background refreshes: not while one is under way, and not more often than the cooldown even when they fail. */
  private canRefresh(now: number): boolean {
    return this.inFlight === undefined && now - this.lastAttempt >= this.options.cooldownMs;
  }

  /** Fetches the set now (joins a fetch under way); `revalidate`: with Cache-Control: no-cache. */
  refresh(revalidate = false): Promise<void> {
    if (this.inFlight) return this.inFlight;
    const startedAt = this.options.now();
    this.lastAttempt = startedAt;
    const doFetch = this.options.fetch ?? fetch;
    this.inFlight = (async () => {
      const headers: Record<string, string> = { accept: 'application/jwk-set+json, application/json' };
      if (revalidate) headers['cache-control'] = 'no-cache';
      const response = await doFetch(this.uri, { headers, signal: AbortSignal.timeout(this.options.timeoutMs) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const text = await readCapped(response, JWKS_MAX_BYTES, (max) => new Error(`the JWKS is larger than ${max} bytes`));
      this.keys = keepUnchanged(this.keys, loadJwks(JSON.parse(text)));
      this.fetchedAt = this.options.now();
      this.heldFrom = startedAt;
    })().then(
      () => {
        this.lastFetchFailed = false;
        this.inFlight = undefined;
      },
      (err: unknown) => {
        this.lastFetchFailed = true;
        this.inFlight = undefined;
        throw err;
      },
    );
    return this.inFlight;
  }

  /**
   * Whether keys can be checked: `up` when the last fetch worked, `stale`
   * when keys are held but the last fetch failed (they keep verifying),
   * `down` when none is held. With none held, a fetch is made first when
   * none was tried yet or the last failed one is `failedRetryMs` old (a
   * readiness probe sees the set come back, not only its absence).
   */
  async health(): Promise<'up' | 'stale' | 'down'> {
    // none held: fetch now, and again at each probe once the retry pause of a failed fetch is over
    // (an instance a readiness probe took out gets no request that would fetch)
    const retryDue = this.options.now() - this.lastAttempt >= this.failedRetryMs();
    if (this.keys.size === 0 && this.inFlight === undefined && retryDue) await this.refresh().catch(() => undefined);
    else if (this.inFlight) await this.inFlight.catch(() => undefined);
    if (this.keys.size === 0) return 'down';
    return this.lastFetchFailed ? 'stale' : 'up';
  }
}
