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
    if (this.probe) this.outages.probeEvery(() => this.runProbe(), this.options.probeEveryMs ?? 5000);
  }

  /** `store` with every answer reported here; a store that answers synchronously (in memory) needs none. */
  monitor(store: ReplayStore): ReplayStore {
    this.probe = () => Promise.resolve(store.consume(`health-probe:${randomBytes(12).toString('base64url')}`, this.now() + 1000));
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
   * proof, and so does its return. Never rejects.
   */
  async check(): Promise<boolean> {
    if (!this.probe) return this.up;
    const startedAt = this.now();
    try {
      await this.probe();
      this.succeeded(startedAt);
    } catch (err) {
      this.failed(err, false);
    }
    return this.up;
  }

  stop(): void {
    this.outages.stop();
    this.probe = undefined;
  }

  private runProbe(): void {
    const startedAt = this.now();
    this.probe?.().then(
      () => this.succeeded(startedAt),
      (err: unknown) => this.failed(err, false),
    );
  }
}
