import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import type { JsonWebKey } from '../jwt/jwk';
import { jwkThumbprint } from '../jwt/thumbprint';
import type { Logger } from '../logger';
import type { KeyStore, StoredKey } from '../stores/types';
import { UnknownKidGate } from './unknown-kid-gate';
import { StoreUnavailableError } from '../errors';
import { FollowUp } from '../shared/follow-up';

export const SIGNING_ALGORITHMS = ['ES256', 'RS256'] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

/** A public key as published in the JWKS. */
export interface PublicJwk extends JsonWebKey {
  kid: string;
  alg: string;
  use: 'sig';
}

/** A key ready for use: key objects are built once, never per request. */
export interface LoadedKey {
  kid: string;
  alg: string;
  publicKey: KeyObject;
  /** Only on the issuer's own keys. */
  privateKey?: KeyObject;
  jwk: PublicJwk;
  /** Epoch ms from which the key signs. */
  activatesAt: number;
  /** Epoch ms at which the key stopped signing; `null` while current or pending. */
  retiredAt: number | null;
  /** The longest a token it signed may be valid, in seconds, as the store records it (0: not recorded). */
  tokenTtl?: number;
}

/** Finds the verification key for a `kid`; may fetch or reload, so it may answer with a promise. */
export interface KeyResolver {
  /** The key when it is known now, without fetching or I/O. `now` (epoch ms), when given, lets a remote set refresh itself in the background once old. */
  peek(kid: string, now?: number): LoadedKey | undefined;
  resolve(kid: string): LoadedKey | undefined | Promise<LoadedKey | undefined>;
}

/** A KeyStore whose store is opened later (or lazily): every call waits for it. */
export function deferredKeyStore(get: () => KeyStore | Promise<KeyStore>): KeyStore {
  return {
    listKeys: async () => (await get()).listKeys(),
    insertFirstKey: async (key) => (await get()).insertFirstKey(key),
    rotateKey: async (key, expected) => (await get()).rotateKey(key, expected),
    // `now` on: with it the store keeps the keys whose recorded token lifetime has not run out
    pruneKeys: async (before, now) => (await get()).pruneKeys(before, now),
    raiseKeyTokenTtl: async (kids, tokenTtl) => {
      await (await get()).raiseKeyTokenTtl?.(kids, tokenTtl);
    },
    deleteKey: async (kid, now) => {
      const store = await get();
      if (!store.deleteKey) throw new KeyRevocationUnsupportedError();
      return store.deleteKey(kid, now);
    },
    keysVersion: async () => (await get()).keysVersion?.(),
  };
}

/** RFC 7638 thumbprint, used as `kid` (shared with DPoP: lib/jwt/thumbprint). */
export { jwkThumbprint };

function publicMembers(jwk: JsonWebKey): JsonWebKey {
  return jwk.kty === 'EC' ? { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y } : { kty: jwk.kty, n: jwk.n, e: jwk.e };
}

/** A new key pair for `alg`, as the store keeps it. */
export function generateStoredKey(alg: SigningAlgorithm, now: Date, activatesAt: Date = now): StoredKey {
  const { privateKey, publicKey } =
    alg === 'ES256'
      ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
      : generateKeyPairSync('rsa', { modulusLength: 2048 });
  const publicJwk = publicMembers(publicKey.export({ format: 'jwk' }));
  return {
    kid: jwkThumbprint(publicJwk),
    alg,
    privateJwk: JSON.stringify(privateKey.export({ format: 'jwk' })),
    publicJwk: JSON.stringify(publicJwk),
    createdAt: now,
    activatesAt,
    retiredAt: null,
  };
}

export function loadStoredKey(stored: StoredKey): LoadedKey {
  const publicJwk = JSON.parse(stored.publicJwk) as JsonWebKey;
  return {
    kid: stored.kid,
    alg: stored.alg,
    publicKey: createPublicKey({ key: publicJwk, format: 'jwk' }),
    privateKey: createPrivateKey({ key: JSON.parse(stored.privateJwk) as JsonWebKey, format: 'jwk' }),
    jwk: { ...publicMembers(publicJwk), kid: stored.kid, alg: stored.alg, use: 'sig' },
    activatesAt: stored.activatesAt.getTime(),
    retiredAt: stored.retiredAt ? stored.retiredAt.getTime() : null,
    tokenTtl: stored.tokenTtl ?? 0,
  };
}

