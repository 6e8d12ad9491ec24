import jwt from 'jsonwebtoken';
import { LRUCache } from 'lru-cache';
import { InvalidTokenError, type TokenRejectionFacts, type TokenRejectionReason } from '../errors';
import type { AccessTokenClaims } from './issuer';
import { SIGNING_ALGORITHMS, type KeyResolver, type LoadedKey } from './keys';
import { assertNotRevoked, type RevocationCheck } from './revocation';
import { safeJson } from '../shared/safe-json';
import { echoed } from '../shared/visible-text';

/**
 * What a verified access token tells the protected route; becomes `req.auth`.
 * Frozen, claims included: the requests that carry the same token share it
 * (the verified-token cache), so a route that could change it would change
 * what the next request with that token is granted. Per-request data goes
 * elsewhere (`res.locals`).
 */
export interface AccessTokenAuth {
  readonly clientId: string;
  readonly scope: readonly string[];
  readonly token: string;
  readonly claims: Readonly<AccessTokenClaims & Record<string, unknown>>;
}

export interface VerifierOptions {
  issuer: string;
  /** The audience the token must carry; a list accepts any of them (introspection and revocation at the issuer). */
  audience: string | readonly string[];
  keys: KeyResolver;
  /** Seconds of clock skew allowed on `exp`, `nbf` and `iat`. */
  clockTolerance: number;
  /** Most verified tokens kept in memory (0 turns the cache off). */
  cacheMax: number;
  now: () => number;
  /**
   * Revocations, checked after the signature and claims on every answer,
   * verified-token cache hits included (a token revoked after it was cached
   * is refused on its next use).
   */
  revocation?: RevocationCheck;
}

const ALLOWED_ALGORITHMS = new Set<string>(SIGNING_ALGORITHMS);
const REQUIRED_CLAIMS = ['iss', 'sub', 'client_id', 'aud', 'iat', 'exp', 'jti'] as const;
const TYP = /^(application\/)?at\+jwt$/i;

type Json = Record<string, unknown>;

/** Freezes a decoded JSON value and everything in it (a token's claims: small, and frozen once per verification). */
function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/**
 * Values read from an unverified token are shortened before they are logged,
 * and their control, bidi and line-separator characters escaped (a U+202E
 * in a claimed client_id would show the rest of the line reversed).
 */
const CLIP = 200;
function clip(value: unknown): string {
  return echoed(typeof value === 'string' ? value : asJson(value), CLIP, '...');
}

/** A claim or header value that is not a string, as JSON; anyone can send one nested too deep to write. */
function asJson(value: unknown): string {
  return safeJson(value, Array.isArray(value) ? '(an array nested too deep to show)' : '(an object nested too deep to show)');
}

/**
 * Who the token says it is for, to tell operators which client sent it (never
 * the token itself): `client_id` once the signature is verified, else
 * `claimed_client_id` (anyone can write any client_id into a token that
 * is not checked, so a search by client_id never finds forgeries).
 */
function context(header: Json, claims: Json | undefined, verified = false): TokenRejectionFacts {
  const facts: TokenRejectionFacts = {};
  if (typeof header.kid === 'string') facts.kid = clip(header.kid);
  if (typeof claims?.client_id === 'string') {
    if (verified) facts.client_id = clip(claims.client_id);
    else facts.claimed_client_id = clip(claims.client_id);
  }
  return facts;
}

function reject(reason: TokenRejectionReason, detail: string, facts?: TokenRejectionFacts, description?: string): never {
  throw new InvalidTokenError(description, { reason, detail, facts });
}

function decodeSegment(segment: string): Json | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
    if (value && typeof value === 'object' && !Array.isArray(value)) return value as Json;
  } catch {
    // not JSON
  }
  return undefined;
}

/** Header and claims of a JWS compact serialization, decoded but not verified. */
function decode(token: string): { header: Json; claims: Json } {
  const first = token.indexOf('.');
  const second = first < 1 ? -1 : token.indexOf('.', first + 1);
  if (second < 0 || token.indexOf('.', second + 1) !== -1) reject('malformed', 'not a JWS compact serialization');
  const header = decodeSegment(token.slice(0, first)) ?? reject('malformed', 'the JOSE header is not a JSON object');
  const claims = decodeSegment(token.slice(first + 1, second)) ?? reject('malformed', 'the claims are not a JSON object', context(header, undefined));
  return { header, claims };
}

const isString = (value: unknown): value is string => typeof value === 'string';

