/**
 * How revocations travel between the instances of one issuer (and
 * issuer-bound verifiers): every instance holds a RevocationState; a feed
 * applies an instance's revocations to its own state at once and makes
 * them reach the others.
 *
 * - StoreRevocationFeed: every instance reloads from the shared store
 *   periodically, sooner when a notification (PostgreSQL NOTIFY, a Redis
 *   doorbell) arrives.
 *
 * The authoritative copy stays in the store (RevocationStore); a feed is the
 * fast path. Events are monotone (see revocation.ts), so echoes, duplicates
 * and reordering are harmless.
 */
import type { RevocationStore } from '../stores/types';
import { MAX_CLOCK_TOLERANCE, type RevocationEvent, type RevocationState } from './revocation';
import { StoreUnavailableError } from '../errors';

export interface RevocationFeed {
  /** Applies the events to this instance's state at once, then sends them to the others. */
  publish(events: RevocationEvent | RevocationEvent[]): Promise<void>;
  /** Subscribes and loads what the feed already holds; resolves once loaded. */
  start(): Promise<void>;
  close(): Promise<void>;
}

const asList = (events: RevocationEvent | RevocationEvent[]): RevocationEvent[] => (Array.isArray(events) ? events : [events]);

export interface StoreRevocationFeedOptions {
  state: RevocationState;
  store: RevocationStore;
  /** Longest token lifetime, seconds: how far back revoked clients are listed (with clockTolerance). */
  maxTokenTtl: number;
  /**
   * Seconds this instance's verifiers accept a token past its `exp`: a
   * denylist entry is listed that much longer (default 0). Without it an
   * instance that starts within that time of a revoked token's `exp` would
   * not know the token and accept it. The store keeps entries for the
   * largest tolerance any instance may have (MAX_CLOCK_TOLERANCE), whatever
   * this one's.
   */
  clockTolerance?: number;
  /** Reload from the store every resyncMs (default 2 000, the client-cache bound). */
  resyncMs?: number;
  /** Expired denylist entries are deleted from the store at most this often (ms, default 60 000). */
  purgeEveryMs?: number;
  /**
   * Tells other instances at once (e.g. PostgreSQL NOTIFY); they call
   * `resync()` when told (LISTEN). Without it, others learn within resyncMs.
   */
  notify?: (events: RevocationEvent[]) => Promise<void>;
  now?: () => number;
  onError?: (err: unknown) => void;
  /**
   * A notification that failed (the revocation is stored and applied here
   * already; the others learn of it within resyncMs): publish() resolves all
   * the same. Default: onError.
   */
  onNotifyError?: (err: unknown) => void;
  /**
   * After this long (ms) without a reload that reached the store, the feed
   * is `stale` (its state may miss revocations made elsewhere since); the
   * next reload that reaches it ends that. Default: never.
   */
  maxStaleMs?: number;
  /** Told when the feed goes stale (with the last reload's age and why the latest failed) and when it is current again. */
  onStale?: (stale: boolean, facts: { sinceMs: number; err?: unknown }) => void;
}

/**
 * A feed over the shared store alone (no Redis): every instance reloads the
 * revocations every resyncMs (default 2 s), sooner when a notification
 * arrives. The events published here must already be persisted (see
 * Revoker).
 */
export class StoreRevocationFeed implements RevocationFeed {
  private timer: NodeJS.Timeout | undefined;
  private lastPurge = Number.NEGATIVE_INFINITY;
  private running: Promise<void> | undefined;
  /** The store's revocationsVersion() at the last reload. */
  private loadedVersion: string | number | undefined;
  private readonly now: () => number;
  /** When a reload last reached the store (a version read that said nothing moved counts). */
  private confirmedAt: number | undefined;
  /** No reload has reached the store for maxStaleMs: what is revoked elsewhere since may be missing here. */
  stale = false;
  /** The last reload failed (the store did not answer): another one now would likely wait out its timeout too. */
  failing = false;

  constructor(private readonly options: StoreRevocationFeedOptions) {
    this.now = options.now ?? Date.now;
  }

  async publish(events: RevocationEvent | RevocationEvent[]): Promise<void> {
    const list = asList(events);
    this.options.state.apply(list);
    try {
      await this.options.notify?.(list);
    } catch (err) {
      // stored and in force here: a failed ring is no failed revocation
      (this.options.onNotifyError ?? this.options.onError)?.(err);
    }
  }

