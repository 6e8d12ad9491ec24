import { LRUCache } from 'lru-cache';
import type { IssuerConfig } from '../config';
import { InvalidClientError, OAuthError, TooManyRequestsError } from '../errors';
import type { Logger } from '../logger';
import type { ClientRecord, Store } from '../stores/types';
import type { FailedAuthLimiter } from './brute-force';
import { authenticateClient, type ClientCredentials } from './client-auth';
import { ClientService } from './clients';
import { signAccessToken, type IssuedToken } from './issuer';
import { deferredKeyStore, KeyRing } from './keys';
import { authorizationServerMetadata } from './metadata';
import { AccessTokenVerifier } from './verifier';

/**
 * Everything the issuer does, without HTTP: authenticate clients, sign
 * tokens, hold the keys, verify tokens. The Express layer only translates.
 */
export class AuthorizationServer {
  readonly clients: ClientService;
  readonly keys: KeyRing;
  readonly verifier: AccessTokenVerifier;
  readonly metadata: Record<string, unknown>;
  private store: Store | undefined;
  private readying: Promise<void> | undefined;
  /** Found clients, briefly: a revoke reaches every instance within `clientCacheTtl`. */
  private clientCache: LRUCache<string, ClientRecord> | undefined;

  constructor(
    readonly config: IssuerConfig,
    private readonly openStore: () => Promise<Store>,
    readonly logger: Logger,
    private readonly limiter: FailedAuthLimiter | undefined,
    readonly now: () => number = Date.now,
  ) {
    this.clients = new ClientService(() => this.ready().then(() => this.store!), logger, now);
    this.keys = new KeyRing(
      deferredKeyStore(() => this.store!),
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
    });
    this.metadata = authorizationServerMetadata(config);
  }

  /** Opens the store and loads (or creates) the signing key. Safe to call many times. */
  ready(): Promise<void> {
    this.readying ??= (async () => {
      const store = await this.openStore();
      // a store that keeps and invalidates found clients itself needs no second cache
      const ttl = this.config.clientCacheTtl ?? (store.cachesClients ? 0 : 2);
      if (ttl > 0) this.clientCache = new LRUCache({ max: 10_000, ttl: ttl * 1000 });
      this.store = store;
      await this.keys.init();
      this.isReady = true;
    })();
    return this.readying;
  }

  /** `null` once ready() has finished, else the promise to wait for: cheap on the hot path. */
  pending(): Promise<void> | null {
    return this.isReady ? null : this.ready();
  }
  private isReady = false;

  private async findFresh(clientId: string): Promise<ClientRecord | null> {
    const client = await this.store!.findClient(clientId);
    if (client && this.clientCache) this.clientCache.set(clientId, client);
    return client;
  }

  /** Checks the credentials against a cached record first, then (on failure) against the store. */
  private async check(credentials: ClientCredentials): Promise<ClientRecord> {
    const now = new Date(this.now());
    const cached = this.clientCache?.get(credentials.clientId);
    if (cached) {
      try {
        return await authenticateClient(async () => cached, credentials, now);
      } catch (err) {
        if (!(err instanceof InvalidClientError)) throw err;
        // a rotated secret may be newer than the cached record
      }
    }
    return authenticateClient((id) => this.findFresh(id), credentials, now);
  }

  async authenticate(credentials: ClientCredentials, source: { ip?: string } = {}): Promise<ClientRecord> {
    await this.ready();
    const base = { client_id: credentials.clientId, method: credentials.method, ip: source.ip };
    // only what the caller controls can refuse it: its address, and this client_id from its address
    const limit = this.limiter && (await this.limiter.check(credentials.clientId, source.ip));
    if (limit && limit.retryAfterMs > 0) {
      this.logger.warn({ event: 'client.rate_limited', ...base, retry_after_ms: limit.retryAfterMs }, 'too many failed client authentications');
      throw new TooManyRequestsError(limit.retryAfterMs / 1000);
    }
    try {
      const client = await this.check(credentials);
      if (limit && limit.pairFailures > 0) await this.limiter!.succeeded(credentials.clientId, source.ip);
      return client;
    } catch (err) {
      if (err instanceof OAuthError) {
        this.logger.warn({ event: 'client.auth_failed', ...base, reason: err.detail }, 'client authentication failed');
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

  issue(client: ClientRecord, scopes: string[]): IssuedToken {
    const issued = signAccessToken(this.keys.current(), {
      issuer: this.config.issuer,
      audience: this.config.audience,
      clientId: client.clientId,
      scopes,
      ttl: this.config.accessTokenTtl,
      now: this.now(),
    });
    this.logger.info(
      { event: 'token.issued', client_id: client.clientId, scope: issued.claims.scope, jti: issued.claims.jti, exp: issued.claims.exp },
      'access token issued',
    );
    return issued;
  }

  async close(): Promise<void> {
    if (!this.readying) return;
    await this.readying.catch(() => undefined);
    await this.store?.close();
  }
}
