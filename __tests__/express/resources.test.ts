/**
 * RFC 8707 resource indicators: several APIs from one issuer. The research
 * note's RI1–RI6 on the wire, the CLI flag, and the token client caching
 * per resource against this issuer.
 */
import express from 'express';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createIssuer } from '../../lib';
import { main } from '../../lib/cli/main';
import { createTokenClient } from '../../lib/client';
import { signClientAssertion } from '../../lib/jwt/client-assertion';
import { loopbackServer, setup, tempDir, ISSUER, type TestSetup } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { generateKeyPairSync } from 'node:crypto';

const API_A = 'https://api-a.test';
const API_B = 'https://api-b.test/v1';
const API_C = 'https://api-c.test';
const DEFAULT = 'https://orders.test';

type Client = { clientId: string; clientSecret: string };

function tokenRequest(t: TestSetup, client: Client, body: string) {
  return request(t.app)
    .post('/oauth/token')
    .type('form')
    .auth(client.clientId, client.clientSecret)
    .send(`grant_type=client_credentials${body}`);
}

const audOf = (accessToken: string) => (jwt.decode(accessToken) as { aud: unknown }).aud;

function expectInvalidTarget(res: request.Response, description: RegExp): void {
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 400, error: 'invalid_target' });
  expect(res.body.error_description).toMatch(description);
  expect(res.headers['cache-control']).toBe('no-store');
}

