import { LRUCache } from 'lru-cache';
import type { IssuerConfig } from '../config';
import { InvalidClientError, InvalidTargetError, OAuthError, StoreUnavailableError, TooManyRequestsError } from '../errors';
import type { Logger } from '../logger';
import type { ClientRecord, Store } from '../stores/types';
import type { FailedAuthLimiter } from './brute-force';
import { AssertionRejectedError, ClientAssertionVerifier } from './client-assertion';
import { authenticateClient, type ClientCredentials } from './client-auth';
import { ClientService } from './clients';
import { MemoryReplayStore, verifyDpopProof, type DpopVerifyOptions, type ReplayStore, type VerifiedDpopProof } from './dpop';
import { signAccessToken, type IssuedToken } from './issuer';
import { KeyDerivedNonces } from './key-derived-nonces';
import { deferredKeyStore, KeyRing } from './keys';
import { authorizationServerMetadata } from './metadata';
import { introspect, revocationFor, type IntrospectionResponse } from './introspection';
import { RevocationState } from './revocation';
import { PublishedRevocationList } from './revocation-list';
import { parseResourceIndicator, ResourcePolicy } from './resources';
import { Revoker, StoreRevocationFeed } from './revocation-feed';
import { asTemporarilyUnavailable, StoreHealth } from './store-health';
import { AccessTokenVerifier } from './verifier';

/** What `health()` reports: ready to issue tokens when `ok`. */
export interface IssuerHealth {
  /** The store answers and a key signs now. */
  ok: boolean;
  store: 'up' | 'down';
  /** The kid of the key that signs now, `null` when none is loaded. */
  signingKid: string | null;
}

/** How long `health()` reuses its last answer, and how long a failed start-up is kept before the next try (ms). */
const HEALTH_TTL_MS = 1000;
const READY_RETRY_MS = 1000;
/** A ping that takes longer counts as `down`. */
const PING_TIMEOUT_MS = 2000;
/** How often expired assertion jtis are deleted from the store. */
const JTI_PURGE_MS = 60_000;

/**
 * Everything the issuer does, without HTTP: authenticate clients, sign
 * tokens, hold the keys, verify tokens. The Express layer only translates.
 */
export class AuthorizationServer {
  readonly clients: ClientService;
  readonly keys: KeyRing;
  readonly verifier: AccessTokenVerifier;
  readonly metadata: Record<string, unknown>;
  /** Every store call reports here: one `store.unavailable` per outage, then `store.recovered`. */
  readonly storeHealth: StoreHealth;
  private store: Store | undefined;
  /** The same store, each call reported to `storeHealth` (the hot path reports inline instead). */
  private watched: Store | undefined;
  private readying: Promise<void> | undefined;
  /** When the last ready() failed; `undefined` while it runs or after it succeeded. */
  private readyFailedAt: number | undefined;
  private lastHealth: { at: number; value: Promise<IssuerHealth> } | undefined;
  /** Found clients, briefly: a revoke reaches every instance within `clientCacheTtl`. */
  private clientCache: LRUCache<string, ClientRecord> | undefined;
  /** private_key_jwt assertions: keys imported once per client key set, jtis single use in the store. */
  readonly assertions: ClientAssertionVerifier;
  /** Purges expired assertion jtis off the request path. */
  private purgeTimer: NodeJS.Timeout | undefined;
  /** How DPoP proofs are checked here and by the issuer-bound requireBearer(): one replay store, one nonce source. */
  readonly dpop: DpopVerifyOptions;
  /** What is revoked, in memory: checked by the verifier on every token, loaded from and kept in step with the store. */
  readonly revocation: RevocationState;
  /** Reloads revocations from the store every 2 s, at once on a store notification (PostgreSQL LISTEN). */
  private revocationFeed: StoreRevocationFeed | undefined;
  private stopListening: (() => Promise<void>) | undefined;
  /** Persists, then applies and announces revocations (CLI, /oauth/revoke, issuer.clients). */
  private revoker: Revoker | undefined;
  /** RFC 8707: the resources this issuer serves (`audience` the default); undefined when `audience` is not a URI and no resources are set. */
  private readonly resources: ResourcePolicy | undefined;
  /** Verifiers of the issuer-bound requireBearer({ audience }) for resources other than the default, one per audience. */
  private readonly audienceVerifiers = new Map<string, AccessTokenVerifier>();
  /** The signed list standalone verifiers poll: re-signed when the state or the signing key changes, or half its 5 min lifetime passed. */
  readonly revocationList: PublishedRevocationList;

