import * as crypto from 'node:crypto';
import { createHash } from 'node:crypto';
import type { JsonWebKey } from '../jwt/jwk';
import { InvalidDpopProofError, InvalidTokenError, OAuthError, TemporarilyUnavailableError, UseDpopNonceError, type DpopProofFailure } from '../errors';
import { DPOP_ALGORITHMS, isDpopAlgorithm, verifyJws, type DpopAlgorithm } from '../jwt/algorithms';
import { accessTokenHash } from '../jwt/dpop-proof';
import { normalizeHtuCached } from './dpop-htu';
import { DpopKeyCache, publicDpopJwk, type CheckedProofHeader } from './dpop-key-cache';
import type { DpopNonces } from './dpop-nonces';
import type { ReplayStore } from './dpop-replay';

// One import for the adapters: the parts verifyDpopProof is configured with.
export { normalizeHtu, requestHtu } from './dpop-htu';
export { DpopKeyCache } from './dpop-key-cache';
/** `typ` is a media type (RFC 7515 §4.1.9): any case, `application/` optional, as for access tokens and client assertions. */
const DPOP_TYP = /^(application\/)?dpop\+jwt$/i;

export { DpopNonces, type DpopNoncesOptions } from './dpop-nonces';
export { MemoryReplayStore, type ReplayStore } from './dpop-replay';
export { DPOP_ALGORITHMS, type DpopAlgorithm } from '../jwt/algorithms';

/** What the request says the proof must match. */
export interface DpopExpected {
  /** The request method, e.g. `POST`; compared exactly. */
  htm: string;
  /**
   * The request URI as the server knows it: its configured public origin
   * plus the path (`req.originalUrl`), never built from `Host` or
   * `X-Forwarded-*`. Both sides are normalised; query and fragment ignored.
   */
  htu: string;
  /** At a protected resource: the access token, whose hash `ath` must be. */
  accessToken?: string;
  /** Its hash, when the caller has it already (saves hashing the token per request). */
  accessTokenHash?: string;
  /** At a protected resource: the token's `cnf.jkt`, the thumbprint the proof key must have. */
  jkt?: string;
  /**
   * The proof this same request passed at an earlier check, as that check
   * answered it (a route behind two requireBearer() layers: the mount's and
   * its own, with a scope). When the proof is that one, its signature and
   * its `jti` are not checked again (a `jti` may be used once, and this is
   * still the one request); every other check runs, with this check's
   * settings.
   */
  checkedBefore?: CheckedDpopProof;
}

/** A proof as verifyDpopProof() accepted it for a request. */
export interface CheckedDpopProof {
  /** The proof, the `DPoP` header's value. */
  proof: string;
  verified: VerifiedDpopProof;
}

export interface DpopVerifyOptions {
  /** Remembers each proof's `jti` for the acceptance window. */
  replay: ReplayStore;
  /** When given, every proof must carry one of its current nonces (else `use_dpop_nonce`). */
  nonces?: Pick<DpopNonces, 'current' | 'isValid'>;
  /** Accepted `alg`s; default ES256, ES384, PS256, RS256. */
  algorithms?: readonly DpopAlgorithm[];
  /** Seconds a proof is accepted after its `iat`; default 300. */
  maxAge?: number;
  /** Seconds an `iat` may lie in the future (clock skew); default 5. */
  clockTolerance?: number;
  /** Longest `jti` accepted, in characters; default 256. */
  maxJtiLength?: number;
  /** Longest proof accepted, in characters; default 8192. */
  maxProofLength?: number;
  /** Imported proof keys; default one cache shared by the process. */
  keyCache?: DpopKeyCache;
  /** HTTP status of InvalidDpopProofError and UseDpopNonceError: 400 at the token endpoint (default), 401 at a resource. */
  status?: 400 | 401;
  now?: () => number;
}

export interface DpopProofClaims extends Record<string, unknown> {
  jti: string;
  htm: string;
  htu: string;
  iat: number;
  ath?: string;
  nonce?: string;
}

export interface VerifiedDpopProof {
  /** RFC 7638 thumbprint of the proof key: the `cnf.jkt` to bind a token to. */
  jkt: string;
  /** The proof key's public JWK (required members only). */
  jwk: JsonWebKey;
  claims: DpopProofClaims;
}

const defaultKeyCache = new DpopKeyCache(1000);
const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