  async start(): Promise<void> {
    await this.resync();
    if (!this.timer) {
      this.timer = setInterval(() => {
        this.resync().catch((err: unknown) => this.options.onError?.(err));
      }, this.options.resyncMs ?? 2_000);
      this.timer.unref();
    }
  }

  /**
   * Reloads from the store (concurrent calls share one read); purges expired
   * entries now and then. When the store tells a version of its revocations
   * (revocationsVersion) and it has not moved since the last reload, the
   * reload is skipped, except right after a purge (every purgeEveryMs): a
   * full reload at least that often whatever the version says.
   */
  resync(): Promise<void> {
    this.running ??= (async () => {
      const { store } = this.options;
      const now = this.now();
      const toleranceMs = (this.options.clockTolerance ?? 0) * 1000;
      // a token is accepted here until exp + clockTolerance: its entry counts until then
      const deadBefore = new Date(now - toleranceMs);
      let full = false;
      if (now - this.lastPurge >= (this.options.purgeEveryMs ?? 60_000)) {
        // another instance on the store may accept it for longer (a larger clockTolerance): kept for the largest.
        // A store that reads but cannot be written now (a full disk, a standby) keeps them until a later purge:
        // the reload goes on (were the store down, the list below fails as well)
        await store.purgeExpiredRevocations(new Date(now - Math.max(toleranceMs, MAX_CLOCK_TOLERANCE * 1000))).catch((err: unknown) => {
          if (!(err instanceof StoreUnavailableError)) throw err;
        });
        this.lastPurge = now;
        full = true;
      }
      // read before the list: a change made while listing moves it again, and the next resync reloads
      const version = store.revocationsVersion ? await store.revocationsVersion() : undefined;
      if (!full && version !== undefined && version === this.loadedVersion) return;
      const snapshot = await store.listRevocations(deadBefore, new Date(now - this.options.maxTokenTtl * 1000 - toleranceMs));
      this.options.state.load(snapshot);
      this.loadedVersion = version;
    })().then(
      () => {
        this.running = undefined;
        this.confirmed();
      },
      (err: unknown) => {
        this.running = undefined;
        this.unconfirmed(err);
        throw err;
      },
    );
    return this.running;
  }

  private confirmed(): void {
    this.failing = false;
    const now = this.now();
    const before = this.confirmedAt;
    this.confirmedAt = now;
    if (this.stale) {
      this.stale = false;
      this.options.onStale?.(false, { sinceMs: before === undefined ? 0 : now - before });
    }
  }

  private unconfirmed(err: unknown): void {
    this.failing = true;
    const { maxStaleMs } = this.options;
    if (this.stale || maxStaleMs === undefined || this.confirmedAt === undefined) return;
    const sinceMs = this.now() - this.confirmedAt;
    if (sinceMs <= maxStaleMs) return;
    this.stale = true;
    this.options.onStale?.(true, { sinceMs, err });
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * The write side, for /oauth/revoke and the CLI: persist in the store, then
 * publish, so that a restart never forgets and the others hear at once.
 */
export class Revoker {
  constructor(
    private readonly store: RevocationStore,
    private readonly feed: RevocationFeed,
  ) {}

  /** RFC 7009: one token (its jti, owner, exp in epoch seconds and, when known, its generation: its `gen` claim, 0 without). */
  async token(jti: string, clientId: string, exp: number, gen?: number): Promise<void> {
    await this.store.revokeToken({ jti, clientId, exp: new Date(exp * 1000) });
    await this.feed.publish({ type: 'token', jti, clientId, exp, gen });
  }

  /** revoke-tokens: every token issued to the client so far; answers the new generation. */
  async clientTokens(clientId: string, at: Date): Promise<number> {
    const generation = await this.store.bumpTokenGeneration(clientId, at);
    await this.feed.publish({ type: 'tokens', clientId, generation, at: at.getTime() });
    return generation;
  }

  /** An update that took something away: call after ClientStore.updateClient() raised the generation (the store keeps it). */
  async clientTokensRaised(clientId: string, generation: number, at: Date): Promise<void> {
    await this.feed.publish({ type: 'tokens', clientId, generation, at: at.getTime() });
  }

  /** revoke: call after ClientStore.revokeClient() answered true (the store keeps revoked_at). */
  async client(clientId: string, at: Date): Promise<void> {
    await this.feed.publish({ type: 'client', clientId, at: at.getTime() });
  }
}