  constructor(
    readonly config: IssuerConfig,
    private readonly openStore: () => Promise<Store>,
    readonly logger: Logger,
    private readonly limiter: FailedAuthLimiter | undefined,
    readonly now: () => number = Date.now,
    dpopReplay?: ReplayStore,
  ) {
    this.storeHealth = new StoreHealth(logger, now);
    this.revocation = new RevocationState({ maxTokenTtl: config.accessTokenTtl, clockTolerance: config.clockTolerance, now });
    this.revocationList = new PublishedRevocationList({ state: this.revocation, issuer: config.issuer, signingKey: () => this.keys.current(), now });
    this.clients = new ClientService(
      () => this.ready().then(() => this.watched!),
      logger,
      now,
      {
        client: (clientId, at) => this.revoker!.client(clientId, at),
        clientTokens: (clientId, at) => this.revoker!.clientTokens(clientId, at),
      },
      (values) => this.clientResources(values),
    );
    this.keys = new KeyRing(
      deferredKeyStore(() => this.watched!),
      {
        algorithm: config.algorithm,
        maxTokenTtl: config.accessTokenTtl + config.clockTolerance,
        reloadCooldownMs: 5_000,
        refreshMs: config.keyRefreshInterval * 1000,
        rotationLeadTimeMs: config.keyRotationLeadTime * 1000,
        logger,
        now,
      },
    );
    this.verifier = new AccessTokenVerifier({
      issuer: config.issuer,
      audience: config.audience,
      keys: this.keys,
      clockTolerance: config.clockTolerance,
      cacheMax: config.tokenCacheMax,
      now,
      revocation: this.revocation,
    });
    this.metadata = authorizationServerMetadata(config);
    this.resources = resourcePolicy(config);
    this.assertions = new ClientAssertionVerifier({
      issuer: config.issuer,
      tokenEndpoint: config.tokenEndpoint,
      audience: config.clientAssertionAudience,
      clockTolerance: config.clockTolerance,
      consumeJti: (clientId, jtiHash, expiresAt) => this.watched!.consumeJti(clientId, jtiHash, expiresAt),
      now,
    });
    this.dpop = {
      replay: dpopReplay ?? new MemoryReplayStore({ max: config.dpop.replayMax, now }),
      nonces: config.dpop.nonce ? new KeyDerivedNonces(this.keys, now) : undefined,
      maxAge: config.dpop.maxAge,
      clockTolerance: config.clockTolerance,
      now,
    };
  }

  private startJtiPurge(store: Store): void {
    this.purgeTimer = setInterval(() => {
      store.purgeJtis(new Date(this.now())).catch(() => undefined); // an outage shows on the request path already
    }, JTI_PURGE_MS);
    this.purgeTimer.unref();
  }

  /**
   * Checks the token request's DPoP proof (RFC 9449 §5) against the
   * configured token endpoint URL (never the request's Host). Called after
   * the client is authenticated: anyone can sign proofs, and checking them
   * first would let strangers fill the replay store.
   */
  checkDpopProof(proof: string | string[]): VerifiedDpopProof | Promise<VerifiedDpopProof> {
    return verifyDpopProof(proof, { htm: 'POST', htu: this.config.tokenEndpoint }, this.dpop);
  }