function decodeObject(segment: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A header or claim value for an operator's detail: bounded, whatever the
 * client sent. An object or array is named, not written: String() of an
 * array nested some thousands deep throws (a RangeError), and a proof may
 * hold one.
 */
function shown(value: unknown): string {
  if (value !== null && typeof value === 'object') return Array.isArray(value) ? '(an array)' : '(an object)';
  return String(value).slice(0, 32);
}

/** node:crypto's one-shot hash (Node 20.12+), cheaper than a Hash object; createHash before. */
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'buffer') => Buffer }).hash;

/** The replay key of a proof: its jti scoped to its key, hashed to a fixed size. */
function replayKey(jkt: string, jti: string): string {
  const input = `${jkt}\n${jti}`;
  const digest = oneShot ? oneShot('sha256', input, 'buffer') : createHash('sha256').update(input).digest();
  return digest.subarray(0, 16).toString('base64url');
}

/**
 * Checks one DPoP proof (RFC 9449 §4.3) against a request: exactly one
 * compact JWS; `typ` dpop+jwt; an allowed asymmetric `alg`; a public-only
 * `jwk` of the matching type; `jti`, `htm`, `htu`, `iat`; `htm` exact;
 * `htu` after RFC 3986 normalisation; `iat` in the window; `ath` and the
 * key's thumbprint when the request carries an access token; the signature
 * with the (cached) header key; the server nonce when nonces are on; and,
 * last, the `jti` unused (recorded in the replay store until the proof
 * expires). A proof the same request passed before (`checkedBefore`) skips
 * the signature and the `jti`.
 *
 * Throws InvalidDpopProofError (with a reason), UseDpopNonceError (carries
 * the `DPoP-Nonce` to send), InvalidTokenError when the proof key is not the
 * one the token is bound to, TemporarilyUnavailableError when the replay
 * store fails. Answers synchronously when the replay store does.
 */