/** The key that signs at `now`: one of the issuer's own keys, activated, not retired, the most recently activated. */
export function signingKeyAt(keys: Iterable<LoadedKey>, now: number): LoadedKey | undefined {
  let best: LoadedKey | undefined;
  for (const k of keys) {
    if (!k.privateKey || k.activatesAt > now || (k.retiredAt !== null && k.retiredAt <= now)) continue;
    if (!best || k.activatesAt > best.activatesAt) best = k;
  }
  return best;
}

/** Whether a key not yet active will never sign: a later rotation withdrew it (it retires when it would have activated). */
export function isWithdrawn(k: Pick<LoadedKey, 'activatesAt' | 'retiredAt'>): boolean {
  return k.retiredAt !== null && k.retiredAt <= k.activatesAt;
}

/**
 * A key's status at `now`, among `keys`: `current` for the one key that
 * signs (signingKeyAt), `pending` for a key that will sign once it activates,
 * `retired` for any other (it signs no more, or a later rotation withdrew it
 * before it ever signed; published until the tokens it may have signed expire).
 */
export function keyStatus(key: LoadedKey, keys: Iterable<LoadedKey>, now: number): 'pending' | 'current' | 'retired' {
  if (signingKeyAt(keys, now) === key) return 'current';
  return key.activatesAt > now && !isWithdrawn(key) ? 'pending' : 'retired';
}

export interface KeyRingOptions {
  algorithm: SigningAlgorithm;
  /**
   * Longest access token lifetime in seconds (clock tolerance included): a
   * retired key stays published that long, or longer when another instance
   * on the store recorded a longer one for it. Recorded on every key this
   * instance may sign with, before it does.
   */
  maxTokenTtl: number;
  /**
   * Whether this process signs tokens (default true). A process that never
   * does (the CLI) records no lifetime on the keys and creates keys with
   * none: the issuers that load them record theirs.
   */
  signs?: boolean;
  /** Shortest interval between two reloads caused by an unknown kid, in ms. */
  reloadCooldownMs: number;
  /** Keys are reloaded in the background when older than this (another instance or the CLI may have rotated), in ms. */
  refreshMs: number;
  /**
   * With a store that tells a version of its keys (KeyStore.keysVersion()):
   * how often it is read, in ms, and the keys reloaded when it moved.
   * Default: never (the keys wait for `refreshMs`).
   */
  versionCheckMs?: number;
  /** Lead time of the rotation made at start-up when the configured algorithm changed, in ms. */
  rotationLeadTimeMs: number;
  /** Receives `key.rotated` and `key.pruned` audit events. */
  logger?: Logger;
  now: () => number;
}

/** A rotation that found the keys changed by another (an instance or the CLI rotating at the same moment); nothing was written. */
export class KeyRotationConflictError extends Error {
  constructor() {
    super('the signing keys changed during the rotation; list them and try again');
    this.name = 'KeyRotationConflictError';
  }
}

/** KeyRing.revoke(): no key of the store has this kid. */
export class UnknownSigningKeyError extends Error {
  constructor(readonly kid: string) {
    super(`no signing key has kid ${kid}`);
    this.name = 'UnknownSigningKeyError';
  }
}

/** KeyRing.revoke() on a store whose KeyStore has no deleteKey(). */
export class KeyRevocationUnsupportedError extends Error {
  constructor() {
    super('this store cannot delete a signing key (its KeyStore has no deleteKey())');
    this.name = 'KeyRevocationUnsupportedError';
  }
}

/**
 * The issuer's signing keys: which key signs now, which are published, and
 * rotation. Persisted through a `KeyStore`, so every instance on one store
 * sees the same keys.
 */
