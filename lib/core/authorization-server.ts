import type { IssuerConfig } from '../config';
import { OAuthError } from '../errors';
import type { Logger } from '../logger';
import type { ClientRecord, Store } from '../stores/types';
import { authenticateClient, type ClientCredentials } from './client-auth';
import { ClientService } from './clients';
import { signAccessToken, type IssuedToken } from './issuer';
import { KeyRing } from './keys';
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

  constructor(
    readonly config: IssuerConfig,
    private readonly openStore: () => Promise<Store>,
    readonly logger: Logger,
    readonly now: () => number = Date.now,
  ) {
    this.clients = new ClientService(() => this.ready().then(() => this.store!), logger, now);
    this.keys = new KeyRing(
      { listKeys: () => this.store!.listKeys(), insertFirstKey: (k) => this.store!.insertFirstKey(k), rotateKey: (k, e) => this.store!.rotateKey(k, e), pruneKeys: (b) => this.store!.pruneKeys(b) },
      {
        algorithm: config.algorithm,
        maxTokenTtl: config.accessTokenTtl + config.clockTolerance,
        reloadCooldownMs: 5_000,
        refreshMs: 30_000,
        rotationLeadTimeMs: config.keyRotationLeadTime * 1000,
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
      this.store = await this.openStore();
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

  async authenticate(credentials: ClientCredentials, source: { ip?: string } = {}): Promise<ClientRecord> {
    await this.ready();
    try {
      return await authenticateClient((id) => this.store!.findClient(id), credentials, new Date(this.now()));
    } catch (err) {
      if (err instanceof OAuthError) {
        this.logger.warn(
          { event: 'client.auth_failed', client_id: credentials.clientId, reason: err.detail, method: credentials.method, ip: source.ip },
          'client authentication failed',
        );
      }
      throw err;
    }
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
