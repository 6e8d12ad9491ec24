import { StoreUnavailableError, TemporarilyUnavailableError } from '../errors';
import type { Logger } from '../logger';
import type { Store } from '../stores/types';

/** A store outage as the 503 a client sees; any other error unchanged. */
export function asTemporarilyUnavailable(err: unknown): unknown {
  return err instanceof StoreUnavailableError ? new TemporarilyUnavailableError(undefined, { detail: err.message, cause: err }) : err;
}

/**
 * Whether the store answers, from the outcome of every store call the issuer
 * makes. Logs `store.unavailable` once when an outage starts (not per
 * request) and `store.recovered` when the store answers again.
 */
export class StoreHealth {
  private outage: { since: number; failures: number } | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  get up(): boolean {
    return this.outage === undefined;
  }

  /**
   * A store call succeeded. Cheap: called on the hot path. `startedAt`: when
   * the call began; one begun before the outage was seen says nothing of the
   * store now (it would end the outage as soon as it was logged).
   */
  succeeded(startedAt?: number): void {
    if (this.outage === undefined) return;
    const { since, failures } = this.outage;
    if (startedAt !== undefined && startedAt < since) return;
    this.outage = undefined;
    this.logger.info({ event: 'store.recovered', down_ms: this.now() - since, failures }, 'store available again');
  }

  /** A store call failed: an outage (StoreUnavailableError) is counted, any other error ignored. */
  failed(err: unknown): void {
    if (!(err instanceof StoreUnavailableError)) return;
    if (this.outage === undefined) {
      this.outage = { since: this.now(), failures: 1 };
      this.logger.error({ event: 'store.unavailable', reason: err.message }, 'store unavailable; answering 503 until it is back');
    } else {
      this.outage.failures++;
    }
  }

  /** The outcome of `promise`, reported; an outage rejects as StoreUnavailableError (unchanged). */
  watch<T>(promise: Promise<T>): Promise<T> {
    const startedAt = this.now();
    return promise.then(
      (value) => {
        this.succeeded(startedAt);
        return value;
      },
      (err: unknown) => {
        this.failed(err);
        throw err;
      },
    );
  }

  /** `store` with every call reported here. */
  monitor<S extends Store>(store: S): S {
    const watched = Object.create(store) as Record<string, unknown>;
    for (const name of STORE_CALLS) {
      const fn = (store as unknown as Record<string, unknown>)[name];
      if (typeof fn === 'function') watched[name] = (...args: unknown[]) => this.watch((fn as (...a: unknown[]) => Promise<unknown>).apply(store, args));
    }
    return watched as unknown as S;
  }
}

// the revocation calls too: a revocation that cannot be written (a full disk) is an outage the log shows,
// and the reload every revocationResync notices an outage (and its end) on an instance with no traffic
const STORE_CALLS = [
  'findClient', 'createClient', 'listClients', 'revokeClient', 'rotateSecret', 'listKeys', 'insertFirstKey', 'rotateKey', 'pruneKeys', 'raiseKeyTokenTtl', 'ping',
  'addClientKey', 'removeClientKey', 'updateClient', 'consumeJti', 'revokeToken', 'bumpTokenGeneration', 'listRevocations', 'purgeExpiredRevocations', 'revocationsVersion',
] as const;
