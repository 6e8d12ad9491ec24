/**
 * requireBearer() with DPoP (RFC 9449 §7): what a client of the protected
 * API sees, with tokens from a real issuer and proofs made by DpopKey.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Request, type Response } from 'express';
import Redis from 'ioredis';
import request from 'supertest';
import { requireBearer, type Issuer } from '../../lib';
import { AUDIENCE, ISSUER, setup, type TestSetup } from '../helpers/app';
import { newDpopKey, rawProof } from '../helpers/dpop';
import { describeIfRedis, redisUrl } from '../helpers/redis';

const API = ISSUER; // the issuer-bound requireBearer() builds htu from the issuer's origin by default
const ALGS = 'DPoP algs="ES256 ES384 PS256 RS256"';
const TOKEN_URL = `${ISSUER}/oauth/token`;
const now = () => Math.floor(Date.now() / 1000);
/** What the route sees of req.auth: the client, its granted scope, the token it was given and its DPoP binding. */
const sendAuth = (req: Request, res: Response): void => {
  res.json({ clientId: req.auth?.clientId, scope: req.auth?.scope, token: req.auth?.token, cnf: req.auth?.claims.cnf });
};

/**
 * A strict RFC 9110 §11 parser of a WWW-Authenticate field value: a list of
 * challenges, each `scheme [ 1*SP auth-param *( OWS "," OWS auth-param ) ]`.
 * Throws on anything else.
 */
