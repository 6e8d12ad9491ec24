/**
 * The Redis that holds DPoP proof jtis (dpop.redis) stalls, through a proxy
 * this test owns (the machine's Redis is never touched): DPoP requests get
 * 503 with Retry-After at the token endpoint and at protected routes, the
 * outage is logged once under its own event (and its end), counted apart
 * from a store outage, and shown in readiness and in the up-gauge, which
 * comes back without traffic once Redis answers.
 */
import Redis from 'ioredis';
import { Registry } from 'prom-client';
import request from 'supertest';
import { ISSUER, setup, type TestSetup } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy';
import { describeIfRedis, redisUrl } from '../helpers/redis';

type Logged = Record<string, unknown>;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const TOKEN_URL = `${ISSUER}/oauth/token`;

describeIfRedis('the DPoP replay store (Redis) stalls', () => {
  let proxy: FaultProxy;
  let redis: Redis;
  let t: TestSetup;
  const registry = new Registry();
  const lines: Logged[] = [];
  const log = (level: string) => (o: Logged) => void lines.push({ level, ...o });

  beforeAll(async () => {
    const target = new URL(redisUrl());
    proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
    redis = new Redis({ host: '127.0.0.1', port: proxy.port });
    const prefix = `ecc:test:dpop-outage:${process.pid}:${Date.now()}`;
    t = await setup(
      {
        dpop: { redis, keyPrefix: `${prefix}:` },
        bruteForce: false,
        metrics: { registry },
        logger: { info: log('info'), warn: log('warn'), error: log('error') },
      },
      (app, issuer) => {
        app.use(issuer.router());
        app.get('/api/orders', issuer.requireBearer(), (req, res) => res.json({ client_id: req.auth!.clientId }));
      },
    );
    await redis.ping();
  });
  afterAll(async () => {
    await t.close();
    proxy.restore();
    redis.disconnect();
    await proxy.close();
  });

  const metric = async (series: string) => {
    const text = await registry.metrics();
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };

  it('503 + Retry-After (and the challenges at the API), one dpop_replay_store.unavailable, its own metrics and readiness field, then recovered', async () => {
    const key = newDpopKey();
    const client = await t.issuer.clients.create({ name: 'dpop', scopes: 'orders:read' });
    const token = (proof: string) =>
      request(t.app).post('/oauth/token').set('DPoP', proof).type('form').send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
    const first = await token(key.proof({ htm: 'POST', htu: TOKEN_URL }));
    expect(first.status).toBe(200);
    const at = first.body.access_token as string;
    expect(await metric('ecc_dpop_replay_store_up')).toBe(1);
    expect((await t.issuer.health()).dpopReplayStore).toBe('up');

    proxy.blackHole();
    for (let i = 0; i < 3; i++) {
      const res = await token(key.proof({ htm: 'POST', htu: TOKEN_URL }));
      expect(res.status).toBe(503);
      expect(res.headers['retry-after']).toBe('5');
      expect(res.body.error).toBe('temporarily_unavailable');
    }
    const api = await request(t.app).get('/api/orders').set('Authorization', `DPoP ${at}`).set('DPoP', key.proof({ htm: 'GET', htu: `${ISSUER}/api/orders`, accessToken: at }));
    expect(api.status).toBe(503);
    expect(api.headers['retry-after']).toBe('5');
    expect(api.headers['www-authenticate']).toMatch(/DPoP algs="[^"]+", error="temporarily_unavailable"/);
    // requests without DPoP are served
    expect((await request(t.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret })).status).toBe(200);

    expect(lines.filter((l) => String(l.event).startsWith('dpop_replay_store.'))).toEqual([
      { level: 'error', event: 'dpop_replay_store.unavailable', store: 'redis', reason: expect.stringMatching(/Redis did not answer within 1000 ms/) },
    ]);
    expect(lines.find((l) => l.event === 'bearer.unavailable')).toMatchObject({ dependency: 'dpop_replay_store' });
    expect(lines.filter((l) => l.event === 'store.unavailable')).toEqual([]);
    expect(await metric('ecc_dpop_replay_store_up')).toBe(0);
    expect(await metric('ecc_dpop_replay_store_errors_total')).toBe(4);
    expect(await metric('ecc_bearer_checks_total{outcome="unavailable",reason="dpop_replay_store"}')).toBe(1);
    // the token endpoint's 503s say what was down: the replay store, not the issuer's store
    expect(await metric('ecc_token_requests_total{outcome="unavailable",reason="dpop_replay_store"}')).toBe(3);
    expect(await metric('ecc_token_requests_total{outcome="unavailable",reason="store"}')).toBe(0);
    expect(await metric('ecc_store_up')).toBe(1);
    await sleep(1_100); // past health()'s one-second cache
    // shown, without taking the instance out: requests without DPoP are served, and every instance shares that Redis
    expect(await t.issuer.health()).toEqual({ ok: true, store: 'up', signingKid: expect.any(String), dpopReplayStore: 'down' });

    proxy.restore();
    // no traffic: the replay store is asked again every 5 s while down
    const until = Date.now() + 12_000;
    while (!lines.some((l) => l.event === 'dpop_replay_store.recovered') && Date.now() < until) await sleep(100);
    expect(lines.filter((l) => String(l.event).startsWith('dpop_replay_store.')).map((l) => l.event)).toEqual(['dpop_replay_store.unavailable', 'dpop_replay_store.recovered']);
    expect(await metric('ecc_dpop_replay_store_up')).toBe(1);
    expect((await token(key.proof({ htm: 'POST', htu: TOKEN_URL }))).status).toBe(200);
  }, 30_000);

  it('readiness asks Redis itself: an outage without any DPoP request shows in health() and the gauge, and so does its end', async () => {
    await sleep(1_100); // past health()'s one-second cache
    expect((await t.issuer.health()).dpopReplayStore).toBe('up');
    lines.length = 0;
    proxy.blackHole();
    await sleep(1_100);
    expect(await t.issuer.health()).toEqual({ ok: true, store: 'up', signingKid: expect.any(String), dpopReplayStore: 'down' });
    expect(await metric('ecc_dpop_replay_store_up')).toBe(0);
    expect(lines.filter((l) => String(l.event).startsWith('dpop_replay_store.')).map((l) => l.event)).toEqual(['dpop_replay_store.unavailable']);
    proxy.restore();
    await sleep(1_100);
    expect((await t.issuer.health()).dpopReplayStore).toBe('up');
    expect(await metric('ecc_dpop_replay_store_up')).toBe(1);
  }, 30_000);
});
