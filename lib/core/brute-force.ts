import { createHash } from 'node:crypto';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract, type RateLimiterRes } from 'rate-limiter-flexible';

/**
 * Limits failed client authentications (RFC 6749 §2.3.1) per client_id and
 * per source address, with rate-limiter-flexible: counters in memory, or in
 * Redis so that every instance counts together. Only failures count; a
 * correct request within the limit never does. Once a key is over its limit,
 * every token request for it is refused until the window passes.
 */
export interface BruteForceOptions {
  /** Failed authentications allowed per client_id in a window. Default 20. */
  maxFailuresPerClient?: number;
  /** Failed authentications allowed per source address in a window. Default 100. */
  maxFailuresPerAddress?: number;
  /** Window in seconds. Default 900 (15 minutes). */
  window?: number;
  /** An ioredis (or node-redis 4+) client: counters shared by every instance. Default: in memory. */
  redis?: unknown;
}

export interface BruteForceSettings {
  maxFailuresPerClient: number;
  maxFailuresPerAddress: number;
  window: number;
}

/** Fixed-size keys: a client_id is whatever the request says, up to the body limit. */
const digest = (value: string): string => createHash('sha256').update(value).digest('base64url').slice(0, 22);

export class FailedAuthLimiter {
  private readonly perClient: RateLimiterAbstract;
  private readonly perAddress: RateLimiterAbstract;

  constructor(
    readonly settings: BruteForceSettings,
    redis?: unknown,
  ) {
    const make = (points: number, keyPrefix: string): RateLimiterAbstract => {
      const base = { points, duration: settings.window, keyPrefix };
      if (!redis) return new RateLimiterMemory(base);
      // Redis down: count in this instance's memory rather than fail every request
      return new RateLimiterRedis({ ...base, storeClient: redis, insuranceLimiter: new RateLimiterMemory(base) });
    };
    this.perClient = make(settings.maxFailuresPerClient, 'ecc:authfail:client');
    this.perAddress = make(settings.maxFailuresPerAddress, 'ecc:authfail:addr');
  }

  /**
   * `retryAfterMs`: how long until the client or the address may try again,
   * 0 when neither is over its limit. `clientFailures`: failures counted
   * against the client in the window.
   */
  async check(clientId: string, address: string | undefined): Promise<{ retryAfterMs: number; clientFailures: number }> {
    const [client, addr] = await Promise.all([
      this.perClient.get(digest(clientId)),
      address ? this.perAddress.get(address) : Promise.resolve(null),
    ]);
    const wait = (res: RateLimiterRes | null, points: number): number => (res && res.consumedPoints >= points ? res.msBeforeNext : 0);
    return {
      retryAfterMs: Math.max(wait(client, this.settings.maxFailuresPerClient), wait(addr, this.settings.maxFailuresPerAddress)),
      clientFailures: client?.consumedPoints ?? 0,
    };
  }

  /** Counts one failed authentication against the client and the address. */
  async failed(clientId: string, address: string | undefined): Promise<void> {
    const consume = (limiter: RateLimiterAbstract, key: string) =>
      limiter.consume(key).catch((res: unknown) => {
        // over the limit is a RateLimiterRes, not an error: the next check() reports it
        if (res instanceof Error) throw res;
      });
    await Promise.all([consume(this.perClient, digest(clientId)), address ? consume(this.perAddress, address) : undefined]);
  }

  /** A successful authentication clears the client's count (not the address's). */
  async succeeded(clientId: string): Promise<void> {
    await this.perClient.delete(digest(clientId));
  }
}