/**
 * The verified-token cache's key: the token's last 24 characters, part of its
 * signature (an entry counts only for the very same token, compared whole on
 * a hit, so two tokens that share an ending only take each other's place).
 * Each lookup hashes a new string: 24 characters instead of the signature
 * segment (86 for ES256, 342 for RS256) or the whole token (500+), and no
 * search for the last dot.
 */
const CACHE_KEY_LENGTH = 24;
const cacheKey = (token: string): string => token.slice(-CACHE_KEY_LENGTH);
const isNumber = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);

/**
 * Verifies RFC 9068 access tokens: an allowlist of asymmetric algorithms, a
 * known `kid`, `typ: at+jwt`, issuer, audience, lifetime and the required
 * claims. Every failure is `invalid_token`; why is in its `reason` (and
 * `facts`, `detail`), decided here from the decoded token, not from
 * jsonwebtoken's messages: the header and claims are checked first, then
 * jsonwebtoken checks the signature and the lifetime (in that order, so an
 * expired forgery is refused as a bad signature, as before).
 *
 * Verified tokens are remembered (bounded LRU) until their own `exp`, so a
 * token used many times is checked cryptographically once. A remembered
 * token counts only while the key that signed it is still published.
 */
export class AccessTokenVerifier {
  private readonly cache: LRUCache<string, { auth: AccessTokenAuth; key: LoadedKey }> | undefined;
  /** Lookups in the verified-token cache (none while it is off); read by the metrics. */
  readonly cacheStats = { hits: 0, misses: 0 };

  constructor(private readonly options: VerifierOptions) {
    this.cache = options.cacheMax > 0 ? new LRUCache({ max: options.cacheMax }) : undefined;
  }

  verify(token: string): AccessTokenAuth | Promise<AccessTokenAuth> {
    return this.cached(token) ?? this.verifyUncached(token);
  }

  /**
   * The token from the verified-token cache: its auth when this very string
   * was verified before and is still good (unexpired, its key still
   * published, not revoked: a revoked token throws as in verify()), else
   * undefined. A hit also says the string is a well-formed token, since only
   * verified tokens are kept.
   */
  cached(token: string): AccessTokenAuth | undefined {
    if (!this.cache) return undefined;
    const key = cacheKey(token);
    const hit = this.cache.get(key);
    if (hit && hit.auth.token === token) {
      // still unexpired, and its key still published: nothing else can have changed
      const now = this.options.now();
      if (hit.auth.claims.exp * 1000 > now && this.options.keys.peek(hit.key.kid, now) === hit.key) {
        this.cacheStats.hits++;
        return this.options.revocation ? assertNotRevoked(hit.auth, this.options.revocation) : hit.auth;
      }
      this.cache.delete(key);
    }
    return undefined;
  }

  /** verify() past the cache: every check on the token itself, for a token that cached() did not find (counted as a miss). */
  verifyUncached(token: string): AccessTokenAuth | Promise<AccessTokenAuth> {
    if (this.cache) this.cacheStats.misses++;
    const { header, claims } = decode(token);
    const { alg, kid } = header;
    if (!isString(alg) || !ALLOWED_ALGORITHMS.has(alg)) {
      reject('wrong_alg', `algorithm ${clip(alg)} is not allowed`, { ...context(header, claims), expected: [...ALLOWED_ALGORITHMS], received: clip(alg) });
    }
    if (!isString(header.typ) || !TYP.test(header.typ)) {
      reject('wrong_typ', `typ ${clip(header.typ)} is not at+jwt`, { ...context(header, claims), expected: 'at+jwt', received: clip(header.typ) });
    }
    // RFC 7515 §4.1.11: a crit extension not understood makes the JWS invalid, and none is understood here
    if (header.crit !== undefined) reject('malformed', `crit header parameter ${clip(header.crit)} is not supported`, context(header, claims));
    if (token.endsWith('.')) reject('bad_signature', 'the signature is empty', context(header, claims));
    if (!isString(kid)) reject('unknown_kid', 'no kid in the header', context(header, claims));
    this.checkClaims(header, claims);
    const key = this.options.keys.resolve(kid);
    if (key instanceof Promise) return key.then((k) => this.check(token, header, claims, k));
    return this.check(token, header, claims, key);
  }

