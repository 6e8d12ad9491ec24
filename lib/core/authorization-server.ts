import { randomBytes } from 'node:crypto';
import type { IssuerConfig } from '../config';
import { InvalidDpopProofError, InvalidRequestError, InvalidTargetError, TemporarilyUnavailableError, type OAuthError } from '../errors';
import type { Logger } from '../logger';
import type { ClientRecord, RevocationNotifier, Store } from '../stores/types';
import type { FailedAuthLimiter } from './brute-force';
import { addressKey } from './address-key';
import { ClientAssertionVerifier } from './client-assertion';
import { refusalReason, ThrottledLog } from './refusal-log';
import { ClientService } from './clients';
import { MemoryReplayStore, verifyDpopProof, type DpopVerifyOptions, type ReplayStore, type VerifiedDpopProof } from './dpop';
import { signAccessToken, type IssuedToken } from './issuer';
import { KeyDerivedNonces } from './key-derived-nonces';
import { deferredKeyStore, KeyRevocationUnsupportedError, KeyRing, type LoadedKey } from './keys';
import { authorizationServerMetadata } from './metadata';
import type { IntrospectionResult } from './introspection';
import { IssuerAudiences } from './issuer-audiences';
import { IssuerClientAuth } from './issuer-client-auth';
import { IssuerHealthCheck, PING_TIMEOUT_MS, withTimeout, type IssuerHealth } from './issuer-health';
import { IssuerRevocations } from './issuer-revocations';
import { ReplayStoreHealth } from './replay-store-health';
import type { ServiceGate } from './service-gate';
import { StoreHealth } from './store-health';
import { clip } from '../shared/visible-text';
import { AccessTokenVerifier } from './verifier';

/** How long a failed start-up is kept before the next try (ms). */
const READY_RETRY_MS = 1000;
/** The client_id of the write probe's rows (no client_id has a space). */
const WRITE_PROBE_CLIENT = ' write-probe';
/** How often expired assertion jtis are deleted from the store. */
const JTI_PURGE_MS = 60_000;

/** A refused request's `resource` as its log line shows it: each value cut to 200 characters, at most 4 of them (escaped by the log). */
function loggedResource(resource: string | readonly string[]): string | string[] {
  const one = (value: string): string => clip(value, 200);
  return typeof resource === 'string' ? one(resource) : resource.slice(0, 4).map(one);
}

/**
 * Everything the issuer does, without HTTP: authenticate clients (see
 * IssuerClientAuth), sign tokens, hold the keys, verify tokens. The Express
 * layer only translates.
 */
export class AuthorizationServer {
  readonly clients: ClientService;
  readonly keys: KeyRing;
  readonly verifier: AccessTokenVerifier;
  readonly metadata: Record<string, unknown>;
  /** Every store call reports here: one `store.unavailable` per outage, then `store.recovered`. */
  readonly storeHealth: StoreHealth;
  /** With a shared DPoP replay store: one `dpop_replay_store.unavailable` per outage, then `dpop_replay_store.recovered`. */
  readonly replayHealth: ReplayStoreHealth | undefined;
  private store: Store | undefined;
  /** The same store, each call reported to `storeHealth` (the hot path reports inline instead). */
  private watched: Store | undefined;
  private readying: Promise<void> | undefined;
  /** When the last ready() failed; `undefined` while it runs or after it succeeded. */
  private readyFailedAt: number | undefined;
  /** True once ready() has finished (set there alone): the one check of the hot paths. */
  isReady = false;
  /** Set by close(): a start that failed is not tried again. */
  private closed = false;
  /** Readiness for health(): the store pinged at most once a second. */
  private readonly healthCheck: IssuerHealthCheck;
  /** Client authentication at the token, revocation and introspection endpoints. */
  readonly clientAuth: IssuerClientAuth;
  /** Every throttled refusal line of this issuer (keys: event, reason, client, address). */
  private readonly refusalLog: ThrottledLog;
  /** Purges expired assertion jtis off the request path. */
  private purgeTimer: NodeJS.Timeout | undefined;
  /** How DPoP proofs are checked here and by the issuer-bound requireBearer(): one replay store, one nonce source. */
  readonly dpop: DpopVerifyOptions;
  /** What is revoked (checked by every verifier of this issuer), kept in step with the store; the write side; the published list. */
  readonly revocations: IssuerRevocations;
  /** RFC 8707: the resources this issuer serves and a verifier per audience. */
  readonly audiences: IssuerAudiences;