function parseChallenges(value: string): { scheme: string; params: Record<string, string> }[] {
  const token = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+/;
  const challenges: { scheme: string; params: Record<string, string> }[] = [];
  let rest = value;
  let current: { scheme: string; params: Record<string, string> } | undefined;
  while (rest.length > 0) {
    // either `name=value` (a param of the current challenge) or a new scheme
    const name = token.exec(rest)?.[0];
    if (!name) throw new Error(`bad challenge at ${rest}`);
    const after = rest.slice(name.length);
    const eq = /^[ \t]*=[ \t]*/.exec(after);
    if (current && eq) {
      let v = after.slice(eq[0].length);
      let parsed: string;
      if (v.startsWith('"')) {
        const m = /^"((?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*)"/.exec(v);
        if (!m) throw new Error(`bad quoted-string at ${v}`);
        parsed = m[1].replace(/\\(.)/g, '$1');
        v = v.slice(m[0].length);
      } else {
        const m = token.exec(v);
        if (!m) throw new Error(`bad token at ${v}`);
        parsed = m[0];
        v = v.slice(m[0].length);
      }
      current.params[name.toLowerCase()] = parsed;
      rest = v;
    } else {
      current = { scheme: name, params: {} };
      challenges.push(current);
      rest = after.replace(/^ +/, '');
      if (rest.length > 0 && !token.test(rest) && !rest.startsWith(',')) throw new Error(`bad challenge at ${rest}`);
    }
    const sep = /^[ \t]*,[ \t]*/.exec(rest);
    if (sep) rest = rest.slice(sep[0].length);
    else if (rest.length > 0 && !/^[!#$%&'*+\-.^_`|~0-9A-Za-z]/.test(rest)) throw new Error(`bad separator at ${rest}`);
  }
  return challenges;
}

function challengesOf(res: request.Response) {
  const value = res.headers['www-authenticate'];
  expect(typeof value).toBe('string');
  const parsed = parseChallenges(value as string);
  for (const c of parsed) if (c.params.error_description !== undefined) expect(c.params.error_description).toMatch(/^[\x20\x21\x23-\x5b\x5d-\x7e]*$/);
  return Object.fromEntries(parsed.map((c) => [c.scheme, c.params]));
}

function expectError(res: request.Response, status: number, error: string, scheme: 'DPoP' | 'Bearer'): void {
  expect({ status: res.status, error: res.body.error }).toEqual({ status, error });
  expect(res.body.error_description).toMatch(/^[\x20\x21\x23-\x5b\x5d-\x7e]+$/);
  const challenges = challengesOf(res);
  expect(challenges[scheme]?.error).toBe(error);
}

describe('issuer.requireBearer() with DPoP', () => {
  let t: TestSetup;
  let issuer: Issuer;
  let client: { clientId: string; clientSecret: string };
  const key = newDpopKey();
  let dpopToken: string;
  let bearerToken: string;

  async function token(proof?: string): Promise<string> {
    let req = request(t.app).post('/oauth/token').type('form');
    if (proof) req = req.set('DPoP', proof);
    const res = await req.send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
    expect(res.status).toBe(200);
    return res.body.access_token as string;
  }

  beforeAll(async () => {
    t = await setup({}, (app, i) => {
      app.use(i.router());
      app.get('/api/orders', i.requireBearer({ scope: 'orders:read' }), sendAuth);
      app.get('/api/admin', i.requireBearer({ scope: 'orders:admin' }), sendAuth);
      app.get('/required', i.requireBearer({ dpop: 'required' }), sendAuth);
      app.get('/disabled', i.requireBearer({ dpop: 'disabled' }), sendAuth);
      const v1 = express.Router();
      v1.get('/api/orders', i.requireBearer(), sendAuth);
      app.use('/v1', v1);
      // the example's shape: one check for the mount, one more with each route's scope
      app.use('/two', i.requireBearer());
      app.get('/two/orders', i.requireBearer({ scope: 'orders:read' }), sendAuth);
      app.get('/two/admin', i.requireBearer({ scope: 'orders:admin' }), sendAuth);
      app.get('/two/nonce', i.requireBearer({ dpopNonce: true }), sendAuth);
    });
    issuer = t.issuer;
    client = await issuer.clients.create({ name: 'dpop-rs', scopes: 'orders:read' });
    dpopToken = await token(key.proof({ htm: 'POST', htu: TOKEN_URL }));
    bearerToken = await token();
  });
  afterAll(() => t.close());

  const get = (path: string, authorization?: string, proof?: string | string[]) => {
    let req = request(t.app).get(path);
    if (authorization) req = req.set('Authorization', authorization);
    if (proof !== undefined) req = req.set('DPoP', proof as string);
    return req;
  };
  const proofFor = (path: string, accessToken = dpopToken, k = key) => k.proof({ htm: 'GET', htu: `${API}${path}`, accessToken });

  it('DR1: DPoP scheme, bound token, valid proof → 200; every request needs a fresh proof (cached token, proof checked)', async () => {
    const res = await get('/api/orders', `DPoP ${dpopToken}`, proofFor('/api/orders'));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ clientId: client.clientId, scope: ['orders:read'], token: dpopToken, cnf: { jkt: key.jkt } });
    // the token verification is now cached; the next request's proof is still checked
    const again = await get('/api/orders', `DPoP ${dpopToken}`, rawProof(key, { htm: 'GET', htu: `${API}/api/orders`, iat: now() }, { payload: { ath: 'x' } }));
    expectError(again, 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('DR2: no credentials → 401 with a Bearer and a DPoP challenge, no error', async () => {
    const res = await get('/api/orders');
    expect(res.status).toBe(401);
    expect(res.headers['www-authenticate']).toBe(`Bearer realm="api", ${ALGS}`);
    expect(challengesOf(res)).toEqual({ Bearer: { realm: 'api' }, DPoP: { algs: 'ES256 ES384 PS256 RS256' } });
  });

  it('DR3: a DPoP-bound token sent as Bearer → 401 invalid_token, never 200', async () => {
    const res = await get('/api/orders', `Bearer ${dpopToken}`);
    expectError(res, 401, 'invalid_token', 'Bearer');
    expect(challengesOf(res).DPoP).toEqual({ algs: 'ES256 ES384 PS256 RS256' });
  });

  it.each([
    ['"DPoP" alone', () => 'DPoP'],
    ['two tokens', () => `DPoP ${dpopToken} x`],
    ['a "$" in the token', () => `dpop  ${dpopToken.slice(0, 20)}$${dpopToken.slice(21)}`],
    ['"=" before the end', () => `DPoP ab=cd`],
  ])('a malformed DPoP authorization header (%s) → 400 invalid_request on the DPoP challenge', async (_name, header) => {
    expectError(await get('/api/orders', header(), proofFor('/api/orders')), 400, 'invalid_request', 'DPoP');
  });

  it('DR4: DPoP scheme without a proof → 401 invalid_dpop_proof', async () => {
    expectError(await get('/api/orders', `DPoP ${dpopToken}`), 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('DR5: DPoP scheme with an unbound token → 401 invalid_token on the DPoP challenge', async () => {
    expectError(await get('/api/orders', `DPoP ${bearerToken}`, proofFor('/api/orders', bearerToken)), 401, 'invalid_token', 'DPoP');
  });

  it('DR6: ath of another token, or none → 401 invalid_dpop_proof', async () => {
    expectError(await get('/api/orders', `DPoP ${dpopToken}`, proofFor('/api/orders', bearerToken)), 401, 'invalid_dpop_proof', 'DPoP');
    const noAth = key.proof({ htm: 'GET', htu: `${API}/api/orders` });
    expectError(await get('/api/orders', `DPoP ${dpopToken}`, noAth), 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('DR7: a proof by another key → 401 invalid_token', async () => {
    const other = newDpopKey();
    expectError(await get('/api/orders', `DPoP ${dpopToken}`, proofFor('/api/orders', dpopToken, other)), 401, 'invalid_token', 'DPoP');
  });

  it('DR8: htu of another path → 401; a query string on the same path → 200', async () => {
    expectError(await get('/api/orders', `DPoP ${dpopToken}`, proofFor('/api/other')), 401, 'invalid_dpop_proof', 'DPoP');
    const res = await get('/api/orders?page=2', `DPoP ${dpopToken}`, key.proof({ htm: 'GET', htu: `${API}/api/orders?page=2`, accessToken: dpopToken }));
    expect(res.status).toBe(200);
    // the route ran with the client's DPoP-bound auth: bound to the key that made the proofs
    expect(res.body).toEqual({ clientId: client.clientId, scope: ['orders:read'], token: dpopToken, cnf: { jkt: key.jkt } });
  });

  it('DR9: an app mounted under /v1 checks htu against the original URL', async () => {
    expect((await get('/v1/api/orders', `DPoP ${dpopToken}`, proofFor('/v1/api/orders'))).status).toBe(200);
    expectError(await get('/v1/api/orders', `DPoP ${dpopToken}`, proofFor('/api/orders')), 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('a request in the absolute form (through a forward proxy, RFC 9112 §3.2.2) is checked against its path on the configured host', async () => {
    const server = http.createServer(t.app).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const send = (proof: string) =>
      new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port, path: `http://127.0.0.1:${port}/api/orders?page=1`, headers: { authorization: `DPoP ${dpopToken}`, dpop: proof } }, (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) as Record<string, unknown> }));
        });
        req.on('error', reject).end();
      });
    try {
      expect(await send(proofFor('/api/orders'))).toEqual({ status: 200, body: { clientId: client.clientId, scope: ['orders:read'], token: dpopToken, cnf: { jkt: key.jkt } } });
      // the target's authority is not a path: a proof made for it as one is refused
      expect((await send(proofFor(`/http://127.0.0.1:${port}/api/orders`))).body).toMatchObject({ error: 'invalid_dpop_proof' });
    } finally {
      server.close();
    }
  });

  it('DR10: proofs 400 s old or 120 s ahead → 401', async () => {
    for (const iat of [now() - 400, now() + 120]) {
      const proof = rawProof(key, { htm: 'GET', htu: `${API}/api/orders`, iat, accessToken: dpopToken });
      expectError(await get('/api/orders', `DPoP ${dpopToken}`, proof), 401, 'invalid_dpop_proof', 'DPoP');
    }
  });

  it('DR11: a proof is single use', async () => {
    const proof = proofFor('/api/orders');
    expect((await get('/api/orders', `DPoP ${dpopToken}`, proof)).status).toBe(200);
    expectError(await get('/api/orders', `DPoP ${dpopToken}`, proof), 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('DR12: typ, alg and jwk attacks → 401 invalid_dpop_proof', async () => {
    const d = { htm: 'GET', htu: `${API}/api/orders`, iat: now(), accessToken: dpopToken };
    for (const proof of [
      rawProof(key, d, { header: { typ: 'JWT' } }),
      rawProof(key, d, { header: { alg: 'none' } }),
      rawProof(key, d, { header: { alg: 'HS256' }, hmacSecret: 's' }),
      rawProof(key, d, { header: { jwk: { ...key.publicJwk, d: 'AAAA' } } }),
      rawProof(key, d, { header: { jwk: undefined } }),
    ]) {
      expectError(await get('/api/orders', `DPoP ${dpopToken}`, proof), 401, 'invalid_dpop_proof', 'DPoP');
    }
  });

  it('DR13: both schemes at once → 400 invalid_request, both challenges carry the error', async () => {
    const res = await get('/api/orders', `Bearer ${dpopToken}`, proofFor('/api/orders'));
    expectError(res, 400, 'invalid_request', 'DPoP');
    expect(challengesOf(res).Bearer.error).toBe('invalid_request');
    const two = await request(t.app)
      .get('/api/orders')
      .set('Authorization', [`Bearer ${bearerToken}`, `DPoP ${dpopToken}`] as unknown as string)
      .set('DPoP', proofFor('/api/orders'));
    expectError(two, 400, 'invalid_request', 'Bearer');
  });

  it('a token also in the URL → 400 invalid_request on the challenge of the scheme the header used', async () => {
    const viaDpop = await get('/api/orders?access_token=x', `DPoP ${dpopToken}`, proofFor('/api/orders'));
    expectError(viaDpop, 400, 'invalid_request', 'DPoP');
    expect(challengesOf(viaDpop).Bearer).toEqual({ realm: expect.any(String) });
    const viaBearer = await get('/api/orders?access_token=x', `Bearer ${bearerToken}`);
    expectError(viaBearer, 400, 'invalid_request', 'Bearer');
    expect(challengesOf(viaBearer).DPoP).toEqual({ algs: 'ES256 ES384 PS256 RS256' });
    const urlOnly = await get(`/api/orders?access_token=${bearerToken}`);
    expectError(urlOnly, 400, 'invalid_request', 'Bearer');
  });

  it('a Bearer token with a stray DPoP header is still accepted', async () => {
    expect((await get('/api/orders', `Bearer ${bearerToken}`, proofFor('/api/orders', bearerToken))).status).toBe(200);
  });

  it('DR15: missing scope with a DPoP token → 403 insufficient_scope on the DPoP challenge', async () => {
    const res = await get('/api/admin', `DPoP ${dpopToken}`, proofFor('/api/admin'));
    expectError(res, 403, 'insufficient_scope', 'DPoP');
    expect(challengesOf(res).DPoP.scope).toBe('orders:admin');
  });

  it('a route behind two requireBearer() layers checks one proof once: 200, 403 for a missing scope, and the proof is still single use', async () => {
    const proof = proofFor('/two/orders');
    const res = await get('/two/orders', `DPoP ${dpopToken}`, proof);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ clientId: client.clientId, scope: ['orders:read'], token: dpopToken, cnf: { jkt: key.jkt } });
    expectError(await get('/two/orders', `DPoP ${dpopToken}`, proof), 401, 'invalid_dpop_proof', 'DPoP');
    const admin = await get('/two/admin', `DPoP ${dpopToken}`, proofFor('/two/admin'));
    expectError(admin, 403, 'insufficient_scope', 'DPoP');
    expect(challengesOf(admin).DPoP.scope).toBe('orders:admin');
    // a proof failing the first layer never reaches the second
    expectError(await get('/two/orders', `DPoP ${dpopToken}`, proofFor('/two/other')), 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('a second layer still applies its own settings to a proof the first passed (here: a server nonce)', async () => {
    const first = await get('/two/nonce', `DPoP ${dpopToken}`, proofFor('/two/nonce'));
    expectError(first, 401, 'use_dpop_nonce', 'DPoP');
    const nonce = first.headers['dpop-nonce'] as string;
    expect(nonce).toEqual(expect.any(String));
    const withNonce = rawProof(key, { htm: 'GET', htu: `${API}/two/nonce`, iat: now(), accessToken: dpopToken }, { payload: { nonce } });
    expect((await get('/two/nonce', `DPoP ${dpopToken}`, withNonce)).status).toBe(200);
  });

  it("dpop: 'required' refuses Bearer and challenges DPoP only; 'disabled' ignores the DPoP scheme", async () => {
    const required = await get('/required', `Bearer ${bearerToken}`);
    expectError(required, 401, 'invalid_token', 'DPoP');
    expect(Object.keys(challengesOf(required))).toEqual(['DPoP']);
    // a malformed Bearer header is still a 400 there
    expectError(await get('/required', 'Bearer a$b'), 400, 'invalid_request', 'DPoP');
    expect((await get('/required', `DPoP ${dpopToken}`, proofFor('/required'))).status).toBe(200);
    const disabled = await get('/disabled', `DPoP ${dpopToken}`, proofFor('/disabled'));
    expect(disabled.status).toBe(401);
    expect(disabled.headers['www-authenticate']).toBe('Bearer realm="api"');
    expect((await get('/disabled', `Bearer ${bearerToken}`)).status).toBe(200);
    expectError(await get('/disabled', `Bearer ${dpopToken}`), 401, 'invalid_token', 'Bearer');
  });

  it('refuses a bad dpop option with a TypeError', () => {
    expect(() => issuer.requireBearer({ dpop: 'maybe' as never })).toThrow(TypeError);
  });
});

describe('standalone requireBearer() with DPoP', () => {
  let t: TestSetup;
  let dpopToken: string;
  let client: { clientId: string; clientSecret: string };
  const key = newDpopKey();
  beforeAll(async () => {
    t = await setup();
    client = await t.issuer.clients.create({ name: 'dpop-sa', scopes: 'orders:read' });
    const res = await request(t.app)
      .post('/oauth/token')
      .set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL }))
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
    dpopToken = res.body.access_token;
  });
  afterAll(() => t.close());

  it('builds htu from publicUrl (behind a proxy), never from Host or X-Forwarded-*', async () => {
    const app = express();
    app.get('/orders', requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys: await t.issuer.keys.jwks(), publicUrl: 'https://api.example.com/' }), sendAuth);
    const ok = await request(app)
      .get('/orders')
      .set('Authorization', `DPoP ${dpopToken}`)
      .set('DPoP', key.proof({ htm: 'GET', htu: 'https://api.example.com/orders', accessToken: dpopToken }));
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ clientId: client.clientId, scope: ['orders:read'], token: dpopToken, cnf: { jkt: key.jkt } });
    const forged = await request(app)
      .get('/orders')
      .set('Host', 'evil.test')
      .set('X-Forwarded-Host', 'evil.test')
      .set('Authorization', `DPoP ${dpopToken}`)
      .set('DPoP', key.proof({ htm: 'GET', htu: 'http://evil.test/orders', accessToken: dpopToken }));
    expectError(forged, 401, 'invalid_dpop_proof', 'DPoP');
  });

  it('needs a public URL for DPoP when the audience is not a URL', async () => {
    const keys = await t.issuer.keys.jwks();
    expect(() => requireBearer({ issuer: ISSUER, audience: 'orders-api', keys, dpop: 'required' })).toThrow(/publicUrl/);
    // without one, DPoP stays off: the bare Bearer challenge as before
    const app = express();
    app.get('/orders', requireBearer({ issuer: ISSUER, audience: 'orders-api', keys }), sendAuth);
    expect((await request(app).get('/orders')).headers['www-authenticate']).toBe('Bearer realm="api"');
  });
});

describeIfRedis('DR11 across instances: a proof replayed to another instance sharing Redis', () => {
  const prefix = `ecc:test:dpoprs:${process.pid}:${Date.now()}:`;
  let redis: Redis;
  let t: TestSetup;
  const key = newDpopKey();
  beforeAll(async () => {
    redis = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
    t = await setup();
  });
  afterAll(async () => {
    await t.close();
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it('is refused by the second instance', async () => {
    const client = await t.issuer.clients.create({ name: 'dpop-redis-rs', scopes: 'orders:read' });
    const tokenRes = await request(t.app)
      .post('/oauth/token')
      .set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL }))
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
    const at = tokenRes.body.access_token as string;
    const keys = await t.issuer.keys.jwks();
    const instance = () => {
      const app = express();
      app.get('/orders', requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys, publicUrl: 'https://api.example.com', dpopProofs: { redis, keyPrefix: prefix } }), sendAuth);
      return app;
    };
    const [a, b] = [instance(), instance()];
    const proof = key.proof({ htm: 'GET', htu: 'https://api.example.com/orders', accessToken: at });
    expect((await request(a).get('/orders').set('Authorization', `DPoP ${at}`).set('DPoP', proof)).status).toBe(200);
    const replay = await request(b).get('/orders').set('Authorization', `DPoP ${at}`).set('DPoP', proof);
    expectError(replay, 401, 'invalid_dpop_proof', 'DPoP');
  });
});

