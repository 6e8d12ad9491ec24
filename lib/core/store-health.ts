import { StoreUnavailableError, TemporarilyUnavailableError } from '../errors';
import type { Logger } from '../logger';
import type { Store } from '../stores/types';
import { OutageTracker, type Outage as TrackedOutage } from './outage-tracker';

/** A store outage as the 503 a client sees; any other error unchanged. */
export function asTemporarilyUnavailable(err: unknown): unknown {
  return err instanceof StoreUnavailableError ? new TemporarilyUnavailableError(undefined, { detail: err.message, cause: err, dependency: 'store' }) : err;
}

/** What a store call says of the store: that it can be read, or written (a row certainly written). */
export type StoreAccess = 'read' | 'write';

/** The store as its calls found it: `read_only` while writes fail and reads work (a full disk). */
export type StoreState = 'up' | 'read_only' | 'down';

export interface StoreHealthOptions {
  /**
   * Writes one harmless row; called while writes fail (every `probeEveryMs`,
   * and at once when reads come back), so a store that could not be written
   * is seen writable again without traffic: an instance that readiness took
   * out of a load balancer gets none.
   */
  probeWrite?: () => Promise<unknown>;
  /** Default 5000; a read that succeeds meanwhile probes at once (at most once a second). */
  probeEveryMs?: number;
}

interface Outage extends TrackedOutage {
  /** A read failed since the outage started, and no read succeeded since. */
  readsFail: boolean;
  /** A write failed during the outage, and no write succeeded since. */
  writesFail: boolean;
}

/**
 * Whether the store answers, from the outcome of every store call the issuer
 * makes. One outage from the first failed call to the moment the kinds of
 * call that failed work again: logs `store.unavailable` once when it starts
 * (not per request) and `store.recovered` when it ends. A store that reads but
 * cannot write (a full disk) is one outage that reads do not end; a write
 * does (or the write probe, see StoreHealthOptions). The outage, its log
 * lines and its probe timer are an OutageTracker's, as ReplayStoreHealth's are.
 */
export class StoreHealth {
  private readonly outages: OutageTracker<Outage>;
  private probing = false;
  private lastProbeAt = Number.NEGATIVE_INFINITY;

  constructor(
    logger: Logger,
    private readonly now: () => number = Date.now,
    private readonly options: StoreHealthOptions = {},
  ) {
    this.outages = new OutageTracker(logger, now, { unavailable: 'store.unavailable', recovered: 'store.recovered', recoveredMessage: 'store available again' });
  }

  /** No outage. */
  get up(): boolean {
    return this.outages.up;
  }

  get state(): StoreState {
    const outage = this.outages.current;
    if (outage === undefined) return 'up';
    return outage.readsFail ? 'down' : 'read_only';
  }

  /**
   * A store call succeeded. Cheap: called on the hot path. `startedAt`: when
   * the call began; one begun before the outage was seen says nothing of the
   * store now (it would end the outage as soon as it was logged). `access`:
   * what the success shows; a read does not end an outage of writes.
   */
  succeeded(startedAt?: number, access: StoreAccess = 'read'): void {
    const outage = this.outages.endable(startedAt);
    if (outage === undefined) return;
    outage.readsFail = false;
    if (access === 'write') outage.writesFail = false;
    if (outage.writesFail) {
      // the store answers; whether writes work is for a write to tell, soon rather than at the next tick
      // (at most one probe a second however many reads succeed)
      if (this.now() - this.lastProbeAt >= 1000) this.probe();
      return;
    }
    this.outages.end();
  }

  /** A store call failed: an outage (StoreUnavailableError) is counted, any other error ignored. */
  failed(err: unknown, access: StoreAccess = 'read'): void {
    if (!(err instanceof StoreUnavailableError)) return;
    let outage = this.outages.current;
    if (outage === undefined) {
      outage = this.outages.begin(
        { since: this.now(), failures: 0, readsFail: false, writesFail: false },
        { reason: err.message, access },
        access === 'write'
          ? 'store cannot be written (reads may work); answering 503 to what must write until it is back'
          : 'store unavailable; answering 503 until it is back',
      );
    }
    outage.failures++;
    if (access === 'read') outage.readsFail = true;
    else if (!outage.writesFail) {
      outage.writesFail = true;
      this.startProbing();
    }
  }

