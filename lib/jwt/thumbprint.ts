import { createHash } from 'node:crypto';
import type { JsonWebKey } from './jwk';

/**
 * The members RFC 7638 §3.2 hashes, i.e. the public key itself, for the key
 * types this package uses. Anything else (private members, `kid`, `alg`,
 * `use`) is left out.
 */
export function publicKeyMembers(jwk: JsonWebKey): JsonWebKey {
  switch (jwk.kty) {
    case 'EC':
      return { crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y };
    case 'RSA':
      return { e: jwk.e, kty: jwk.kty, n: jwk.n };
    case 'OKP':
      return { crv: jwk.crv, kty: jwk.kty, x: jwk.x };
    default:
      throw new TypeError(`no RFC 7638 thumbprint for kty ${String(jwk.kty)}`);
  }
}

/**
 * RFC 7638 JWK thumbprint (SHA-256, base64url): the required members in
 * lexicographic order, no whitespace. Used as signing `kid` and as DPoP `jkt`.
 */
export function jwkThumbprint(jwk: JsonWebKey): string {
  // publicKeyMembers lists the members in lexicographic order already
  return createHash('sha256').update(JSON.stringify(publicKeyMembers(jwk))).digest('base64url');
}

/**
 * Whether two JWKs hold the same public key (their RFC 7638 members agree),
 * whatever their `kid`, `alg` or `use`. Key types without a thumbprint are
 * never the same.
 */
export function samePublicKey(a: { kty?: unknown }, b: { kty?: unknown }): boolean {
  if (a.kty !== b.kty) return false;
  try {
    return JSON.stringify(publicKeyMembers(a as JsonWebKey)) === JSON.stringify(publicKeyMembers(b as JsonWebKey));
  } catch {
    return false;
  }
}