export class KeyRing implements KeyResolver {
  private keys = new Map<string, LoadedKey>();
  private jwksDocument: { keys: PublicJwk[] } = { keys: [] };
  private lastReload = 0;
  /** Reloads for unknown kids: a failed one (store unreachable) is retried after the cooldown too. */
  private readonly unknownKids: UnknownKidGate;
  private reloading: Promise<void> | undefined;
  /** The reload that follows the one in flight (see reload()). */
  private readonly afterReload = new FollowUp();
  /** The refresh in flight (a prune when one is due, then a reload); it never rejects. */
  private refreshing: Promise<void> | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private versionTimer: NodeJS.Timeout | undefined;
  /** The store's keysVersion() read before the last reload (undefined: it tells none). */
  private loadedVersion: string | number | undefined;
  /** Whether init() created the store's first key: at most one process on a store ever sees `true`. */
  createdFirstKey = false;

  constructor(
    private readonly store: KeyStore,
    private readonly options: KeyRingOptions,
  ) {
    this.unknownKids = new UnknownKidGate({ cooldownMs: options.reloadCooldownMs, failedRetryMs: options.reloadCooldownMs, now: options.now });
  }

  /** Loads the keys; creates the first one, or rotates at once when the configured algorithm changed. */
  async init(): Promise<void> {
    const now = new Date(this.options.now());
    let stored = await this.store.listKeys();
    if (!stored.some((k) => k.retiredAt === null)) {
      const first = { ...generateStoredKey(this.options.algorithm, now), tokenTtl: this.ownTokenTtl() };
      stored = await this.store.insertFirstKey(first);
      this.createdFirstKey = stored.some((k) => k.kid === first.kid);
    }
    this.replace(stored);
    // before this instance signs anything: its lifetime on the keys it may sign with. A store that reads but
    // cannot be written now (a standby during a failover) does not stop the start: the next reload records it
    await this.recordTokenTtl().catch((err: unknown) => {
      if (!(err instanceof StoreUnavailableError)) throw err;
    });
    if (!this.hasKeyOfOwnAlgorithm()) await this.rotateAtInit();
  }

  /** Whether a key not retired has the configured algorithm (the signing key, or one pending to replace it). */
  private hasKeyOfOwnAlgorithm(): boolean {
    return [...this.keys.values()].some((k) => k.retiredAt === null && k.alg === this.options.algorithm);
  }

  /**
   * The rotation to a changed algorithm at start. Instances started together
   * (a deployment after SIGNING_ALG changed) all see the old algorithm and
   * rotate at once; one wins, and the others find its key on reload: theirs
   * too, so they start with it. Only a rotation that lost to one of another
   * algorithm is tried again, once.
   */
  private async rotateAtInit(): Promise<void> {
    try {
      await this.rotate(this.options.rotationLeadTimeMs);
    } catch (err) {
      if (!(err instanceof KeyRotationConflictError)) throw err;
      // rotate() reloaded the keys
      if (!this.hasKeyOfOwnAlgorithm()) await this.rotate(this.options.rotationLeadTimeMs);
    }
  }

  /** The lifetime this process records on keys: its own when it signs, else none. */
  private ownTokenTtl(): number {
    return this.options.signs === false ? 0 : this.options.maxTokenTtl;
  }

  /**
   * Raises the recorded token lifetime of the keys this instance may still
   * sign with (not retired, or retiring later: a rotation is pending) to this
   * instance's where it is lower.
   */
  private async recordTokenTtl(): Promise<void> {
    const ttl = this.ownTokenTtl();
    const now = this.options.now();
    const lower = [...this.keys.values()].filter((k) => (k.retiredAt === null || k.retiredAt > now) && (k.tokenTtl ?? 0) < ttl);
    if (lower.length === 0 || !this.store.raiseKeyTokenTtl) return;
    await this.store.raiseKeyTokenTtl(lower.map((k) => k.kid), ttl);
    for (const k of lower) k.tokenTtl = ttl;
  }

  /** When a retired key's tokens have all expired: by the longest lifetime recorded for it, or this instance's. */
  private expiresAt(k: LoadedKey): number {
    return k.retiredAt! + Math.max(k.tokenTtl ?? 0, this.options.maxTokenTtl) * 1000;
  }

