import { createPrivateKey, randomBytes, type KeyObject } from 'node:crypto';
import type { JsonWebKey, JwkInput } from './jwk';
import { isDpopAlgorithm, signJws, type DpopAlgorithm } from './algorithms';

/** RFC 7523 §2.2 `client_assertion_type`. */
export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

export interface ClientAssertionInput {
  clientId: string;
  /** The issuer identifier (the assertion's only `aud`). */
  audience: string;
  /** A private JWK (its `kid` and `alg` are used when present) or a private KeyObject. */
  privateKey: JwkInput | KeyObject;
  /** `kid` header; default the JWK's `kid`. */
  kid?: string;
  /** Default the JWK's `alg`, else ES256 / ES384 by curve, RS256 for RSA. */
  alg?: DpopAlgorithm;
  /** Seconds the assertion is valid. Default 60. */
  lifetime?: number;
  /** Current time in ms. Default Date.now(). */
  now?: number;
}

function b64(value: object): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function defaultAlgorithm(key: KeyObject, jwk: JsonWebKey | undefined): DpopAlgorithm {
  if (jwk && isDpopAlgorithm(jwk.alg)) return jwk.alg;
  if (key.asymmetricKeyType === 'rsa') return 'RS256';
  if (key.asymmetricKeyType === 'rsa-pss') return 'PS256';
  if (key.asymmetricKeyType === 'ec') return key.asymmetricKeyDetails?.namedCurve === 'secp384r1' ? 'ES384' : 'ES256';
  throw new TypeError(`no client assertion algorithm for a ${String(key.asymmetricKeyType)} key`);
}

/**
 * Signs a fresh client assertion (RFC 7523 §2.2, private_key_jwt):
 * `iss` = `sub` = the client id, `aud` = the issuer, `iat`, `exp` = now + 60 s,
 * a random `jti`, `typ: JWT` and the key's `kid` in the header. Call it
 * once per token request: the issuer accepts each assertion once.
 */
export function signClientAssertion(input: ClientAssertionInput): string {
  const isKeyObject = !('kty' in input.privateKey);
  const jwk = isKeyObject ? undefined : (input.privateKey as JsonWebKey);
  const key = isKeyObject ? (input.privateKey as KeyObject) : createPrivateKey({ key: jwk as JsonWebKey, format: 'jwk' });
  if (key.type !== 'private') throw new TypeError('signClientAssertion needs a private key');
  const alg = input.alg ?? defaultAlgorithm(key, jwk);
  const kid = input.kid ?? (typeof jwk?.kid === 'string' ? jwk.kid : undefined);
  const iat = Math.floor((input.now ?? Date.now()) / 1000);
  const header = kid === undefined ? { alg, typ: 'JWT' } : { alg, typ: 'JWT', kid };
  const payload = {
    iss: input.clientId,
    sub: input.clientId,
    aud: input.audience,
    iat,
    exp: iat + (input.lifetime ?? 60),
    jti: randomBytes(18).toString('base64url'),
  };
  const signingInput = `${b64(header)}.${b64(payload)}`;
  return `${signingInput}.${signJws(alg, key, signingInput).toString('base64url')}`;
}
