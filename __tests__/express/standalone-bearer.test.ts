/**
 * The standalone requireBearer(): a resource server that only verifies, with
 * the keys from a real issuer's JWKS over HTTP (or given up front).
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Request, type RequestHandler, type Response } from 'express';
import request from 'supertest';
import { requireBearer, type BearerOptions, type IssuedCredentials } from '../../lib';
import { AUDIENCE, ISSUER, setup, type TestSetup } from '../helpers/app';
import { fetchToken, freshKey, headerOf, issuerSigningKey, mint } from '../helpers/tokens';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import Redis from 'ioredis';

interface RunningIssuer {
  t: TestSetup;
  client: IssuedCredentials;
  jwksUri: string;
  /** GET requests the JWKS route has seen. */
  fetches(): number;
  stop(): Promise<void>;
}

const running: RunningIssuer[] = [];

function listen(app: express.Express): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server));
    server.once('error', reject);
  });
}

function stopServer(server: Server): Promise<void> {
  if (!server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/** An issuer app listening on 127.0.0.1 with an ephemeral port, counting JWKS fetches. */
async function startIssuer(): Promise<RunningIssuer> {
  let fetches = 0;
  const t = await setup({}, (app, issuer) => {
    app.use('/.well-known/jwks.json', (req, _res, next) => {
      if (req.method === 'GET') fetches++;
      next();
    });
    app.use(issuer.router());
  });
  const server = await listen(t.app);
  const { port } = server.address() as AddressInfo;
  const client = await t.issuer.clients.create({ name: 'svc', scopes: ['orders:read', 'orders:write'] });
  let stopped = false;
  const handle: RunningIssuer = {
    t,
    client,
    jwksUri: `http://127.0.0.1:${port}/.well-known/jwks.json`,
    fetches: () => fetches,
    async stop() {
      await stopServer(server);
      if (!stopped) {
        stopped = true;
        await t.close();
      }
    },
  };
  running.push(handle);
  return handle;
}

afterAll(async () => {
  await Promise.all(running.map((r) => r.stop()));
});

const sendAuth = (req: Request, res: Response): void => {
  res.json(req.auth);
};

function api(middleware: RequestHandler): express.Express {
  const app = express();
  app.get('/orders', middleware, sendAuth);
  return app;
}

/** BearerOptions without issuer and audience, each key source kept apart (Omit alone would merge the union). */
type KeySourceOptions = BearerOptions extends infer T ? (T extends unknown ? Omit<T, 'issuer' | 'audience'> : never) : never;

function bearer(options: KeySourceOptions): RequestHandler {
  return requireBearer({ issuer: ISSUER, audience: AUDIENCE, logger: false, ...options });
}

const get = (app: express.Express, token: string) => request(app).get('/orders').set('Authorization', `Bearer ${token}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function expectInvalidToken(res: request.Response): void {
  expect(res.status).toBe(401);
  expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
  expect(res.body).toEqual({ error: 'invalid_token', error_description: expect.any(String) });
  expect(res.headers['www-authenticate']).toMatch(/^Bearer realm="api", error="invalid_token"/);
}

describe('with jwksUri', () => {
  // the file's first test: a cold issuer, its first tokens and the first JWKS fetch (about 0.2 s alone;
  // once past jest's 5 s default on a loaded 2-core CI run), so a longer bound than the default
  it("accepts the issuer's tokens and fetches the JWKS once for many requests", async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri }));
    const tokens = await Promise.all([0, 1, 2, 3, 4].map(() => fetchToken(s.t.app, s.client, 'orders:read')));
    expect(s.fetches()).toBe(0);

    const first = await Promise.all(tokens.map((token) => get(app, token)));
    for (const [i, res] of first.entries()) {
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ clientId: s.client.clientId, scope: ['orders:read'], token: tokens[i] });
    }
    for (let round = 0; round < 3; round++) {
      for (const token of [...tokens, await fetchToken(s.t.app, s.client)]) expect((await get(app, token)).status).toBe(200);
    }
    expect(s.fetches()).toBe(1);
  }, 15_000);

  it('rejects tokens it should: wrong audience, expired, bad signature', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri }));
    const key = await issuerSigningKey(s.t.dataDir);
    expect((await get(app, mint(key))).status).toBe(200);
    expectInvalidToken(await get(app, mint(key, { claims: { aud: 'http://other-api.test' } })));
    const now = Math.floor(Date.now() / 1000);
    const expired = await get(app, mint(key, { claims: { iat: now - 120, exp: now - 60 } }));
    expectInvalidToken(expired);
    expect(expired.body.error_description).toMatch(/expired/i);
    expectInvalidToken(await get(app, mint(freshKey('ES256', key.kid))));
  });

  it('a flood of 50 unknown kids causes at most one extra fetch within the cooldown', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri, jwksCooldown: 60 }));
    const good = await fetchToken(s.t.app, s.client);
    expect((await get(app, good)).status).toBe(200);
    expect(s.fetches()).toBe(1);

    const forged = Array.from({ length: 50 }, () => mint(freshKey()));
    const results = await Promise.all(forged.map((token) => get(app, token)));
    for (const res of results) expectInvalidToken(res);
    expect(s.fetches()).toBeLessThanOrEqual(2);

    // and the real tokens still pass
    expect((await get(app, good)).status).toBe(200);
    expect((await get(app, await fetchToken(s.t.app, s.client))).status).toBe(200);
    expect(s.fetches()).toBeLessThanOrEqual(2);
  });

  it('a cold flood of 50 unknown kids shares one fetch', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri, jwksCooldown: 60 }));
    const results = await Promise.all(Array.from({ length: 50 }, () => get(app, mint(freshKey()))));
    for (const res of results) expectInvalidToken(res);
    expect(s.fetches()).toBe(1);
  });

  it('refetches at once for an unknown kid, then not again until the cooldown after a fruitless refetch', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri, jwksCooldown: 0.3 }));
    expect((await get(app, await fetchToken(s.t.app, s.client))).status).toBe(200);
    expect(s.fetches()).toBe(1);

    // right after the first fetch: an unknown kid may be a new key, so look
    expectInvalidToken(await get(app, mint(freshKey())));
    expect(s.fetches()).toBe(2);
    // that refetch found nothing: the next unknown kid waits for the cooldown
    expectInvalidToken(await get(app, mint(freshKey())));
    expect(s.fetches()).toBe(2);

    await sleep(400);
    expectInvalidToken(await get(app, mint(freshKey())));
    expect(s.fetches()).toBe(3);
  });

  it('accepts tokens signed by a key rotated in the issuer, after the refetch', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri, jwksCooldown: 0.2 }));
    const before = await fetchToken(s.t.app, s.client);
    expect((await get(app, before)).status).toBe(200);
    expect(s.fetches()).toBe(1);

    const rotated = await s.t.issuer.keys.rotate(0);
    const after = await fetchToken(s.t.app, s.client);
    expect(headerOf(after).kid).toBe(rotated.kid);
    expect(headerOf(after).kid).not.toBe(headerOf(before).kid);

    await sleep(250);
    const res = await get(app, after);
    expect(res.status).toBe(200);
    expect(res.body.clientId).toBe(s.client.clientId);
    expect(s.fetches()).toBe(2);
    // the retired key is still published, so its tokens stay good until they expire
    expect((await get(app, before)).status).toBe(200);
  });

  it('JWKS server down: a known key keeps working, an unknown kid gets 503 temporarily_unavailable (not 500)', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri, jwksCooldown: 0 }));
    const good = await fetchToken(s.t.app, s.client);
    const other = await fetchToken(s.t.app, s.client);
    expect((await get(app, good)).status).toBe(200);
    await s.stop();

    expect((await get(app, other)).status).toBe(200);
    const res = await get(app, mint(freshKey()));
    expect(res.status).not.toBe(500);
    expect(res.status).toBe(503);
    expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
    expect(res.body).toEqual({ error: 'temporarily_unavailable', error_description: expect.any(String) });
    expect(res.body.error_description).not.toContain('127.0.0.1');
    expect(res.headers['retry-after']).toBeDefined();
  });

  it('JWKS never reachable: a request gets 503, not 500, and does not hang', async () => {
    const s = await startIssuer();
    const token = await fetchToken(s.t.app, s.client);
    await s.stop();
    const app = api(bearer({ jwksUri: s.jwksUri, jwksCooldown: 0.001, jwksTimeout: 1 }));
    const res = await get(app, token);
    expect(res.status).not.toBe(500);
    expect(res.status).toBe(503);
    expect(res.body.error).toBe('temporarily_unavailable');
    // refused as every other request is (RFC 6750 §3): the challenge names the error; Retry-After says when to come back
    expect(res.headers['www-authenticate']).toBe(
      'Bearer realm="api", error="temporarily_unavailable", error_description="the authorization server keys cannot be fetched; retry later", DPoP algs="ES256 ES384 PS256 RS256"',
    );
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  });

  it('health(): jwks "up" once fetched; "stale" (ok, keys still verify) after a fetch failed; "down" (not ok) when never fetched', async () => {
    const s = await startIssuer();
    const guard = requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri: s.jwksUri, jwksCooldown: 0, logger: false });
    expect(await guard.health()).toEqual({ ok: true, jwks: 'up' });
    const good = await fetchToken(s.t.app, s.client);
    await s.stop();
    const app = api(guard);
    expect((await get(app, mint(freshKey()))).status).toBe(503); // an unknown kid: a fetch that fails
    expect(await guard.health()).toEqual({ ok: true, jwks: 'stale' });
    expect((await get(app, good)).status).toBe(200);
    const never = requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri: s.jwksUri, jwksTimeout: 1, logger: false });
    expect(await never.health()).toEqual({ ok: false, jwks: 'down' });
  });

  it('health(): a JWKS down at start is fetched again at later probes (once the retry pause is over), so readiness comes back without traffic', async () => {
    const s = await startIssuer();
    const jwks = await s.t.issuer.keys.jwks();
    let down = true;
    const host = express();
    host.get('/jwks', (_req, res) => void (down ? res.status(503).end() : res.json(jwks)));
    const server = await listen(host);
    try {
      const { port } = server.address() as AddressInfo;
      const guard = requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri: `http://127.0.0.1:${port}/jwks`, jwksCooldown: 0.2, logger: false });
      expect(await guard.health()).toEqual({ ok: false, jwks: 'down' });
      down = false;
      await sleep(250);
      expect(await guard.health()).toEqual({ ok: true, jwks: 'up' });
    } finally {
      await stopServer(server);
    }
  });

  it('JWKS unreachable: the log says so once a minute, not once per request', async () => {
    const s = await startIssuer();
    const token = await fetchToken(s.t.app, s.client);
    await s.stop();
    const lines: Array<Record<string, unknown>> = [];
    const logger = { info: () => undefined, error: () => undefined, warn: (o: Record<string, unknown>) => void lines.push(o) };
    const app = api(requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri: s.jwksUri, jwksCooldown: 0.001, jwksTimeout: 1, logger }));
    for (let i = 0; i < 3; i++) expect((await get(app, token)).status).toBe(503);
    expect(lines.filter((l) => l.event === 'bearer.unavailable')).toEqual([{ event: 'bearer.unavailable', dependency: 'jwks', reason: expect.any(String) }]);
    expect(JSON.stringify(lines)).not.toContain(token.split('.')[2]);
  });

  it('checks the scope', async () => {
    const s = await startIssuer();
    const app = api(bearer({ jwksUri: s.jwksUri, scope: 'orders:write' }));
    const res = await get(app, await fetchToken(s.t.app, s.client, 'orders:read'));
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('insufficient_scope');
    expect(res.headers['www-authenticate']).toContain('error="insufficient_scope"');
    expect(res.headers['www-authenticate']).toContain('scope="orders:write"');
    expect((await get(app, await fetchToken(s.t.app, s.client, 'orders:write'))).status).toBe(200);
  });
});

