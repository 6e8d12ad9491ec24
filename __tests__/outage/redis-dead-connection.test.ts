/**
 * A Redis connection that a network dropped without closing it: Redis is
 * fine and new connections to it work, but the one the client holds stays
 * open and answers nothing, as it would until TCP gave up on it (about 15
 * minutes on Linux). Cut through a proxy this test owns (heal(): new
 * connections go through, the old one stays open and silent), with an
 * ioredis client as users make one. The gate has the client connect again
 * once its calls go unanswered for 10 s, and DPoP requests are served again.
 */
import Redis from 'ioredis';
import request from 'supertest';
import { ISSUER, setup, type TestSetup } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy';
import { describeIfRedis, redisUrl } from '../helpers/redis';

type Logged = Record<string, unknown>;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const TOKEN_URL = `${ISSUER}/oauth/token`;

describeIfRedis('a Redis connection dropped by the network without closing', () => {
  let proxy: FaultProxy;
  let redis: Redis;
  let t: TestSetup;
  const lines: Logged[] = [];
  const log = (level: string) => (o: Logged) => void lines.push({ level, ...o });

  beforeAll(async () => {
    const target = new URL(redisUrl());
    proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
    redis = new Redis({ host: '127.0.0.1', port: proxy.port });
    const prefix = `ecc:test:dead-connection:${process.pid}:${Date.now()}`;
    t = await setup(
      { dpop: { redis, keyPrefix: `${prefix}:` }, bruteForce: false, logger: { info: log('info'), warn: log('warn'), error: log('error') } },
      (app, issuer) => void app.use(issuer.router()),
    );
    await redis.ping();
  });
  afterAll(async () => {
    await t.close();
    proxy.restore();
    redis.disconnect();
    await proxy.close();
  });

  it('DPoP requests get 503 while it answers nothing, and are served again within 10 s and a probe of the gate, on a new connection', async () => {
    const key = newDpopKey();
    const client = await t.issuer.clients.create({ name: 'dpop' });
    const token = () =>
      request(t.app).post('/oauth/token').set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL })).type('form')
        .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
    expect((await token()).status).toBe(200);

    proxy.blackHole();
    const refused = await token();
    expect(refused.status).toBe(503);
    expect(refused.body.error).toBe('temporarily_unavailable');
    proxy.heal(); // Redis is reachable again on a new connection; the client's own stays open and silent
    const healedAt = Date.now();
    let status = 503;
    while (status !== 200 && Date.now() - healedAt < 20_000) {
      await sleep(250);
      status = (await token()).status;
    }
    const tookMs = Date.now() - healedAt;
    expect(status).toBe(200);
    // reconnectAfterMs (10 s) from the last progress, and the next call or probe (every 5 s while down) after it
    expect(tookMs).toBeLessThan(16_000);
    expect(lines.filter((l) => l.event === 'dpop_replay_store.unavailable')).toHaveLength(1);
    expect(lines.filter((l) => l.event === 'dpop_replay_store.recovered')).toHaveLength(1);
  }, 30_000);
});
