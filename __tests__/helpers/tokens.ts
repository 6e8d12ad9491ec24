/**
 * Access tokens for tests: the issuer's real signing key read from its store,
 * fresh key pairs, and JWTs minted with jsonwebtoken (or by hand, for the
 * unsigned and HMAC forgeries jsonwebtoken refuses to produce).
 */
import { createHmac, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { openEmbeddedStore } from '../../lib/stores/embedded';

export const TEST_ISSUER = 'http://issuer.test';
export const TEST_AUDIENCE = 'http://api.test';

export interface SigningKey {
  kid: string;
  alg: 'ES256' | 'RS256';
  privateKey: KeyObject;
  publicKey: KeyObject;
}

/** The key the issuer under `dataDir` signs with now, read through a second connection to its store. */
export async function issuerSigningKey(dataDir: string): Promise<SigningKey> {
  const store = await openEmbeddedStore({ dataDir });
  try {
    const now = Date.now();
    const current = (await store.listKeys())
      .filter((k) => k.retiredAt === null && k.activatesAt.getTime() <= now)
      .sort((a, b) => b.activatesAt.getTime() - a.activatesAt.getTime())[0];
    if (!current) throw new Error(`no current signing key in ${dataDir}`);
    return {
      kid: current.kid,
      alg: current.alg as SigningKey['alg'],
      privateKey: createPrivateKey({ key: JSON.parse(current.privateJwk), format: 'jwk' }),
      publicKey: createPublicKey({ key: JSON.parse(current.publicJwk), format: 'jwk' }),
    };
  } finally {
    await store.close();
  }
}

/** A key pair the issuer never saw; `kid` defaults to a random one. */
export function freshKey(alg: SigningKey['alg'] = 'ES256', kid = randomBytes(12).toString('base64url')): SigningKey {
  const { privateKey, publicKey } =
    alg === 'ES256' ? generateKeyPairSync('ec', { namedCurve: 'P-256' }) : generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { kid, alg, privateKey, publicKey };
}

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

/** The claims of a valid access token of the test issuer, with `overrides` applied. */
export function accessClaims(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const iat = nowSeconds();
  return {
    iss: TEST_ISSUER,
    sub: 'client-test',
    client_id: 'client-test',
    aud: TEST_AUDIENCE,
    iat,
    exp: iat + 300,
    jti: randomBytes(16).toString('base64url'),
    scope: 'orders:read',
    ...overrides,
  };
}

export interface MintOptions {
  /** Claims merged over `accessClaims()`. */
  claims?: Record<string, unknown>;
  /** Claims removed from the payload (e.g. `['exp']`). */
  omit?: string[];
  /** JOSE header members merged over `{ alg, typ: 'at+jwt', kid }`; `undefined` removes one. */
  header?: Record<string, unknown>;
}

function payloadOf(options: MintOptions): Record<string, unknown> {
  const payload = accessClaims(options.claims);
  for (const name of options.omit ?? []) delete payload[name];
  return payload;
}

/** A JWT signed with `key` (jsonwebtoken, no `expiresIn`; `iat` left out when omitted). */
export function mint(key: SigningKey, options: MintOptions = {}): string {
  const payload = payloadOf(options);
  return jwt.sign(payload, key.privateKey, {
    algorithm: key.alg,
    noTimestamp: payload.iat === undefined,
    header: { alg: key.alg, typ: 'at+jwt', kid: key.kid, ...options.header } as jwt.JwtHeader,
  });
}

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');

/** An unsigned token (`alg: none`, empty signature) naming `kid`. */
export function unsignedToken(kid: string, options: MintOptions = {}): string {
  return `${b64({ alg: 'none', typ: 'at+jwt', kid, ...options.header })}.${b64(payloadOf(options))}.`;
}

/** An HS256 token whose HMAC secret is `secret` (e.g. the issuer's public key as PEM or JWK text). */
export function hmacToken(kid: string, secret: string, options: MintOptions = {}): string {
  const signingInput = `${b64({ alg: 'HS256', typ: 'at+jwt', kid, ...options.header })}.${b64(payloadOf(options))}`;
  return `${signingInput}.${createHmac('sha256', secret).update(signingInput).digest('base64url')}`;
}

/** The decoded JOSE header of a token. */
export function headerOf(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString('utf8'));
}

/** A real access token from POST /oauth/token of `app` (form body, client_secret_post). */
export async function fetchToken(
  app: Parameters<typeof request>[0],
  client: { clientId: string; clientSecret: string },
  scope?: string,
): Promise<string> {
  const form: Record<string, string> = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret };
  if (scope !== undefined) form.scope = scope;
  const res = await request(app).post('/oauth/token').type('form').send(form);
  if (res.status !== 200 || typeof res.body.access_token !== 'string') {
    throw new Error(`token request failed: ${res.status} ${JSON.stringify(res.body)}`);
  }
  return res.body.access_token;
}