  /**
   * Opens the store and loads (or creates) the signing key. Safe to call
   * many times. When the store is unavailable it rejects with
   * StoreUnavailableError, and the next call after a second tries again: an
   * issuer started during an outage recovers without a restart.
   */
  ready(): Promise<void> {
    if (this.readyFailedAt !== undefined && this.readyFailedAt + READY_RETRY_MS <= this.now()) {
      this.readyFailedAt = undefined;
      this.readying = undefined;
    }
    this.readying ??= (async () => {
      if (!this.store) {
        const store = await this.storeHealth.watch(this.openStore());
        // a store that keeps and invalidates found clients itself needs no second cache
        const ttl = this.config.clientCacheTtl ?? (store.cachesClients ? 0 : 2);
        if (ttl > 0) this.clientCache = new LRUCache({ max: 10_000, ttl: ttl * 1000 });
        this.store = store;
        this.watched = this.storeHealth.monitor(store);
        this.startJtiPurge(store);
      }
      await this.keys.init();
      await this.startRevocations(this.watched!);
      this.isReady = true;
    })().catch((err: unknown) => {
      this.readyFailedAt = this.now();
      throw err;
    });
    return this.readying;
  }

  /**
   * Loads what is revoked from the store, then keeps it current: a reload
   * every `revocationResync` seconds, and at once when another instance
   * notifies (stores with LISTEN/NOTIFY). A failed reload keeps the last
   * state; the next one tries again.
   */
  private async startRevocations(store: Store): Promise<void> {
    if (this.revocationFeed) return;
    const feed = new StoreRevocationFeed({
      state: this.revocation,
      store,
      maxTokenTtl: this.config.accessTokenTtl + this.config.clockTolerance,
      resyncMs: this.config.revocationResync * 1000,
      notify: store.notifyRevocations ? () => store.notifyRevocations!() : undefined,
      now: this.now,
      onError: () => undefined, // an outage is reported once by storeHealth
    });
    await feed.start();
    this.revocationFeed = feed;
    this.revoker = new Revoker(store, feed);
    this.revocation.start();
    if (store.listenRevocations) {
      this.stopListening = await store.listenRevocations(() => {
        feed.resync().catch(() => undefined);
      });
    }
  }

  /**
   * Verifies tokens for introspection and revocation: this issuer's tokens
   * for any of its audiences, revocations applied (a revoked token is
   * inactive, and revoking it again changes nothing).
   */
  private get anyAudience(): AccessTokenVerifier {
    this.anyAudienceVerifier ??= new AccessTokenVerifier({
      issuer: this.config.issuer,
      audience: this.audiences,
      keys: this.keys,
      clockTolerance: this.config.clockTolerance,
      cacheMax: 0,
      now: this.now,
      revocation: this.revocation,
    });
    return this.anyAudienceVerifier;
  }
  private anyAudienceVerifier: AccessTokenVerifier | undefined;

  /** Every audience this issuer's tokens carry. */
  get audiences(): string[] {
    return this.resources ? [this.config.audience, ...this.resources.list().filter((r) => r !== this.config.audience)] : [this.config.audience];
  }

  /**
   * RFC 8707: the `aud` of a token for this client and its request's
   * `resource` (undefined when absent, a list when repeated): the default
   * audience without one, else the one resource asked for, if the issuer
   * serves it and the client may use it. InvalidTargetError otherwise.
   */
  audienceFor(client: ClientRecord, requested: string | string[] | undefined): string {
    if (this.resources) return this.resources.audienceFor(requested, client.resources);
    if (requested === undefined) return this.config.audience;
    if (Array.isArray(requested) && requested.length > 1) throw new InvalidTargetError('only one resource per token request');
    parseResourceIndicator(Array.isArray(requested) ? requested[0] : requested);
    throw new InvalidTargetError('the requested resource is not served by this issuer');
  }

  /** The resources a client may be registered for, as the issuer spells them; TypeError naming the first it does not serve. */
  clientResources(values: readonly string[]): string[] {
    if (values.length === 0) return [];
    if (!this.resources) throw new TypeError('this issuer serves no resources (RFC 8707): set the resources option, with an audience that is an absolute URI');
    return this.resources.clientResources(values);
  }

  /** The verifier for tokens of `audience`: the default one, or one per other resource (same keys, cache size and revocations). */
  verifierFor(audience: string | undefined): AccessTokenVerifier {
    if (audience === undefined || audience === this.config.audience) return this.verifier;
    if (!this.audiences.includes(audience)) throw new TypeError(`audience ${JSON.stringify(audience)} is not one of this issuer's resources: ${this.audiences.join(', ')}`);
    let verifier = this.audienceVerifiers.get(audience);
    if (!verifier) {
      verifier = new AccessTokenVerifier({
        issuer: this.config.issuer,
        audience,
        keys: this.keys,
        clockTolerance: this.config.clockTolerance,
        cacheMax: this.config.tokenCacheMax,
        now: this.now,
        revocation: this.revocation,
      });
      this.audienceVerifiers.set(audience, verifier);
    }
    return verifier;
  }

