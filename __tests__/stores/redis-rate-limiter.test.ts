import Redis from 'ioredis';
import { FailedAuthLimiter, type BruteForceSettings } from '../../lib/core/brute-force';
import { ServiceGate } from '../../lib/core/service-gate';
import { redisFailureCounters } from '../../lib/stores/redis-rate-limiter';

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