  constructor(
    readonly config: IssuerConfig,
    private readonly openStore: () => Promise<Store>,
    readonly logger: Logger,
    limiter: FailedAuthLimiter | undefined,
    readonly now: () => number = Date.now,
    /** A shared DPoP replay store (Redis), and the gate of its client (shared with whatever else calls it). */
    dpopReplay?: { store: ReplayStore; gate: ServiceGate },
    /** Rings the other instances when something is revoked, besides the store's own notifications (a Redis doorbell). */
    revocationPush?: RevocationNotifier,
  ) {
    this.storeHealth = new StoreHealth(logger, now, {
      // while writes fail: a used-jti row under a client_id no client has, expired at once (purged with the others)
      probeWrite: () => withTimeout(this.store!.consumeJti(WRITE_PROBE_CLIENT, randomBytes(16).toString('base64url'), new Date(this.now())), PING_TIMEOUT_MS),
    });
    this.refusalLog = new ThrottledLog(logger, 60_000, now);
    this.revocations = new IssuerRevocations({
      config,
      logger,
      now,
      signingKey: () => this.keys.current(),
      publishedKids: () => this.keys.publishedKids(),
      push: revocationPush,
      // what rang may be a key change too (a rotation, a revoked key): reloaded now, not at the next key refresh
      onRing: () => {
        this.clientAuth.forgetClients();
        this.keys.reload().catch(() => undefined);
      },
    });
    this.clients = new ClientService(
      () => this.ready().then(() => this.watched!),
      logger,
      now,
      {
        client: (clientId, at) => this.revocations.writer.client(clientId, at),
        clientTokens: (clientId, at) => this.revocations.writer.clientTokens(clientId, at),
        clientTokensRaised: (clientId, generation, at) => this.revocations.writer.clientTokensRaised(clientId, generation, at),
        credentialsChanged: () => this.revocations.announce(),
      },
      (values) => this.audiences.clientResources(values),
      // a client updated through this issuer counts here from its next request
      (clientId) => this.clientAuth.forgetClient(clientId),
    );
    this.keys = new KeyRing(
      deferredKeyStore(() => this.watched!),
      {
        algorithm: config.algorithm,
        maxTokenTtl: config.accessTokenTtl + config.clockTolerance,
        reloadCooldownMs: 5_000,
        refreshMs: config.keyRefreshInterval * 1000,
        // a store that tells a version of its keys (the embedded file): a change by the CLI or another process on
        // it is in force here as soon as a revocation would be
        versionCheckMs: config.revocationResync * 1000,
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
      revocation: this.revocations.check,
    });
    this.metadata = authorizationServerMetadata(config);
    this.audiences = new IssuerAudiences(config, this.keys, this.revocations.check, now, this.verifier);
    // a client revoked, or its tokens (an update that took scopes away), anywhere: its cached record goes too
    this.revocations.state.onChange(() => this.clientAuth.forgetClients());
    const assertions = new ClientAssertionVerifier({
      issuer: config.issuer,
      tokenEndpoint: config.tokenEndpoint,
      otherEndpoints: [config.revocationEndpoint, config.introspectionEndpoint],
      audience: config.clientAssertionAudience,
      maxLifetime: config.clientAssertionMaxLifetime,
      clockTolerance: config.clockTolerance,
      consumeJti: (clientId, jtiHash, expiresAt) => this.watched!.consumeJti(clientId, jtiHash, expiresAt),
      now,
      onJwksUriRecovered: (uri, downMs, failures) =>
        logger.info({ event: 'client.jwks_uri_recovered', jwks_uri: uri, down_ms: downMs, failures }, "a client's jwks_uri can be fetched again"),
    });
    this.clientAuth = new IssuerClientAuth(this, config.clientCacheTtl, this.storeHealth, assertions, limiter, this.refusalLog, logger, now);
    this.replayHealth = dpopReplay && new ReplayStoreHealth(logger, { kind: 'redis', gate: dpopReplay.gate, now });
    this.dpop = {
      replay: dpopReplay ? this.replayHealth!.monitor(dpopReplay.store) : new MemoryReplayStore({ max: config.dpop.replayMax, now }),
      nonces: config.dpop.nonce ? new KeyDerivedNonces(this.keys, now) : undefined,
      maxAge: config.dpop.maxAge,
      clockTolerance: config.clockTolerance,
      now,
    };
    this.healthCheck = new IssuerHealthCheck(
      {
        ready: () => this.ready(),
        watchedStore: () => this.watched!,
        localStore: () => (this.store as { kind?: unknown } | undefined)?.kind === 'embedded',
        signingKid: () => (this.isReady ? this.keys.current().kid : null),
        storeHealth: this.storeHealth,
        replayHealth: this.replayHealth,
      },
      now,
    );
  }

