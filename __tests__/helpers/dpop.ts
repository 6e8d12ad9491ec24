/**
 * DPoP proofs for tests: well-formed ones through the library's DpopKey,
 * and hand-made ones (any header, any payload) signed with a real key so a
 * test changes exactly one thing.
 */
import { createHmac, generateKeyPairSync, type JsonWebKey, type KeyObject } from 'node:crypto';
import { signJws, type DpopAlgorithm } from '../../lib/jwt/algorithms';
import { DpopKey, accessTokenHash } from '../../lib/jwt/dpop-proof';

export function newDpopKey(alg: DpopAlgorithm = 'ES256', modulusLength = 2048): DpopKey {
  const { privateKey } =
    alg === 'ES256'
      ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
      : alg === 'ES384'
        ? generateKeyPairSync('ec', { namedCurve: 'P-384' })
        : generateKeyPairSync('rsa', { modulusLength });
  return new DpopKey({ privateKey, alg });
}

/** The private KeyObject of a DpopKey (tests only). */
export function privateKeyOf(key: DpopKey): KeyObject {
  return (key as unknown as { privateKey: KeyObject }).privateKey;
}

const b64 = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

export interface RawProof {
  header?: Record<string, unknown>;
  payload?: Record<string, unknown>;
  /** Signs with this key instead of `key`'s own. */
  signWith?: KeyObject;
  /** `alg` used to sign, when it differs from the header's. */
  signAlg?: DpopAlgorithm;
  /** Bytes used as the HMAC secret for an HS256 signature. */
  hmacSecret?: string;
}

/**
 * A proof for `key` with default header {typ, alg, jwk} and payload
 * {jti, htm, htu, iat}; `header` and `payload` entries replace (or, when
 * `undefined`, remove) defaults. The htu is sent as written, not normalised.
 */
export function rawProof(key: DpopKey, defaults: { htm: string; htu: string; iat: number; accessToken?: string }, raw: RawProof = {}): string {
  const header = strip({ typ: 'dpop+jwt', alg: key.alg, jwk: key.publicJwk, ...raw.header });
  const payload = strip({
    jti: `jti-${Math.random().toString(36).slice(2)}`,
    htm: defaults.htm,
    htu: defaults.htu,
    iat: defaults.iat,
    ...(defaults.accessToken !== undefined ? { ath: accessTokenHash(defaults.accessToken) } : {}),
    ...raw.payload,
  });
  const input = `${b64(header)}.${b64(payload)}`;
  if (raw.hmacSecret !== undefined) return `${input}.${createHmac('sha256', raw.hmacSecret).update(input).digest('base64url')}`;
  const sig = signJws(raw.signAlg ?? key.alg, raw.signWith ?? privateKeyOf(key), input);
  return `${input}.${sig.toString('base64url')}`;
}

function strip(object: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(object).filter(([, v]) => v !== undefined));
}

export function privateJwkOf(key: DpopKey): JsonWebKey {
  return privateKeyOf(key).export({ format: 'jwk' });
}
