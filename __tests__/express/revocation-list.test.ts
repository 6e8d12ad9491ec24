/**
 * Revocation at standalone verifiers: the issuer serves a signed revocation
 * list (GET /oauth/revocation-list, ETag), requireBearer({ jwksUri,
 * revocationList }) polls it. Real HTTP servers on 127.0.0.1: the issuer, a
 * resource server, and where needed a switchable proxy in front of the list.
 */
import { get as httpGet, type IncomingHttpHeaders } from 'node:http';
import { gunzipSync } from 'node:zlib';
import express from 'express';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createIssuer, requireBearer, stopRevocationListPolling, type Issuer } from '../../lib';
import { signRevocationList } from '../../lib/core/revocation-list';
import { loopbackServer, tempDir, type LoopbackServer } from '../helpers/app';
import { freshKey } from '../helpers/tokens';
import { callOrders, revoke, startIssuer, token, untilStatus, type Running } from '../helpers/running-issuer';

type Line = { level: string; event?: string; [k: string]: unknown };

function recordingLogger(lines: Line[]) {
  const at = (level: string) => (obj: Record<string, unknown>) => void lines.push({ level, ...obj });
  return { info: at('info'), warn: at('warn'), error: at('error'), debug: at('debug') };
}





/** A resource server verifying `r`'s tokens with the given revocationList option. */
function resourceServer(r: Running, revocationList: unknown, logger: unknown = false): express.Express {
  return resourceServerWith(r, revocationList, logger).app;
}

/** The same, with its requireBearer() (for its health()). */
function resourceServerWith(r: Running, revocationList: unknown, logger: unknown = false): { app: express.Express; verify: ReturnType<typeof requireBearer> } {
  const app = express();
  const verify = requireBearer({
    issuer: r.url,
    audience: `${r.url}/api`,
    jwksUri: `${r.url}/.well-known/jwks.json`,
    revocationList: revocationList as never,
    logger: logger as never,
  });
  app.get('/api/orders', verify, (req, res) => void res.json({ client: req.auth!.clientId }));
  return { app, verify };
}

/** Polls `check` every 20 ms until it holds, for at most `limitMs`; answers when it first held (Date.now()), -1 if never. */
async function whenTrue(check: () => Promise<boolean>, limitMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < limitMs) {
    if (await check()) return Date.now();
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return -1;
}

const call = callOrders;

const until = untilStatus;

