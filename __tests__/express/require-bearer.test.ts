/**
 * issuer.requireBearer(): the RFC 6750 §3 contract as a client of the
 * protected API sees it (status, WWW-Authenticate, JSON body).
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import express, { type Express, type Request, type Response } from 'express';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createIssuer, type IssuedCredentials, type Issuer, type IssuerOptions } from '../../lib';
import { AUDIENCE, ISSUER, setup, tempDir, type TestSetup } from '../helpers/app';
import {
  fetchToken,
  freshKey,
  headerOf,
  hmacToken,
  issuerSigningKey,
  mint,
  nowSeconds,
  unsignedToken,
  type SigningKey,
} from '../helpers/tokens';

const sendAuth = (req: Request, res: Response): void => {
  res.json(req.auth);
};

/** The protected API of these tests, next to the issuer's own router. */
function mountApi(app: Express, issuer: Issuer): void {
  app.use(issuer.router());
  app.get('/me', issuer.requireBearer(), sendAuth);
  app.get('/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
  app.post('/orders', issuer.requireBearer({ scope: 'orders:write' }), sendAuth);
  app.get('/admin', issuer.requireBearer({ scope: ['orders:write', 'orders:admin'] }), sendAuth);
  app.post('/json', express.json(), issuer.requireBearer(), sendAuth);
  app.post('/form', express.urlencoded({ extended: false }), issuer.requireBearer(), sendAuth);
}

/** Words of jsonwebtoken's error messages and of the verifier's operator-only details. */
const LEAK = /jwt |expected|signature|kid|claim|algorithm|typ |at\+jwt|malformed|audience|issuer/i;

/** Every failure: status, a JSON `{ error, error_description }` body, and a Bearer challenge. */
function expectFailure(res: request.Response, status: number, error: string, realm = '"api"'): void {
  expect(res.status).toBe(status);
  expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
  expect(res.body).toEqual({ error, error_description: expect.any(String) });
  expect(res.body.error_description).not.toBe('');
  const challenge = res.headers['www-authenticate'];
  expect(challenge).toMatch(new RegExp(`^Bearer realm=${realm.replace(/[\\"]/g, '\\$&')}`));
  expect(challenge).toContain(`error="${error}"`);
}

function expectInvalidToken(res: request.Response): void {
  expectFailure(res, 401, 'invalid_token');
  expect(res.body.error_description).not.toMatch(LEAK);
  expect(res.headers['www-authenticate']).not.toMatch(LEAK);
}

/** 401 for a request without a bearer token: the challenge carries no error attribute. */
function expectMissingToken(res: request.Response): void {
  expect(res.status).toBe(401);
  // DPoP is allowed by default: a bare DPoP challenge follows the Bearer one
  expect(res.headers['www-authenticate']).toBe('Bearer realm="api", DPoP algs="ES256 ES384 PS256 RS256"');
  expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
  expect(res.body).toEqual({ error: expect.any(String), error_description: expect.any(String) });
}

let t: TestSetup;
let key: SigningKey;
let reader: IssuedCredentials;
let writer: IssuedCredentials;
let readToken: string;

beforeAll(async () => {
  t = await setup({}, mountApi);
  key = await issuerSigningKey(t.dataDir);
  reader = await t.issuer.clients.create({ name: 'reader', scopes: ['orders:read'] });
  writer = await t.issuer.clients.create({ name: 'writer', scopes: ['orders:read', 'orders:write', 'orders:admin'] });
  readToken = await fetchToken(t.app, reader);
});

afterAll(async () => {
  await t?.close();
});

describe('a valid token', () => {
  it('runs the route and sets req.auth to { clientId, scope, token, claims }', async () => {
    const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${readToken}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      clientId: reader.clientId,
      scope: ['orders:read'],
      token: readToken,
      claims: jwt.decode(readToken),
    });
    expect(res.body.claims).toMatchObject({ iss: ISSUER, aud: AUDIENCE, sub: reader.clientId, client_id: reader.clientId, scope: 'orders:read' });
  });

  it('gives req.auth.scope as the granted scope tokens', async () => {
    const token = await fetchToken(t.app, writer, 'orders:write orders:read');
    const res = await request(t.app).get('/me').set('Authorization', `Bearer ${token}`);
    expect(res.status).toBe(200);
    expect(res.body.clientId).toBe(writer.clientId);
    expect(res.body.scope).toEqual(['orders:write', 'orders:read']);
  });

  it.each(['bearer', 'BEARER', 'Bearer', 'bEaReR'])('accepts the scheme written %s', async (scheme) => {
    const res = await request(t.app).get('/orders').set('Authorization', `${scheme} ${readToken}`);
    expect(res.status).toBe(200);
    expect(res.body.clientId).toBe(reader.clientId);
  });

  it('accepts a token minted by the test helper with the issuer key (so the forgeries below differ only in what they test)', async () => {
    const token = mint(key, { claims: { client_id: 'minted', sub: 'minted' } });
    const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${token}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ clientId: 'minted', scope: ['orders:read'], token });
  });

  it.each([
    ['two spaces', 'Bearer  '],
    ['three spaces', 'Bearer   '],
    ['two spaces, lower-case scheme', 'bearer  '],
  ])('accepts %s after the scheme (RFC 6750 §2.1: 1*SP)', async (_name, prefix) => {
    const res = await request(t.app).get('/orders').set('Authorization', `${prefix}${readToken}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ clientId: reader.clientId, token: readToken });
  });

  it('accepts a token used many times, giving the route the same req.auth each time (verified once, then from the cache)', async () => {
    const expected = { clientId: reader.clientId, scope: ['orders:read'], token: readToken, claims: jwt.decode(readToken) };
    for (let i = 0; i < 5; i++) {
      const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${readToken}`);
      expect({ request: i, status: res.status, body: res.body }).toEqual({ request: i, status: 200, body: expected });
    }
    // a cached token of one client never answers for another: the writer's token right after gets the writer's auth
    const writeToken = await fetchToken(t.app, writer, 'orders:read');
    for (const [token, clientId] of [[writeToken, writer.clientId], [readToken, reader.clientId]]) {
      const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${token}`);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ clientId, scope: ['orders:read'], token });
    }
  });
});

describe('no bearer token', () => {
  it('401 with a bare challenge when there is no Authorization header', async () => {
    expectMissingToken(await request(t.app).get('/orders'));
  });

  it.each([
    ['Basic', `Basic ${Buffer.from('user:pass').toString('base64')}`],
    ['Digest', 'Digest username="x"'],
    ['another scheme starting with Bearer', 'Bearerish abc'],
    ['a scheme one letter off', 'Bearar abc'],
  ])('401 with a bare challenge for %s', async (_name, header) => {
    expectMissingToken(await request(t.app).get('/orders').set('Authorization', header));
  });

  it('ignores a token sent in another header', async () => {
    expectMissingToken(await request(t.app).get('/orders').set('X-Access-Token', readToken));
  });
});

describe('an invalid token: 401 invalid_token', () => {
  const cases: [string, () => string][] = [
    ['a bad signature (another key, same kid)', () => mint(freshKey('ES256', key.kid))],
    ['another algorithm than the kid (RS256 under an ES256 kid)', () => mint(freshKey('RS256', key.kid))],
    ['the wrong iss', () => mint(key, { claims: { iss: 'http://other-issuer.test' } })],
    ['the wrong aud', () => mint(key, { claims: { aud: 'http://other-api.test' } })],
    ['an aud array without our audience', () => mint(key, { claims: { aud: ['http://other-api.test'] } })],
    ['typ "JWT"', () => mint(key, { header: { typ: 'JWT' } })],
    ['no typ', () => mint(key, { header: { typ: undefined } })],
    ['alg none with a known kid', () => unsignedToken(key.kid)],
    ['HS256 keyed with the public key PEM', () => hmacToken(key.kid, key.publicKey.export({ type: 'spki', format: 'pem' }).toString())],
    ['HS256 keyed with the public JWK', () => hmacToken(key.kid, JSON.stringify(key.publicKey.export({ format: 'jwk' })))],
    ['an unknown kid', () => mint(freshKey())],
    ['no kid', () => mint(key, { header: { kid: undefined } })],
    ['garbage "abc.def.ghi"', () => 'abc.def.ghi'],
    ['a token that is no JWS', () => 'abcdef'],
  ];

  it.each(cases)('%s', async (_name, make) => {
    const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${make()}`);
    expectInvalidToken(res);
  });

  it('the helper really drops typ', () => {
    expect(headerOf(mint(key, { header: { typ: undefined } }))).not.toHaveProperty('typ');
  });

  it('does not leak jsonwebtoken messages for a wrong audience', async () => {
    const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${mint(key, { claims: { aud: 'http://other-api.test' } })}`);
    expectInvalidToken(res);
    expect(res.text).not.toContain('jwt audience invalid. expected');
    expect(res.headers['www-authenticate']).not.toContain('jwt audience invalid. expected');
  });

  it('says an expired token expired (exp beyond the 5 s clock tolerance)', async () => {
    const now = nowSeconds();
    const token = mint(key, { claims: { iat: now - 120, exp: now - 60 } });
    const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${token}`);
    expectInvalidToken(res);
    expect(res.body.error_description).toMatch(/expired/i);
    expect(res.headers['www-authenticate']).toMatch(/error_description="[^"]*expired[^"]*"/i);
  });

  describe('on a frozen clock (only Date is fake: sockets and timers run as they do)', () => {
    let frozen: TestSetup;
    let frozenKey: SigningKey;
    const NOW = 1_900_000_000; // a whole second: the verifier compares whole seconds
    beforeAll(async () => {
      jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
      jest.setSystemTime(NOW * 1000);
      // made after the clock is frozen: the issuer reads the clock it was made with
      frozen = await setup({}, mountApi);
      frozenKey = await issuerSigningKey(frozen.dataDir);
    });
    afterAll(async () => {
      jest.useRealTimers();
      await frozen?.close();
    });

    it('accepts a token expired by less than the clock tolerance (exp 4 s ago, tolerance 5 s), and gives the route its auth', async () => {
      expect(nowSeconds()).toBe(NOW);
      const token = mint(frozenKey, { claims: { iat: NOW - 120, exp: NOW - 4 } });
      const res = await request(frozen.app).get('/orders').set('Authorization', `Bearer ${token}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ clientId: 'client-test', scope: ['orders:read'], token, claims: jwt.decode(token) });
      expect(res.body.claims.exp).toBe(NOW - 4);
    });

    it('refuses a token expired by the whole clock tolerance (exp 5 s ago) as expired', async () => {
      const token = mint(frozenKey, { claims: { iat: NOW - 120, exp: NOW - 5 } });
      const res = await request(frozen.app).get('/orders').set('Authorization', `Bearer ${token}`);
      expectInvalidToken(res);
      expect(res.body.error_description).toMatch(/expired/i);
      expect(res.headers['www-authenticate']).toMatch(/error_description="[^"]*expired[^"]*"/i);
    });
  });

  describe.each(['exp', 'iat', 'sub', 'client_id', 'jti', 'iss', 'aud'])('without the %s claim', (claim) => {
    it('is rejected', async () => {
      const token = mint(key, { omit: [claim] });
      expect(jwt.decode(token)).not.toHaveProperty(claim);
      const res = await request(t.app).get('/orders').set('Authorization', `Bearer ${token}`);
      expectInvalidToken(res);
    });
  });
});

describe('insufficient scope: 403', () => {
  it('names the required scope in the challenge', async () => {
    const res = await request(t.app).post('/orders').set('Authorization', `Bearer ${readToken}`);
    expectFailure(res, 403, 'insufficient_scope');
    expect(res.headers['www-authenticate']).toContain('scope="orders:write"');
  });

  it('lists several required scopes space-separated, and needs all of them', async () => {
    const onlyWrite = await fetchToken(t.app, writer, 'orders:write');
    const res = await request(t.app).get('/admin').set('Authorization', `Bearer ${onlyWrite}`);
    expectFailure(res, 403, 'insufficient_scope');
    expect(res.headers['www-authenticate']).toContain('scope="orders:write orders:admin"');
  });

  it('passes when the token has every required scope', async () => {
    const both = await fetchToken(t.app, writer, 'orders:admin orders:write');
    const res = await request(t.app).get('/admin').set('Authorization', `Bearer ${both}`);
    expect(res.status).toBe(200);
    expect(res.body.scope).toEqual(['orders:admin', 'orders:write']);
  });

  it('a token without any scope gets 403 on a scoped route and 200 on an unscoped one', async () => {
    const token = mint(key, { omit: ['scope'] });
    expectFailure(await request(t.app).get('/orders').set('Authorization', `Bearer ${token}`), 403, 'insufficient_scope');
    const res = await request(t.app).get('/me').set('Authorization', `Bearer ${token}`);
    expect(res.status).toBe(200);
    expect(res.body.scope).toEqual([]);
  });
});

describe('malformed request: 400 invalid_request', () => {
  it.each([
    ['"Bearer" alone', 'Bearer'],
    ['"Bearer " with a trailing space', 'Bearer '],
    ['two tokens', 'Bearer a b'],
    ['a "$" outside b64token', 'Bearer abc$def'],
    ['a quoted token', 'Bearer "x"'],
    ['a token with a comma', 'Bearer abc,def'],
    ['"=" before the end of the token', 'Bearer ab=cd'],
    ['a lower-case scheme and a "$"', 'bearer  abc$def'],
  ])('%s', async (_name, header) => {
    expectFailure(await request(t.app).get('/orders').set('Authorization', header), 400, 'invalid_request');
  });

  it.each([['Bearer\t'], ['bearer\t'], ['Bearer \t'], ['Bearer\t ']])('a tab after the scheme, before a valid token (%j; RFC 6750 §2.1: 1*SP), is malformed, not a missing token', async (prefix) => {
    const res = await request(t.app).get('/orders').set('Authorization', `${prefix}${readToken}`);
    expectFailure(res, 400, 'invalid_request');
    expect(res.body.error_description).toBe('malformed Bearer authorization header');
  });

  it('access_token in the query, without a header', async () => {
    const res = await request(t.app).get(`/orders?access_token=${readToken}`);
    expectFailure(res, 400, 'invalid_request');
  });

  it('access_token in the query, even with a valid header', async () => {
    const res = await request(t.app).get(`/orders?x=1&access_token=${readToken}`).set('Authorization', `Bearer ${readToken}`);
    expectFailure(res, 400, 'invalid_request');
  });

  it('access_token in the query with a percent-encoded name (access%5Ftoken)', async () => {
    const res = await request(t.app).get(`/orders?access%5Ftoken=${readToken}`);
    expectFailure(res, 400, 'invalid_request');
  });

  it('access_token in a JSON body parsed by the app', async () => {
    const ok = await request(t.app).post('/json').set('Authorization', `Bearer ${readToken}`).send({ order: 1 });
    expect(ok.status).toBe(200);
    const res = await request(t.app).post('/json').set('Authorization', `Bearer ${readToken}`).send({ access_token: readToken });
    expectFailure(res, 400, 'invalid_request');
  });

  it('access_token in a form body parsed by the app', async () => {
    const ok = await request(t.app).post('/form').set('Authorization', `Bearer ${readToken}`).type('form').send({ order: '1' });
    expect(ok.status).toBe(200);
    const res = await request(t.app).post('/form').set('Authorization', `Bearer ${readToken}`).type('form').send({ access_token: readToken });
    expectFailure(res, 400, 'invalid_request');
    const noHeader = await request(t.app).post('/form').type('form').send({ access_token: readToken });
    expectFailure(noHeader, 400, 'invalid_request');
  });
});

describe('realm', () => {
  let quoted: TestSetup;
  beforeAll(async () => {
    quoted = await setup({ realm: 'my "api"' }, mountApi);
  });
  afterAll(async () => {
    await quoted?.close();
  });

  it('is quoted safely in the bare challenge', async () => {
    const res = await request(quoted.app).get('/orders');
    expect(res.status).toBe(401);
    expect(res.headers['www-authenticate']).toBe('Bearer realm="my \\"api\\"", DPoP algs="ES256 ES384 PS256 RS256"');
  });

  it('is quoted safely in an error challenge', async () => {
    const res = await request(quoted.app).get('/orders').set('Authorization', 'Bearer abc.def.ghi');
    expectFailure(res, 401, 'invalid_token', '"my \\"api\\""');
  });
});

describe('a verified (cached) token', () => {
  let short: TestSetup;
  beforeAll(async () => {
    short = await setup({ accessTokenTtl: 1, clockTolerance: 0 }, mountApi);
  });
  afterAll(async () => {
    await short?.close();
  });

  it('stops being accepted after its exp', async () => {
    const shortKey = await issuerSigningKey(short.dataDir);
    const iat = nowSeconds();
    const token = mint(shortKey, { claims: { iat, exp: iat + 2 } });
    for (let i = 0; i < 2; i++) {
      const res = await request(short.app).get('/orders').set('Authorization', `Bearer ${token}`);
      expect(res.status).toBe(200);
    }
    const wait = (iat + 2) * 1000 + 50 - Date.now();
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, wait)));
    const res = await request(short.app).get('/orders').set('Authorization', `Bearer ${token}`);
    expectInvalidToken(res);
    expect(res.body.error_description).toMatch(/expired/i);
  }, 5000);
});

describe('before issuer.ready()', () => {
  it('the first request waits for the keys', async () => {
    const dataDir = tempDir();
    const first = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
    await first.ready();
    const client = await first.clients.create({ name: 'early', scopes: ['orders:read'] });
    const issuing = express();
    issuing.use(first.router());
    const token = await fetchToken(issuing, client).finally(() => first.close());

    // same store, ready() never awaited: requireBearer must still load the key that signed the token
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
    const app = express();
    app.get('/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
    try {
      const results = await Promise.all([0, 1, 2].map(() => request(app).get('/orders').set('Authorization', `Bearer ${token}`)));
      for (const res of results) {
        expect(res.status).toBe(200);
        expect(res.body.clientId).toBe(client.clientId);
      }
    } finally {
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('answers a request without a token with 401 before ready()', async () => {
    const dataDir = tempDir();
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
    const app = express();
    app.get('/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
    try {
      expectMissingToken(await request(app).get('/orders'));
      expectInvalidToken(await request(app).get('/orders').set('Authorization', 'Bearer abc.def.ghi'));
    } finally {
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('options are checked when the middleware is made', () => {
  let dataDir: string;
  beforeAll(() => {
    dataDir = join(tempDir(), 'never-created');
  });
  afterAll(() => {
    rmSync(join(dataDir, '..'), { recursive: true, force: true });
  });
  const base = (): IssuerOptions => ({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });

  it.each<[string, () => Record<string, unknown>]>([
    ['a missing issuer', () => ({ ...base(), issuer: undefined })],
    ['an issuer that is no URL', () => ({ ...base(), issuer: 'issuer.test' })],
    ['a non-http issuer', () => ({ ...base(), issuer: 'ftp://issuer.test' })],
    ['a missing audience', () => ({ ...base(), audience: undefined })],
    ['an unknown algorithm', () => ({ ...base(), algorithm: 'HS256' })],
    ['alg none', () => ({ ...base(), algorithm: 'none' })],
    ['a negative accessTokenTtl', () => ({ ...base(), accessTokenTtl: -1 })],
    ['a non-integer accessTokenTtl', () => ({ ...base(), accessTokenTtl: 1.5 })],
    ['an unknown option', () => ({ ...base(), audiance: AUDIENCE })],
  ])('createIssuer throws a TypeError for %s', (_name, options) => {
    expect(() => createIssuer(options() as unknown as IssuerOptions)).toThrow(TypeError);
  });

  it('a valid createIssuer does not throw: ready() opens its store, its router issues tokens that its requireBearer() accepts, and close() resolves', async () => {
    const issuer = createIssuer(base());
    let closed = false;
    try {
      expect(issuer.config).toMatchObject({ issuer: ISSUER, audience: AUDIENCE, dataDir, algorithm: 'ES256', accessTokenTtl: 3600 });
      await expect(issuer.ready()).resolves.toBeUndefined();
      const [signing] = await issuer.keys.list();
      expect(signing).toMatchObject({ alg: 'ES256', status: 'current' });
      expect(await issuer.health()).toEqual({ ok: true, store: 'up', signingKid: signing.kid });

      const app = express();
      app.use(issuer.router());
      app.get('/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
      const client = await issuer.clients.create({ name: 'fresh', scopes: ['orders:read'] });
      const token = await fetchToken(app, client);
      expect(headerOf(token)).toMatchObject({ alg: 'ES256', kid: signing.kid });
      expect(jwt.decode(token)).toMatchObject({ iss: ISSUER, aud: AUDIENCE, client_id: client.clientId, scope: 'orders:read' });
      const res = await request(app).get('/orders').set('Authorization', `Bearer ${token}`);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ clientId: client.clientId, scope: ['orders:read'], token });

      closed = true;
      await expect(issuer.close()).resolves.toBeUndefined();
    } finally {
      if (!closed) await issuer.close();
    }
  });

  it('issuer.requireBearer throws a TypeError for a malformed scope or an unknown option', async () => {
    const issuer = createIssuer(base());
    try {
      expect(() => issuer.requireBearer({ scope: 'bad"scope' })).toThrow(TypeError);
      expect(() => issuer.requireBearer({ scope: ['ok', 'not ok'] })).toThrow(TypeError);
      expect(() => issuer.requireBearer({ scopes: 'a' } as never)).toThrow(TypeError);
      expect(() => issuer.requireBearer({ scope: 'orders:read orders:write' })).not.toThrow();
    } finally {
      await issuer.close();
    }
  });
});
