import type { Logger } from '../logger';

/** An outage under way: when it was seen, and how many calls failed in it. */
export interface Outage {
  since: number;
  failures: number;
}

/** The two log lines of an outage. */
export interface OutageEvents {
  /** Logged (error) once when an outage begins, e.g. `store.unavailable`. */
  unavailable: string;
  /** Logged (info) when it ends, with `down_ms` and `failures`, e.g. `store.recovered`. */
  recovered: string;
  /** The message of the `recovered` line. */
  recoveredMessage: string;
  /** Fields on both lines, right after `event` (e.g. `{ store: 'redis' }`). */
  fields?: Record<string, unknown>;
}

/**
 * The outages of a backing service (the client store, a shared DPoP replay
 * store), one at a time, as the calls to it found them: the owner begins one
 * on the first failed call (logged once, not per request) and ends it on a
 * call that succeeded after it was seen (logged with how long it lasted and
 * how many calls failed). While one lasts, the owner may have the service
 * probed every few seconds (probeEvery), so its end shows without traffic:
 * an instance that readiness took out of a load balancer gets none.
 * Used by StoreHealth and ReplayStoreHealth.
 */
export class OutageTracker<O extends Outage = Outage> {
  /** The outage under way, if any. */
  current: O | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  private stopped_ = false;

  constructor(
    private readonly logger: Logger,
    private readonly now: () => number,
    private readonly events: OutageEvents,
  ) {}

  get up(): boolean {
    return this.current === undefined;
  }

  /** Whether stop() was called: no probe runs any more. */
  get stopped(): boolean {
    return this.stopped_;
  }

  /**
   * The outage that a call begun at `startedAt` which succeeded speaks of:
   * none when there is none, or when the call began before the outage was
   * seen (it says nothing of the service now). Cheap: on the hot path.
   */
  endable(startedAt: number | undefined): O | undefined {
    const { current } = this;
    if (current === undefined || (startedAt !== undefined && startedAt < current.since)) return undefined;
    return current;
  }

  /** Begins `outage` and logs it once: `fields` after the event's own (e.g. the reason), then `message`. */
  begin(outage: O, fields: Record<string, unknown>, message: string): O {
    this.current = outage;
    this.logger.error({ event: this.events.unavailable, ...this.events.fields, ...fields }, message);
    return outage;
  }

  /** Ends the outage under way (there must be one): stops the probe and logs how long it lasted. */
  end(): void {
    const outage = this.current!;
    this.current = undefined;
    this.stopProbing();
    this.logger.info(
      { event: this.events.recovered, ...this.events.fields, down_ms: this.now() - outage.since, failures: outage.failures },
      this.events.recoveredMessage,
    );
  }

  /**
   * Runs `probe` every `everyMs` until the outage ends (a timer that keeps no
   * process alive); nothing when one runs already, or after stop(). A tick
   * does not wait for the probe before it: `probe` must itself start none
   * while one is in flight (StoreHealth skips the tick, ReplayStoreHealth
   * waits on the probe in flight), or a service that does not answer piles
   * them up.
   */
  probeEvery(probe: () => void, everyMs: number): void {
    if (this.probeTimer || this.stopped_) return;
    this.probeTimer = setInterval(probe, everyMs);
    this.probeTimer.unref();
  }

  /** Stops the probe for good (the owner is closing); outages are still tracked and logged. */
  stop(): void {
    this.stopped_ = true;
    this.stopProbing();
  }

  private stopProbing(): void {
    clearInterval(this.probeTimer);
    this.probeTimer = undefined;
  }
}
