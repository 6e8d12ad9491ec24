/**
 * The shared Redis gate (core/service-gate.ts) against the ways a Redis and
 * an ioredis client really behave, cut or slowed through a proxy each test
 * owns: answers that come just past the deadline, the client's own
 * commandTimeout, commands dropped at reconnect, a refused connection with
 * the offline queue on. What is asserted is what users see: statuses and
 * Retry-After, the outage lines once per outage, readiness, how long a
 * request waits (bounds with room for a loaded 2-core machine: a deadline is
 * 1000 ms, "at once" under 400 ms) and how many commands the client holds.
 */
import Redis, { type RedisOptions } from 'ioredis';
import request from 'supertest';
import { ISSUER } from '../helpers/app';
import { describeIfRedis } from '../helpers/redis';
import { redisRig, type RedisRig } from '../helpers/redis-rig';

const AT_ONCE_MS = 400;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Rig extends RedisRig {
  api(): Promise<{ status: number; retryAfter: string | undefined; ms: number }>;
  /** The DPoP replay store's outage lines, in order. */
  outageLines(): string[];
}

/** An issuer whose DPoP replay store and brute-force counters are on one ioredis client (with `options`), through a proxy. */
async function rig(options: RedisOptions = {}): Promise<Rig> {
  const r = await redisRig('gate', options);
  return {
    ...r,
    async api() {
      const started = Date.now();
      const res = await request(r.t.app)
        .get('/api/orders')
        .set('Authorization', `DPoP ${r.at}`)
        .set('DPoP', r.key.proof({ htm: 'GET', htu: `${ISSUER}/api/orders`, accessToken: r.at }));
      return { status: res.status, retryAfter: res.headers['retry-after'] as string | undefined, ms: Date.now() - started };
    },
    outageLines: () => r.lines.filter((l) => String(l.event).startsWith('dpop_replay_store.')).map((l) => `${l.level} ${l.event}`),
  };
}

/** The commands an ioredis client holds: sent and not answered, and not sent yet. */
const held = (redis: Redis): number => {
  const internal = redis as unknown as { commandQueue: { length: number }; offlineQueue: { length: number } };
  return internal.commandQueue.length + internal.offlineQueue.length;
};

/** Protected-route requests every 250 ms until one is served (or `withinMs` passed): how long that took. */
async function servedAgainAfter(r: Rig, withinMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < withinMs) {
    if ((await r.api()).status === 200) return Date.now() - started;
    await sleep(250);
  }
  return Number.POSITIVE_INFINITY;
}