  // ---- lifecycle: start, readiness, close

  /**
   * Opens the store and loads (or creates) the signing key. Safe to call
   * many times. When the store is unavailable it rejects with
   * StoreUnavailableError, and the next call after a second tries again: an
   * issuer started during an outage recovers without a restart.
   */
  /**
   * keys.revoke() once the store is open, refused before anything changes
   * on a store without deleteKey(): the key ring's store is deferred, and
   * could tell that only when called, after the rotation that replaces a
   * signing key.
   */
  async revokeKey(kid: string): Promise<{ revoked: LoadedKey; replacement: LoadedKey | undefined }> {
    await this.ready();
    if (typeof this.watched!.deleteKey !== 'function') throw new KeyRevocationUnsupportedError();
    const result = await this.keys.revoke(kid);
    // the other instances stop accepting its tokens, and signing with it, when the ring reaches them
    await this.revocations.announce();
    return result;
  }

  /** keys.rotate() once the store is open; the other instances are rung, and publish the new key at once. */
  async rotateKey(leadTimeMs: number): Promise<LoadedKey> {
    await this.ready();
    const key = await this.keys.rotate(leadTimeMs);
    await this.revocations.announce();
    return key;
  }

  ready(): Promise<void> {
    // closed: a start that failed is not tried again (it would open a store and timers nothing closes)
    if (this.closed && !this.isReady) return Promise.reject(new TemporarilyUnavailableError('the issuer is shut down', { detail: 'issuer closed' }));
    if (this.readyFailedAt !== undefined && this.readyFailedAt + READY_RETRY_MS <= this.now()) {
      this.readyFailedAt = undefined;
      this.readying = undefined;
    }
    this.readying ??= (async () => {
      if (!this.store) {
        const store = await this.storeHealth.watch(this.openStore());
        this.clientAuth.open(store);
        this.store = store;
        this.watched = this.storeHealth.monitor(store);
        this.startJtiPurge(store);
      }
      await this.keys.init();
      this.keys.startRefreshing();
      await this.revocations.start(this.watched!);
      this.isReady = true;
    })().catch((err: unknown) => {
      this.readyFailedAt = this.now();
      throw err;
    });
    return this.readying;
  }

  /** `null` once ready() has finished, else the promise to wait for: cheap on the hot path. */
  pending(): Promise<void> | null {
    return this.isReady ? null : this.ready();
  }

  /** Readiness (see IssuerHealthCheck): the store pinged at most once a second, the signing key named. */
  health(): Promise<IssuerHealth> {
    return this.healthCheck.health();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.stopTimers();
    if (!this.readying) return;
    await this.readying.catch(() => undefined);
    // a ready() still opening the store when close() was called started its timers since
    this.stopTimers();
    await this.revocations.close();
    await this.store?.close();
  }

