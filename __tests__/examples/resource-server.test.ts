/**
 * examples/resource-server.ts, the API that only verifies: a DPoP caller
 * names this API's URL in its proofs (PUBLIC_URL), and its scoped route
 * (requireBearer at /api and again with a scope) takes one proof.
 */
import { createServer } from 'node:net';
import { rmSync } from 'node:fs';
import request from 'supertest';
import { startResourceServer, type RunningResourceServer } from '../../examples/resource-server';
import { startServer, type RunningServer } from '../../examples/server';
import { tempDir } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import Redis from 'ioredis';

const ISSUER = 'http://localhost:3000';

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** The orders API as the issuer, with a client of it and a DPoP-bound token of `key`'s. */
async function issuerWithDpopToken(dataDir: string, key: ReturnType<typeof newDpopKey>): Promise<{ issuer: RunningServer; token: string }> {
  const issuer = await startServer({ PORT: '0', HOST: '127.0.0.1', ISSUER, DATA_DIR: dataDir, LOG_LEVEL: 'silent' }, () => undefined, { demoClient: false });
  const client = await issuer.issuer.clients.create({ name: 'reports-caller', scopes: 'orders:read' });
  const res = await request(issuer.server)
    .post('/oauth/token')
    .set('DPoP', key.proof({ htm: 'POST', htu: `${ISSUER}/oauth/token` }))
    .type('form')
    .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
  expect(res.body.token_type).toBe('DPoP');
  return { issuer, token: res.body.access_token };
}

/** The resource server's environment against `issuer`'s JWKS, the revocation list off; `extra` added. */
const apiEnv = (issuer: RunningServer, extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({
  HOST: '127.0.0.1',
  ISSUER,
  JWKS_URI: `${issuer.url}/.well-known/jwks.json`,
  REVOCATION_LIST: 'off',
  LOG_LEVEL: 'silent',
  ...extra,
});

describe('examples/resource-server.ts with DPoP', () => {
  const dataDir = tempDir();
  let issuer: RunningServer;
  let api: RunningResourceServer;
  let port: number;
  const key = newDpopKey();
  let token: string;

  beforeAll(async () => {
    ({ issuer, token } = await issuerWithDpopToken(dataDir, key));
    port = await freePort();
    api = await startResourceServer(apiEnv(issuer, { PORT: String(port) }));
  });
  afterAll(async () => {
    await api?.close();
    await issuer?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const reports = (htu: string) =>
    request(api.server).get('/api/reports').set('Authorization', `DPoP ${token}`).set('DPoP', key.proof({ htm: 'GET', htu, accessToken: token }));

  it('accepts a proof naming its own URL (http://localhost:PORT by default) on a route checked twice', async () => {
    const res = await reports(`http://localhost:${port}/api/reports`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ reports: [], for: expect.any(String) });
  });

  it("refuses a proof made for the issuer's origin", async () => {
    const res = await reports(`${ISSUER}/api/reports`);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_dpop_proof');
  });
});

describeIfRedis('examples/resource-server.ts, two instances behind one PUBLIC_URL with REDIS_URL', () => {
  const dataDir = tempDir();
  const prefix = `ecc-test-rs-${process.pid}-${Date.now()}:`;
  let issuer: RunningServer;
  const apis: RunningResourceServer[] = [];
  const key = newDpopKey();
  let token: string;
  let publicUrl: string;

  beforeAll(async () => {
    ({ issuer, token } = await issuerWithDpopToken(dataDir, key));
    publicUrl = `http://api.test:${await freePort()}`;
    for (let i = 0; i < 2; i++) {
      apis.push(await startResourceServer(apiEnv(issuer, { PORT: String(await freePort()), PUBLIC_URL: publicUrl, REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: prefix })));
    }
  });
  afterAll(async () => {
    for (const api of apis) await api.close();
    await issuer?.close();
    rmSync(dataDir, { recursive: true, force: true });
    const redis = new Redis(redisUrl());
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it('a proof accepted by one instance is remembered in Redis under REDIS_KEY_PREFIX, and refused by the other (without REDIS_URL, instances in separate processes each accepted it once)', async () => {
    const proof = key.proof({ htm: 'GET', htu: `${publicUrl}/api/whoami`, accessToken: token });
    const first = await request(apis[0].server).get('/api/whoami').set('Authorization', `DPoP ${token}`).set('DPoP', proof);
    expect(first.status).toBe(200);
    const replay = await request(apis[1].server).get('/api/whoami').set('Authorization', `DPoP ${token}`).set('DPoP', proof);
    expect(replay.status).toBe(401);
    expect(replay.body.error).toBe('invalid_dpop_proof');
    // the proof is remembered in Redis, under the prefix
    const redis = new Redis(redisUrl());
    try {
      expect((await redis.keys(`${prefix}dpop:*`)).length).toBeGreaterThan(0);
    } finally {
      await redis.quit();
    }
    // a fresh proof still works on the second
    const fresh = key.proof({ htm: 'GET', htu: `${publicUrl}/api/whoami`, accessToken: token });
    expect((await request(apis[1].server).get('/api/whoami').set('Authorization', `DPoP ${token}`).set('DPoP', fresh)).status).toBe(200);
  });
});

describe('examples/resource-server.ts readiness', () => {
  it('GET /health/ready: 200 with the keys and the revocation list fetched, 503 {ok:false, jwks:"down"} while the JWKS cannot be fetched; /health stays 200', async () => {
    const dataDir = tempDir();
    const issuer = await startServer({ PORT: '0', HOST: '127.0.0.1', ISSUER, DATA_DIR: dataDir, LOG_LEVEL: 'silent' }, () => undefined, { demoClient: false });
    const closed = await freePort();
    const up = await startResourceServer({
      PORT: '0',
      HOST: '127.0.0.1',
      ISSUER,
      JWKS_URI: `${issuer.url}/.well-known/jwks.json`,
      REVOCATION_LIST: `${issuer.url}/oauth/revocation-list`,
      LOG_LEVEL: 'silent',
    });
    const down = await startResourceServer({ PORT: '0', HOST: '127.0.0.1', ISSUER, JWKS_URI: `http://127.0.0.1:${closed}/jwks.json`, REVOCATION_LIST: 'off', LOG_LEVEL: 'silent' });
    try {
      const ready = await request(up.server).get('/health/ready');
      expect(ready.status).toBe(200);
      expect(ready.headers['cache-control']).toBe('no-store');
      expect(ready.body).toEqual({ ok: true, jwks: 'up', revocationList: 'fresh' });
      const notReady = await request(down.server).get('/health/ready');
      expect(notReady.status).toBe(503);
      expect(notReady.body).toEqual({ ok: false, jwks: 'down' });
      expect((await request(down.server).get('/health')).status).toBe(200);
    } finally {
      await up.close();
      await down.close();
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
