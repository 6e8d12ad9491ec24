import { createPublicKey, type KeyObject } from 'node:crypto';
import type { JsonWebKey } from '../jwt/jwk';
import { LRUCache } from 'lru-cache';
import { keyTypeOf, type DpopAlgorithm } from '../jwt/algorithms';
import { isBase64url, MAX_RSA_BITS, MIN_RSA_BITS, PRIVATE_JWK_MEMBERS } from '../jwt/public-jwk';
import { jwkThumbprint } from '../jwt/thumbprint';

export interface ImportedDpopKey {
  /** RFC 7638 thumbprint of the key. */
  jkt: string;
  key: KeyObject;
  /** The public JWK, required members only. */
  jwk: JsonWebKey;
}

/** A proof header that passed the checks of verifyDpopProof: its `alg` and the imported key. */
export interface CheckedProofHeader {
  alg: DpopAlgorithm;
  imported: ImportedDpopKey;
}

/**
 * Checks a proof header's `jwk` for `alg` and gives its public members, or a
 * short reason it is refused: not an object, private or symmetric material,
 * an `alg` member other than the proof's or a `use` other than `sig`, a key
 * type or curve that does not fit the algorithm, members that are not
 * base64url strings.
 */
export function publicDpopJwk(jwk: unknown, alg: DpopAlgorithm): JsonWebKey | string {
  if (!jwk || typeof jwk !== 'object' || Array.isArray(jwk)) return 'jwk is not an object';
  const candidate = jwk as Record<string, unknown>;
  for (const member of PRIVATE_JWK_MEMBERS) {
    if (member in candidate) return `jwk carries the private or symmetric member ${member}`;
  }
  if (candidate.alg !== undefined && candidate.alg !== alg) return `jwk is meant for ${String(candidate.alg).slice(0, 32)}, the proof uses ${alg}`;
  if (candidate.use !== undefined && candidate.use !== 'sig') return 'jwk use is not sig';
  const need = keyTypeOf(alg);
  if (candidate.kty !== need.kty) return `jwk kty ${String(candidate.kty)} does not fit ${alg}`;
  if (need.kty === 'EC') {
    if (candidate.crv !== need.crv) return `jwk crv ${String(candidate.crv)} does not fit ${alg}`;
    if (!isBase64url(candidate.x) || !isBase64url(candidate.y)) return 'jwk x or y is not base64url';
    return { crv: need.crv, kty: 'EC', x: candidate.x, y: candidate.y };
  }
  if (!isBase64url(candidate.n) || !isBase64url(candidate.e)) return 'jwk n or e is not base64url';
  return { e: candidate.e, kty: 'RSA', n: candidate.n };
}

/**
 * Public keys from DPoP proof headers, imported once per key: a bounded LRU
 * keyed by RFC 7638 thumbprint (the thumbprint covers every member the
 * import reads, so one thumbprint is one key). Clients reuse one DPoP key,
 * so a proof normally costs a thumbprint and a map lookup, not an import.
 */
export class DpopKeyCache {
  private readonly keys: LRUCache<string, KeyObject>;
  /**
   * Proof headers already checked and their key imported, by the header's
   * exact base64url text: a client signs every proof with one header, so
   * the next proof skips decoding it, the checks, the thumbprint and the
   * lookup. The same text always decodes to the same header, so the answer
   * is the one the full path would give. Only headers that passed are kept.
   */
  private readonly headers: LRUCache<string, CheckedProofHeader>;

  constructor(max = 1000) {
    this.keys = new LRUCache({ max: Math.max(1, max) });
    this.headers = new LRUCache({ max: Math.max(1, max) });
  }

  /** A header (its base64url text) that passed every check before, with its key. */
  checkedHeader(segment: string): CheckedProofHeader | undefined {
    return this.headers.get(segment);
  }

  rememberHeader(segment: string, checked: CheckedProofHeader): void {
    this.headers.set(segment, checked);
  }

  get size(): number {
    return this.keys.size;
  }

  /**
   * The key object for a checked public JWK (see publicDpopJwk), or a
   * reason it cannot be used (not a point on the curve, RSA modulus too
   * small). Failed imports are not cached.
   */
  import(jwk: JsonWebKey): ImportedDpopKey | string {
    const jkt = jwkThumbprint(jwk);
    let key = this.keys.get(jkt);
    if (!key) {
      try {
        key = createPublicKey({ key: jwk, format: 'jwk' });
      } catch {
        return 'jwk is not a valid public key';
      }
      const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
      if (jwk.kty === 'RSA' && (bits < MIN_RSA_BITS || bits > MAX_RSA_BITS)) {
        return `jwk RSA modulus of ${bits} bits is outside ${MIN_RSA_BITS}-${MAX_RSA_BITS}`;
      }
      this.keys.set(jkt, key);
    }
    return { jkt, key, jwk };
  }
}
