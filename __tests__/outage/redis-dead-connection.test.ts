/**
 * A Redis connection that a network dropped without closing it: Redis is
 * fine and new connections to it work, but the one the client holds stays
 * open and answers nothing, as it would until TCP gave up on it (about 15
 * minutes on Linux). Cut through the rig's proxy (heal(): new connections go
 * through, the old one stays open and silent), with an ioredis client as
 * users make one. The gate has the client connect again once its calls go
 * unanswered for 10 s, and DPoP requests are served again.
 */
import request from 'supertest';
import { redisRig, TOKEN_URL, type RedisRig } from '../helpers/redis-rig';
import { describeIfRedis } from '../helpers/redis';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeIfRedis('a Redis connection dropped by the network without closing', () => {
  let rig: RedisRig;
  beforeAll(async () => {
    rig = await redisRig('dead-connection', {}, { bruteForce: false });
  });
  afterAll(() => rig.close());

  it('DPoP requests get 503 while it answers nothing, and are served again within 10 s and a probe of the gate, on a new connection', async () => {
    const { proxy, t, client, key, lines } = rig;
    const token = () =>
      request(t.app).post('/oauth/token').set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL })).type('form')
        .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });

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