  private replace(stored: StoredKey[]): void {
    const previous = this.keys;
    this.keys = new Map(stored.map((k) => [k.kid, previous.get(k.kid) ?? loadStoredKey(k)]));
    for (const k of stored) {
      const loaded = this.keys.get(k.kid)!;
      loaded.retiredAt = k.retiredAt ? k.retiredAt.getTime() : null;
      loaded.tokenTtl = Math.max(loaded.tokenTtl ?? 0, k.tokenTtl ?? 0);
    }
    this.jwksDocument = { keys: [...this.keys.values()].map((k) => k.jwk) };
    this.lastReload = this.options.now();
  }

  /**
   * Reloads from the store (another instance or the CLI may have rotated):
   * a read that starts after this call. While one is in flight, it may have
   * read the store before the change the caller knows of (its own rotation,
   * another instance's ring), so one more follows it, shared by everyone
   * who asks meanwhile.
   */
  reload(): Promise<void> {
    return this.afterReload.run(this.reloading, () => this.readKeys());
  }

  /** A reload, or the one under way (which may have read the store before a change the caller knows of: see reload()). */
  private readKeys(): Promise<void> {
    this.reloading ??= (async () => {
      // read before the keys: a change made while listing moves it again, and the next check reloads
      const version = this.store.keysVersion ? await this.store.keysVersion() : undefined;
      this.replace(await this.store.listKeys());
      this.loadedVersion = version;
    })()
      // a key another instance or the CLI added: recorded before it signs (it is pending for the lead time); a
      // store that cannot be written now (reads still work) fails no reload: the next refresh records it
      .then(() => this.recordTokenTtl().catch(() => undefined))
      .finally(() => {
        this.reloading = undefined;
      });
    return this.reloading;
  }

  /**
   * Starts a background reload when the keys are older than `refreshMs`, and
   * prunes retired keys whose tokens have all expired; never waits for it.
   */
  private refreshIfStale(now: number): void {
    if (now - this.lastReload >= this.options.refreshMs) void this.refresh(now);
  }

  /** A reload (after a prune when one is due), unless one runs: then that one. Never rejects. */
  private refresh(now: number): Promise<void> {
    this.refreshing ??= (async () => {
      const prunable = [...this.keys.values()].some((k) => k.retiredAt !== null && this.expiresAt(k) < now);
      // a prune that removed keys reloaded them already
      // by the clock: a reload under way is as recent as one started now
      if (!prunable || (await this.prune()) === 0) await this.readKeys();
    })()
      .catch(() => {
        // the store is unreachable: keep signing with the keys we have and try again later
        this.lastReload = this.options.now();
      })
      .finally(() => {
        this.refreshing = undefined;
      });
    return this.refreshing;
  }

  /**
   * `null` while the keys are at most `refreshMs` old, else the refresh to
   * wait for before signing (it never rejects: with the store down, the keys
   * held sign). The timer keeps an idle instance's keys fresh; this covers a
   * process that was not running meanwhile (a frozen container, a suspended
   * machine), whose first request would otherwise be signed before the
   * overdue timer ran. One comparison on the token path.
   */
  fresh(): Promise<void> | null {
    const now = this.options.now();
    return now - this.lastReload < this.options.refreshMs ? null : this.refresh(now);
  }

  /**
   * Reloads (and prunes) every `refreshMs` whether requests come or not. A
   * request only starts a reload it does not wait for, so an instance that
   * had none for a while would sign its next tokens with the keys it loaded
   * last: after a rotation, with a retired key, or one pruned meanwhile
   * (401 unknown_kid everywhere for those tokens). The timer keeps no
   * process alive; stopRefreshing() ends it.
   */
  startRefreshing(): void {
    if (this.refreshTimer || !Number.isFinite(this.options.refreshMs)) return;
    this.refreshTimer = setInterval(() => void this.refresh(this.options.now()), this.options.refreshMs);
    this.refreshTimer.unref();
    const every = this.options.versionCheckMs;
    if (every !== undefined && Number.isFinite(every) && this.store.keysVersion) {
      this.versionTimer = setInterval(() => void this.checkVersion(), every);
      this.versionTimer.unref();
    }
  }

