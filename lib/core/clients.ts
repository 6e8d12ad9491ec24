import type { Logger } from '../logger';
import type { ClientRecord, ClientStore } from '../stores/types';
import { scopeOption } from './scope';
import { generateClientId, generateSecret, hashSecret } from './secrets';
import { GRANT_TYPE } from './token-request';

/** A client as shown to operators: never a secret or a hash. */
export interface ClientInfo {
  clientId: string;
  name: string;
  scopes: string[];
  grantTypes: string[];
  createdAt: Date;
  revokedAt: Date | null;
  /** Secrets that authenticate now (more than one during a rotation window). */
  activeSecrets: number;
}

/** Fresh credentials; the only moment the secret exists in clear. */
export interface IssuedCredentials {
  clientId: string;
  clientSecret: string;
  name: string;
  scopes: string[];
}

export interface CreateClientInput {
  name: string;
  /** "a b" or ["a", "b"]. */
  scopes?: string | string[];
  /** Default `["client_credentials"]`. */
  grantTypes?: string[];
}

const NAME = /^[^\x00-\x1f\x7f]{1,200}$/;

/** Client lifecycle: the CLI and admin code go through here, never to the store directly. */
export class ClientService {
  constructor(
    private readonly store: () => Promise<ClientStore>,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  async create(input: CreateClientInput): Promise<IssuedCredentials> {
    if (!input || typeof input.name !== 'string' || !NAME.test(input.name.trim())) {
      throw new TypeError('a client needs a name of 1 to 200 printable characters');
    }
    const scopes = scopeOption('scopes', input.scopes);
    const grantTypes = input.grantTypes ?? [GRANT_TYPE];
    if (!Array.isArray(grantTypes) || !grantTypes.every((g) => typeof g === 'string' && /^[\x21-\x7e]+$/.test(g))) {
      throw new TypeError('grantTypes must be an array of grant type names');
    }
    const store = await this.store();
    const clientSecret = generateSecret();
    const createdAt = new Date(this.now());
    const clientId = generateClientId();
    const name = input.name.trim();
    await store.createClient({
      clientId,
      name,
      scopes,
      grantTypes,
      createdAt,
      secret: { hash: hashSecret(clientSecret), createdAt, expiresAt: null },
    });
    this.logger.info({ event: 'client.created', client_id: clientId, scope: scopes.join(' ') }, 'client created');
    return { clientId, clientSecret, name, scopes };
  }

  async list(): Promise<ClientInfo[]> {
    const store = await this.store();
    return (await store.listClients()).map((c) => this.info(c));
  }

  async get(clientId: string): Promise<ClientInfo | null> {
    const client = await (await this.store()).findClient(clientId);
    return client ? this.info(client) : null;
  }

  /** Ends the client and all its secrets at once. `false` when unknown or revoked already. */
  async revoke(clientId: string): Promise<boolean> {
    const done = await (await this.store()).revokeClient(clientId, new Date(this.now()));
    if (done) this.logger.info({ event: 'client.revoked', client_id: clientId }, 'client revoked');
    return done;
  }

  /**
   * Gives the client a new secret. The old ones keep working for
   * `keepOldFor` seconds (default 0: they end now). `null` when the client is
   * unknown or revoked.
   */
  async rotateSecret(clientId: string, options: { keepOldFor?: number } = {}): Promise<{ clientId: string; clientSecret: string } | null> {
    const keepOldFor = options.keepOldFor ?? 0;
    if (typeof keepOldFor !== 'number' || !Number.isFinite(keepOldFor) || keepOldFor < 0) {
      throw new TypeError('keepOldFor must be a number of seconds, 0 or more');
    }
    const now = this.now();
    const clientSecret = generateSecret();
    const ok = await (await this.store()).rotateSecret(
      clientId,
      { hash: hashSecret(clientSecret), createdAt: new Date(now), expiresAt: null },
      keepOldFor > 0 ? new Date(now + keepOldFor * 1000) : null,
    );
    if (!ok) return null;
    this.logger.info({ event: 'client.secret_rotated', client_id: clientId, keep_old_for: keepOldFor }, 'client secret rotated');
    return { clientId, clientSecret };
  }

  private info(client: ClientRecord): ClientInfo {
    const now = this.now();
    return {
      clientId: client.clientId,
      name: client.name,
      scopes: client.scopes,
      grantTypes: client.grantTypes,
      createdAt: client.createdAt,
      revokedAt: client.revokedAt,
      activeSecrets:
        client.revokedAt === null ? client.secrets.filter((s) => s.expiresAt === null || s.expiresAt.getTime() > now).length : 0,
    };
  }
}
