import { rmSync } from 'node:fs';
import request from 'supertest';
import { createApp, startServer, type RunningServer } from '../../examples/server';
import { createIssuer, openEmbeddedStore, StoreUnavailableError } from '../../lib';
import Redis from 'ioredis';
import { main } from '../../lib/cli/main';
import { tempDir } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import { startFaultProxy } from '../helpers/fault-proxy';

const env = (dataDir: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({
  PORT: '0',
  HOST: '127.0.0.1',
  ISSUER: 'http://localhost:3000',
  DATA_DIR: dataDir,
  LOG_LEVEL: 'silent',
  ...extra,
});

function demoCredentials(lines: string[]): { id: string; secret: string } {
  const id = lines.find((l) => l.includes('client_id:'))!.split(/\s+/).pop()!;
  const secret = lines.find((l) => l.includes('client_secret:'))!.split(/\s+/).pop()!;
  return { id, secret };
}

describe('examples/server.ts', () => {
  const dataDir = tempDir();
  let running: RunningServer;
  const printed: string[] = [];
  let demo: { id: string; secret: string };
  let token: string;

  beforeAll(async () => {
    running = await startServer(env(dataDir), (l) => printed.push(l));
    demo = demoCredentials(printed);
  });
  afterAll(async () => {
    await running?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('prints a demo client and a ready curl line on first start', () => {
    expect(demo.id).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(demo.secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(printed.join('\n')).toContain(`curl -s -u '${demo.id}:${demo.secret}' -d grant_type=client_credentials http://localhost:3000/oauth/token`);
  });

  it('DEMO_CLIENT=0: no demo client on a first start, nothing printed about one', async () => {
    const other = tempDir();
    const lines: string[] = [];
    const quiet = await startServer(env(other, { DEMO_CLIENT: '0' }), (l) => lines.push(l));
    try {
      expect(lines.join('\n')).not.toMatch(/client_secret|demo client/i);
      expect(await quiet.issuer.clients.list()).toEqual([]);
    } finally {
      await quiet.close();
      rmSync(other, { recursive: true, force: true });
    }
  });

  it('serves /health without a token', async () => {
    const res = await request(running.url).get('/health');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok' });
  });

  it('serves /health/ready: 200 with the health object, never cached', async () => {
    const res = await request(running.url).get('/health/ready');
    expect(res.status).toBe(200);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toEqual({ ok: true, store: 'up', signingKid: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/) });
  });

  it('walks through the README: token, whoami, orders', async () => {
    const tokenRes = await request(running.url).post('/oauth/token').auth(demo.id, demo.secret).type('form').send({ grant_type: 'client_credentials' });
    expect(tokenRes.status).toBe(200);
    token = tokenRes.body.access_token;

    const who = await request(running.url).get('/api/whoami').set('Authorization', `Bearer ${token}`);
    expect(who.body).toEqual({ client_id: demo.id, scope: 'orders:read orders:write' });

    const created = await request(running.url).post('/api/orders').set('Authorization', `Bearer ${token}`).send({ item: 'apples', quantity: 3 });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({ id: 1, item: 'apples', quantity: 3, created_by: demo.id });

    const list = await request(running.url).get('/api/orders').set('Authorization', `Bearer ${token}`);
    expect(list.body).toEqual({ orders: [created.body] });
  });

  it('answers another method on a known /api path with 405 and Allow (after the token check), an unknown path with 404', async () => {
    const auth = { Authorization: `Bearer ${token}` };
    const del = await request(running.url).delete('/api/orders').set(auth);
    expect({ status: del.status, allow: del.headers.allow, body: del.body }).toEqual({ status: 405, allow: 'GET, HEAD, POST', body: { error: 'method_not_allowed' } });
    const put = await request(running.url).put('/api/whoami').set(auth);
    expect({ status: put.status, allow: put.headers.allow }).toEqual({ status: 405, allow: 'GET, HEAD' });
    expect((await request(running.url).delete('/api/orders')).status).toBe(401);
    expect((await request(running.url).get('/api/nothing').set(auth)).status).toBe(404);
  });

  it('needs a token on /api and the right scope per route', async () => {
    const none = await request(running.url).get('/api/orders');
    expect(none.status).toBe(401);
    // DPoP is allowed by default: the bare DPoP challenge follows the Bearer one
    expect(none.headers['www-authenticate']).toBe('Bearer realm="api", DPoP algs="ES256 ES384 PS256 RS256"');

    const readOnly = (await request(running.url).post('/oauth/token').auth(demo.id, demo.secret).type('form')
      .send({ grant_type: 'client_credentials', scope: 'orders:read' })).body.access_token;
    expect((await request(running.url).get('/api/orders').set('Authorization', `Bearer ${readOnly}`)).status).toBe(200);
    const write = await request(running.url).post('/api/orders').set('Authorization', `Bearer ${readOnly}`).send({ item: 'x', quantity: 1 });
    expect(write.status).toBe(403);
    expect(write.headers['www-authenticate']).toContain('error="insufficient_scope"');
    expect(write.headers['www-authenticate']).toContain('scope="orders:write"');
  });

  it('answers a bad order with 400 JSON, not a stack trace', async () => {
    const bad = await request(running.url).post('/api/orders').set('Authorization', `Bearer ${token}`).set('Content-Type', 'application/json').send('{"item":');
    expect(bad.status).toBe(400);
    expect(bad.text).not.toMatch(/at .*\.(js|ts):\d+/);
    const invalid = await request(running.url).post('/api/orders').set('Authorization', `Bearer ${token}`).send({ item: '', quantity: 0 });
    expect(invalid.status).toBe(400);
  });

  it('advertises its scopes in the metadata', async () => {
    const meta = await request(running.url).get('/.well-known/oauth-authorization-server');
    expect(meta.body.scopes_supported).toEqual(['orders:read', 'orders:write']);
    expect(meta.body.token_endpoint).toBe('http://localhost:3000/oauth/token');
  });

  it('loses nothing on restart: no new demo client, old token and old client still work', async () => {
    await running.close();
    const again: string[] = [];
    running = await startServer(env(dataDir), (l) => again.push(l));
    expect(again.join('\n')).not.toContain('client_secret');
    const who = await request(running.url).get('/api/whoami').set('Authorization', `Bearer ${token}`);
    expect(who.status).toBe(200);
    const fresh = await request(running.url).post('/oauth/token').auth(demo.id, demo.secret).type('form').send({ grant_type: 'client_credentials' });
    expect(fresh.status).toBe(200);
  });

  it('honours ACCESS_TOKEN_TTL and refuses a malformed one at start-up', async () => {
    const dir = tempDir();
    const lines: string[] = [];
    const short = await startServer(env(dir, { ACCESS_TOKEN_TTL: '60' }), (l) => lines.push(l));
    try {
      const d = demoCredentials(lines);
      const res = await request(short.url).post('/oauth/token').auth(d.id, d.secret).type('form').send({ grant_type: 'client_credentials' });
      expect(res.body.expires_in).toBe(60);
    } finally {
      await short.close();
      rmSync(dir, { recursive: true, force: true });
    }
    await expect(startServer(env(tempDir(), { ACCESS_TOKEN_TTL: 'soon' }), () => undefined)).rejects.toThrow(/ACCESS_TOKEN_TTL/);
  });

  it('RESOURCES names the other APIs it issues tokens for: a client allowed one gets a token for it (RFC 8707), an unknown one is invalid_target', async () => {
    const dir = tempDir();
    const served = await startServer(env(dir, { DEMO_CLIENT: '0', RESOURCES: 'https://billing.example.com, https://reports.example.com' }), () => undefined);
    try {
      const c = await served.issuer.clients.create({ name: 'invoicer', scopes: 'orders:read', resources: ['https://billing.example.com', 'https://reports.example.com'] });
      const ask = (resource: string) =>
        request(served.url).post('/oauth/token').auth(c.clientId, c.clientSecret).type('form').send({ grant_type: 'client_credentials', resource });
      const res = await ask('https://billing.example.com');
      expect(res.status).toBe(200);
      expect(JSON.parse(Buffer.from(res.body.access_token.split('.')[1], 'base64url').toString()).aud).toBe('https://billing.example.com');
      const unknown = await ask('https://payroll.example.com');
      expect(unknown.status).toBe(400);
      expect(unknown.body.error).toBe('invalid_target');
    } finally {
      await served.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('answers /health/ready with 503 while the store does not answer, and 200 once it does again', async () => {
    const dir = tempDir();
    const store = await openEmbeddedStore({ dataDir: dir });
    let down = false;
    const ping = store.ping!.bind(store);
    store.ping = () => (down ? Promise.reject(new StoreUnavailableError('the test cut the store')) : ping());
    const issuer = createIssuer({ issuer: 'http://localhost:3000', audience: 'http://localhost:3000/api', store, logger: false });
    await issuer.ready();
    const app = createApp(issuer);
    try {
      expect((await request(app).get('/health/ready')).status).toBe(200);
      down = true;
      await new Promise((r) => setTimeout(r, 1100)); // the answer is reused for a second
      const res = await request(app).get('/health/ready');
      expect(res.status).toBe(503);
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.body).toEqual({ ok: false, store: 'down', signingKid: expect.any(String) });
      expect((await request(app).get('/health')).status).toBe(200); // liveness is not readiness
      down = false;
      await new Promise((r) => setTimeout(r, 1100));
      expect((await request(app).get('/health/ready')).status).toBe(200);
    } finally {
      await issuer.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
  it('serves Prometheus metrics at /metrics with METRICS=1, and no /metrics without it', async () => {
    expect((await request(running.url).get('/metrics')).status).toBe(404);
    const dir = tempDir();
    const withMetrics = await startServer(env(dir, { METRICS: '1' }), () => undefined, { demoClient: false });
    try {
      const { clientId, clientSecret } = await withMetrics.issuer.clients.create({ name: 'm', scopes: 'orders:read' });
      const ok = await request(withMetrics.url).post('/oauth/token').auth(clientId, clientSecret).type('form').send({ grant_type: 'client_credentials' });
      expect(ok.status).toBe(200);
      await request(withMetrics.url).post('/oauth/token').auth(clientId, 'wrong').type('form').send({ grant_type: 'client_credentials' });
      await request(withMetrics.url).get('/api/whoami').set('Authorization', `Bearer ${ok.body.access_token}`).expect(200);
      const res = await request(withMetrics.url).get('/metrics');
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/plain/);
      expect(res.text).toContain('ecc_token_requests_total{outcome="issued"} 1');
      expect(res.text).toContain('ecc_token_requests_total{outcome="invalid_client",reason="wrong_secret"} 1');
      expect(res.text).toMatch(/ecc_bearer_checks_total\{outcome="accepted",reason=""\} 1/);
      expect(res.text).not.toContain(clientId);
    } finally {
      await withMetrics.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('METRICS_PORT: /metrics on that port only (404 on the API port), GET and HEAD, 405 and 404 otherwise; closed with the server', async () => {
    const dir = tempDir();
    const server = await startServer(env(dir, { METRICS_PORT: '0' }), () => undefined, { demoClient: false });
    try {
      expect(server.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      const metricsOrigin = server.metricsUrl!.replace(/\/metrics$/, '');
      expect(metricsOrigin).not.toBe(server.url);

      const { clientId, clientSecret } = await server.issuer.clients.create({ name: 'm', scopes: 'orders:read' });
      await request(server.url).post('/oauth/token').auth(clientId, 'wrong').type('form').send({ grant_type: 'client_credentials' }).expect(401);
      // not on the API's port
      const onApi = await request(server.url).get('/metrics');
      expect({ status: onApi.status, body: onApi.body }).toEqual({ status: 404, body: { error: 'not_found' } });
      const res = await request(metricsOrigin).get('/metrics');
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^text\/plain/);
      expect(res.headers['x-powered-by']).toBeUndefined();
      expect(res.text).toContain('ecc_token_requests_total{outcome="invalid_client",reason="wrong_secret"} 1');
      expect((await request(metricsOrigin).head('/metrics')).status).toBe(200);
      const post = await request(metricsOrigin).post('/metrics');
      expect({ status: post.status, allow: post.headers.allow, body: post.body }).toEqual({ status: 405, allow: 'GET, HEAD', body: { error: 'method_not_allowed' } });
      // the API's routes are not on the metrics port
      for (const path of ['/oauth/token', '/health', '/api/whoami', '/.well-known/jwks.json']) {
        const other = await request(metricsOrigin).get(path);
        expect({ path, status: other.status, body: other.body }).toEqual({ path, status: 404, body: { error: 'not_found' } });
      }
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
    await expect(fetch(server.metricsUrl!)).rejects.toThrow();
  });

  it('METRICS_PORT equal to PORT on another address (METRICS_HOST): both listen, /metrics only on the metrics address', async () => {
    const dir = tempDir();
    const port = '47393';
    const server = await startServer(env(dir, { PORT: port, METRICS_PORT: port, METRICS_HOST: '127.0.0.2' }), () => undefined, { demoClient: false });
    try {
      expect({ url: server.url, metricsUrl: server.metricsUrl }).toEqual({ url: `http://127.0.0.1:${port}`, metricsUrl: `http://127.0.0.2:${port}/metrics` });
      expect((await request(server.url).get('/metrics')).status).toBe(404);
      expect((await request(`http://127.0.0.2:${port}`).get('/metrics')).status).toBe(200);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describeIfRedis('examples/server.ts with REDIS_URL and REVOCATION_CHANNEL', () => {
  it('starts within about 2 s on a Redis that is connected but does not answer (README: 2 s at most), serves Bearer requests, and stops without waiting for it', async () => {
    const target = new URL(redisUrl());
    const proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
    proxy.blackHole();
    const dir = tempDir();
    const started = Date.now();
    const server = await startServer(env(dir, { REDIS_URL: `redis://127.0.0.1:${proxy.port}` }), () => undefined, { demoClient: false });
    const tookMs = Date.now() - started;
    try {
      // the revocation subscription and the main connection are waited for side by side, each 2 s at most
      expect(tookMs).toBeLessThan(3500);
      const c = await server.issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
      const res = await request(server.url).post('/oauth/token').auth(c.clientId, c.clientSecret).type('form').send({ grant_type: 'client_credentials' });
      expect(res.status).toBe(200);
      expect((await request(server.url).get('/api/whoami').set('Authorization', `Bearer ${res.body.access_token}`)).status).toBe(200);
    } finally {
      // a stop does not wait for a Redis that will not answer QUIT: a second at most
      const closing = Date.now();
      await server.close();
      expect(Date.now() - closing).toBeLessThan(2500);
      proxy.restore();
      await proxy.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 20_000);

  it('listens for revocations on that channel, so the CLI given the same variables rings it', async () => {
    const dir = tempDir();
    const channel = `ecc-test:${process.pid}:${Date.now()}`;
    const redis = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
    const server = await startServer(env(dir, { REDIS_URL: redisUrl(), REVOCATION_CHANNEL: channel }), () => undefined, { demoClient: false });
    try {
      const numsub = async (name: string): Promise<number> => Number(((await redis.call('PUBSUB', 'NUMSUB', name)) as [string, number])[1]);
      expect(await numsub(channel)).toBe(1);
      const c = await server.issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
      const token = (await request(server.url).post('/oauth/token').auth(c.clientId, c.clientSecret).type('form').send({ grant_type: 'client_credentials' })).body.access_token;
      const code = await main(['revoke-tokens', c.clientId], { stdout: () => undefined, stderr: () => undefined, env: { DATA_DIR: dir, REDIS_URL: redisUrl(), REVOCATION_CHANNEL: channel } });
      expect(code).toBe(0);
      // the ring, not the 2 s reload: refused within 500 ms
      const started = Date.now();
      let status = 200;
      while (status !== 401 && Date.now() - started < 3000) {
        status = (await request(server.url).get('/api/whoami').set('Authorization', `Bearer ${token}`)).status;
        if (status !== 401) await new Promise((r) => setTimeout(r, 10));
      }
      expect(status).toBe(401);
      expect(Date.now() - started).toBeLessThan(500);
    } finally {
      await server.close();
      await redis.quit();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('remembers DPoP proofs in Redis: a proof used at one instance is refused at another; REDIS_KEY_PREFIX names the keys', async () => {
    const dirs = [tempDir(), tempDir()];
    const prefix = `ecc-test:${process.pid}:${Date.now()}:`;
    const servers = await Promise.all(dirs.map((dir) => startServer(env(dir, { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: prefix }), () => undefined, { demoClient: false })));
    const redis = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
    await redis.connect();
    try {
      const clients = await Promise.all(servers.map((s) => s.issuer.clients.create({ name: 'dpop-svc', scopes: 'orders:read' })));
      const proof = newDpopKey().proof({ htm: 'POST', htu: 'http://localhost:3000/oauth/token' });
      const ask = (i: number) =>
        request(servers[i].url).post('/oauth/token').set('DPoP', proof).auth(clients[i].clientId, clients[i].clientSecret).type('form').send({ grant_type: 'client_credentials' });
      const first = await ask(0);
      expect({ status: first.status, type: first.body.token_type }).toEqual({ status: 200, type: 'DPoP' });
      const replayed = await ask(1);
      expect({ status: replayed.status, error: replayed.body.error }).toEqual({ status: 400, error: 'invalid_dpop_proof' });
      expect(replayed.body.error_description).toMatch(/already used/);
      // a failed authentication is counted under the prefix too
      await request(servers[0].url).post('/oauth/token').auth(clients[0].clientId, 'wrong').type('form').send({ grant_type: 'client_credentials' }).expect(401);
      const keys = await redis.keys(`${prefix}*`);
      expect(keys.filter((k) => k.startsWith(`${prefix}dpop:`))).toHaveLength(1);
      expect(keys.filter((k) => k.startsWith(`${prefix}authfail:`)).length).toBeGreaterThanOrEqual(2);
      if (keys.length > 0) await redis.del(...keys);
    } finally {
      await Promise.all(servers.map((s) => s.close()));
      await redis.quit();
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    }
  });
});