describe('DPoP refusals in token.rejected and the metrics', () => {
  it('counts dpop_bound_as_bearer, dpop_missing and the token endpoint outcomes, and logs the reasons', async () => {
    const { Registry } = await import('prom-client');
    const registry = new Registry();
    const lines: Record<string, unknown>[] = [];
    const logger = { info: (o: object) => void lines.push(o as Record<string, unknown>), warn() {}, error() {}, debug: (o: object) => void lines.push(o as Record<string, unknown>) };
    const t = await setup({ metrics: { registry }, logger: logger as never, dpop: { nonce: true } }, (app, i) => {
      app.use(i.router());
      app.get('/orders', i.requireBearer(), sendAuth);
    });
    try {
      const key = newDpopKey();
      const client = await t.issuer.clients.create({ name: 'm', scopes: 'orders:read' });
      const post = (proof: string) =>
        request(t.app).post('/oauth/token').set('DPoP', proof).type('form').send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
      const first = await post(key.proof({ htm: 'POST', htu: TOKEN_URL }));
      expect(first.body.error).toBe('use_dpop_nonce');
      const nonce = first.headers['dpop-nonce'];
      expect((await post(key.proof({ htm: 'POST', htu: `${ISSUER}/x`, nonce }))).body.error).toBe('invalid_dpop_proof');
      const at = (await post(key.proof({ htm: 'POST', htu: TOKEN_URL, nonce }))).body.access_token as string;
      expect((await request(t.app).get('/orders').set('Authorization', `Bearer ${at}`)).status).toBe(401);
      expect((await request(t.app).get('/orders').set('Authorization', `DPoP ${at}`)).status).toBe(401);
      const text = await registry.metrics();
      for (const series of [
        'ecc_token_requests_total{outcome="use_dpop_nonce"} 1',
        // the token endpoint's refused proof by the check that failed, as at protected routes
        'ecc_token_requests_total{outcome="invalid_dpop_proof",reason="dpop_htu"} 1',
        'ecc_token_requests_total{outcome="invalid_dpop_proof",reason="dpop_replayed"} 0',
        'ecc_bearer_checks_total{outcome="invalid_token",reason="dpop_bound_as_bearer"} 1',
        'ecc_bearer_checks_total{outcome="invalid_dpop_proof",reason="dpop_missing"} 1',
      ]) {
        expect(text).toContain(series);
      }
      const rejected = lines.filter((l) => l.event === 'token.rejected').map((l) => [l.reason, l.client_id]);
      expect(rejected).toEqual([['dpop_bound_as_bearer', client.clientId], ['dpop_missing', client.clientId]]);
      expect(JSON.stringify(lines)).not.toContain(at);
    } finally {
      await t.close();
    }
  });

  it('tells the four ways a token and its scheme or proof disagree apart, each at info with the client_id, in logs and metrics; a bound token as Bearer with a DPoP header names its client', async () => {
    const { Registry } = await import('prom-client');
    const registry = new Registry();
    const lines: { level: string; obj: Record<string, unknown> }[] = [];
    const at = (level: string) => (obj: Record<string, unknown>) => void lines.push({ level, obj });
    const t = await setup({ metrics: { registry }, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } }, (app, i) => {
      app.use(i.router());
      app.get('/orders', i.requireBearer(), sendAuth);
      app.get('/strict', i.requireBearer({ dpop: 'required' }), sendAuth);
    });
    try {
      const key = newDpopKey();
      const thief = newDpopKey();
      const client = await t.issuer.clients.create({ name: 'm', scopes: 'orders:read' });
      const form = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret };
      const bound = (await request(t.app).post('/oauth/token').set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL })).type('form').send(form)).body.access_token as string;
      const plain = (await request(t.app).post('/oauth/token').type('form').send(form)).body.access_token as string;
      const get = (path: string, authorization: string, proof?: string) => {
        const req = request(t.app).get(path).set('Authorization', authorization);
        return proof === undefined ? req : req.set('DPoP', proof);
      };
      const proof = (path: string, token: string, k = key) => k.proof({ htm: 'GET', htu: `${API}${path}`, accessToken: token });
      expect((await get('/orders', `Bearer ${plain}`)).status).toBe(200); // now in the verified-token cache
      lines.length = 0;

      expect((await get('/orders', `Bearer ${bound}`)).status).toBe(401);
      expect((await get('/orders', `DPoP ${bound}`, proof('/orders', bound, thief))).status).toBe(401);
      expect((await get('/orders', `DPoP ${plain}`, proof('/orders', plain))).status).toBe(401);
      expect((await get('/strict', `Bearer ${plain}`)).status).toBe(401);
      expect((await get('/orders', `Bearer ${bound}`, proof('/orders', bound))).status).toBe(400);

      const rejected = lines.filter((l) => l.obj.event === 'token.rejected').map((l) => [l.level, l.obj.reason, l.obj.client_id]);
      expect(rejected).toEqual([
        ['info', 'dpop_bound_as_bearer', client.clientId],
        ['info', 'dpop_key_mismatch', client.clientId],
        ['info', 'dpop_unbound_token', client.clientId],
        ['info', 'dpop_required', client.clientId],
        ['info', 'both_schemes', client.clientId],
      ]);
      const text = await registry.metrics();
      for (const reason of ['dpop_bound_as_bearer', 'dpop_key_mismatch', 'dpop_unbound_token', 'dpop_required']) {
        expect(text).toContain(`ecc_bearer_checks_total{outcome="invalid_token",reason="${reason}"} 1`);
      }
      expect(text).toContain('ecc_bearer_checks_total{outcome="invalid_request",reason="both_schemes"} 1');
      expect(text).not.toContain('dpop_binding');
    } finally {
      await t.close();
    }
  });
});

