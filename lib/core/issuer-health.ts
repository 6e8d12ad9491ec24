/**
 * One issuer's readiness, as `health()` reports it to a load balancer: the
 * store pinged, the signing key named, the shared DPoP replay store asked.
 */
import { StoreUnavailableError } from '../errors';
import { withDeadline } from '../shared/deadline';
import type { Store } from '../stores/types';
import type { ReplayStoreHealth } from './replay-store-health';
import type { StoreHealth } from './store-health';

/** What `health()` reports: ready to issue tokens when `ok`. */
export interface IssuerHealth {
  /** The store answers, and a key signs now; an embedded store must also take writes (a shared one that cannot is `read_only` on every instance, which stay in). */
  ok: boolean;
  /** `read_only`: reads work, writes fail (a full disk, a standby): what must write (private_key_jwt assertions, revocations) gets 503. */
  store: 'up' | 'read_only' | 'down';
  /** The kid of the key that signs now, `null` when none is loaded. */
  signingKid: string | null;
  /**
   * Only with a shared DPoP replay store (`dpop.redis`): whether it answered
   * the last proof (or probe). `down` does not clear `ok`: requests without
   * a DPoP proof are served, and the store is shared by every instance.
   */
  dpopReplayStore?: 'up' | 'down';
}

/** How long `health()` reuses its last answer (ms). */
const HEALTH_TTL_MS = 1000;
/** A ping that takes longer counts as `down`. */
export const PING_TIMEOUT_MS = 2000;

/** What the check reads of its issuer. */
export interface HealthSources {
  /** The issuer's ready(): opens the store and loads the keys. */
  ready(): Promise<void>;
  /** Once ready() opened it: the store, each call reported to storeHealth. */
  watchedStore(): Store;
  /** Whether the store is one only this instance writes (the embedded one). */
  localStore(): boolean;
  /** The kid of the key that signs now, `null` before ready() has finished; throws when none is loaded. */
  signingKid(): string | null;
  readonly storeHealth: StoreHealth;
  readonly replayHealth: ReplayStoreHealth | undefined;
}

export class IssuerHealthCheck {
  private last: { at: number; value: Promise<IssuerHealth> } | undefined;

  constructor(
    private readonly sources: HealthSources,
    private readonly now: () => number,
  ) {}

  /**
   * Readiness: pings the store (its `ping()`, else a read of the keys) and
   * names the signing key. Cheap: one ping per second at most, shared by
   * concurrent callers; a ping slower than 2 s counts as down.
   */
  health(): Promise<IssuerHealth> {
    const now = this.now();
    if (this.last && now - this.last.at < HEALTH_TTL_MS) return this.last.value;
    const value = this.check();
    this.last = { at: now, value };
    return value;
  }

  private async check(): Promise<IssuerHealth> {
    const sources = this.sources;
    let store: IssuerHealth['store'];
    try {
      await sources.ready();
      const watched = sources.watchedStore();
      await withTimeout<unknown>(watched.ping ? watched.ping() : watched.listKeys(), PING_TIMEOUT_MS);
      // the ping reads: a store that fails writes (a full disk) answers it
      store = sources.storeHealth.state === 'read_only' ? 'read_only' : 'up';
    } catch {
      store = 'down';
    }
    let signingKid: string | null;
    try {
      signingKid = sources.signingKid();
    } catch {
      signingKid = null;
    }
    // a store only this instance writes (the embedded one on a full disk) takes it out of rotation; a shared one
    // that cannot be written fails every instance alike, and taking them all out would refuse what still works
    // (tokens for clients with a secret, protected routes)
    const local = sources.localStore();
    const storeOk = store === 'up' || (store === 'read_only' && !local);
    const health: IssuerHealth = { ok: storeOk && signingKid !== null, store, signingKid };
    // asked now (a request with a DPoP proof may be long in coming), within the same ping timeout
    if (sources.replayHealth) health.dpopReplayStore = await replayStoreState(sources.replayHealth);
    return health;
  }
}

/** A shared DPoP replay store's readiness, asked now within the ping timeout (issuer and standalone health()). */
export async function replayStoreState(replay: ReplayStoreHealth): Promise<'up' | 'down'> {
  return (await withTimeout(replay.check(), PING_TIMEOUT_MS).catch(() => false)) ? 'up' : 'down';
}

/** Rejects with StoreUnavailableError after `ms` unless `promise` settles first. */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return withDeadline(promise, ms, () => new StoreUnavailableError(`no answer within ${ms} ms`));
}
