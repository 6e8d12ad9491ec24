import { RateLimiterMemory, type RateLimiterRes } from 'rate-limiter-flexible';
import type { FailureCounter, FailureCounterFactory } from '../stores/types';
import { addressKey } from './address-key';
import { clientIdDigest, hasClientIdShape } from './secrets';

/**
 * Limits failed client authentications (RFC 6749 §2.3.1) by what an attacker
 * controls: the source address, and the pair (client_id, address). A client_id
 * is no secret (every token carries it), so failures under it from other
 * addresses never refuse the right secret: a per-client count only raises an
 * alert. Counters live in memory, or in Redis so that every instance counts
 * together (rate-limiter-flexible). Only failures count; a correct request
 * never does.
 */
export interface BruteForceOptions {
  /** Failed authentications allowed from one source address in a window, whatever the client_id. Default 100. */
  maxFailuresPerAddress?: number;
  /** Failed authentications allowed for one client_id from one source address in a window. Default 10. */
  maxFailuresPerClientAddress?: number;
  /**
   * Failed authentications of one registered client, from all addresses, in a
   * window that raise `client.auth_failures_high` (again at twice, four times… as many).
   * Never refuses a request. Default 20.
   */
  alertFailuresPerClient?: number;
  /** Window in seconds. Default 900 (15 minutes). */
  window?: number;
  /** An ioredis (or node-redis 4+) client: counters shared by every instance. Default: in memory. */
  redis?: unknown;
  /** Prefix of the counters' keys, e.g. to keep two deployments apart on one Redis. Default `ecc:authfail`. */
  keyPrefix?: string;
}

export interface BruteForceSettings {
  maxFailuresPerAddress: number;
  maxFailuresPerClientAddress: number;
  alertFailuresPerClient: number;
  window: number;
  keyPrefix: string;
}

/** Which limit refused a request: the address's (any client_id), or the client_id's from that address. */
export type FailureLimit = 'address' | 'client_address';

export interface LimitCheck {
  /** How long until this address, or this client from this address, may try again; 0 when not over a limit. */
  retryAfterMs: number;
  /** Failures counted for this client from this address (cleared by a success). */
  pairFailures: number;
  /** Failures counted for this address, any client_id. */
  addressFailures: number;
  /** The limit this request is over (the address's when both), when retryAfterMs > 0. */
  limit?: FailureLimit;
}

export interface FailureCount {
  /** Failures of this client from every address in the window; 0 when the client is not registered. */
  clientFailures: number;
  /** True exactly when this failure brought the client's count to the alert threshold or a doubling of it. */
  alert: boolean;
  /**
   * More than 0 when this failure went past the address's or the pair's
   * limit (requests that all passed check() before any of them was
   * counted): how long until the next try, as check() would have said.
   */
  retryAfterMs: number;
  /** Failures of this client from this address, and of this address, this one included (0 without an address). */
  pairFailures: number;
  addressFailures: number;
  /** The limit this failure went past (the address's when both), when retryAfterMs > 0. */
  limit?: FailureLimit;
}


/**
 * Bounded keys that never hold a secret: a client_id is whatever the request
 * says, up to the body limit, and may be a secret sent in its place (id and
 * secret swapped), which a key name would show to anyone who can SCAN or
 * MONITOR the Redis, its replicas and its RDB/AOF files for the window. One
 * with the shape of a client id (hasClientIdShape(): at most 32 URL-safe
 * characters, as the log shows it; a generated secret has 43) is the key as
 * it is (`i.` …), anything else is hashed (`h.` + 22 characters of its
 * SHA-256, unkeyed so that every instance on a Redis counts alike). An
 * attacker's id never costs more than a hash, and hashing is skipped for
 * the ids of real clients.
 */
function clientKey(clientId: string): string {
  return hasClientIdShape(clientId) ? `i.${clientId}` : clientIdDigest(clientId);
}

export { addressKey } from './address-key';

const over = (res: RateLimiterRes | null, points: number): number => (res && res.consumedPoints >= points ? res.msBeforeNext : 0);

/** The limit a request is over, from how long each refuses it: the address's when both (it refuses every client_id). */
const limitOver = (addressMs: number, pairMs: number): { limit?: FailureLimit } =>
  addressMs > 0 ? { limit: 'address' } : pairMs > 0 ? { limit: 'client_address' } : {};

