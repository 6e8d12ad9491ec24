import { randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import type { LoadedKey } from './keys';
import { formatScope } from './scope';

/** Claims of an access token (RFC 9068 §2.2). */
export interface AccessTokenClaims {
  iss: string;
  sub: string;
  client_id: string;
  aud: string;
  iat: number;
  exp: number;
  jti: string;
  /** The granted scopes, space-separated; absent when none were granted (RFC 6749 §3.3 has no empty scope). */
  scope?: string;
  /** RFC 9449 §6.1: the thumbprint of the DPoP key the token is bound to. */
  cnf?: { jkt: string };
  /** The client's token generation when above 0 (see core/revocation.ts): `revoke-tokens` refuses lower ones. */
  gen?: number;
}

export interface IssuedToken {
  accessToken: string;
  expiresIn: number;
  claims: AccessTokenClaims;
}

/** Signs an RFC 9068 access token (`typ: at+jwt`) for a client. */
export function signAccessToken(
  key: LoadedKey,
  input: { issuer: string; audience: string; clientId: string; scopes: readonly string[]; ttl: number; now: number; jkt?: string; generation?: number },
): IssuedToken {
  if (!key.privateKey) throw new Error(`key ${key.kid} cannot sign`);
  const iat = Math.floor(input.now / 1000);
  const claims: AccessTokenClaims = {
    iss: input.issuer,
    sub: input.clientId,
    client_id: input.clientId,
    aud: input.audience,
    iat,
    exp: iat + input.ttl,
    jti: randomUUID(),
  };
  if (input.scopes.length > 0) claims.scope = formatScope(input.scopes);
  if (input.jkt !== undefined) claims.cnf = { jkt: input.jkt };
  // generation 0 is what a token without the claim counts as: most tokens never carry it
  if (input.generation) claims.gen = input.generation;
  const accessToken = jwt.sign(claims, key.privateKey, {
    algorithm: key.alg as jwt.Algorithm,
    header: { alg: key.alg as jwt.Algorithm, typ: 'at+jwt', kid: key.kid },
  });
  return { accessToken, expiresIn: input.ttl, claims };
}