export function verifyDpopProof(
  proof: string | string[] | undefined,
  expected: DpopExpected,
  options: DpopVerifyOptions,
): VerifiedDpopProof | Promise<VerifiedDpopProof> {
  const status = options.status ?? 400;
  const fail = (reason: DpopProofFailure, detail?: string, description?: string): never => {
    throw new InvalidDpopProofError(reason, { status, description, detail: detail === undefined ? undefined : `dpop proof: ${reason}: ${detail}` });
  };

  if (Array.isArray(proof)) {
    if (proof.length > 1) fail('multiple', `${proof.length} DPoP headers`);
    proof = proof[0];
  }
  if (proof === undefined || proof === '') return fail('missing');
  if (proof.length > (options.maxProofLength ?? 8192)) fail('malformed', `${proof.length} characters`, `the DPoP proof is longer than ${options.maxProofLength ?? 8192} characters`);
  if (proof.includes(',')) fail('multiple', 'a list in one DPoP header');
  if (!COMPACT_JWS.test(proof)) fail('malformed');

  const firstDot = proof.indexOf('.');
  const secondDot = proof.indexOf('.', firstDot + 1);
  const keyCache = options.keyCache ?? defaultKeyCache;
  const headerSegment = proof.slice(0, firstDot);
  // a header seen before passed every check below and has its key imported
  const known: CheckedProofHeader | undefined = keyCache.checkedHeader(headerSegment);
  let alg: DpopAlgorithm;
  let jwk: JsonWebKey | undefined;
  if (known) {
    alg = known.alg;
    if (!(options.algorithms ?? DPOP_ALGORITHMS).includes(alg)) return fail('alg', `alg ${alg}`);
  } else {
    const header = decodeObject(headerSegment) ?? fail('malformed', 'the JOSE header is not a JSON object', 'the DPoP proof header is not a JSON object');
    if (typeof header.typ !== 'string' || !DPOP_TYP.test(header.typ)) fail('typ', `typ ${shown(header.typ)}`);
    const headerAlg = header.alg;
    if (!isDpopAlgorithm(headerAlg) || !(options.algorithms ?? DPOP_ALGORITHMS).includes(headerAlg)) return fail('alg', `alg ${shown(headerAlg)}`);
    alg = headerAlg;
    if (header.crit !== undefined) fail('malformed', 'crit is not supported', 'the DPoP proof has a crit header parameter, and none is supported');
    const checked = publicDpopJwk(header.jwk, alg);
    if (typeof checked === 'string') return fail('jwk', checked);
    jwk = checked;
  }

  const claims = decodeObject(proof.slice(firstDot + 1, secondDot)) ?? fail('malformed', 'the payload is not a JSON object', 'the DPoP proof payload is not a JSON object');
  const { jti, htm, htu, iat } = claims;
  if (typeof jti !== 'string' || jti.length === 0 || jti.length > (options.maxJtiLength ?? 256)) fail('claims', 'jti missing or too long');
  if (typeof htm !== 'string' || typeof htu !== 'string') fail('claims', 'htm or htu missing');
  if (typeof iat !== 'number' || !Number.isFinite(iat)) fail('claims', 'iat missing');

  if (htm !== expected.htm) fail('htm', `htm ${shown(htm)} for a ${expected.htm} request`);
  const proofHtu = normalizeHtuCached(htu as string);
  const requestHtu = normalizeHtuCached(expected.htu);
  if (proofHtu === undefined || proofHtu !== requestHtu) fail('htu', `htu ${proofHtu?.slice(0, 256) ?? '(not an http(s) URL)'} for ${requestHtu ?? '(no request URI)'}`);

  const now = (options.now ?? Date.now)();
  const maxAge = options.maxAge ?? 300;
  const clockTolerance = options.clockTolerance ?? 5;
  const age = now / 1000 - (iat as number);
  if (age > maxAge) fail('iat_too_old', `${Math.round(age)} s old`);
  if (-age > clockTolerance) fail('iat_in_future', `${Math.round(-age)} s ahead`);

  if (expected.accessToken !== undefined && claims.ath !== (expected.accessTokenHash ?? accessTokenHash(expected.accessToken))) {
    fail('ath', claims.ath === undefined ? 'ath missing' : 'ath is the hash of another token');
  }

  let imported = known?.imported;
  if (!imported) {
    const result = keyCache.import(jwk!);
    if (typeof result === 'string') return fail('jwk', result);
    imported = result;
    keyCache.rememberHeader(headerSegment, { alg, imported });
  }
  if (expected.jkt !== undefined && imported.jkt !== expected.jkt) {
    throw new InvalidTokenError('the access token is bound to another DPoP key', { detail: 'dpop proof key thumbprint is not cnf.jkt' });
  }
  // the very proof this request passed before (the same bytes, so the same key and signature)
  const before = expected.checkedBefore !== undefined && expected.checkedBefore.proof === proof && expected.checkedBefore.verified.jkt === imported.jkt ? expected.checkedBefore.verified : undefined;
  if (!before && !verifyJws(alg, imported.key, proof.slice(0, secondDot), Buffer.from(proof.slice(secondDot + 1), 'base64url'))) fail('signature');

  if (options.nonces) {
    if (claims.nonce === undefined) throw new UseDpopNonceError(options.nonces.current(), { status, detail: 'dpop proof: no nonce' });
    if (!options.nonces.isValid(claims.nonce)) {
      throw new UseDpopNonceError(options.nonces.current(), { status, stale: true, detail: 'dpop proof: stale or unknown nonce' });
    }
  }

  // its jti was recorded when this request first passed
  if (before) return before;
  const verified: VerifiedDpopProof = { jkt: imported.jkt, jwk: imported.jwk, claims: claims as DpopProofClaims };
  // the proof stays acceptable until iat + maxAge (by any instance's clock within the tolerance)
  const expiresAt = ((iat as number) + maxAge + clockTolerance) * 1000;
  const forgotten = options.replay.forgottenUntil;
  if (forgotten !== undefined && expiresAt <= forgotten) {
    // a bounded replay store, full under load, no longer remembers proofs this old
    const window = Math.max(0, Math.floor(now / 1000 - (forgotten / 1000 - maxAge - clockTolerance)));
    fail('iat_too_old', `${Math.round(age)} s old; the full replay store covers the last ${window} s (raise dpop.replayMax or use dpop.redis)`);
  }
  let first: boolean | Promise<boolean>;
  try {
    first = options.replay.consume(replayKey(imported.jkt, jti as string), expiresAt);
  } catch (err) {
    throw replayFailure(err);
  }
  if (typeof first === 'boolean') return first ? verified : fail('replayed');
  return first.then(
    (ok) => (ok ? verified : fail('replayed')),
    (err: unknown) => {
      throw replayFailure(err);
    },
  );
}

function replayFailure(err: unknown): OAuthError {
  if (err instanceof OAuthError) return err;
  return new TemporarilyUnavailableError(undefined, { detail: `dpop replay store unavailable: ${err instanceof Error ? err.message : String(err)}`, cause: err, dependency: 'dpop_replay_store' });
}