describe('the issuer publishes a signed revocation list', () => {
  let r: Running;
  beforeAll(async () => {
    r = await startIssuer();
  });
  afterAll(() => r.close());

  it('GET: a revocation-list+jwt signed with the signing key, iss the issuer, no-cache, an ETag; 304 for that ETag; a new list after a revocation', async () => {
    const first = await fetch(`${r.url}/oauth/revocation-list`);
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toBe('application/revocation-list+jwt');
    expect(first.headers.get('cache-control')).toBe('no-cache');
    const etag = first.headers.get('etag')!;
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
    const body = await first.text();
    const decoded = jwt.decode(body, { complete: true })!;
    expect(decoded.header).toMatchObject({ typ: 'revocation-list+jwt', alg: 'ES256' });
    const jwks = (await (await fetch(`${r.url}/.well-known/jwks.json`)).json()) as { keys: { kid: string }[] };
    expect(jwks.keys.map((k) => k.kid)).toContain(decoded.header.kid);
    expect(decoded.payload).toMatchObject({ iss: r.url, tokens: [], clients: [] });

    const again = await fetch(`${r.url}/oauth/revocation-list`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe('');

    const at = await token(r);
    await revoke(r, at);
    const after = await fetch(`${r.url}/oauth/revocation-list`, { headers: { 'if-none-match': etag } });
    expect(after.status).toBe(200);
    expect(after.headers.get('etag')).not.toBe(etag);
    const listed = jwt.decode(await after.text()) as { tokens: { jti: string; client_id: string }[] };
    expect(listed.tokens).toEqual([expect.objectContaining({ jti: (jwt.decode(at) as { jti: string }).jti, client_id: r.client.clientId })]);
  });

  it('HEAD answers the headers without a body; other methods 405; the metadata names the list', async () => {
    const head = await request(r.url).head('/oauth/revocation-list');
    expect(head.status).toBe(200);
    expect(head.headers.etag).toBeDefined();
    const post = await request(r.url).post('/oauth/revocation-list');
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    const metadata = await (await fetch(`${r.url}/.well-known/oauth-authorization-server`)).json();
    expect(metadata).toMatchObject({ revocation_list_uri: `${r.url}/oauth/revocation-list` });
  });

  it('gzip: a short list goes as it is, whatever the caller accepts', async () => {
    const res = await rawGet(`${r.url}/oauth/revocation-list`, { 'accept-encoding': 'gzip' });
    expect(res.status).toBe(200);
    expect(res.headers['content-encoding']).toBeUndefined();
    expect(res.headers.vary).toBe('Accept-Encoding');
    expect(res.body.length).toBeLessThan(1024);
    expect(jwt.decode(res.body.toString('utf8'))).toMatchObject({ iss: r.url, clients: [] }); // one token revoked by the test before
  });

  it('gzip: a long list goes gzipped with its own ETag for Accept-Encoding gzip, as it is otherwise; either ETag gets a 304; the poller takes it gzipped', async () => {
    const revoked: string[] = [];
    for (let i = 0; i < 30; i++) {
      const at = await token(r);
      await revoke(r, at);
      revoked.push((jwt.decode(at) as { jti: string }).jti);
    }
    const url = `${r.url}/oauth/revocation-list`;
    const plain = await rawGet(url, {});
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.body.length).toBeGreaterThan(1024);
    const listed = jwt.decode(plain.body.toString('utf8')) as { tokens: { jti: string }[] };
    expect(listed.tokens.map((t) => t.jti)).toEqual(expect.arrayContaining(revoked));

    const gz = await rawGet(url, { 'accept-encoding': 'br, gzip;q=0.8' });
    expect(gz.status).toBe(200);
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gz.headers.vary).toBe('Accept-Encoding');
    expect(gz.headers['content-type']).toBe('application/revocation-list+jwt');
    expect(Number(gz.headers['content-length'])).toBe(gz.body.length);
    expect(gz.body.length).toBeLessThan(plain.body.length);
    expect(gunzipSync(gz.body).toString('utf8')).toBe(plain.body.toString('utf8'));
    expect(gz.headers.etag).toBe(`${plain.headers.etag!.slice(0, -1)}-gz"`);

    // refused gzip (q=0) or identity only: as it is
    for (const accept of ['gzip;q=0', 'identity']) {
      const res = await rawGet(url, { 'accept-encoding': accept });
      expect({ accept, encoding: res.headers['content-encoding'], same: res.body.equals(plain.body) }).toEqual({ accept, encoding: undefined, same: true });
    }
    // either representation's ETag: 304, whichever the caller asks for now
    for (const [etag, accept] of [[gz.headers.etag!, 'gzip'], [plain.headers.etag!, 'gzip'], [gz.headers.etag!, 'identity']]) {
      expect((await rawGet(url, { 'accept-encoding': accept, 'if-none-match': etag })).status).toBe(304);
    }
    // HEAD: the headers of the gzip answer, no body
    const head = await request(r.url).head('/oauth/revocation-list').set('Accept-Encoding', 'gzip');
    expect(head.headers['content-encoding']).toBe('gzip');

    // what the standalone poller's fetch gets: the gzip answer, decoded and verified
    expect((await fetch(url)).headers.get('content-encoding')).toBe('gzip');
    const api = resourceServer(r, { uri: url, interval: 0.2 });
    const at = await token(r);
    expect((await call(api, at)).status).toBe(200);
    await revoke(r, at);
    expect(await until(api, at, 401, 2000)).toBeGreaterThanOrEqual(0);
    expect((await call(api, await token(r))).status).toBe(200);
  });
});