describeIfRedis('the shared Redis gate, against Redis and ioredis as they behave', () => {
  it('a Redis answering just past the deadline (1.1 s) is one outage, not one per answer: one line, readiness down throughout, then recovered once', async () => {
    const r = await rig();
    try {
      r.proxy.slow(1100);
      // three callers, each a protected route with a DPoP proof every 100 ms, for 7 s; readiness read every 500 ms
      const until = Date.now() + 7000;
      const statuses = new Map<string, number>();
      const readiness: string[] = [];
      await Promise.all([
        ...[0, 1, 2].map(async () => {
          while (Date.now() < until) {
            const res = await r.api();
            const seen = `${res.status} ${res.retryAfter}`;
            statuses.set(seen, (statuses.get(seen) ?? 0) + 1);
            await sleep(100);
          }
        }),
        (async () => {
          await sleep(1500); // the first deadline has passed
          while (Date.now() < until) {
            readiness.push((await r.t.issuer.health()).dpopReplayStore!);
            await sleep(500);
          }
        })(),
      ]);
      // every answer past its deadline: each request 503 with Retry-After, the store down all along
      expect([...statuses.keys()]).toEqual(['503 5']);
      expect(new Set(readiness)).toEqual(new Set(['down']));
      expect(r.outageLines()).toEqual(['error dpop_replay_store.unavailable']);

      // answers in time again: the outage ends, once
      r.proxy.slow(0);
      let status = 0;
      for (let i = 0; i < 40 && status !== 200; i++) {
        await sleep(250);
        status = (await r.api()).status;
      }
      expect(status).toBe(200);
      expect(r.outageLines()).toEqual(['error dpop_replay_store.unavailable', 'info dpop_replay_store.recovered']);
      expect((await r.t.issuer.health()).dpopReplayStore).toBe('up');
    } finally {
      await r.close();
    }
  }, 30_000);

  it('with autoResendUnfulfilledCommands: false (held commands dropped at reconnect), DPoP is served again as soon as Redis is, outage after outage', async () => {
    const r = await rig({ autoResendUnfulfilledCommands: false });
    try {
      // a stall: the command it holds is dropped, never answered nor rejected, when the connection is made again
      r.proxy.blackHole();
      const first = await r.api();
      expect([first.status, first.retryAfter]).toEqual([503, '5']);
      r.proxy.restore();
      expect(await servedAgainAfter(r, 12_000)).toBeLessThan(5000);

      // a second outage: Redis stops (connection refused), then comes back
      r.proxy.cut();
      const second = await r.api();
      expect([second.status, second.retryAfter]).toEqual([503, '5']);
      await sleep(300);
      r.proxy.restore();
      expect(await servedAgainAfter(r, 12_000)).toBeLessThan(5000);
      expect(r.outageLines()).toEqual([
        'error dpop_replay_store.unavailable',
        'info dpop_replay_store.recovered',
        'error dpop_replay_store.unavailable',
        'info dpop_replay_store.recovered',
      ]);
    } finally {
      await r.close();
    }
  }, 40_000);

  it('with commandTimeout (300 ms), a stall costs the first request its timeout, then every request is answered at once and no command piles up per request', async () => {
    const r = await rig({ commandTimeout: 300 });
    try {
      r.proxy.blackHole();
      const first = await r.api();
      expect([first.status, first.retryAfter]).toEqual([503, '5']);
      const caught = held(r.redis);
      // 40 requests one after another: ioredis rejects a command after 300 ms but keeps it until Redis answers
      const waits: number[] = [];
      for (let i = 0; i < 40; i++) {
        const res = await r.api();
        expect([res.status, res.retryAfter]).toEqual([503, '5']);
        waits.push(res.ms);
      }
      const total = waits.reduce((a, b) => a + b, 0);
      // one call let through every 5 s at most (a request or the probe), each waiting 300 ms
      expect(total).toBeLessThan(3000);
      expect(held(r.redis) - caught).toBeLessThanOrEqual(3);
      expect(r.outageLines()).toEqual(['error dpop_replay_store.unavailable']);

      r.proxy.restore();
      expect(await servedAgainAfter(r, 12_000)).toBeLessThan(6000);
      expect(held(r.redis)).toBe(0);
      expect(r.outageLines()).toEqual(['error dpop_replay_store.unavailable', 'info dpop_replay_store.recovered']);
    } finally {
      await r.close();
    }
  }, 40_000);

  it('Redis refusing connections, the offline queue on: only the request that met it first waits; the others are answered at once until it is back', async () => {
    // maxRetriesPerRequest 2: ioredis clears its offline queue after every 3 reconnection attempts (~0.3 s, then
    // longer), as it does after 20 (~10 s) by default: each time, the gate used to send the next request into it
    const r = await rig({ maxRetriesPerRequest: 2 });
    try {
      r.proxy.cut();
      const waits: number[] = [];
      const until = Date.now() + 5000;
      while (Date.now() < until) {
        const res = await r.api();
        expect([res.status, res.retryAfter]).toEqual([503, '5']);
        waits.push(res.ms);
        await sleep(100);
      }
      expect(waits.length).toBeGreaterThanOrEqual(10);
      expect(waits.slice(1).filter((ms) => ms >= AT_ONCE_MS)).toEqual([]);
      expect(held(r.redis)).toBeLessThanOrEqual(1);
      r.proxy.restore();
      expect(await servedAgainAfter(r, 12_000)).toBeLessThan(5000);
      expect(r.outageLines()).toEqual(['error dpop_replay_store.unavailable', 'info dpop_replay_store.recovered']);
    } finally {
      await r.close();
    }
  }, 40_000);
});
