/**
 * Failed-authentication counters in Redis (rate-limiter-flexible), so that
 * every instance on it counts together: the FailureCounterFactory that
 * create-issuer gives the brute-force limits when `bruteForce.redis` is set.
 */
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterRes } from 'rate-limiter-flexible';
import { withDeadline } from '../shared/deadline';
import { REDIS_DEADLINE_MS } from './redis-deadline';
import type { FailureCounter, FailureCounterFactory } from './types';

/** How long counting skips a Redis that let a call time out, before it asks it again. */
const REDIS_PAUSE_MS = 5000;

/**
 * Redis counters that never hold a request up: a call that fails (Redis
 * down) or takes longer than REDIS_DEADLINE_MS (Redis stalled: connected,
 * not answering) counts in this instance's memory instead, and after a
 * timeout the next REDIS_PAUSE_MS count there at once.
 */
class RedisOrMemory implements FailureCounter {
  private pausedUntil = 0;

  constructor(
    private readonly redis: RateLimiterRedis,
    private readonly memory: RateLimiterMemory,
    private readonly onFallback: (reason: string) => void,
  ) {}

  get(key: string): Promise<RateLimiterRes | null> {
    return this.run((l) => l.get(key));
  }

  consume(key: string): Promise<RateLimiterRes> {
    return this.run((l) => l.consume(key));
  }

  delete(key: string): Promise<boolean> {
    return this.run((l) => l.delete(key));
  }

  private run<T>(call: (limiter: RateLimiterRedis | RateLimiterMemory) => Promise<T>): Promise<T> {
    if (Date.now() < this.pausedUntil) return call(this.memory);
    return withDeadline(call(this.redis), REDIS_DEADLINE_MS, () => new RedisDeadlineError()).catch((err: unknown) => {
      // over the limit is an answer (a RateLimiterRes), not a failure
      if (!(err instanceof RedisDeadlineError)) throw err;
      this.pausedUntil = Date.now() + REDIS_PAUSE_MS;
      this.onFallback(`no answer from Redis within ${REDIS_DEADLINE_MS} ms`);
      return call(this.memory);
    });
  }
}

class RedisDeadlineError extends Error {}

/**
 * Counters in `redis` (an ioredis or node-redis 4+ client). Redis down: each
 * counts in this instance's memory rather than fail every request; Redis
 * stalled: the same, after a deadline.
 */
export function redisFailureCounters(
  redis: unknown,
  /** Told when counting falls back to memory because Redis did not answer in time (an error falls back silently, as rate-limiter-flexible's insurance does). */
  onFallback: (reason: string) => void = () => undefined,
): FailureCounterFactory {
  return (limit) => {
    const memory = new RateLimiterMemory(limit);
    return new RedisOrMemory(new RateLimiterRedis({ ...limit, storeClient: redis, insuranceLimiter: memory }), memory, onFallback);
  };
}
