/**
 * Failed-authentication counters in Redis (rate-limiter-flexible), so that
 * every instance on it counts together: the FailureCounterFactory that
 * create-issuer gives the brute-force limits when `bruteForce.redis` is set.
 */
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterRes } from 'rate-limiter-flexible';
import { isErrorReply, isNodeRedis } from './redis-client';
import type { FailureCounter, FailureCounterFactory, ServiceGateway } from './types';

/**
 * Redis counters that never hold a request up: each call goes through the
 * gate of the Redis client (shared with the DPoP replay store and the
 * revocation push on it), and counts in this instance's memory instead when
 * Redis fails, does not answer within the gate's deadline (stalled:
 * connected, not answering), or is known not to answer (then at once,
 * without asking it) until it answers again.
 */
class RedisOrMemory implements FailureCounter {
  constructor(
    private readonly redis: RateLimiterRedis,
    private readonly memory: RateLimiterMemory,
    private readonly gate: ServiceGateway,
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
    return this.gate.run(() => call(this.redis), {
      // over the limit is an answer (a RateLimiterRes), not a failure
      isAnswer: (rejection) => !(rejection instanceof Error),
      // Redis answered with an error (its ACL refuses the script, say): memory for this call, and no outage
      // for the other parts on this client, which may well work (else they would flap down and up)
      isCallError: isErrorReply,
      otherwise: (why) => {
        this.onFallback(why.message);
        return call(this.memory);
      },
    });
  }
}

/**
 * Counters in `redis` (an ioredis or node-redis 4+ client), through `gate`
 * (core/service-gate.ts's, shared by everything on that client). Redis
 * failing, stalled or known down: each counts in this instance's memory
 * rather than fail or hold up the request.
 */
export function redisFailureCounters(
  redis: unknown,
  gate: ServiceGateway,
  /** Told when a count goes to memory because Redis failed, did not answer in time, or is known not to answer (throttle it). */
  onFallback: (reason: string) => void = () => undefined,
): FailureCounterFactory {
  return (limit) => {
    const memory = new RateLimiterMemory(limit);
    // no insuranceLimiter: a Redis error must reach the gate (an insurance answer would look like Redis answering)
    // node-redis 4+ must be named to rate-limiter-flexible: it would take a v5 client for ioredis
    const limiter = new RateLimiterRedis({ ...limit, storeClient: redis, useRedisPackage: isNodeRedis(redis) });
    return new RedisOrMemory(limiter, memory, gate, onFallback);
  };
}
