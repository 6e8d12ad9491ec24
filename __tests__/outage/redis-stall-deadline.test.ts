/**
 * A Redis that stalls (connected, not answering) under every part of an
 * issuer on one ioredis client with default options, as users make one (the
 * brute-force counters, the DPoP replay store, the revocation push), cut
 * through a proxy each test owns: a request waits one deadline (1 s) in all
 * however many of those parts it meets, the requests after it are answered
 * at once (Redis is not asked again for each), the client does not queue a
 * command per request while Redis is known not to answer, and its return is
 * seen. Timing bounds leave room for a loaded 2-core machine: a deadline is
 * 1000 ms, "at once" is under 400 ms.
 */
import Redis from 'ioredis';
import request from 'supertest';
import { requireBearer } from '../../lib';
import { AUDIENCE, ISSUER } from '../helpers/app';
import { describeIfRedis } from '../helpers/redis';
import { redisRig, TOKEN_URL, type RedisRig } from '../helpers/redis-rig';

const ONE_DEADLINE_MS = 1800;
const AT_ONCE_MS = 400;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const timed = async <T>(run: () => Promise<T>): Promise<{ value: T; ms: number }> => {
  const started = Date.now();
  const value = await run();
  return { value, ms: Date.now() - started };
};

/** The commands an ioredis client holds: sent and not answered, and not sent yet. */
const held = (redis: Redis): number => {
  const internal = redis as unknown as { commandQueue: { length: number }; offlineQueue: { length: number } };
  return internal.commandQueue.length + internal.offlineQueue.length;
};

type Rig = RedisRig;

/** Every part on the one client, the revocation push included, unless `parts` turns one off. */
const rig = (parts: { bruteForce?: boolean; revocationPush?: boolean } = {}): Promise<Rig> => redisRig('stall-deadline', {}, { revocationPush: true, ...parts });

const tokenRequest = (r: Rig, options: { dpop?: boolean; secret?: string } = {}) => {
  let req = request(r.t.app).post('/oauth/token').type('form');
  if (options.dpop) req = req.set('DPoP', r.key.proof({ htm: 'POST', htu: TOKEN_URL }));
  return req.send({ grant_type: 'client_credentials', client_id: r.client.clientId, client_secret: options.secret ?? r.client.clientSecret });
};
const apiRequest = (r: Rig, app = r.t.app, path = '/api/orders') =>
  request(app).get(path).set('Authorization', `DPoP ${r.at}`).set('DPoP', r.key.proof({ htm: 'GET', htu: `${ISSUER}${path}`, accessToken: r.at }));

const expect503 = (res: request.Response) => {
  expect({ status: res.status, error: res.body.error, retryAfter: res.headers['retry-after'] }).toEqual({ status: 503, error: 'temporarily_unavailable', retryAfter: '5' });
};