/** GET the list with exactly these headers (node:http sends no Accept-Encoding of its own); the raw bytes. */
function rawGet(url: string, headers: Record<string, string>): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    httpGet(url, { headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

describe('requireBearer({ jwksUri, revocationList }) at a standalone resource server', () => {
  let r: Running;
  beforeAll(async () => {
    r = await startIssuer();
  });
  afterAll(() => r.close());

  it('a revoked token (already in the verified-token cache) is refused within the poll interval: 0.3 s → under 1 s', async () => {
    const api = resourceServer(r, { uri: `${r.url}/oauth/revocation-list`, interval: 0.3 });
    const at = await token(r);
    expect((await call(api, at)).status).toBe(200);
    expect((await call(api, at)).status).toBe(200); // a cache hit now
    const started = Date.now();
    await revoke(r, at);
    const ms = await until(api, at, 401, 3000);
    expect(ms).toBeGreaterThanOrEqual(0);
    expect(Date.now() - started).toBeLessThan(1000);
    const res = await call(api, at);
    expect(res.body).toEqual({ error: 'invalid_token', error_description: 'the access token was revoked' });
    // another token of the same client is untouched
    expect((await call(api, await token(r))).status).toBe(200);
  });

  it('a revoked client and revoke-tokens reach it too', async () => {
    const api = resourceServer(r, { uri: `${r.url}/oauth/revocation-list`, interval: 0.2 });
    const other = await r.issuer.clients.create({ name: 'other', scopes: 'orders:read' });
    const a = await token(r);
    const b = await token(r, other);
    expect([(await call(api, a)).status, (await call(api, b)).status]).toEqual([200, 200]);
    await r.issuer.clients.revokeTokens(r.client.clientId);
    await r.issuer.clients.revoke(other.clientId);
    expect(await until(api, a, 401, 2000)).toBeGreaterThanOrEqual(0);
    expect(await until(api, b, 401, 2000)).toBeGreaterThanOrEqual(0);
    expect((await call(api, await token(r))).status).toBe(200); // the client stays active after revoke-tokens
  });

  it('the default interval (10 s) bounds it: a revocation is refused within 10.5 s', async () => {
    const api = resourceServer(r, `${r.url}/oauth/revocation-list`);
    const at = await token(r);
    expect((await call(api, at)).status).toBe(200);
    const started = Date.now();
    await revoke(r, at);
    const ms = await until(api, at, 401, 11_000);
    expect(ms).toBeGreaterThanOrEqual(0);
    expect(Date.now() - started).toBeLessThanOrEqual(10_500);
  }, 15_000);

  it('a verifier with a larger clockTolerance than the issuer\'s learns of a revoked token it still accepts by its clock, from an issuer restarted after the token\'s exp + the issuer\'s tolerance', async () => {
    const http = await loopbackServer();
    const dataDir = tempDir();
    const start = async (): Promise<Issuer> => {
      const issuer = createIssuer({ issuer: http.url, audience: `${http.url}/api`, dataDir, logger: false, accessTokenTtl: 1, clockTolerance: 0 });
      await issuer.ready();
      const app = express();
      app.use(issuer.router());
      http.serve(app);
      return issuer;
    };
    let issuer = await start();
    try {
      const client = await issuer.clients.create({ name: 'caller', scopes: 'orders:read' });
      const r = { url: http.url, client } as unknown as Running;
      const at = await token(r);
      await revoke(r, at);
      const exp = (jwt.decode(at) as { exp: number }).exp;
      // restarted past exp + the issuer's tolerance (0), within the verifier's (30), which still accepts the token by its time
      await issuer.close();
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, exp * 1000 + 1500 - Date.now())));
      issuer = await start();
      const app = express();
      app.get('/api/orders', requireBearer({ issuer: http.url, audience: `${http.url}/api`, jwksUri: `${http.url}/.well-known/jwks.json`, clockTolerance: 30, revocationList: `${http.url}/oauth/revocation-list` }), (req, res) => void res.json({ client: req.auth!.clientId }));
      const refused = await call(app, at);
      expect(refused.status).toBe(401);
      expect(refused.body.error).toBe('invalid_token');
      // a token of the same client not revoked passes there: the refusal is the revocation's, not the clock's
      expect((await call(app, await token(r))).status).toBe(200);
    } finally {
      stopRevocationListPolling();
      await issuer.close();
      await http.close();
    }
  });

  it('stopRevocationListPolling() stops the polls: the list is asked for no more', async () => {
    const counter = await loopbackServer();
    let asked = 0;
    const app = express();
    app.get('/list', async (req, res) => {
      asked += 1;
      const upstream = await fetch(`${r.url}/oauth/revocation-list`);
      res.type('application/revocation-list+jwt').send(await upstream.text());
    });
    counter.serve(app);
    try {
      const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
      const api = resourceServer(r, { uri: `${counter.url}/list`, interval: 0.1 });
      expect((await call(api, await token(r))).status).toBe(200);
      for (let waited = 0; asked < 3 && waited < 3000; waited += 50) await sleep(50);
      expect(asked).toBeGreaterThanOrEqual(3); // the first poll and the timer's
      stopRevocationListPolling();
      await sleep(150); // a poll already on its way when it stopped lands here
      const after = asked;
      await sleep(500);
      expect(asked).toBe(after);
      // a verifier created after it polls again: its first request waits for the list
      // (its timer starts after that first poll, so what is counted on return is that poll, or more)
      const again = resourceServer(r, { uri: `${counter.url}/list`, interval: 0.1 });
      expect((await call(again, await token(r))).status).toBe(200);
      expect(asked).toBeGreaterThanOrEqual(after + 1);
      stopRevocationListPolling();
    } finally {
      await counter.close();
    }
  });

  it('refuses options that make no sense, at start-up', () => {
    const base = { issuer: r.url, audience: 'a', jwksUri: `${r.url}/.well-known/jwks.json` };
    expect(() => requireBearer({ ...base, revocationList: 'not a url' })).toThrow(TypeError);
    expect(() => requireBearer({ ...base, revocationList: { uri: `${r.url}/x`, interval: 0 } })).toThrow(/interval/);
    expect(() => requireBearer({ ...base, revocationList: { uri: `${r.url}/x`, interval: 60, maxStale: 30 } })).toThrow(/maxStale/);
    expect(() => requireBearer({ ...base, revocationList: { uri: `${r.url}/x`, failOpen: 'yes' as never } })).toThrow(/failOpen/);
    expect(() => requireBearer({ ...base, revocationList: { uri: `${r.url}/x`, every: 3 } as never })).toThrow(TypeError);
  });
});