  /** Presence, types, issuer and audience, exactly, on the decoded claims. */
  private checkClaims(header: Json, claims: Json): asserts claims is AccessTokenClaims & Json {
    for (const claim of REQUIRED_CLAIMS) {
      if (claims[claim] === undefined) reject('missing_claim', `claim ${claim} is missing`, { ...context(header, claims), claim });
    }
    const invalid = (claim: string, wanted: string): never =>
      reject('invalid_claim', `claim ${claim} must be ${wanted}`, { ...context(header, claims), claim, received: clip(claims[claim]) });
    const { iss, aud } = claims;
    if (!isString(iss)) invalid('iss', 'a string');
    if (iss !== this.options.issuer) {
      reject('wrong_issuer', `the token is from issuer ${clip(iss)}, not ${this.options.issuer}`, {
        ...context(header, claims),
        expected: this.options.issuer,
        received: clip(iss),
      });
    }
    if (!isString(aud) && !(Array.isArray(aud) && aud.every(isString))) invalid('aud', 'a string or an array of strings');
    if (!this.audienceMatches(aud as string | string[])) {
      const received = isString(aud) ? clip(aud) : (aud as string[]).slice(0, 10).map(clip);
      reject('wrong_audience', `the token is for audience ${clip(aud)}, not ${this.options.audience}`, {
        ...context(header, claims),
        expected: isString(this.options.audience) ? this.options.audience : [...this.options.audience],
        received,
      });
    }
    if (!isNumber(claims.exp)) invalid('exp', 'a number');
    if (!isNumber(claims.iat)) invalid('iat', 'a number');
    if (claims.nbf !== undefined && !isNumber(claims.nbf)) invalid('nbf', 'a number');
    if (!isString(claims.client_id)) invalid('client_id', 'a string');
    if (!isString(claims.sub)) invalid('sub', 'a string');
    if (claims.scope !== undefined && !isString(claims.scope)) invalid('scope', 'a string');
  }

  private audienceMatches(aud: string | string[]): boolean {
    const wanted = this.options.audience;
    if (isString(wanted)) return isString(aud) ? aud === wanted : aud.includes(wanted);
    return isString(aud) ? wanted.includes(aud) : aud.some((a) => wanted.includes(a));
  }

  private check(token: string, header: Json, claims: AccessTokenClaims & Json, key: LoadedKey | undefined): AccessTokenAuth {
    const alg = header.alg as string;
    if (!key) reject('unknown_kid', `no published key has kid ${clip(header.kid)}`, context(header, claims));
    if (key.alg !== alg) {
      reject('wrong_alg', `kid ${key.kid} is a ${key.alg} key, the token says ${alg}`, { ...context(header, claims), expected: key.alg, received: alg });
    }
    const clockTimestamp = Math.floor(this.options.now() / 1000);
    try {
      // issuer, audience and the claims' types are checked above; jsonwebtoken checks the signature, then exp and nbf
      jwt.verify(token, key.publicKey, {
        algorithms: [key.alg as jwt.Algorithm],
        clockTolerance: this.options.clockTolerance,
        clockTimestamp,
      });
    } catch (err) {
      if (err instanceof jwt.TokenExpiredError) {
        reject('expired', `expired at ${err.expiredAt.toISOString()}`, { ...context(header, claims, true), received: claims.exp }, 'the access token expired');
      }
      if (err instanceof jwt.NotBeforeError) {
        reject('not_yet_valid', `not valid before ${err.date.toISOString()}`, { ...context(header, claims, true), received: claims.nbf as number });
      }
      // everything else about the token was checked above: what jsonwebtoken refuses now is the signature
      return reject('bad_signature', err instanceof Error ? err.message : 'signature verification failed', { ...context(header, claims), alg });
    }
    // issued later than now, beyond the clock tolerance: the issuer's clock or the token is wrong (jsonwebtoken does not check iat)
    if (claims.iat > clockTimestamp + this.options.clockTolerance) {
      reject('not_yet_valid', `issued in the future (iat ${claims.iat}, now ${clockTimestamp})`, { ...context(header, claims, true), received: claims.iat });
    }
    const auth: AccessTokenAuth = Object.freeze({
      clientId: claims.client_id,
      scope: Object.freeze(claims.scope ? claims.scope.split(' ') : []),
      token,
      claims: deepFreeze(claims),
    });
    // no per-entry ttl (lru-cache's clock reads on every get): a hit checks exp itself, and max bounds the entries
    if (this.cache && claims.exp * 1000 > this.options.now()) this.cache.set(cacheKey(token), { auth, key });
    return this.options.revocation ? assertNotRevoked(auth, this.options.revocation) : auth;
  }

  /** Empties the verified-token cache (e.g. after keys were removed). */
  clear(): void {
    this.cache?.clear();
  }
}