describeIfRedis('a stalled Redis under every Redis part of an issuer (one client)', () => {
  it('a token request with a DPoP proof waits one deadline in all, not one per part; then every request is answered at once; its return is seen', async () => {
    const r = await rig();
    try {
      r.proxy.blackHole();
      // the brute-force check and the DPoP proof's jti both ask Redis: one deadline for both
      const first = await timed(() => tokenRequest(r, { dpop: true }));
      expect503(first.value);
      expect(first.ms).toBeLessThan(ONE_DEADLINE_MS);

      // Redis is known not to answer: nobody waits for it again
      for (let i = 0; i < 5; i++) {
        const next = await timed(() => tokenRequest(r, { dpop: true }));
        expect503(next.value);
        expect(next.ms).toBeLessThan(AT_ONCE_MS);
      }
      const bearer = await timed(() => tokenRequest(r));
      expect([bearer.value.status, bearer.ms < AT_ONCE_MS]).toEqual([200, true]);
      const wrong = await timed(() => tokenRequest(r, { secret: 'wrong' }));
      expect([wrong.value.status, wrong.ms < AT_ONCE_MS]).toEqual([401, true]);
      const api = await timed(() => apiRequest(r));
      expect503(api.value);
      expect(api.value.headers['www-authenticate']).toMatch(/DPoP algs="[^"]+", error="temporarily_unavailable"/);
      expect(api.ms).toBeLessThan(AT_ONCE_MS);
      // the revocation is stored and in force; the ring is not tried while Redis is down
      const revoke = await timed(() => request(r.t.app).post('/oauth/revoke').type('form').auth(r.client.clientId, r.client.clientSecret).send({ token: bearer.value.body.access_token }));
      expect([revoke.value.status, revoke.ms < AT_ONCE_MS]).toEqual([200, true]);
      expect(r.lines.filter((l) => l.event === 'revocation_push.unavailable')).toHaveLength(1);

      // one line each for the outage, whichever part met it
      expect(r.lines.filter((l) => l.event === 'dpop_replay_store.unavailable')).toEqual([
        { level: 'error', event: 'dpop_replay_store.unavailable', store: 'redis', reason: 'Redis did not answer within 1000 ms' },
      ]);
      expect(r.lines.filter((l) => l.event === 'brute_force.redis_unavailable')).toHaveLength(1);

      // back: the next requests find it (the probe, or the first request once what Redis held is answered)
      r.proxy.restore();
      let status = 0;
      for (let i = 0; i < 40 && status !== 200; i++) {
        await sleep(250);
        status = (await tokenRequest(r, { dpop: true })).status;
      }
      expect(status).toBe(200);
      expect(r.lines.filter((l) => String(l.event).startsWith('dpop_replay_store.')).map((l) => l.event)).toEqual([
        'dpop_replay_store.unavailable',
        'dpop_replay_store.recovered',
      ]);
      expect((await apiRequest(r)).status).toBe(200);
    } finally {
      await r.close();
    }
  }, 30_000);

  it('a protected route that meets the stall first: 503 after one deadline, then at once, at a standalone requireBearer() on that client too', async () => {
    const r = await rig({ bruteForce: false, revocationPush: false });
    try {
      const standalone = requireBearer({
        issuer: ISSUER,
        audience: AUDIENCE,
        keys: await r.t.issuer.keys.jwks(),
        publicUrl: ISSUER,
        dpopProofs: { redis: r.redis, keyPrefix: `ecc:test:stall-deadline:${process.pid}:rs:` },
        logger: false,
      });
      r.t.app.get('/rs/orders', standalone, (_req, res) => void res.json({ ok: true }));
      expect((await apiRequest(r, r.t.app, '/rs/orders')).status).toBe(200);

      r.proxy.blackHole();
      const first = await timed(() => apiRequest(r));
      expect503(first.value);
      expect(first.ms).toBeLessThan(ONE_DEADLINE_MS);
      for (let i = 0; i < 5; i++) {
        const next = await timed(() => apiRequest(r));
        expect503(next.value);
        expect(next.ms).toBeLessThan(AT_ONCE_MS);
      }
      // the standalone requireBearer() on the same client knows it already
      for (let i = 0; i < 3; i++) {
        const next = await timed(() => apiRequest(r, r.t.app, '/rs/orders'));
        expect503(next.value);
        expect(next.ms).toBeLessThan(AT_ONCE_MS);
      }
    } finally {
      await r.close();
    }
  }, 30_000);

  it('while Redis is known not to answer, requests queue no command in the client: what the first deadline caught, whatever the load', async () => {
    const r = await rig({ revocationPush: false });
    try {
      r.proxy.blackHole();
      // 50 at a time meet the stall together: each is let go by the first deadline
      const started = Date.now();
      const onset = await Promise.all(Array.from({ length: 50 }, () => apiRequest(r)));
      const onsetMs = Date.now() - started;
      onset.forEach(expect503);
      expect(onsetMs).toBeLessThan(ONE_DEADLINE_MS + 500);
      const caught = held(r.redis);
      expect(caught).toBeGreaterThan(0);
      expect(caught).toBeLessThanOrEqual(51);

      // then a bounded load (at most 6 s of it): DPoP token requests and protected routes, 20 at a time
      const until = Date.now() + 6000;
      let sent = 0;
      const statuses = new Map<number, number>();
      await Promise.all(
        Array.from({ length: 20 }, async (_, worker) => {
          for (let i = 0; i < 15 && Date.now() < until; i++) {
            const res = worker % 2 ? await apiRequest(r) : await tokenRequest(r, { dpop: true });
            sent++;
            statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          }
        }),
      );
      expect(Object.fromEntries(statuses)).toEqual({ 503: sent });
      expect(sent).toBeGreaterThanOrEqual(100);
      // nothing more is held than before the load (a probe at most)
      expect(held(r.redis) - caught).toBeLessThanOrEqual(1);

      // back: what it held is answered or dropped, and the next requests are served
      r.proxy.restore();
      let status = 0;
      for (let i = 0; i < 40 && status !== 200; i++) {
        await sleep(250);
        status = (await apiRequest(r)).status;
      }
      expect(status).toBe(200);
      expect(held(r.redis)).toBe(0);
    } finally {
      await r.close();
    }
  }, 30_000);
});
