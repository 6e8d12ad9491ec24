import { constants, sign, verify, type KeyObject } from 'node:crypto';

/** The JWS algorithms accepted for DPoP proofs: asymmetric only, never `none` or HMAC. */
export const DPOP_ALGORITHMS = ['ES256', 'ES384', 'PS256', 'RS256'] as const;
export type DpopAlgorithm = (typeof DPOP_ALGORITHMS)[number];

interface AlgorithmSpec {
  kty: 'EC' | 'RSA';
  /** The curve for EC algorithms (RFC 7518 §3.4 pins one per algorithm). */
  crv?: string;
  hash: 'sha256' | 'sha384';
  /** Options for node:crypto sign/verify besides the key. */
  options: { dsaEncoding?: 'ieee-p1363'; padding?: number; saltLength?: number };
}

const SPECS: Record<DpopAlgorithm, AlgorithmSpec> = {
  ES256: { kty: 'EC', crv: 'P-256', hash: 'sha256', options: { dsaEncoding: 'ieee-p1363' } },
  ES384: { kty: 'EC', crv: 'P-384', hash: 'sha384', options: { dsaEncoding: 'ieee-p1363' } },
  PS256: {
    kty: 'RSA',
    hash: 'sha256',
    options: { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST },
  },
  RS256: { kty: 'RSA', hash: 'sha256', options: { padding: constants.RSA_PKCS1_PADDING } },
};

export function isDpopAlgorithm(alg: unknown): alg is DpopAlgorithm {
  return typeof alg === 'string' && Object.prototype.hasOwnProperty.call(SPECS, alg);
}

/** The key type (and curve) an algorithm needs. */
export function keyTypeOf(alg: DpopAlgorithm): { kty: 'EC' | 'RSA'; crv?: string } {
  const { kty, crv } = SPECS[alg];
  return { kty, crv };
}

/** The JWS signature of `input` (the ASCII signing input) with `alg`, as raw bytes. */
export function signJws(alg: DpopAlgorithm, privateKey: KeyObject, input: string): Buffer {
  const spec = SPECS[alg];
  return sign(spec.hash, Buffer.from(input, 'latin1'), { key: privateKey, ...spec.options });
}

/** Whether `signature` is `alg`'s signature of `input` by `publicKey`; never throws for a bad signature. */
export function verifyJws(alg: DpopAlgorithm, publicKey: KeyObject, input: string, signature: Buffer): boolean {
  const spec = SPECS[alg];
  try {
    return verify(spec.hash, Buffer.from(input, 'latin1'), { key: publicKey, ...spec.options }, signature);
  } catch {
    return false;
  }
}
