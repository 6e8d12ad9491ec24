import { randomBytes } from 'node:crypto';
import type { Logger } from '../logger';
import type { ReplayStore } from './dpop-replay';
import { OutageTracker } from './outage-tracker';
import { ServiceGate } from './service-gate';

/** Stops a collected ReplayStoreHealth's watch of its gate (it was dropped without stop()). */
const unwatchWhenCollected = new FinalizationRegistry<() => void>((unwatch) => unwatch());

/**
 * Has `gate` tell `health` of its changes while `health` lives, holding it
 * weakly. A function of its own: closures made in a method that uses `this`
 * share its context, and so would hold `health` after all.
 */
function watchWeakly(gate: ServiceGate, health: ReplayStoreHealth): () => void {
  const ref = new WeakRef(health);
  return gate.watch({
    down: (reason) => ref.deref()?.gateDown(reason),
    up: () => ref.deref()?.gateUp(),
  });
}

export interface ReplayStoreHealthOptions {
  /** What the store is, for the log lines (e.g. `redis`). */
  kind: string;
  /**
   * The gate of the store's client, shared with whatever else calls it
   * (sharedServiceGate()): an outage any of them met is this store's too.
   * Default: one of its own, with `deadlineMs`.
   */
  gate?: ServiceGate;
  /** The deadline of a gate of its own (ms). Default 1000. */
  deadlineMs?: number;
  /** While the store is down, it is asked again this often (ms), so its return shows without traffic. Default 5000. */
  probeEveryMs?: number;
  now?: () => number;
}

/**
 * Whether a shared DPoP replay store (Redis) answers, from every proof it is
 * asked about and from whatever else calls its client (its ServiceGate):
 * one `dpop_replay_store.unavailable` line when DPoP proofs start getting
 * 503 because of it, one `dpop_replay_store.recovered` when it answers again
 * (asked every few seconds while down, so that shows without traffic).
 * While it is down a proof is refused at once, without asking it (see
 * ServiceGate), so that no request waits a deadline again. Counts the calls
 * that failed, for metrics. The log lines and the probe timer are an
 * OutageTracker's, as StoreHealth's are.
 */
export class ReplayStoreHealth {
  /** Proof checks refused because the store did not answer (each one a 503). */
  errors = 0;
  private readonly outages: OutageTracker;
  private readonly gate: ServiceGate;
  private readonly unwatch: () => void;
  private probe: (() => Promise<unknown>) | undefined;
  /** The probe in flight, if any: check() and the timer ask the store through it (see probeNow()). */
  private probing: Promise<void> | undefined;
  private readonly now: () => number;

  constructor(
    logger: Logger,
    private readonly options: ReplayStoreHealthOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.gate = options.gate ?? new ServiceGate({ name: options.kind, deadlineMs: options.deadlineMs ?? 1000, now: this.now });
    this.outages = new OutageTracker(logger, this.now, {
      unavailable: 'dpop_replay_store.unavailable',
      recovered: 'dpop_replay_store.recovered',
      recoveredMessage: 'DPoP replay store answers again; DPoP proofs are checked again',
      fields: { store: options.kind },
    });
    // the gate lives as long as its client (the process, often): it holds this weakly, so that an issuer
    // dropped without close() is not kept (nor logs or probes for ever); once collected, it is unwatched
    this.unwatch = watchWeakly(this.gate, this);
    unwatchWhenCollected.register(this, this.unwatch, this);
    // made while its client is known down (another issuer on it met the outage)
    if (!this.gate.up) this.begin(this.gate.reason ?? 'unknown');
  }

  get up(): boolean {
    return this.gate.up;
  }

  succeeded(startedAt: number): void {
    this.gate.succeeded(startedAt);
  }

  failed(err: unknown, counted = true): void {
    this.gate.failed(err);
    if (!counted) return;
    this.errors++;
    const outage = this.outages.current;
    if (outage) outage.failures++;
  }

  /** `store` with every call through the gate and every answer reported here; a store that answers synchronously (in memory) needs none. */
  monitor(store: ReplayStore): ReplayStore {
    // async: a store that throws at once rejects like one that fails later
    this.probe = async () => store.consume(`health-probe:${randomBytes(12).toString('base64url')}`, this.now() + 1000);
    if (!this.up) this.probeWhileDown();
    const consume = (key: string, expiresAt: number): Promise<boolean> | boolean => {
      // known down, with a call still unanswered: refused now, not one more command queued behind it
      if (!this.gate.mayCall()) {
        const why = this.gate.downError();
        this.failed(why);
        return Promise.reject(why);
      }
      let answer: Promise<boolean> | boolean;
      try {
        answer = store.consume(key, expiresAt);
      } catch (err) {
        this.failed(err);
        throw err;
      }
      if (typeof answer === 'boolean') return answer;
      return this.gate.track(answer).catch((err: unknown) => {
        this.failed(err);
        throw err;
      });
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
   * answer is this one's too. While the store is down and a call to it is
   * still unanswered, what is known. Never rejects.
   */
  async check(): Promise<boolean> {
    await this.probeNow();
    return this.up;
  }

  stop(): void {
    this.outages.stop();
    unwatchWhenCollected.unregister(this);
    this.unwatch();
    this.probe = undefined;
  }

  /** Its gate went down: an outage of this store (see watchWeakly()). */
  gateDown(reason: string): void {
    this.begin(reason);
  }

  /** Its gate is up again (see watchWeakly()). */
  gateUp(): void {
    if (this.outages.current) this.outages.end();
  }

  private begin(reason: string): void {
    if (this.outages.current) return;
    this.outages.begin({ since: this.now(), failures: 0 }, { reason }, 'DPoP replay store unavailable: requests with a DPoP proof get 503 until it is back');
    this.probeWhileDown();
  }

  private probeWhileDown(): void {
    if (!this.probe) return;
    // the timer holds this weakly: an issuer dropped without close() in an outage is not kept by it (it stops then)
    const self = new WeakRef(this);
    const outages = this.outages;
    outages.probeEvery(() => {
      const health = self.deref();
      if (health) void health.probeNow();
      else outages.stop();
    }, this.options.probeEveryMs ?? 5000);
  }

  /**
   * One probe of the store through the gate, unless one is in flight: then
   * that one. A store that does not answer (a Redis that black-holes) is
   * thus asked once at a time, and while down not again before it answered
   * what it was asked (see ServiceGate), not once more per timer tick and
   * per readiness check. Never rejects.
   */
  private probeNow(): Promise<void> {
    if (this.probing) return this.probing;
    const probe = this.probe;
    if (!probe || !this.gate.mayCall()) return Promise.resolve();
    this.probing = this.gate
      .run(probe)
      .then(
        () => undefined,
        (err: unknown) => this.failed(err, false),
      )
      .finally(() => {
        this.probing = undefined;
      });
    return this.probing;
  }
}