  /**
   * RFC 7009 for an authenticated client: revokes `token` when it is one of
   * the client's own live access tokens; anything that is not a live token
   * of this issuer changes nothing (the endpoint answers 200 all the same);
   * another client's token → InvalidRequestError, and it stays valid.
   */
  async revoke(client: ClientRecord, token: string): Promise<void> {
    const event = await revocationFor(token, client.clientId, (t) => this.anyAudience.verify(t));
    if (!event || event.type !== 'token') return;
    try {
      await this.revoker!.token(event.jti, event.clientId, event.exp);
    } catch (err) {
      throw asTemporarilyUnavailable(err);
    }
    this.logger.info({ event: 'token.revoked', client_id: client.clientId, jti: event.jti }, 'access token revoked');
  }

  /**
   * RFC 7662 for an authenticated client: callers holding the `introspect`
   * permission learn a live token's claims; every other answer is exactly
   * `{ active: false }`, including for callers without the permission.
   */
  async introspect(client: ClientRecord, token: string): Promise<IntrospectionResponse> {
    if (!client.permissions.includes('introspect')) {
      this.logger.warn({ event: 'introspection.refused', client_id: client.clientId, reason: 'no_permission' }, 'introspection by a client without the introspect permission');
      return { active: false };
    }
    return introspect(token, (t) => this.anyAudience.verify(t), this.revocation);
  }

  /** `null` once ready() has finished, else the promise to wait for: cheap on the hot path. */
  pending(): Promise<void> | null {
    return this.isReady ? null : this.ready();
  }
  private isReady = false;

  private async findFresh(clientId: string): Promise<ClientRecord | null> {
    let client: ClientRecord | null;
    try {
      client = await this.store!.findClient(clientId);
    } catch (err) {
      this.storeHealth.failed(err);
      throw err;
    }
    this.storeHealth.succeeded();
    if (client && this.clientCache) this.clientCache.set(clientId, client);
    return client;
  }

  /** Checks the credentials against a cached record first, then (on failure) against the store. */
  private async check(credentials: ClientCredentials): Promise<ClientRecord> {
    const now = new Date(this.now());
    const cached = this.clientCache?.get(credentials.clientId);
    if (cached) {
      try {
        return await authenticateClient(async () => cached, credentials, now, this.assertions);
      } catch (err) {
        if (!(err instanceof InvalidClientError) || err.detail === 'assertion_replayed') throw err;
        // a rotated secret or an added key may be newer than the cached record
      }
    }
    return authenticateClient((id) => this.findFresh(id), credentials, now, this.assertions);
  }

  async authenticate(credentials: ClientCredentials, source: { ip?: string } = {}): Promise<ClientRecord> {
    // a store outage is a 503 (already reported to storeHealth by the store call that failed)
    if (!this.isReady) await this.ready().catch((err: unknown) => Promise.reject(asTemporarilyUnavailable(err)));
    // only what the caller controls can refuse it: its address, and this client_id from its address
    const limit = this.limiter && (await this.limiter.check(credentials.clientId, source.ip));
    if (limit && limit.retryAfterMs > 0) {
      this.logger.warn({ event: 'client.rate_limited', client_id: credentials.clientId, method: credentials.method, ip: source.ip, retry_after_ms: limit.retryAfterMs }, 'too many failed client authentications');
      throw new TooManyRequestsError(limit.retryAfterMs / 1000);
    }
    try {
      const client = await this.check(credentials);
      if (limit && limit.pairFailures > 0) await this.limiter!.succeeded(credentials.clientId, source.ip);
      return client;
    } catch (err) {
      if (err instanceof StoreUnavailableError) throw asTemporarilyUnavailable(err);
      if (err instanceof OAuthError) {
        const facts = err instanceof AssertionRejectedError ? err.facts : undefined;
        this.logger.warn({ event: 'client.auth_failed', client_id: credentials.clientId, method: credentials.method, ip: source.ip, reason: err.detail, ...facts }, 'client authentication failed');
        if (err instanceof InvalidClientError && this.limiter) await this.countFailure(credentials.clientId, source.ip, err.detail !== 'unknown_client');
      }
      throw err;
    }
  }