  private stopTimers(): void {
    clearInterval(this.purgeTimer);
    this.keys.stopRefreshing();
    this.storeHealth.stop();
    this.replayHealth?.stop();
  }

  private startJtiPurge(store: Store): void {
    this.purgeTimer = setInterval(() => {
      store.purgeJtis(new Date(this.now())).catch(() => undefined); // an outage shows on the request path already
    }, JTI_PURGE_MS);
    this.purgeTimer.unref();
  }

  // ---- the core of the token, revocation and introspection endpoints

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
   * `null` while the signing keys are fresh (at most keyRefreshInterval old),
   * else the refresh to wait for before issue(): a process that did not run
   * for a while (frozen, suspended) might otherwise sign with a key retired
   * or pruned meanwhile. Never rejects.
   */
  freshKeys(): Promise<void> | null {
    return this.keys.fresh();
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
      // what this instance has learned, or the store's when the record is newer (a cut-off another instance or the CLI made)
      generation: Math.max(this.revocations.state.generation(client.clientId), client.tokenGeneration ?? 0),
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

  /** RFC 8707: the audience of a token for this client and its request's `resource`; InvalidTargetError when not served or not allowed. */
  audienceFor(client: ClientRecord, requested: string | string[] | undefined): string {
    return this.audiences.audienceFor(client, requested);
  }

  /** The verifier for tokens of `audience` (the default one when undefined); TypeError for an audience this issuer does not serve. */
  verifierFor(audience: string | undefined): AccessTokenVerifier {
    return this.audiences.verifierFor(audience);
  }

  /** RFC 7009 for an authenticated client (see IssuerRevocations.revoke). */
  revoke(client: ClientRecord, token: string): Promise<void> {
    return this.revocations.revoke(client, token, (t) => this.audiences.anyAudience.verify(t));
  }

  /** RFC 7662 for an authenticated client (see IssuerRevocations.introspect). */
  /** `ip`: the caller's address, for the log line of a refusal. */
  introspect(client: ClientRecord, token: string, ip?: string): Promise<IntrospectionResult> {
    return this.revocations.introspect(client, token, (t) => this.audiences.anyAudience.verify(t), ip);
  }

  /**
   * Logs a request the token, revocation or introspection endpoint refused
   * with a 4xx other than a failed client authentication or a 429 (those
   * are client.auth_failed and client.rate_limited): `token.refused`,
   * `revocation.refused` or `introspection.refused`, with a bounded `reason`,
   * the `error` code and status sent, `detail`, the `client_id` once the
   * client is authenticated, what the error adds (the client_id a request
   * with two authentication methods named), the `resource` refused
   * (invalid_target), and `ip`. At info for the first of a reason and
   * client (or address, before authentication) in a minute, the rest at debug.
   */
  refused(endpoint: 'token' | 'revocation' | 'introspection', error: OAuthError, source: { clientId?: string; ip?: string; resource?: string | readonly string[] }): void {
    const reason = refusalReason(error);
    const detail = error.detail !== undefined && error.detail !== reason ? error.detail : error.description;
    const line = {
      event: `${endpoint}.refused`,
      reason,
      error: error.code,
      status: error.status,
      detail: detail.slice(0, 300),
      ...(error instanceof InvalidRequestError && error.facts),
      ...(source.resource !== undefined && error instanceof InvalidTargetError && { resource: loggedResource(source.resource) }),
      ...(source.clientId !== undefined && { client_id: source.clientId }),
      ip: source.ip,
    };
    // an IPv6 address by its /64, as every other refusal window (one host picks any address of its /64)
    const who = source.clientId !== undefined ? `client:${source.clientId}` : `ip:${source.ip === undefined ? '' : addressKey(source.ip)}`;
    // a DPoP proof's checks are told apart (htu, replayed…): one misconfiguration does not hide another
    const kind = error instanceof InvalidDpopProofError ? `:${error.reason}` : '';
    this.refusalLog.report('info', `${endpoint}|${reason}${kind}|${who}`, line, `${endpoint} request refused: ${reason}`);
  }
}
