import { randomBytes } from 'node:crypto';
import type { Logger } from '../logger';
import type { ReplayStore } from './dpop-replay';
import { OutageTracker } from './outage-tracker';

export interface ReplayStoreHealthOptions {
  /** What the store is, for the log lines (e.g. `redis`). */
  kind: string;
  /** While the store is down, it is asked again this often (ms), so its return shows without traffic. Default 5000. */
  probeEveryMs?: number;
  now?: () => number;
}

/**
 * Whether a shared DPoP replay store (Redis) answers, from every proof it is
 * asked about: one `dpop_replay_store.unavailable` line when DPoP proofs
 * start getting 503 because of it, one `dpop_replay_store.recovered` when it
 * answers again (asked every few seconds while down, so that shows without
 * traffic). Counts the calls that failed, for metrics. The outage, its log
 * lines and its probe timer are an OutageTracker's, as StoreHealth's are.
 */
export class ReplayStoreHealth {
  /** Proof checks refused because the store did not answer (each one a 503). */
  errors = 0;
  private readonly outages: OutageTracker;
  private probe: (() => Promise<unknown>) | undefined;
  /** The probe in flight, if any: check() and the timer ask the store through it (see probeNow()). */
  private probing: Promise<void> | undefined;
  private readonly now: () => number;

  constructor(
    logger: Logger,
    private readonly options: ReplayStoreHealthOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.outages = new OutageTracker(logger, this.now, {
      unavailable: 'dpop_replay_store.unavailable',
      recovered: 'dpop_replay_store.recovered',
      recoveredMessage: 'DPoP replay store answers again; DPoP proofs are checked again',
      fields: { store: options.kind },
    });
  }

  get up(): boolean {
    return this.outages.up;
  }

  succeeded(startedAt: number): void {
    if (this.outages.endable(startedAt)) this.outages.end();
  }

  failed(err: unknown, counted = true): void {
    if (counted) this.errors++;
    const outage = this.outages.current;
    if (outage) {
      if (counted) outage.failures++;
      return;
    }
    this.outages.begin(
      { since: this.now(), failures: counted ? 1 : 0 },
      { reason: err instanceof Error ? err.message : String(err) },
      'DPoP replay store unavailable: requests with a DPoP proof get 503 until it is back',
    );
    if (this.probe) this.outages.probeEvery(() => void this.probeNow(), this.options.probeEveryMs ?? 5000);
  }

  /** `store` with every answer reported here; a store that answers synchronously (in memory) needs none. */
  monitor(store: ReplayStore): ReplayStore {
    // async: a store that throws at once rejects like one that fails later
    this.probe = async () => store.consume(`health-probe:${randomBytes(12).toString('base64url')}`, this.now() + 1000);
    const consume = (key: string, expiresAt: number): Promise<boolean> | boolean => {
      const startedAt = this.now();
      let answer: Promise<boolean> | boolean;
      try {
        answer = store.consume(key, expiresAt);
      } catch (err) {
        this.failed(err);
        throw err;
      }
      if (typeof answer === 'boolean') return answer;
      return answer.then(
        (first) => {
          this.succeeded(startedAt);
          return first;
        },
        (err: unknown) => {
          this.failed(err);
          throw err;
        },
      );
    };
    return {
      consume,
      get forgottenUntil() {
        return store.forgottenUntil;
      },
    };
  }

  /**
   * Asks the store now (one `consume()` of a random key that expires in a
   * second), for readiness: its outage shows without waiting for a DPoP
   * proof, and so does its return. A probe in flight is not doubled: its
   * answer is this one's too. Never rejects.
   */
  async check(): Promise<boolean> {
    await this.probeNow();
    return this.up;
  }

  stop(): void {
    this.outages.stop();
    this.probe = undefined;
  }

  /**
   * One probe of the store, reported here, unless one is in flight: then
   * that one. A store that does not answer (a Redis that black-holes, held
   * up to its deadline; a store without one, for ever) is thus asked once at
   * a time, not once more per timer tick and per readiness check, each
   * waiting on it. Never rejects.
   */
  private probeNow(): Promise<void> {
    if (this.probing) return this.probing;
    const probe = this.probe;
    if (!probe) return Promise.resolve();
    const startedAt = this.now();
    this.probing = probe()
      .then(
        () => this.succeeded(startedAt),
        (err: unknown) => this.failed(err, false),
      )
      .finally(() => {
        this.probing = undefined;
      });
    return this.probing;
  }
}