  stopRefreshing(): void {
    clearInterval(this.refreshTimer);
    clearInterval(this.versionTimer);
    this.refreshTimer = undefined;
    this.versionTimer = undefined;
  }

  /** Reloads when the store's keysVersion() moved since the last reload; a store that does not answer is left to the refresh. */
  private async checkVersion(): Promise<void> {
    if (this.reloading || this.refreshing) return;
    try {
      const version = await this.store.keysVersion!();
      if (version === undefined) {
        // a store that tells none (a deferred store learns only now which it is): nothing to check
        clearInterval(this.versionTimer);
        this.versionTimer = undefined;
      } else if (version !== this.loadedVersion) {
        await this.refresh(this.options.now());
      }
    } catch {
      // the store is down: the held keys go on signing, and the refresh timer tries again
    }
  }

  /** The key that signs now: active, not retired, the most recently activated. */
  current(): LoadedKey {
    const now = this.options.now();
    this.refreshIfStale(now);
    const best = signingKeyAt(this.keys.values(), now);
    if (!best) throw new Error('no signing key is active; was ready() awaited?');
    return best;
  }

  /** Every published key: pending, current and retired-but-not-yet-expired. */
  jwks(): { keys: PublicJwk[] } {
    this.refreshIfStale(this.options.now());
    return this.jwksDocument;
  }

  /** The kids jwks() publishes, in its order (the signed revocation list names them). */
  publishedKids(): string[] {
    this.refreshIfStale(this.options.now());
    return [...this.keys.keys()];
  }

  list(): LoadedKey[] {
    return [...this.keys.values()];
  }

  peek(kid: string): LoadedKey | undefined {
    return this.keys.get(kid);
  }

  /**
   * A known key at once; for an unknown kid, a reload from the store, unless
   * one in the last `reloadCooldownMs` already failed to find a kid: made-up
   * kids cost one store read per cooldown, a new key is found at once. The
   * rules are an UnknownKidGate's, as RemoteJwks's are; unlike RemoteJwks, a
   * reload under way is joined only when the gate lets the kid through.
   */
  resolve(kid: string): LoadedKey | undefined | Promise<LoadedKey | undefined> {
    const key = this.keys.get(kid);
    if (key) return key;
    const gate = this.unknownKids.check(this.options.now());
    if (gate === 'unknown') return undefined;
    // the store could not be asked: say so again (a 503, not "unknown kid") until the cooldown ends
    if (gate === 'failed') return Promise.reject(this.unknownKids.failure);
    // a reload under way is as good as a new one for a kid nobody here made
    return this.readKeys().then(
      () => this.unknownKids.fetched(this.keys.get(kid)),
      (err: unknown) => {
        this.unknownKids.fetchFailed(err);
        throw err;
      },
    );
  }

