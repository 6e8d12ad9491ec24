/** The token client with private_key_jwt, against the real issuer and requireBearer() in one process. */
import { generateKeyPairSync } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { createTokenClient, type TokenClient } from '../../lib/client';
import { createIssuer, signClientAssertion, type Issuer } from '../../lib';
import { tempDir } from '../helpers/app';

let server: Server;
let url: string;
let issuer: Issuer;
const tokenForms: URLSearchParams[] = [];
const clients: TokenClient[] = [];

function keyPair(kid: string) {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { privateJwk: { ...privateKey.export({ format: 'jwk' }), kid }, publicJwk: { ...publicKey.export({ format: 'jwk' }), kid }, privateKey };
}

function decode(jwt: string): { header: Record<string, unknown>; payload: Record<string, unknown> } {
  const [h, p] = jwt.split('.');
  return { header: JSON.parse(Buffer.from(h, 'base64url').toString()), payload: JSON.parse(Buffer.from(p, 'base64url').toString()) };
}

beforeAll(async () => {
  const app = express();
  server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  issuer = createIssuer({ issuer: url, audience: `${url}/api`, dataDir: tempDir(), logger: false });
  await issuer.ready();
  app.use(express.urlencoded({ extended: false }), (req, _res, next) => {
    if (req.path === '/oauth/token') tokenForms.push(new URLSearchParams(req.body as Record<string, string>));
    next();
  });
  app.use(issuer.router());
  app.get('/api/whoami', issuer.requireBearer(), (req, res) => {
    res.json({ client_id: req.auth!.clientId });
  });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  tokenForms.length = 0;
});
afterAll(async () => {
  await issuer.close();
  await new Promise((r) => server.close(r));
});

/**
 * A JWK typed as newer @types/node declare Node's own JsonWebKey: an interface without an index signature,
 * which a type with one (this package's JsonWebKey) does not accept. The options take it (npm run typecheck).
 */
interface NodeStyleJwk {
  alg?: string;
  crv?: string;
  d?: string;
  ext?: boolean;
  key_ops?: string[];
  kty?: string;
  x?: string;
  y?: string;
  oth?: { d?: string; r?: string; t?: string }[];
}

it('takes a JWK typed as Node\'s own (no index signature) as the private key, the registered key and the DPoP key', async () => {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const privateJwk: NodeStyleJwk = privateKey.export({ format: 'jwk' });
  const publicJwk: NodeStyleJwk = publicKey.export({ format: 'jwk' });
  const dpopJwk: NodeStyleJwk = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  const { clientId } = await issuer.clients.create({ name: 'node-jwk', authMethod: 'private_key_jwt', jwks: publicJwk });
  const client = createTokenClient({ issuer: url, clientId, privateKey: privateJwk, dpop: { privateKey: dpopJwk }, allowInsecureHttp: true });
  clients.push(client);
  const res = await client.fetch(`${url}/api/whoami`);
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({ client_id: clientId });
  const assertion = signClientAssertion({ clientId, audience: url, privateKey: privateJwk });
  expect(decode(assertion).payload).toMatchObject({ iss: clientId, sub: clientId, aud: url });
});

it('gets a token with a fresh assertion per token request, and the API accepts it', async () => {
  const key = keyPair('k1');
  const { clientId } = await issuer.clients.create({ name: 'keyed', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
  const client = createTokenClient({ issuer: url, clientId, privateKey: key.privateJwk, allowInsecureHttp: true });
  clients.push(client);

  const res = await client.fetch(`${url}/api/whoami`);
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({ client_id: clientId });

  // a second token (another scope set): a new assertion, not a replay
  await client.getToken({ scope: '' });
  const byKeyObject = createTokenClient({ issuer: url, clientId, privateKey: key.privateKey, kid: 'k1', allowInsecureHttp: true });
  clients.push(byKeyObject);
  const second = await byKeyObject.getToken();
  expect(second.tokenType).toBe('Bearer');

  expect(tokenForms.length).toBeGreaterThanOrEqual(2);
  const assertions = tokenForms.map((f) => f.get('client_assertion')!);
  expect(new Set(assertions.map((a) => decode(a).payload.jti)).size).toBe(assertions.length);
  for (const form of tokenForms) {
    expect(form.get('client_assertion_type')).toBe('urn:ietf:params:oauth:client-assertion-type:jwt-bearer');
    expect(form.get('client_secret')).toBeNull();
    const { header, payload } = decode(form.get('client_assertion')!);
    expect(header).toMatchObject({ alg: 'ES256', kid: 'k1' });
    expect(payload).toMatchObject({ iss: clientId, sub: clientId, aud: url });
    expect((payload.exp as number) - (payload.iat as number)).toBe(60);
  }
});

it('with tokenEndpoint alone the assertion is for the token endpoint, which the issuer refuses by default; given issuer too, it is for the issuer, with no discovery', async () => {
  const key = keyPair('k1');
  const { clientId } = await issuer.clients.create({ name: 'no-discovery', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
  const alone = createTokenClient({ tokenEndpoint: `${url}/oauth/token`, clientId, privateKey: key.privateJwk, allowInsecureHttp: true });
  clients.push(alone);
  await expect(alone.getToken()).rejects.toMatchObject({ name: 'TokenEndpointError', status: 401, error: 'invalid_client' });
  expect(decode(tokenForms.at(-1)!.get('client_assertion')!).payload.aud).toBe(`${url}/oauth/token`);

  const both = createTokenClient({ issuer: url, tokenEndpoint: `${url}/oauth/token`, clientId, privateKey: key.privateJwk, allowInsecureHttp: true });
  clients.push(both);
  const res = await both.fetch(`${url}/api/whoami`);
  expect(res.status).toBe(200);
  expect(decode(tokenForms.at(-1)!.get('client_assertion')!).payload.aud).toBe(url);
});

it('a key the issuer does not know: invalid_client, as a typed error', async () => {
  const registered = keyPair('k1');
  const other = keyPair('k1');
  const { clientId } = await issuer.clients.create({ name: 'other', authMethod: 'private_key_jwt', jwks: { keys: [registered.publicJwk] } });
  const client = createTokenClient({ issuer: url, clientId, privateKey: other.privateJwk, allowInsecureHttp: true });
  clients.push(client);
  await expect(client.getToken()).rejects.toMatchObject({ name: 'TokenEndpointError', status: 401, error: 'invalid_client' });
});

it('refuses a public key, both a secret and a key, and a key with another authMethod, at creation', () => {
  const key = keyPair('k1');
  const base = { issuer: url, clientId: 'x', allowInsecureHttp: true };
  expect(() => createTokenClient({ ...base, privateKey: key.publicJwk })).toThrow(TypeError);
  expect(() => createTokenClient({ ...base, privateKey: key.privateJwk, clientSecret: 's' })).toThrow(/not both/);
  expect(() => createTokenClient({ ...base, privateKey: key.privateJwk, authMethod: 'client_secret_post' })).toThrow(/private_key_jwt/);
  expect(() => createTokenClient({ ...base, authMethod: 'private_key_jwt' })).toThrow(/privateKey/);
});
