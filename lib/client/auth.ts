import { createPrivateKey, KeyObject } from 'node:crypto';
import type { JsonWebKey, JwkInput } from '../jwt/jwk';
import type { DpopAlgorithm } from '../jwt/algorithms';
import { CLIENT_ASSERTION_TYPE, signClientAssertion } from '../jwt/client-assertion';

/**
 * Client authentication at the token endpoint, as a plug-in: each method adds
 * its credentials to one token request. `apply()` runs for every request sent,
 * retries included, so a method that signs a fresh assertion per request
 * (private_key_jwt) fits the same hook.
 */

/** One token request about to be sent: add headers and form fields. */
export interface TokenRequestParts {
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly body: URLSearchParams;
}

export interface ClientAuthContext {
  readonly clientId: string;
  /** The token endpoint URL (the `aud` of a client assertion). */
  readonly tokenEndpoint: string;
  /** The issuer, when the client was created with one. */
  readonly issuer: string | undefined;
}

export interface ClientAuthentication {
  /** The RFC 7591 `token_endpoint_auth_method` name. */
  readonly method: string;
  apply(request: TokenRequestParts, context: ClientAuthContext): void | Promise<void>;
}

/** application/x-www-form-urlencoded encoding of one value (RFC 6749 Appendix B). */
export function formEncode(value: string): string {
  return encodeURIComponent(value).replace(/%20/g, '+');
}

function checkSecret(secret: unknown): string {
  if (typeof secret !== 'string' || secret === '') throw new TypeError('a client secret must be a non-empty string');
  return secret;
}

/** HTTP Basic with the id and secret form-encoded first (RFC 6749 §2.3.1). */
export function clientSecretBasic(clientSecret: string): ClientAuthentication {
  const secret = formEncode(checkSecret(clientSecret));
  let cached: { clientId: string; header: string } | undefined;
  return {
    method: 'client_secret_basic',
    apply(request, context) {
      if (cached?.clientId !== context.clientId) {
        cached = { clientId: context.clientId, header: `Basic ${Buffer.from(`${formEncode(context.clientId)}:${secret}`).toString('base64')}` };
      }
      request.headers.authorization = cached.header;
    },
  };
}

/** `client_id` and `client_secret` as form fields (RFC 6749 §2.3.1). */
export function clientSecretPost(clientSecret: string): ClientAuthentication {
  const secret = checkSecret(clientSecret);
  return {
    method: 'client_secret_post',
    apply(request, context) {
      request.body.set('client_id', context.clientId);
      request.body.set('client_secret', secret);
    },
  };
}

export interface PrivateKeyJwtOptions {
  /** The client's private key: a private JWK (its `kid` and `alg` are used when present) or a KeyObject. */
  privateKey: JwkInput | KeyObject;
  /** `kid` of the registered public key; default the JWK's `kid`. */
  kid?: string;
  /** ES256, ES384, PS256 or RS256; default the JWK's `alg`, else by key type. */
  alg?: DpopAlgorithm;
}

/**
 * private_key_jwt (RFC 7523 §2.2): every token request, retries included,
 * carries a freshly signed assertion (`aud` = the issuer when the client was
 * created with one, else the token endpoint URL; `exp` = now + 60 s; a new
 * `jti`, since the issuer accepts each assertion once). The key is imported
 * once, here.
 */
export function privateKeyJwt(options: PrivateKeyJwtOptions): ClientAuthentication {
  if (typeof options !== 'object' || options === null) throw new TypeError('privateKeyJwt() needs { privateKey }');
  const given = options.privateKey;
  let privateKey: KeyObject;
  try {
    privateKey = given instanceof KeyObject ? given : createPrivateKey({ key: given as JsonWebKey, format: 'jwk' });
  } catch (err) {
    throw new TypeError(`option privateKey must be a private JWK or KeyObject: ${(err as Error).message}`);
  }
  if (privateKey.type !== 'private') throw new TypeError('option privateKey must be a private key');
  const jwk = given instanceof KeyObject ? undefined : (given as JsonWebKey);
  const kid = options.kid ?? (typeof jwk?.kid === 'string' ? jwk.kid : undefined);
  const alg = options.alg ?? (typeof jwk?.alg === 'string' ? (jwk.alg as DpopAlgorithm) : undefined);
  // fail at start-up, not on the first token request
  signClientAssertion({ clientId: 'check', audience: 'check', privateKey, kid, alg });
  return {
    method: 'private_key_jwt',
    apply(request, context) {
      request.body.set('client_id', context.clientId);
      request.body.set('client_assertion_type', CLIENT_ASSERTION_TYPE);
      request.body.set(
        'client_assertion',
        signClientAssertion({ clientId: context.clientId, audience: context.issuer ?? context.tokenEndpoint, privateKey, kid, alg }),
      );
    },
  };
}