  /**
   * Publishes a new key now and lets it sign after `leadTimeMs`; the key that
   * signs now keeps signing until then and retires at that moment. A key
   * still pending from an earlier rotation is withdrawn: it never signs, and
   * stays published until the tokens it could have signed have expired.
   * Fails when another instance rotated first (then the caller reloads and
   * sees that rotation).
   */
  async rotate(leadTimeMs: number): Promise<LoadedKey> {
    await this.reload();
    const now = this.options.now();
    const expected = [...this.keys.values()].filter((k) => k.retiredAt === null).map((k) => k.kid);
    const signing = signingKeyAt(this.keys.values(), now);
    const withdrawn = [...this.keys.values()].filter((k) => k.activatesAt > now && !isWithdrawn(k) && (k.retiredAt === null || k.retiredAt > now));
    const stored = { ...generateStoredKey(this.options.algorithm, new Date(now), new Date(now + leadTimeMs)), tokenTtl: this.ownTokenTtl() };
    if (!(await this.store.rotateKey(stored, expected))) {
      await this.reload();
      throw new KeyRotationConflictError();
    }
    await this.reload();
    if (this.store.raiseKeyTokenTtl) {
      const raise = async (k: LoadedKey, slackMs: number): Promise<void> => {
        await this.store.raiseKeyTokenTtl!([k.kid], Math.max(k.tokenTtl ?? 0, this.options.maxTokenTtl) + Math.ceil(slackMs / 1000));
      };
      // an instance that has not reloaded since may sign with a withdrawn key for one key refresh after it was due:
      // its recorded token lifetime covers that, so it is not pruned before those tokens expire
      for (const k of withdrawn) await raise(k, this.options.refreshMs);
      // with a lead time shorter than the key refresh, an instance may learn of the rotation only after the signing key
      // retired, and sign with it until then (up to refresh − lead after its retirement): likewise
      if (signing && leadTimeMs < this.options.refreshMs) await raise(signing, this.options.refreshMs - leadTimeMs);
      if (withdrawn.length > 0 || (signing && leadTimeMs < this.options.refreshMs)) await this.reload();
    }
    this.options.logger?.info(
      { event: 'key.rotated', kid: stored.kid, alg: stored.alg, activates_at: stored.activatesAt.toISOString(), replaces: signing ? [signing.kid] : [], ...(withdrawn.length > 0 && { withdrawn: withdrawn.map((k) => k.kid) }) },
      'signing key rotated',
    );
    return this.keys.get(stored.kid)!;
  }

  /**
   * Takes a key out at once, for a key whose private part may have leaked:
   * it is deleted from the store, so it is no longer published and every
   * token it signed is refused, here at once, by the other instances on the
   * store at their next key reload (within the key refresh, or sooner on a
   * token whose kid they then no longer know) and by standalone verifiers at
   * their next JWKS refresh. A key that signs now, or would sign later (a
   * rotation's pending key), is first replaced by a rotation with no lead
   * time, so a new key signs at once. Answers the key taken out and the new
   * key, if one was made. Throws UnknownSigningKeyError,
   * KeyRotationConflictError (another rotation at the same time: nothing was
   * deleted) or KeyRevocationUnsupportedError.
   */
  async revoke(kid: string): Promise<{ revoked: LoadedKey; replacement: LoadedKey | undefined }> {
    if (!this.store.deleteKey) throw new KeyRevocationUnsupportedError();
    await this.reload();
    const key = this.keys.get(kid);
    if (!key) throw new UnknownSigningKeyError(kid);
    const signsNowOrLater = !isWithdrawn(key) && (key.retiredAt === null || key.retiredAt > this.options.now());
    const replacement = signsNowOrLater ? await this.rotate(0) : undefined;
    const deleted = await this.store.deleteKey(kid, new Date(this.options.now()));
    await this.reload();
    // not deleted and still there: it signs again, which only a change made at the same moment elsewhere can do
    if (!deleted && this.keys.has(kid)) throw new KeyRotationConflictError();
    this.options.logger?.warn(
      { event: 'key.revoked', kid, alg: key.alg, replaced_by: replacement?.kid ?? null },
      'signing key revoked: no longer published, every token it signed is refused',
    );
    return { revoked: key, replacement };
  }

  /** Drops retired keys once no token they signed can still be valid. */
  async prune(): Promise<number> {
    const now = this.options.now();
    const before = new Date(now - this.options.maxTokenTtl * 1000);
    // the store's rule decides (it keeps what another instance recorded a longer lifetime for): the kids gone are
    // those it listed before and not after, both read from the store (this ring's view may be behind, or empty
    // as the CLI's; a reload in flight may have started before the delete)
    const listed = (await this.store.listKeys()).map((k) => k.kid);
    const removed = await this.store.pruneKeys(before, new Date(now));
    if (removed > 0) {
      const left = new Set((await this.store.listKeys()).map((k) => k.kid));
      this.options.logger?.info({ event: 'key.pruned', count: removed, kids: listed.filter((kid) => !left.has(kid)) }, 'retired signing keys pruned');
      await this.reload();
    }
    return removed;
  }
}