describe('DPoP proof refusals at a protected route, by the check that failed', () => {
  it('logs and counts each failed check under its own reason (dpop_htu, dpop_signature, dpop_replayed, ...) with the client_id of the verified token', async () => {
    const { Registry } = await import('prom-client');
    const registry = new Registry();
    const lines: Record<string, unknown>[] = [];
    const logger = {
      info: (o: object) => void lines.push({ level: 'info', ...o }),
      warn() {},
      error() {},
      debug: (o: object) => void lines.push({ level: 'debug', ...o }),
    };
    const t = await setup({ metrics: { registry }, logger: logger as never }, (app, i) => {
      app.use(i.router());
      app.get('/orders', i.requireBearer(), sendAuth);
    });
    try {
      const key = newDpopKey();
      const client = await t.issuer.clients.create({ name: 'f9', scopes: 'orders:read' });
      const tokenRes = await request(t.app)
        .post('/oauth/token')
        .set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL }))
        .type('form')
        .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
      const at = tokenRes.body.access_token as string;
      const get = (proof: string) => request(t.app).get('/orders').set('Authorization', `DPoP ${at}`).set('DPoP', proof);
      const url = `${ISSUER}/orders`;
      // a proof for another URL (a publicUrl behind a proxy that is not the one clients call), twice
      expect((await get(key.proof({ htm: 'GET', htu: 'https://elsewhere.example/orders', accessToken: at }))).status).toBe(401);
      expect((await get(key.proof({ htm: 'GET', htu: 'https://elsewhere.example/orders', accessToken: at }))).status).toBe(401);
      // a replayed proof
      const good = key.proof({ htm: 'GET', htu: url, accessToken: at });
      expect((await get(good)).status).toBe(200);
      expect((await get(good)).status).toBe(401);
      // a proof whose signature is not its key's
      const parts = key.proof({ htm: 'GET', htu: url, accessToken: at }).split('.');
      const forged = `${parts[0]}.${parts[1]}.${key.proof({ htm: 'GET', htu: url, accessToken: at }).split('.')[2]}`;
      expect((await get(forged)).status).toBe(401);

      const text = await registry.metrics();
      for (const series of [
        'ecc_bearer_checks_total{outcome="invalid_dpop_proof",reason="dpop_htu"} 2',
        'ecc_bearer_checks_total{outcome="invalid_dpop_proof",reason="dpop_replayed"} 1',
        'ecc_bearer_checks_total{outcome="invalid_dpop_proof",reason="dpop_signature"} 1',
      ]) {
        expect(text).toContain(series);
      }
      const rejected = lines.filter((l) => l.event === 'token.rejected').map((l) => [l.level, l.reason, l.client_id]);
      // one window per failed check: each shows at info the first time, the repeated htu at debug
      expect(rejected).toEqual([
        ['info', 'dpop_htu', client.clientId],
        ['debug', 'dpop_htu', client.clientId],
        ['info', 'dpop_replayed', client.clientId],
        ['info', 'dpop_signature', client.clientId],
      ]);
      expect(lines.find((l) => l.reason === 'dpop_htu')!.detail).toMatch(/htu https:\/\/elsewhere\.example\/orders for http/);
    } finally {
      await t.close();
    }
  });
});