/** `threshold`, 2 × `threshold`, 4 × `threshold`…: an alert per crossing, not per request. */
function isAlertCount(count: number, threshold: number): boolean {
  if (count < threshold || count % threshold !== 0) return false;
  const multiple = count / threshold;
  return (multiple & (multiple - 1)) === 0;
}

/** Counters in this instance's memory: the default (stores/redis-rate-limiter.ts has the shared ones). */
export const memoryFailureCounters: FailureCounterFactory = (limit) => new RateLimiterMemory(limit);

export class FailedAuthLimiter {
  private readonly perAddress: FailureCounter;
  private readonly perPair: FailureCounter;
  private readonly perClient: FailureCounter;

  constructor(
    readonly settings: BruteForceSettings,
    /** Where the counts live: in memory by default; `redisFailureCounters()` (stores/redis-rate-limiter.ts) shares them between instances. */
    counters: FailureCounterFactory = memoryFailureCounters,
  ) {
    const make = (points: number, name: string): FailureCounter => counters({ points, duration: settings.window, keyPrefix: `${settings.keyPrefix}:${name}` });
    this.perAddress = make(settings.maxFailuresPerAddress, 'addr');
    this.perPair = make(settings.maxFailuresPerClientAddress, 'pair');
    this.perClient = make(settings.alertFailuresPerClient, 'client');
  }

  private static pairKey(clientId: string, address: string): string {
    return `${clientKey(clientId)}:${addressKey(address)}`;
  }

  /** Before the secret is checked: one round of two parallel reads. */
  async check(clientId: string, address: string | undefined): Promise<LimitCheck> {
    if (!address) return { retryAfterMs: 0, pairFailures: 0, addressFailures: 0 };
    const [addr, pair] = await Promise.all([
      this.perAddress.get(addressKey(address)),
      this.perPair.get(FailedAuthLimiter.pairKey(clientId, address)),
    ]);
    const addrMs = over(addr, this.settings.maxFailuresPerAddress);
    const pairMs = over(pair, this.settings.maxFailuresPerClientAddress);
    return {
      retryAfterMs: Math.max(addrMs, pairMs),
      pairFailures: pair?.consumedPoints ?? 0,
      addressFailures: addr?.consumedPoints ?? 0,
      ...limitOver(addrMs, pairMs),
    };
  }

  /**
   * Counts one failed authentication against the address and the pair, and,
   * when the client is registered (`knownClient`), against the client.
   */
  async failed(clientId: string, address: string | undefined, knownClient: boolean): Promise<FailureCount> {
    const consume = (limiter: FailureCounter, key: string): Promise<RateLimiterRes> =>
      limiter.consume(key).catch((res: unknown) => {
        // over the limit is a RateLimiterRes, not an error
        if (res instanceof Error) throw res;
        return res as RateLimiterRes;
      });
    const [client, addr, pair] = await Promise.all([
      knownClient ? consume(this.perClient, clientKey(clientId)) : null,
      address ? consume(this.perAddress, addressKey(address)) : null,
      address ? consume(this.perPair, FailedAuthLimiter.pairKey(clientId, address)) : null,
    ]);
    const clientFailures = client?.consumedPoints ?? 0;
    // counted atomically: the limit's own failure still answers 401, those beyond it do not
    const beyond = (res: RateLimiterRes | null, points: number): number => (res && res.consumedPoints > points ? res.msBeforeNext : 0);
    const addrMs = beyond(addr, this.settings.maxFailuresPerAddress);
    const pairMs = beyond(pair, this.settings.maxFailuresPerClientAddress);
    return {
      clientFailures,
      alert: knownClient && isAlertCount(clientFailures, this.settings.alertFailuresPerClient),
      retryAfterMs: Math.max(addrMs, pairMs),
      pairFailures: pair?.consumedPoints ?? 0,
      addressFailures: addr?.consumedPoints ?? 0,
      ...limitOver(addrMs, pairMs),
    };
  }

  /** A success clears the count of this client from this address (not the address's, nor the client's alert count). */
  async succeeded(clientId: string, address: string | undefined): Promise<void> {
    if (address) await this.perPair.delete(FailedAuthLimiter.pairKey(clientId, address));
  }
}