describe('with static keys', () => {
  let t: TestSetup;
  let client: IssuedCredentials;
  beforeAll(async () => {
    t = await setup();
    client = await t.issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('health(): nothing to fetch, ok', async () => {
    expect(await requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys: await t.issuer.keys.jwks(), logger: false }).health()).toEqual({ ok: true });
  });

  it('accepts tokens with a JWK Set', async () => {
    const app = api(bearer({ keys: await t.issuer.keys.jwks() }));
    const token = await fetchToken(t.app, client);
    const res = await get(app, token);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ clientId: client.clientId, scope: ['orders:read'], token });
  });

  it('accepts tokens with an array of JWKs', async () => {
    const app = api(bearer({ keys: (await t.issuer.keys.jwks()).keys }));
    expect((await get(app, await fetchToken(t.app, client))).status).toBe(200);
  });

  it('rejects an unknown kid and a token not signed by the given keys', async () => {
    const app = api(bearer({ keys: await t.issuer.keys.jwks() }));
    const key = await issuerSigningKey(t.dataDir);
    expectInvalidToken(await get(app, mint(freshKey())));
    expectInvalidToken(await get(app, mint(freshKey('ES256', key.kid))));
  });

  it('a logger that throws changes no answer: a refused request still gets the RFC 6750 401, and another requireBearer() still logs it', async () => {
    const keys = await t.issuer.keys.jwks();
    const broken = () => {
      throw new Error('log transport closed');
    };
    const lines: Record<string, unknown>[] = [];
    const record = (o: Record<string, unknown>) => void lines.push(o);
    const app = express();
    app.get('/a', bearer({ keys, logger: { info: broken, warn: broken, error: broken, debug: broken } }), sendAuth);
    app.get('/b', bearer({ keys, logger: { info: record, warn: record, error: record, debug: record } }), sendAuth);
    const forged = mint(freshKey());
    for (const path of ['/a', '/b']) expectInvalidToken(await request(app).get(path).set('Authorization', `Bearer ${forged}`));
    expect(lines.map((l) => [l.event, l.path])).toEqual([['token.rejected', '/b']]);
    const good = await fetchToken(t.app, client);
    expect((await request(app).get('/a').set('Authorization', `Bearer ${good}`)).status).toBe(200);
  });

  it('sends the bare challenge without a token', async () => {
    const app = api(bearer({ keys: await t.issuer.keys.jwks() }));
    const res = await request(app).get('/orders');
    expect(res.status).toBe(401);
    // the audience is a URL: DPoP is allowed by default, with its bare challenge
    expect(res.headers['www-authenticate']).toBe('Bearer realm="api", DPoP algs="ES256 ES384 PS256 RS256"');
  });
});