describe('when the list cannot be had', () => {
  let r: Running;
  let proxy: LoopbackServer;
  let mode: 'pass' | 'down' | 'forged' = 'pass';
  /** When each request for /own-list reached the proxy (other tests' pollers go on asking for /list). */
  const hits: number[] = [];
  /** When each request for /health-list reached the proxy, and whether it was passed on. */
  const healthHits: { at: number; mode: string }[] = [];
  const forger = freshKey();
  beforeAll(async () => {
    r = await startIssuer();
    proxy = await loopbackServer();
    const app = express();
    app.get(['/list', '/own-list', '/health-list'], async (req, res) => {
      if (req.path === '/own-list') hits.push(Date.now());
      if (req.path === '/health-list') healthHits.push({ at: Date.now(), mode });
      if (mode === 'down') return void res.status(503).end();
      if (mode === 'forged') {
        // well-formed, signed by a key the issuer never published
        const body = signRevocationList({ tokens: [], clients: [] }, { kid: forger.kid, alg: 'ES256', privateKey: forger.privateKey, publicKey: forger.publicKey } as never, { issuer: r.url, now: Date.now() });
        return void res.type('application/revocation-list+jwt').send(body);
      }
      const upstream = await fetch(`${r.url}/oauth/revocation-list`, { headers: req.headers['if-none-match'] ? { 'if-none-match': String(req.headers['if-none-match']) } : {} });
      res.status(upstream.status);
      const etag = upstream.headers.get('etag');
      if (etag) res.setHeader('ETag', etag);
      res.type('application/revocation-list+jwt').send(upstream.status === 304 ? undefined : await upstream.text());
    });
    proxy.serve(app);
  });
  afterAll(async () => {
    await proxy.close();
    await r.close();
  });

  it('the last list is trusted for maxStale, then 503 temporarily_unavailable with Retry-After; it recovers as soon as the list answers; one warn line per outage', async () => {
    mode = 'pass';
    const lines: Line[] = [];
    const api = resourceServer(r, { uri: `${proxy.url}/list`, interval: 0.2, maxStale: 1 }, recordingLogger(lines));
    const at = await token(r);
    expect((await call(api, at)).status).toBe(200);
    mode = 'down';
    const downAt = Date.now();
    expect((await call(api, at)).status).toBe(200); // within maxStale: the last list
    const ms = await until(api, at, 503, 3000);
    expect(ms).toBeGreaterThanOrEqual(0);
    expect(Date.now() - downAt).toBeGreaterThanOrEqual(800);
    const refused = await call(api, at);
    expect(refused.status).toBe(503);
    expect(refused.body.error).toBe('temporarily_unavailable');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    mode = 'pass';
    // back within the next poll (0.2 s here; a request polls by itself at most once a second)
    const back = await until(api, at, 200, 2000);
    expect(back).toBeGreaterThanOrEqual(0);
    expect(back).toBeLessThan(1000);
    expect(lines.filter((l) => l.event === 'revocation_list.unavailable')).toHaveLength(1);
    expect(lines.filter((l) => l.event === 'revocation_list.recovered')).toHaveLength(1);
  });

  it('health(): revocationList "fresh", then "stale" past maxStale while the list cannot be fetched (ok: false; with failOpen ok: true), fresh again once it answers', async () => {
    mode = 'pass';
    // a list path of its own: the proxy's record of it says when these two pollers last got the list
    const verify = (failOpen: boolean) =>
      requireBearer({ issuer: r.url, audience: `${r.url}/api`, jwksUri: `${r.url}/.well-known/jwks.json`, revocationList: { uri: `${proxy.url}/health-list`, interval: 0.2, maxStale: 0.5, failOpen }, logger: false });
    const closed = verify(false);
    const open = verify(true);
    expect(await closed.health()).toEqual({ ok: true, jwks: 'up', revocationList: 'fresh' });
    expect(await open.health()).toEqual({ ok: true, jwks: 'up', revocationList: 'fresh' });
    mode = 'down';
    const downAt = Date.now();
    // both stale, polled (was a fixed 0.9 s): never before maxStale (0.5 s) after the last list either got, and within 2 s
    const staleAt = await whenTrue(async () => (await closed.health()).revocationList === 'stale' && (await open.health()).revocationList === 'stale', 2000);
    expect(staleAt).toBeGreaterThan(0);
    const lastPassed = Math.max(...healthHits.filter((h) => h.mode === 'pass' && h.at <= downAt).map((h) => h.at));
    expect(staleAt - lastPassed).toBeGreaterThanOrEqual(500);
    expect(await closed.health()).toEqual({ ok: false, jwks: 'up', revocationList: 'stale' });
    expect(await open.health()).toEqual({ ok: true, jwks: 'up', revocationList: 'stale' });
    mode = 'pass';
    const passAt = Date.now();
    // fresh again within the 0.5 s the fixed wait gave it (one 0.2 s poll), polled
    const freshAt = await whenTrue(async () => (await closed.health()).revocationList === 'fresh', 500);
    expect(freshAt).toBeGreaterThan(0);
    expect(freshAt - passAt).toBeLessThanOrEqual(500);
    expect(await closed.health()).toEqual({ ok: true, jwks: 'up', revocationList: 'fresh' });
  });

  it('a cached token refused while the list is stale waits for a poll of its own: the first request after the issuer answers passes, before the next tick', async () => {
    mode = 'pass';
    // interval = maxStale = 3 s: the timer polls at t0 + 3 s, t0 + 6 s...; the list is stale from t0 + 3 s
    const api = resourceServer(r, { uri: `${proxy.url}/own-list`, interval: 3, maxStale: 3 });
    const at = await token(r);
    expect((await call(api, at)).status).toBe(200); // the first poll; the token is now in the verified-token cache
    const first = hits.length;
    mode = 'down';
    // the timer's poll at t0 + 3 s fails
    const deadline = Date.now() + 5000;
    while (hits.length === first && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(hits.length).toBe(first + 1);
    mode = 'pass';
    // past the once-a-second limit on polls by requests, well before the next tick (t0 + 6 s)
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, hits[hits.length - 1] + 1100 - Date.now())));
    const res = await call(api, at);
    expect(res.status).toBe(200);
    expect(hits.length).toBe(first + 2); // the request's own poll
    expect(Date.now() - hits[first]).toBeLessThan(2900);
  });

  it('failOpen: past maxStale tokens pass unchecked', async () => {
    mode = 'pass';
    const { app: api, verify } = resourceServerWith(r, { uri: `${proxy.url}/list`, interval: 0.2, maxStale: 0.5, failOpen: true });
    const at = await token(r);
    expect((await call(api, at)).status).toBe(200);
    mode = 'down';
    // past maxStale, polled (was a fixed 0.9 s): the list is stale, and the token still passes, to the route, as its client
    expect(await whenTrue(async () => (await verify.health()).revocationList === 'stale', 3000)).toBeGreaterThan(0);
    expect(await verify.health()).toEqual({ ok: true, jwks: 'up', revocationList: 'stale' });
    const res = await call(api, at);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ client: r.client.clientId });
    mode = 'pass';
  });

  it('a list signed by a key the issuer never published is not trusted: never verified → 503 (fail closed)', async () => {
    mode = 'forged';
    const lines: Line[] = [];
    const api = resourceServer(r, { uri: `${proxy.url}/list`, interval: 5, maxStale: 10 }, recordingLogger(lines));
    const res = await call(api, await token(r));
    expect(res.status).toBe(503);
    expect(res.body.error).toBe('temporarily_unavailable');
    expect(lines.find((l) => l.event === 'revocation_list.unavailable')?.reason).toMatch(/unknown kid/);
    mode = 'pass';
  });
});