  /**
   * The outcome of `promise`, reported; an outage rejects as StoreUnavailableError (unchanged).
   * `access`: what the call needs; `proves`: what its success shows (default the same).
   */
  watch<T>(promise: Promise<T>, access: StoreAccess = 'read', proves: (value: T) => StoreAccess = () => access): Promise<T> {
    const startedAt = this.now();
    return promise.then(
      (value) => {
        this.succeeded(startedAt, proves(value));
        return value;
      },
      (err: unknown) => {
        this.failed(err, access);
        throw err;
      },
    );
  }

  /** `store` with every call reported here. */
  monitor<S extends Store>(store: S): S {
    const watched = Object.create(store) as Record<string, unknown>;
    for (const name of STORE_CALLS) {
      const fn = (store as unknown as Record<string, unknown>)[name];
      if (typeof fn !== 'function') continue;
      const access: StoreAccess = WRITES.has(name) ? 'write' : 'read';
      const proves = WROTE[name] ?? ((): StoreAccess => 'read');
      watched[name] = (...args: unknown[]) => this.watch((fn as (...a: unknown[]) => Promise<unknown>).apply(store, args), access, proves);
    }
    return watched as unknown as S;
  }

  /** Stops the write probe (the issuer is closing). */
  stop(): void {
    this.outages.stop();
  }

  private startProbing(): void {
    if (this.options.probeWrite) this.outages.probeEvery(() => this.probe(), this.options.probeEveryMs ?? 5000);
  }

  private probe(): void {
    const run = this.options.probeWrite;
    if (!run || this.probing || this.outages.stopped) return;
    this.probing = true;
    const startedAt = this.now();
    this.lastProbeAt = startedAt;
    run().then(
      () => {
        this.probing = false;
        this.succeeded(startedAt, 'write');
      },
      (err: unknown) => {
        this.probing = false;
        this.failed(err, 'write');
      },
    );
  }
}

// the revocation calls too: a revocation that cannot be written (a full disk) is an outage the log shows,
// and the reload every revocationResync notices an outage (and its end) on an instance with no traffic
const STORE_CALLS = [
  'findClient', 'createClient', 'listClients', 'revokeClient', 'rotateSecret', 'listKeys', 'insertFirstKey', 'rotateKey', 'pruneKeys', 'raiseKeyTokenTtl', 'deleteKey', 'ping',
  'addClientKey', 'removeClientKey', 'updateClient', 'consumeJti', 'revokeToken', 'bumpTokenGeneration', 'listRevocations', 'purgeExpiredRevocations', 'revocationsVersion', 'keysVersion',
] as const;

/** The calls that write: their failure is an outage of writes, which a read does not end. */
const WRITES: ReadonlySet<string> = new Set([
  'createClient', 'revokeClient', 'rotateSecret', 'insertFirstKey', 'rotateKey', 'pruneKeys', 'raiseKeyTokenTtl', 'deleteKey',
  'addClientKey', 'removeClientKey', 'updateClient', 'consumeJti', 'revokeToken', 'bumpTokenGeneration', 'purgeExpiredRevocations',
]);

/**
 * The calls whose success shows a row was written, by their answer. The
 * other writes may change nothing (a prune with nothing to prune, a first key
 * when there is one), which SQLite does without touching the disk: their
 * success shows only that the store answers.
 */
const WROTE: Partial<Record<string, (answer: unknown) => StoreAccess>> = {
  createClient: () => 'write',
  revokeToken: () => 'write',
  bumpTokenGeneration: () => 'write',
  consumeJti: (first) => (first === true ? 'write' : 'read'),
  rotateSecret: (done) => (done === true ? 'write' : 'read'),
  revokeClient: (done) => (done === true ? 'write' : 'read'),
  rotateKey: (done) => (done === true ? 'write' : 'read'),
  deleteKey: (done) => (done === true ? 'write' : 'read'),
  removeClientKey: (done) => (done === true ? 'write' : 'read'),
  addClientKey: (result) => (result === 'added' ? 'write' : 'read'),
};
