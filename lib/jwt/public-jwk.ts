import { createPublicKey, type KeyObject } from 'node:crypto';
import type { JsonWebKey } from './jwk';
import { isDpopAlgorithm, keyTypeOf, type DpopAlgorithm } from './algorithms';
import { jwkThumbprint, publicKeyMembers } from './thumbprint';

/** JWK members that carry private or symmetric key material (RFC 7518 §6). */
export const PRIVATE_JWK_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const;
/** Smallest and largest RSA modulus accepted, in bits (RFC 7518 §3.3; the upper bound caps what one check costs). */
export const MIN_RSA_BITS = 2048;
export const MAX_RSA_BITS = 4096;

/** A checked public signing key: its public members with `kid` and the one algorithm it verifies. */
export interface CheckedPublicJwk {
  /** Public members, `kid` (given, or the RFC 7638 thumbprint) and `alg`; nothing else. */
  jwk: JsonWebKey & { kid: string; alg: DpopAlgorithm; kty: string };
  alg: DpopAlgorithm;
  key: KeyObject;
}

const KID = /^[\x21-\x7e]{1,128}$/;

/** A non-empty base64url string of at most 1024 characters (a JWK key member). */
export function isBase64url(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= 1024 && /^[A-Za-z0-9_-]+$/.test(value);
}

/** The algorithm a key is pinned to: its `alg` member, else ES256/ES384 by curve, RS256 for RSA. */
function pinnedAlgorithm(jwk: Record<string, unknown>): DpopAlgorithm | string {
  if (jwk.alg !== undefined) {
    if (!isDpopAlgorithm(jwk.alg)) return `alg ${String(jwk.alg).slice(0, 32)} is not one of ES256, ES384, PS256, RS256`;
    const need = keyTypeOf(jwk.alg);
    if (jwk.kty !== need.kty || (need.crv !== undefined && jwk.crv !== need.crv)) return `alg ${jwk.alg} does not fit kty ${String(jwk.kty)}${jwk.crv ? ` crv ${String(jwk.crv)}` : ''}`;
    return jwk.alg;
  }
  if (jwk.kty === 'RSA') return 'RS256';
  if (jwk.crv === 'P-256') return 'ES256';
  if (jwk.crv === 'P-384') return 'ES384';
  return `curve ${String(jwk.crv).slice(0, 32)} is not P-256 or P-384`;
}

/**
 * Checks one public signing JWK (a client's key): an object, no private or
 * symmetric members, kty EC (P-256, P-384) or RSA (2048 to 4096 bits), `use`
 * absent or `sig`, `alg` absent or one of ES256/ES384/PS256/RS256 fitting
 * the key. Gives the key, imported once, or a one-line reason it is refused.
 */
export function checkPublicJwk(input: unknown): CheckedPublicJwk | string {
  if (!input || typeof input !== 'object' || Array.isArray(input)) return 'a JWK must be a JSON object';
  const jwk = input as Record<string, unknown>;
  for (const member of PRIVATE_JWK_MEMBERS) {
    if (member in jwk) {
      return member === 'k' || jwk.kty === 'oct'
        ? 'symmetric keys are refused: register a public EC or RSA key'
        : `the JWK carries the private member "${member}": register the public key only`;
    }
  }
  if (jwk.kty === 'oct') return 'symmetric keys are refused: register a public EC or RSA key';
  if (jwk.kty !== 'EC' && jwk.kty !== 'RSA') return `kty ${String(jwk.kty).slice(0, 32)} is not EC or RSA`;
  if (jwk.use !== undefined && jwk.use !== 'sig') return 'use must be sig';
  if (jwk.kid !== undefined && (typeof jwk.kid !== 'string' || !KID.test(jwk.kid))) return 'kid must be 1 to 128 printable ASCII characters';
  const alg = pinnedAlgorithm(jwk);
  if (!isDpopAlgorithm(alg)) return alg;
  if (jwk.kty === 'EC' ? !isBase64url(jwk.x) || !isBase64url(jwk.y) : !isBase64url(jwk.n) || !isBase64url(jwk.e)) {
    return 'the key members are not base64url strings';
  }
  const members = publicKeyMembers(jwk as JsonWebKey);
  let key: KeyObject;
  try {
    key = createPublicKey({ key: members, format: 'jwk' });
  } catch {
    return 'not a valid public key';
  }
  if (jwk.kty === 'RSA') {
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS) return `RSA keys need at least ${MIN_RSA_BITS} bits, this one has ${bits}`;
    if (bits > MAX_RSA_BITS) return `RSA keys of more than ${MAX_RSA_BITS} bits are refused, this one has ${bits}`;
  }
  const kid = typeof jwk.kid === 'string' ? jwk.kid : jwkThumbprint(members);
  return { jwk: { ...members, kid, alg } as CheckedPublicJwk['jwk'], alg, key };
}

/** A JWK Set (`{ keys: [...] }`) or one JWK, as the keys it holds. */
export function jwkList(input: unknown): unknown[] {
  if (input && typeof input === 'object' && !Array.isArray(input) && Array.isArray((input as { keys?: unknown }).keys)) {
    return (input as { keys: unknown[] }).keys;
  }
  return [input];
}