describe('options are checked when the middleware is made', () => {
  const jwksUri = 'http://127.0.0.1:9/.well-known/jwks.json';

  it('needs one of jwksUri or keys', () => {
    // the typings refuse it too; a JavaScript caller gets the TypeError
    // @ts-expect-error neither jwksUri nor keys
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, logger: false })).toThrow(TypeError);
  });

  it('refuses both jwksUri and keys', () => {
    // @ts-expect-error both jwksUri and keys
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri, keys: { keys: [] }, logger: false })).toThrow(TypeError);
  });

  it('refuses a key set with no usable key, and a malformed scope or issuer', () => {
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys: { keys: [] }, logger: false })).toThrow(TypeError);
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri, scope: 'bad"scope', logger: false })).toThrow(TypeError);
    expect(() => requireBearer({ issuer: 'not a url', audience: AUDIENCE, jwksUri, logger: false })).toThrow(TypeError);
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri, jwksCooldown: -1, logger: false })).toThrow(TypeError);
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri, jwksuri: jwksUri, logger: false } as never)).toThrow(TypeError);
  });
});

describeIfRedis('standalone health() with dpopProofs.redis', () => {
  it('reports dpopReplayStore "up" while its Redis answers and "down" when it does not; ok follows the keys alone (Bearer requests are served)', async () => {
    const s = await startIssuer();
    const answering = new Redis(redisUrl());
    const refusing = new Redis('redis://127.0.0.1:1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
    refusing.on('error', () => undefined);
    try {
      const common = { issuer: ISSUER, audience: AUDIENCE, jwksUri: s.jwksUri, logger: false as const };
      const guard = requireBearer({ ...common, dpopProofs: { redis: answering, keyPrefix: `ecc-test-health-${process.pid}:` } });
      expect(await guard.health()).toEqual({ ok: true, jwks: 'up', dpopReplayStore: 'up' });
      const broken = requireBearer({ ...common, dpopProofs: { redis: refusing, keyPrefix: `ecc-test-health-${process.pid}:` } });
      expect(await broken.health()).toEqual({ ok: true, jwks: 'up', dpopReplayStore: 'down' });
      // without dpopProofs.redis, nothing to report
      expect(await requireBearer(common).health()).toEqual({ ok: true, jwks: 'up' });
    } finally {
      answering.disconnect();
      refusing.disconnect();
    }
  });
});