describe('a full in-memory replay store (dpop.replayMax)', () => {
  it('keeps accepting fresh proofs, refuses replays and proofs older than it covers as too old, never 503', async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = { info: (o: object) => void lines.push(o as Record<string, unknown>), warn() {}, error() {}, debug: (o: object) => void lines.push(o as Record<string, unknown>) };
    const t = await setup({ logger: logger as never, dpop: { replayMax: 3 } }, (app, i) => {
      app.use(i.router());
      app.get('/orders', i.requireBearer(), sendAuth);
    });
    try {
      const key = newDpopKey();
      const client = await t.issuer.clients.create({ name: 'busy', scopes: 'orders:read' });
      // proofs come in the order they were made (the token endpoint shares the store)
      const start = now() - 20;
      const token = (
        await request(t.app)
          .post('/oauth/token')
          .set('DPoP', rawProof(key, { htm: 'POST', htu: TOKEN_URL, iat: start - 2 }))
          .type('form')
          .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret })
      ).body.access_token as string;
      const proofAt = (iat: number) => rawProof(key, { htm: 'GET', htu: `${ISSUER}/orders`, iat, accessToken: token });
      const get = (proof: string) => request(t.app).get('/orders').set('Authorization', `DPoP ${token}`).set('DPoP', proof);
      const proofs = Array.from({ length: 10 }, (_, i) => proofAt(start + i * 2));
      // ten proofs, one every 2 s of iat, through a store of 3: every one accepted
      for (const proof of proofs) expect((await get(proof)).status).toBe(200);
      // the first ones are no longer remembered: refused as too old, replayed or not
      expectError(await get(proofs[0]), 401, 'invalid_dpop_proof', 'DPoP');
      expectError(await get(proofAt(start)), 401, 'invalid_dpop_proof', 'DPoP');
      // the last ones are still remembered: a replay is refused as such
      expectError(await get(proofs[9]), 401, 'invalid_dpop_proof', 'DPoP');
      // fresh proofs still work
      expect((await get(proofAt(now()))).status).toBe(200);
      const details = lines.filter((l) => l.event === 'token.rejected').map((l) => String(l.detail));
      expect(details[0]).toMatch(/^dpop proof: iat_too_old: \d+ s old; the full replay store covers the last \d+ s \(raise dpop.replayMax or use dpop.redis\)$/);
    } finally {
      await t.close();
    }
  });
});