describe('resource indicators at the token endpoint', () => {
  let t: TestSetup;
  let both: Client;
  let plain: Client;
  beforeAll(async () => {
    t = await setup({ audience: DEFAULT, resources: [API_A, API_B, API_C] }, (app, issuer) => {
      app.use(issuer.router());
      app.get('/a', issuer.requireBearer({ audience: API_A }), (req, res) => void res.json({ aud: req.auth!.claims.aud }));
      app.get('/b', issuer.requireBearer({ audience: API_B }), (req, res) => void res.json({ aud: req.auth!.claims.aud }));
      app.get('/default', issuer.requireBearer(), (req, res) => void res.json({ aud: req.auth!.claims.aud }));
    });
    both = await t.issuer.clients.create({ name: 'both', scopes: 'orders:read', resources: [API_A, API_B] });
    plain = await t.issuer.clients.create({ name: 'plain', scopes: 'orders:read' });
  });
  afterAll(() => t.close());

  it('RI1: resource=A → 200 and aud A; the token response is otherwise unchanged', async () => {
    const res = await tokenRequest(t, both, `&resource=${encodeURIComponent(API_A)}`);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['access_token', 'expires_in', 'scope', 'token_type']);
    expect(audOf(res.body.access_token)).toBe(API_A);
    // a differently spelt A (upper-case host, trailing slash) is the same resource; the token carries it as configured
    const spelt = await tokenRequest(t, both, `&resource=${encodeURIComponent('https://API-A.test/')}`);
    expect(audOf(spelt.body.access_token)).toBe(API_A);
  });

  it('RI2: no resource → the default audience (RFC 9068 §3), for a client with or without a list', async () => {
    expect(audOf((await tokenRequest(t, plain, '')).body.access_token)).toBe(DEFAULT);
    // a client whose list does not hold the default but holds several: it must say which
    expectInvalidTarget(await tokenRequest(t, both, ''), /resource is required/);
  });

  it('RI3: not allowed, relative, with a fragment or query, unknown → 400 invalid_target each', async () => {
    expectInvalidTarget(await tokenRequest(t, both, `&resource=${encodeURIComponent(API_C)}`), /may not request this resource/);
    expectInvalidTarget(await tokenRequest(t, plain, `&resource=${encodeURIComponent(API_A)}`), /may not request this resource/);
    expectInvalidTarget(await tokenRequest(t, both, '&resource=%2Frelative'), /absolute URI/);
    expectInvalidTarget(await tokenRequest(t, both, `&resource=${encodeURIComponent(`${API_A}#x`)}`), /fragment/);
    expectInvalidTarget(await tokenRequest(t, both, `&resource=${encodeURIComponent(`${API_A}?x=1`)}`), /query/);
    expectInvalidTarget(await tokenRequest(t, both, `&resource=${encodeURIComponent('https://unknown.test')}`), /not served by this issuer/);
  });

  it('RI4: two resource parameters → 400 invalid_target, not the generic repeated-parameter error', async () => {
    const res = await tokenRequest(t, both, `&resource=${encodeURIComponent(API_A)}&resource=${encodeURIComponent(API_B)}`);
    expectInvalidTarget(res, /only one resource per token request/);
    // any other repeated parameter keeps its invalid_request
    const scope = await tokenRequest(t, both, '&scope=orders:read&scope=orders:read');
    expect({ status: scope.status, error: scope.body.error }).toEqual({ status: 400, error: 'invalid_request' });
  });

  it('a wrong secret is invalid_client even with a bad resource (resources are checked after authentication)', async () => {
    const res = await tokenRequest(t, { clientId: both.clientId, clientSecret: 'wrong' }, '&resource=%2Frelative');
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_client');
  });

  it('RI5: a route for API A refuses a token for B and for the default audience (401 invalid_token, wrong_audience); each accepts its own', async () => {
    const a = (await tokenRequest(t, both, `&resource=${encodeURIComponent(API_A)}`)).body.access_token;
    const b = (await tokenRequest(t, both, `&resource=${encodeURIComponent(API_B)}`)).body.access_token;
    const d = (await tokenRequest(t, plain, '')).body.access_token;
    const call = (path: string, at: string) => request(t.app).get(path).set('Authorization', `Bearer ${at}`);
    expect((await call('/a', a)).body).toEqual({ aud: API_A });
    expect((await call('/b', b)).body).toEqual({ aud: API_B });
    expect((await call('/default', d)).body).toEqual({ aud: DEFAULT });
    for (const [path, at] of [['/a', b], ['/a', d], ['/b', a], ['/default', a]] as const) {
      const res = await call(path, at);
      expect({ path, status: res.status, error: res.body.error }).toEqual({ path, status: 401, error: 'invalid_token' });
    }
  });

  it("introspection (by a resource server registered for that resource) and revocation work for tokens of every resource", async () => {
    const rs = await t.issuer.clients.create({ name: 'rs', permissions: ['introspect'], resources: [API_B] });
    const b = (await tokenRequest(t, both, `&resource=${encodeURIComponent(API_B)}`)).body.access_token;
    const seen = await request(t.app).post('/oauth/introspect').type('form').auth(rs.clientId, rs.clientSecret).send({ token: b });
    expect(seen.body).toMatchObject({ active: true, aud: API_B });
    expect((await request(t.app).post('/oauth/revoke').type('form').auth(both.clientId, both.clientSecret).send({ token: b })).status).toBe(200);
    expect((await request(t.app).get('/b').set('Authorization', `Bearer ${b}`)).status).toBe(401);
  });

  it('issuer options and client lists are checked at once', async () => {
    expect(() => createIssuer({ issuer: ISSUER, audience: 'orders-api', resources: [API_A], dataDir: tempDir(), logger: false })).toThrow(/absolute URI/);
    expect(() => createIssuer({ issuer: ISSUER, audience: DEFAULT, resources: ['/relative'], dataDir: tempDir(), logger: false })).toThrow(TypeError);
    expect(() => t.issuer.requireBearer({ audience: 'https://not-served.test' })).toThrow(/not one of this issuer's resources/);
    await expect(t.issuer.clients.create({ name: 'x', resources: ['https://not-served.test'] })).rejects.toThrow(/not one this issuer serves/);
  });
});

describe('RI6: resource + DPoP + private_key_jwt together', () => {
  it('200 with aud the resource, cnf.jkt the proof key, client_id the key-based client', async () => {
    const t = await setup({ audience: DEFAULT, resources: [API_A] });
    try {
      const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      const client = await t.issuer.clients.create({ name: 'pk', authMethod: 'private_key_jwt', jwks: { keys: [{ ...publicKey.export({ format: 'jwk' }), kid: 'k1' }] }, resources: [API_A] });
      const assertion = signClientAssertion({ clientId: client.clientId, audience: ISSUER, privateKey, kid: 'k1' });
      const key = newDpopKey();
      const res = await request(t.app)
        .post('/oauth/token')
        .type('form')
        .set('DPoP', key.proof({ htm: 'POST', htu: `${ISSUER}/oauth/token` }))
        .send({
          grant_type: 'client_credentials',
          client_id: client.clientId,
          client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
          client_assertion: assertion,
          resource: API_A,
        });
      expect(res.status).toBe(200);
      expect(res.body.token_type).toBe('DPoP');
      expect(jwt.decode(res.body.access_token)).toMatchObject({ aud: API_A, client_id: client.clientId, cnf: { jkt: key.jkt } });
    } finally {
      await t.close();
    }
  });
});

describe('resources from the CLI and the token client', () => {
  it('create --resource (repeatable) stores them; a bad one is a usage error; list --json shows them', async () => {
    const dataDir = tempDir();
    const out: string[] = [];
    const err: string[] = [];
    const run = (args: string[]) => main(args, { stdout: (s) => out.push(s), stderr: (s) => err.push(s), env: { DATA_DIR: dataDir } });
    expect(await run(['create', '--name', 'multi', '--resource', API_A, '--resource', API_B, '--json'])).toBe(0);
    const created = JSON.parse(out.join(''));
    expect(created.resources).toEqual([API_A, API_B]);
    out.length = 0;
    expect(await run(['list', '--json'])).toBe(0);
    expect(JSON.parse(out.join(''))[0].resources).toEqual([API_A, API_B]);
    out.length = 0;
    expect(await run(['create', '--name', 'bad', '--resource', `${API_A}#frag`])).toBe(2);
    expect(err.join('')).toMatch(/fragment/);
    // the issuer on that store issues tokens for them
    const issuer = createIssuer({ issuer: ISSUER, audience: DEFAULT, resources: [API_A, API_B], dataDir, logger: false });
    try {
      const client = await issuer.clients.get(created.client_id);
      expect(client?.resources).toEqual([API_A, API_B]);
    } finally {
      await issuer.close();
    }
  });

  it('the token client asks per resource and caches per resource: two resources → two token requests, each token for its API', async () => {
    const http = await loopbackServer();
    const issuer = createIssuer({ issuer: http.url, audience: DEFAULT, resources: [API_A, API_B], dataDir: tempDir(), logger: false });
    await issuer.ready();
    let tokenRequests = 0;
    const app = express();
    app.use('/oauth/token', (_req, _res, next) => {
      tokenRequests++;
      next();
    });
    app.use(issuer.router());
    http.serve(app);
    const client = await issuer.clients.create({ name: 'tc', resources: [API_A, API_B] });
    const tc = createTokenClient({ tokenEndpoint: `${http.url}/oauth/token`, clientId: client.clientId, clientSecret: client.clientSecret, resource: API_A });
    try {
      const a1 = await tc.getToken();
      const b1 = await tc.getToken({ resource: API_B });
      const a2 = await tc.getToken({ resource: API_A });
      const b2 = await tc.getToken({ resource: API_B });
      expect(tokenRequests).toBe(2);
      expect([audOf(a1.accessToken), audOf(b1.accessToken)]).toEqual([API_A, API_B]);
      expect(a2.accessToken).toBe(a1.accessToken);
      expect(b2.accessToken).toBe(b1.accessToken);
    } finally {
      await tc.close();
      await issuer.close();
      await http.close();
    }
  });
});