  /** Counts a failure; at the alert threshold (and each doubling) of a registered client, one audit event. */
  private async countFailure(clientId: string, ip: string | undefined, knownClient: boolean): Promise<void> {
    const { clientFailures, alert } = await this.limiter!.failed(clientId, ip, knownClient);
    if (!alert) return;
    const { alertFailuresPerClient, window } = this.limiter!.settings;
    this.logger.warn(
      { event: 'client.auth_failures_high', client_id: clientId, failures: clientFailures, threshold: alertFailuresPerClient, window_s: window, ip },
      'many failed authentications for one client; its right secret still works',
    );
  }

  /** Signs a token for `audience` (default: the default audience); bound to a DPoP key (`cnf.jkt`) when `jkt` is given. */
  issue(client: ClientRecord, scopes: string[], jkt?: string, audience: string = this.config.audience): IssuedToken {
    const issued = signAccessToken(this.keys.current(), {
      issuer: this.config.issuer,
      audience,
      clientId: client.clientId,
      scopes,
      ttl: this.config.accessTokenTtl,
      now: this.now(),
      jkt,
      generation: this.revocation.generation(client.clientId),
    });
    this.logger.info(
      {
        event: 'token.issued',
        client_id: client.clientId,
        scope: issued.claims.scope,
        jti: issued.claims.jti,
        exp: issued.claims.exp,
        ...(jkt && { token_type: 'DPoP' }),
        ...(audience !== this.config.audience && { aud: audience }),
      },
      'access token issued',
    );
    return issued;
  }

  /**
   * Readiness: pings the store (its `ping()`, else a read of the keys) and
   * names the signing key. Cheap: one ping per second at most, shared by
   * concurrent callers; a ping slower than 2 s counts as down.
   */
  health(): Promise<IssuerHealth> {
    const now = this.now();
    if (this.lastHealth && now - this.lastHealth.at < HEALTH_TTL_MS) return this.lastHealth.value;
    const value = this.checkHealth();
    this.lastHealth = { at: now, value };
    return value;
  }

  private async checkHealth(): Promise<IssuerHealth> {
    let up: boolean;
    try {
      await this.ready();
      const store = this.watched!;
      await withTimeout<unknown>(store.ping ? store.ping() : store.listKeys(), PING_TIMEOUT_MS);
      up = true;
    } catch {
      up = false;
    }
    let signingKid: string | null = null;
    if (this.isReady) {
      try {
        signingKid = this.keys.current().kid;
      } catch {
        signingKid = null;
      }
    }
    return { ok: up && signingKid !== null, store: up ? 'up' : 'down', signingKid };
  }

  async close(): Promise<void> {
    clearInterval(this.purgeTimer);
    if (!this.readying) return;
    await this.readying.catch(() => undefined);
    this.revocation.stop();
    await this.revocationFeed?.close();
    await this.stopListening?.().catch(() => undefined);
    await this.store?.close();
  }
}

/** The resource policy of a configuration: none when the audience is not a URI and no resources are set. */
function resourcePolicy(config: IssuerConfig): ResourcePolicy | undefined {
  let audienceIsUri = true;
  try {
    parseResourceIndicator(config.audience);
  } catch {
    audienceIsUri = false;
  }
  if (!audienceIsUri) {
    if (config.resources.length > 0) throw new TypeError('option resources needs an audience that is an absolute URI without query or fragment: the audience is the default resource');
    return undefined;
  }
  try {
    return new ResourcePolicy({ resources: config.resources, defaultResource: config.audience });
  } catch (err) {
    throw new TypeError(`option resources: ${(err as Error).message}`);
  }
}

/** Rejects after `ms` unless `promise` settles first; the timer never keeps the process alive. */
function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreUnavailableError(`no answer within ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
