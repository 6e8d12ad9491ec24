import Redis from 'ioredis';
import { FailedAuthLimiter, type BruteForceSettings } from '../../lib/core/brute-force';
import { ServiceGate } from '../../lib/core/service-gate';
import { redisFailureCounters } from '../../lib/stores/redis-rate-limiter';
import { describeIfRedis, redisUrl } from '../helpers/redis';

const settings = (over: Partial<BruteForceSettings> = {}): BruteForceSettings => ({
  maxFailuresPerAddress: 100,
  maxFailuresPerClientAddress: 10,
  alertFailuresPerClient: 20,
  window: 60,
  keyPrefix: 'test',
  ...over,
});

describe('FailedAuthLimiter with Redis unreachable', () => {
  // nothing listens on port 1: every command fails at once, as during an outage
  const redis = new Redis('redis://127.0.0.1:1', { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
  afterAll(() => redis.disconnect());

  it('counts in memory instead: the pair and address limits still hold, the alert still fires', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 3, alertFailuresPerClient: 2 }), redisFailureCounters(redis, new ServiceGate({ name: 'Redis', deadlineMs: 1000 })));
    await l.failed('c', '192.0.2.1', true);
    // the limit's own failure is not beyond it; the next one is
    expect(await l.failed('c', '192.0.2.1', true)).toEqual({ clientFailures: 2, alert: true, retryAfterMs: 0, pairFailures: 2, addressFailures: 2 });
    expect((await l.check('c', '192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
    expect((await l.failed('c', '192.0.2.1', true)).retryAfterMs).toBeGreaterThan(0);
    expect((await l.check('c', '192.0.2.2')).retryAfterMs).toBe(0);
    await l.failed('d', '192.0.2.1', false);
    expect((await l.check('e', '192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
    await l.succeeded('c', '192.0.2.1');
    expect((await l.check('c', '192.0.2.1')).pairFailures).toBe(0);
  });
});

/** node-redis 5+'s error replies (packages/client/lib/errors.ts): classes whose `name` stays 'Error'. */
class ErrorReply extends Error {}
class SimpleError extends ErrorReply {}

/**
 * A client with node-redis 5's shape for what rate-limiter-flexible calls with useRedisPackage (its
 * lib/RateLimiterRedis.js): `eval(script, { keys, arguments })`, `multi().get().pTTL().exec(true)`,
 * `del()`, and `isOpen` / `isReady`, no `defineCommand`; its class made as node-redis makes its own
 * (`Class = class extends BaseClass {}` in commander.ts, so not 'Commander' as in v4). Each command
 * is run on a real Redis through ioredis; an error reply comes back as node-redis's SimpleError.
 * node-redis itself is not a dependency of this package.
 */
function nodeRedis5Like(redis: Redis, options: { refuseEval?: string } = {}) {
  const asNodeRedis = (err: unknown) => (err instanceof Error && err.name === 'ReplyError' ? new SimpleError(err.message) : err);
  const Class = class {
    readonly isOpen = true;
    readonly isReady = true;
    async eval(script: string, { keys, arguments: args }: { keys: string[]; arguments: string[] }) {
      if (options.refuseEval) throw new SimpleError(options.refuseEval);
      return redis.eval(script, keys.length, ...keys, ...args).catch((err) => Promise.reject(asNodeRedis(err)));
    }
    multi() {
      const queued: Array<[string, string]> = [];
      const chain = {
        get: (key: string) => (queued.push(['get', key]), chain),
        pTTL: (key: string) => (queued.push(['pttl', key]), chain),
        exec: async () => {
          const multi = redis.multi();
          for (const [command, key] of queued) (command === 'get' ? multi.get(key) : multi.pttl(key));
          const results = (await multi.exec())!;
          return results.map(([err, value]) => {
            if (err) throw asNodeRedis(err);
            return value;
          });
        },
      };
      return chain;
    }
    del(key: string) {
      return redis.del(key);
    }
  };
  return new Class();
}

describeIfRedis('FailedAuthLimiter with a node-redis 5+ client', () => {
  const redis = new Redis(redisUrl(), { lazyConnect: true });
  const prefix = `ecc:test:rlf-node-redis:${process.pid}:${Date.now()}`;
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  it('counts in Redis (not in memory), and Redis stays up for the other parts on the client', async () => {
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000 });
    const fallbacks: string[] = [];
    const l = new FailedAuthLimiter(settings({ keyPrefix: `${prefix}:a` }), redisFailureCounters(nodeRedis5Like(redis), gate, (reason) => fallbacks.push(reason)));
    await l.failed('c', '192.0.2.1', true);
    await l.failed('c', '192.0.2.1', true);
    expect(fallbacks).toEqual([]);
    expect(gate.up).toBe(true);
    expect((await l.check('c', '192.0.2.1')).pairFailures).toBe(2);
    // in Redis: another limiter on the same keys (another instance) reads the count
    const other = new FailedAuthLimiter(settings({ keyPrefix: `${prefix}:a` }), redisFailureCounters(nodeRedis5Like(redis), gate));
    expect((await other.check('c', '192.0.2.1')).pairFailures).toBe(2);
    expect((await redis.keys(`${prefix}:a*`)).length).toBeGreaterThan(0);
  });

  it('an error reply of Redis (SimpleError, name "Error") sends that count to memory and is no outage', async () => {
    const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000 });
    const fallbacks: string[] = [];
    const l = new FailedAuthLimiter(
      settings({ keyPrefix: `${prefix}:b` }),
      redisFailureCounters(nodeRedis5Like(redis, { refuseEval: "NOPERM User ecc has no permissions to run the 'eval' command" }), gate, (reason) => fallbacks.push(reason)),
    );
    expect((await l.failed('c', '192.0.2.1', true)).pairFailures).toBe(1);
    expect(fallbacks[0]).toMatch(/^NOPERM/);
    expect(gate.up).toBe(true);
  });
});
