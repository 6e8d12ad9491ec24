import type { JsonWebKey, JwkInput } from '../jwt/jwk';
import type { Logger } from '../logger';
import { checkPublicJwk, jwkList, PRIVATE_JWK_MEMBERS } from '../jwt/public-jwk';
import { samePublicKey } from '../jwt/thumbprint';
import { checkJwksUri } from './client-jwks-uri';
import type { ClientAuthKind, ClientPermission, ClientPublicJwk, ClientRecord, ClientSettings, ClientStore, RevocationNotifier, RevocationStore, StoredClientChanges } from '../stores/types';
import { parseResourceIndicator } from './resources';
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
  /** `client_secret` or `private_key_jwt`. */
  authMethod: ClientAuthKind;
  /** The kids of a key-based client's public keys; empty for a secret-based one. */
  kids: string[];
  /** Where a key-based client publishes its keys, if it does. */
  jwksUri: string | null;
  /** `introspect` when the client may call `/oauth/introspect`. */
  permissions: ClientPermission[];
  /** Token requests without a DPoP proof are refused. */
  requireDpop: boolean;
  /** RFC 8707 resources it may ask tokens for; empty: the default audience only. */
  resources: string[];
}

/** What `ClientService.update()` may change; each given member replaces the client's. */
export interface ClientChanges {
  name?: string;
  /** "a b" or ["a", "b"]. */
  scopes?: string | string[];
  resources?: string[];
  permissions?: ClientPermission[];
  requireDpop?: boolean;
}

const CHANGEABLE: readonly string[] = ['name', 'scopes', 'resources', 'permissions', 'requireDpop'];

/** What `ClientService.update()` did. */
export interface ClientUpdate {
  clientId: string;
  /** The client's settings now. */
  settings: ClientSettings;
  /** The members that differ from before (none: nothing was written). */
  changed: ('name' | 'scopes' | 'resources' | 'permissions' | 'requireDpop')[];
  /** Something was taken away: the tokens issued before are revoked. */
  tokensRevoked: boolean;
}

/**
 * What an update of `current` to `next` changes, and whether it takes
 * something away (a scope, a resource) or makes DPoP required: the tokens
 * issued until then would keep what was taken, so they go.
 */
function planUpdate(current: ClientSettings, next: StoredClientChanges): { changed: ClientUpdate['changed']; narrows: boolean } {
  // resources compare as the issuer does (https://API.example/ is https://api.example)
  const was = { ...current, resources: current.resources.map(resourceKey) };
  const now = next.resources === undefined ? next : { ...next, resources: next.resources.map(resourceKey) };
  const changed = (Object.keys(next) as (keyof StoredClientChanges)[]).filter((field) => !sameValue(was[field], now[field]));
  const lost = (before: readonly string[], after: readonly string[] | undefined): boolean => after !== undefined && before.some((v) => !after.includes(v));
  // no list is the default audience alone: a first list takes it away unless it names it, which only the issuer can tell
  const defaultLost = was.resources.length === 0 && now.resources !== undefined && now.resources.length > 0;
  const narrows = lost(was.scopes, now.scopes) || lost(was.resources, now.resources) || defaultLost || (now.requireDpop === true && !was.requireDpop);
  return { changed, narrows };
}

/** A resource as the issuer compares them (RFC 8707 normalised), or as it is when it is no resource indicator. */
function resourceKey(value: string): string {
  try {
    return parseResourceIndicator(value);
  } catch {
    return value;
  }
}

/** Whether two stored values are the same: equal, or lists holding the same members. */
function sameValue(a: unknown, b: unknown): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((v) => b.includes(v)) && b.every((v) => a.includes(v));
  return a === b;
}

/** A key-based client as registered: no secret exists. */
export interface RegisteredKeyClient {
  clientId: string;
  name: string;
  scopes: string[];
  authMethod: 'private_key_jwt';
  /** The registered public keys, as stored (public members, `kid`, `alg`); empty with a jwksUri. */
  keys: ClientPublicJwk[];
  jwksUri: string | null;
}

export interface CreateKeyClientInput extends CreateClientInput {
  authMethod: 'private_key_jwt';
  /** The client's public keys: a JWK Set, one JWK or an array of JWKs; public members only. Or else `jwksUri`. */
  jwks?: { keys: unknown[] } | JwkInput | unknown[];
  /** Where the client publishes its public keys: https (http on loopback only); fetched with a timeout and size cap, cached. */
  jwksUri?: string;
}

/** Most public keys one client may have registered at once. */
export const MAX_CLIENT_KEYS = 8;

/** Most keys read from one key set, usable or not (a bound on the work; at most MAX_CLIENT_KEYS are kept). */
const MAX_KEYS_READ = 32;

/**
 * Why a key of a set is not one this issuer verifies client assertions with,
 * though the set may hold it (RFC 7517 §5: an encryption key, an Ed25519
 * key): such keys are skipped, as a jwks_uri's are. `undefined` for a key to
 * check (private or symmetric material is refused, never skipped).
 */
function notASigningKey(jwk: unknown): string | undefined {
  if (!jwk || typeof jwk !== 'object' || Array.isArray(jwk)) return undefined;
  const k = jwk as Record<string, unknown>;
  if (PRIVATE_JWK_MEMBERS.some((m) => m in k) || k.kty === 'oct') return undefined;
  if (typeof k.use === 'string' && k.use !== 'sig') return `use ${k.use.slice(0, 16)}: not a signing key`;
  if (Array.isArray(k.key_ops) && !k.key_ops.includes('verify')) return 'key_ops without verify: not a signing key';
  if (k.kty !== 'EC' && k.kty !== 'RSA') return `kty ${String(k.kty).slice(0, 16)}: this issuer verifies EC (P-256, P-384) and RSA keys`;
  if (k.kty === 'EC' && k.crv !== 'P-256' && k.crv !== 'P-384') return `curve ${String(k.crv).slice(0, 16)}: this issuer verifies P-256 and P-384`;
  return undefined;
}

/**
 * Checks public keys for registration: public members only, no symmetric
 * keys, RSA of 2048 bits or more, unique kids and keys, at most `MAX_CLIENT_KEYS`.
 * Keys a set may hold but that cannot sign assertions here (encryption keys,
 * Ed25519…) are skipped and told to `skipped`; a set with none left is refused.
 * Throws a TypeError with a one-line reason.
 */
export function checkClientKeys(input: unknown, skipped?: (index: number, reason: string) => void): ClientPublicJwk[] {
  const list = Array.isArray(input) ? input : jwkList(input);
  if (list.length === 0) throw new TypeError('a key-based client needs at least one public key');
  if (list.length > MAX_KEYS_READ) throw new TypeError(`at most ${MAX_CLIENT_KEYS} keys per client, got ${list.length}`);
  const keys: ClientPublicJwk[] = [];
  const notUsed: string[] = [];
  for (const [i, jwk] of list.entries()) {
    const skip = notASigningKey(jwk);
    if (skip !== undefined) {
      notUsed.push(list.length > 1 ? `key ${i + 1}: ${skip}` : skip);
      skipped?.(i, skip);
      continue;
    }
    const checked = checkPublicJwk(jwk);
    if (typeof checked === 'string') throw new TypeError(list.length > 1 ? `key ${i + 1}: ${checked}` : checked);
    if (keys.some((k) => k.kid === checked.jwk.kid)) throw new TypeError(`duplicate kid ${JSON.stringify(checked.jwk.kid)}`);
    // one key under two kids: removing one kid (a rotation, a leaked key) would leave the key working under the other
    const same = keys.findIndex((k) => samePublicKey(k, checked.jwk));
    if (same >= 0) throw new TypeError(`key ${i + 1} is the same public key as key ${same + 1} (kid ${JSON.stringify(keys[same].kid)})`);
    keys.push(checked.jwk as unknown as ClientPublicJwk);
  }
  if (keys.length === 0) throw new TypeError(`no key that signs client assertions: ${notUsed.join('; ')}`);
  if (keys.length > MAX_CLIENT_KEYS) throw new TypeError(`at most ${MAX_CLIENT_KEYS} keys per client, got ${keys.length}`);
  return keys;
}

/**
 * `deliver(created)`: hands new credentials (a secret, a client id) to
 * whoever needs them before they are stored. They are stored only once it
 * resolves, so a secret whose delivery failed (a closed pipe, a full disk)
 * never works and never replaces the one in use.
 */
export interface DeliverOptions<T> {
  deliver?: (created: T) => Promise<void>;
}

/**
 * A secret rotation that found the client's secrets changed since it read
 * them (another rotation at the same moment, through the CLI or another
 * instance): nothing was stored; the other rotation's secret is the one that works.
 */
export class SecretRotationConflictError extends Error {
  readonly code = 'secret_rotation_conflict';
  constructor(readonly clientId: string) {
    super(`the secret of client ${clientId} was rotated by another at the same time; this rotation changed nothing`);
    this.name = 'SecretRotationConflictError';
  }
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
  /** `['introspect']` lets the client call `/oauth/introspect` (a resource server). Default none. */
  permissions?: ClientPermission[];
  /** RFC 9449 `dpop_bound_access_tokens`: every token request must carry a DPoP proof. Default false. */
  requireDpop?: boolean;
  /** RFC 8707 resources (absolute URIs) the client may ask tokens for. Default none: the default audience only. */
  resources?: string[];
}

/**
 * 1 to 200 characters (code points), none of them a control, format,
 * surrogate, private-use or unassigned one (Unicode category C: zero-width
 * characters, bidi marks, embeddings, overrides and isolates, soft hyphens,
 * tag characters, BOM), a line or paragraph separator, or a Hangul filler:
 * a name is what operators read in lists and logs, and must look like what
 * it is.
 */
const NAME = /^[^\p{C}\p{Zl}\p{Zp}\u115f\u1160\u3164\uffa0]{1,200}$/u;

/** A client's name as stored (trimmed); TypeError unless 1 to 200 printable characters. */
function clientName(value: unknown): string {
  if (typeof value !== 'string' || !NAME.test(value.trim())) throw new TypeError(NAME_RULE);
  return value.trim();
}

function booleanOption(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(`${name} must be true or false`);
  return value;
}

const NAME_RULE = 'a client needs a name of 1 to 200 printable characters (no control, invisible or bidi characters)';

const MAX_CLIENT_SCOPES = 100;
const MAX_SCOPE_TEXT = 2000;

/** A client's scopes (scopeOption), at most MAX_CLIENT_SCOPES of them in MAX_SCOPE_TEXT characters. */
function clientScopes(value: unknown): string[] {
  const scopes = scopeOption('scopes', value);
  if (scopes.length > MAX_CLIENT_SCOPES) throw new TypeError(`at most ${MAX_CLIENT_SCOPES} scopes per client, got ${scopes.length}`);
  const length = scopes.join(' ').length;
  if (length > MAX_SCOPE_TEXT) throw new TypeError(`the scopes of a client take at most ${MAX_SCOPE_TEXT} characters (every token carries them), got ${length}`);
  return scopes;
}

const PERMISSIONS: readonly ClientPermission[] = ['introspect'];

function resourceList(value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw new TypeError('resources must be an array of absolute URIs');
  return value as string[];
}

/** Resources checked for their form only (absolute URI, no fragment or query), kept as given, without repeats. */
function resourceForms(values: readonly string[]): string[] {
  for (const v of values) {
    try {
      parseResourceIndicator(v);
    } catch (err) {
      throw new TypeError(`resource ${JSON.stringify(v)}: ${(err as Error).message}`);
    }
  }
  return [...new Set(values)];
}

function checkPermissions(value: unknown): ClientPermission[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((p) => PERMISSIONS.includes(p as ClientPermission))) {
    throw new TypeError(`permissions must be an array of ${PERMISSIONS.join(', ')}`);
  }
  return [...new Set(value as ClientPermission[])];
}

/**
 * Where a running issuer takes client revocations: applied to its own state
 * at once and announced to the other instances. Without it (the CLI), they
 * are persisted and announced through the store's notifier only; running
 * issuers learn of them on their next reload.
 */
export interface ClientRevocations {
  client(clientId: string, at: Date): Promise<void>;
  /** Answers the client's new token generation. */
  clientTokens(clientId: string, at: Date): Promise<number>;
  /** After the store raised the client's token generation itself (an update that took something away, in one transaction). */
  clientTokensRaised(clientId: string, generation: number, at: Date): Promise<void>;
  /**
   * After a secret or key stopped working (rotate-secret, client-key remove):
   * rings the running instances, which drop their cached record of the
   * client, so the old credential stops everywhere at once, not within
   * their client cache time. Best effort, as every ring.
   */
  credentialsChanged?(clientId: string): Promise<void>;
}

/**
 * Client revocations where no issuer runs (the CLI): persisted in the store
 * (revokeClient has written revoked_at already; a token generation is bumped
 * here), then announced by `notify`: the store's own notifier (PostgreSQL
 * NOTIFY), and whatever else rings the running instances (a Redis doorbell).
 * They reload within their revocationResync anyway.
 */
export function storeClientRevocations(
  store: () => Promise<RevocationStore>,
  notify: () => Promise<void>,
  /** A ring that failed: the revocation is stored already, so it is reported here and the call succeeds. */
  onNotifyError: (err: unknown) => void = () => undefined,
): ClientRevocations {
  const ring = (): Promise<void> => notify().catch(onNotifyError);
  return {
    client: ring,
    clientTokensRaised: ring,
    credentialsChanged: ring,
    async clientTokens(clientId, at) {
      const generation = await (await store()).bumpTokenGeneration(clientId, at);
      await ring();
      return generation;
    },
  };
}

/** Client lifecycle: the CLI and admin code go through here, never to the store directly. */
export class ClientService {
  private readonly revocations: ClientRevocations;

  constructor(
    private readonly store: () => Promise<ClientStore & RevocationStore & Partial<RevocationNotifier>>,
    private readonly logger: Logger,
    private readonly now: () => number = Date.now,
    /** Default: through the store, announced by its own notifier (see storeClientRevocations). */
    revocations?: ClientRevocations,
    /** Checks a client's resources against the issuer's (TypeError for one it does not serve); without it, their form only. */
    private readonly checkResources: (values: readonly string[]) => string[] = resourceForms,
    /** Told after update() wrote a client (a running issuer drops its cached record). */
    private readonly onUpdate: (clientId: string) => void = () => undefined,
  ) {
    this.revocations =
      revocations ??
      storeClientRevocations(
        store,
        async () => (await store()).notifyRevocations?.(),
        (err) => logger.warn({ event: 'revocation.not_announced', reason: err instanceof Error ? err.message : String(err) }, 'a revocation is stored, but the running instances could not be told: they learn of it at their next reload'),
      );
  }

  /**
   * Registers a client. With `options.deliver`, the new client (its secret
   * included) is handed to it before anything is stored, and stored only once
   * it resolves: a secret nobody received is never stored. A rejection
   * stores nothing and is rethrown.
   */
  create(input: CreateKeyClientInput, options?: DeliverOptions<RegisteredKeyClient>): Promise<RegisteredKeyClient>;
  create(input: CreateClientInput, options?: DeliverOptions<IssuedCredentials>): Promise<IssuedCredentials>;
  async create(
    input: CreateClientInput | CreateKeyClientInput,
    options: DeliverOptions<IssuedCredentials> | DeliverOptions<RegisteredKeyClient> = {},
  ): Promise<IssuedCredentials | RegisteredKeyClient> {
    const deliver = (options.deliver ?? (async () => undefined)) as (client: IssuedCredentials | RegisteredKeyClient) => Promise<void>;
    const authMethod = (input as { authMethod?: unknown } | undefined)?.authMethod ?? 'client_secret';
    if (authMethod !== 'client_secret' && authMethod !== 'private_key_jwt') {
      throw new TypeError(`authMethod must be client_secret or private_key_jwt, got ${JSON.stringify(authMethod)}`);
    }
    const { jwks, jwksUri: uri } = input as { jwks?: unknown; jwksUri?: unknown };
    if (authMethod !== 'private_key_jwt' && (jwks !== undefined || uri !== undefined)) throw new TypeError('jwks and jwksUri go with authMethod private_key_jwt');
    if (jwks !== undefined && uri !== undefined) throw new TypeError('give jwks or jwksUri, not both');
    const jwksUri = authMethod === 'private_key_jwt' && uri !== undefined ? checkJwksUri(uri) : undefined;
    const keys = authMethod === 'private_key_jwt' && jwksUri === undefined ? checkClientKeys(jwks) : undefined;
    if (!input) throw new TypeError(NAME_RULE);
    const name = clientName(input.name);
    const scopes = clientScopes(input.scopes);
    const grantTypes = input.grantTypes ?? [GRANT_TYPE];
    if (!Array.isArray(grantTypes) || !grantTypes.every((g) => typeof g === 'string' && /^[\x21-\x7e]+$/.test(g))) {
      throw new TypeError('grantTypes must be an array of grant type names');
    }
    const permissions = checkPermissions(input.permissions);
    const resources = this.checkResources(resourceList(input.resources));
    const requireDpop = booleanOption('requireDpop', input.requireDpop ?? false);
    const store = await this.store();
    const createdAt = new Date(this.now());
    const clientId = generateClientId();
    const common = { clientId, name, scopes, grantTypes, createdAt, permissions, requireDpop, resources };
    if (jwksUri !== undefined) {
      const created: RegisteredKeyClient = { clientId, name, scopes, authMethod: 'private_key_jwt', keys: [], jwksUri };
      await deliver(created);
      await store.createClient({ ...common, secret: null, authMethod: 'private_key_jwt', jwks: null, jwksUri });
      this.logger.info({ event: 'client.created', client_id: clientId, scope: scopes.join(' '), auth_method: 'private_key_jwt', jwks_uri: jwksUri }, 'client created');
      return created;
    }
    if (keys) {
      const created: RegisteredKeyClient = { clientId, name, scopes, authMethod: 'private_key_jwt', keys, jwksUri: null };
      await deliver(created);
      await store.createClient({ ...common, secret: null, authMethod: 'private_key_jwt', jwks: { keys } });
      this.logger.info(
        { event: 'client.created', client_id: clientId, scope: scopes.join(' '), auth_method: 'private_key_jwt', kids: keys.map((k) => k.kid) },
        'client created',
      );
      return created;
    }
    const clientSecret = generateSecret();
    const created: IssuedCredentials = { clientId, clientSecret, name, scopes };
    await deliver(created);
    await store.createClient({
      ...common,
      secret: { hash: hashSecret(clientSecret), createdAt, expiresAt: null },
    });
    this.logger.info({ event: 'client.created', client_id: clientId, scope: scopes.join(' ') }, 'client created');
    return created;
  }

  async list(): Promise<ClientInfo[]> {
    const store = await this.store();
    return (await store.listClients()).map((c) => this.info(c));
  }

  async get(clientId: string): Promise<ClientInfo | null> {
    const client = await (await this.store()).findClient(clientId);
    return client ? this.info(client) : null;
  }

  /**
   * Ends the client, all its secrets and every access token issued to it, at
   * once. `false` when unknown or revoked already.
   */
  async revoke(clientId: string): Promise<boolean> {
    const store = await this.store();
    const at = new Date(this.now());
    const done = await store.revokeClient(clientId, at);
    if (!done) return false;
    await this.revocations.client(clientId, at);
    this.logger.info({ event: 'client.revoked', client_id: clientId }, 'client revoked');
    return true;
  }

  /**
   * Refuses every access token issued to the client until now; the client
   * stays active and its new tokens work. `null` when the client is unknown
   * or revoked (its tokens are refused already); else the new generation.
   */
  async revokeTokens(clientId: string): Promise<{ generation: number } | null> {
    const store = await this.store();
    const client = await store.findClient(clientId);
    if (!client || client.revokedAt) return null;
    const at = new Date(this.now());
    const generation = await this.revocations.clientTokens(clientId, at);
    this.logger.info({ event: 'client.tokens_revoked', client_id: clientId, generation }, 'access tokens of client revoked');
    return { generation };
  }

  /**
   * Gives the client a new secret. The old ones keep working for
   * `keepOldFor` seconds (default 0: they end now). `null` when the client is
   * unknown or revoked. With `deliver`, as in create(): the new secret is
   * stored (and the old ones ended) only once `deliver` resolved; a rejection
   * changes nothing and is rethrown. A `SecretRotationConflictError` (and no
   * change) when another rotation of the client's secret happened in between.
   */
  async rotateSecret(
    clientId: string,
    options: { keepOldFor?: number } & DeliverOptions<{ clientId: string; clientSecret: string }> = {},
  ): Promise<{ clientId: string; clientSecret: string } | null> {
    const keepOldFor = options.keepOldFor ?? 0;
    if (typeof keepOldFor !== 'number' || !Number.isFinite(keepOldFor) || keepOldFor < 0) {
      throw new TypeError('keepOldFor must be a number of seconds, 0 or more');
    }
    const store = await this.store();
    const client = await store.findClient(clientId);
    if (client?.authMethod === 'private_key_jwt') {
      throw new TypeError(`client ${clientId} authenticates with keys (private_key_jwt), not a secret; use client-key add`);
    }
    // the rotation holds only on the secrets read here: one that ran meanwhile is not undone
    const seen = client?.secrets.map((s) => s.hash) ?? [];
    const now = this.now();
    const clientSecret = generateSecret();
    await options.deliver?.({ clientId, clientSecret });
    const ok = await store.rotateSecret(
      clientId,
      { hash: hashSecret(clientSecret), createdAt: new Date(now), expiresAt: null },
      keepOldFor > 0 ? new Date(now + keepOldFor * 1000) : null,
      seen,
    );
    if (!ok) {
      const after = await store.findClient(clientId);
      if (after && !after.revokedAt) throw new SecretRotationConflictError(clientId);
      return null;
    }
    this.logger.info({ event: 'client.secret_rotated', client_id: clientId, keep_old_for: keepOldFor }, 'client secret rotated');
    await this.credentialsChanged(clientId);
    return { clientId, clientSecret };
  }

  /**
   * Changes a live client's name or policy: its scopes, resources,
   * permissions or DPoP requirement (each replaced as a whole; an absent one
   * stays). When it takes something away (a scope, a resource) or makes DPoP
   * required, every token issued to the client before is revoked too, as
   * with `revokeTokens()`: a token keeps the scopes it was issued with until
   * it expires, so the change holds at once only that way; the client's next
   * token request gets what it may have now. What only adds revokes nothing.
   * `null` when the client is unknown or revoked; TypeError for a bad value
   * or no change asked for.
   */
  async update(clientId: string, changes: ClientChanges): Promise<ClientUpdate | null> {
    const next = this.checkChanges(changes);
    const store = await this.store();
    const at = new Date(this.now());
    // decided inside the store's transaction, on the settings the client has then: a concurrent
    // update cannot make one that takes something away look as if it only added
    let changed: ClientUpdate['changed'] = [];
    const done = await store.updateClient(
      clientId,
      (current) => {
        const plan = planUpdate(current, next);
        changed = plan.changed;
        return changed.length === 0 ? null : { changes: next, revokeTokens: plan.narrows };
      },
      at,
    );
    if (!done) return null;
    if (!done.written) return { clientId, settings: done.before, changed: [], tokensRevoked: false };
    const settings: ClientSettings = { ...done.before, ...next };
    const tokensRevoked = done.generation !== null;
    this.onUpdate(clientId);
    this.logger.info({ event: 'client.updated', client_id: clientId, changed, tokens_revoked: tokensRevoked }, 'client updated');
    // announced: a ring that fails is reported where it fails (a warning), and the instances reload within revocationResync
    if (done.generation !== null) await this.revocations.clientTokensRaised(clientId, done.generation, at);
    return { clientId, settings, changed, tokensRevoked };
  }

  /** The values of `changes`, checked as create() checks them; TypeError for a bad one or none at all. */
  private checkChanges(changes: ClientChanges): StoredClientChanges {
    if (!changes || typeof changes !== 'object') throw new TypeError('changes must be an object');
    // a misspelt member (scope for scopes) would otherwise change nothing and say so quietly
    const unknown = Object.keys(changes).filter((k) => !CHANGEABLE.includes(k));
    if (unknown.length > 0) throw new TypeError(`update() takes ${CHANGEABLE.join(', ')}; not ${unknown.map((k) => JSON.stringify(k)).join(', ')}`);
    const next: StoredClientChanges = {};
    if (changes.name !== undefined) next.name = clientName(changes.name);
    if (changes.scopes !== undefined) next.scopes = clientScopes(changes.scopes);
    if (changes.resources !== undefined) next.resources = this.checkResources(resourceList(changes.resources));
    if (changes.permissions !== undefined) next.permissions = checkPermissions(changes.permissions);
    if (changes.requireDpop !== undefined) next.requireDpop = booleanOption('requireDpop', changes.requireDpop);
    if (Object.keys(next).length === 0) throw new TypeError('nothing to change: give a name, scopes, resources, permissions or requireDpop');
    return next;
  }

  /**
   * Adds a public key to a key-based client (rotation: add the new key, move
   * the client to it, then remove the old one). Throws a TypeError for a
   * refused key, a duplicate kid or a full key set; `null` when the client is
   * unknown, revoked or secret-based.
   */
  async addKey(clientId: string, jwk: unknown): Promise<ClientPublicJwk | null> {
    const [key] = checkClientKeys([jwk]);
    const result = await (await this.store()).addClientKey(clientId, key, MAX_CLIENT_KEYS);
    if (result === 'unknown_client') return null;
    if (result === 'duplicate_kid') throw new TypeError(`client ${clientId} has a key with kid ${JSON.stringify(key.kid)} already`);
    if (result === 'duplicate_key') {
      const existing = (await this.listKeys(clientId))?.find((k) => samePublicKey(k, key));
      throw new TypeError(`client ${clientId} has this public key already${existing ? ` (kid ${JSON.stringify(existing.kid)})` : ''}: a new key needs a new key pair`);
    }
    if (result === 'too_many_keys') throw new TypeError(`client ${clientId} has ${MAX_CLIENT_KEYS} keys already; remove one first`);
    this.logger.info({ event: 'client.key_added', client_id: clientId, kid: key.kid }, 'client key added');
    return key;
  }

  /** Removes one key; `false` when there is no such key, it is the last one, or the client is not a live key-based one. */
  async removeKey(clientId: string, kid: string): Promise<boolean> {
    const done = await (await this.store()).removeClientKey(clientId, kid);
    if (!done) return false;
    this.logger.info({ event: 'client.key_removed', client_id: clientId, kid }, 'client key removed');
    await this.credentialsChanged(clientId);
    return true;
  }

  /** A credential stopped working: this instance's cached record goes, and the others are rung to drop theirs. */
  private async credentialsChanged(clientId: string): Promise<void> {
    this.onUpdate(clientId);
    await this.revocations.credentialsChanged?.(clientId);
  }

  /** The client's public keys; `null` when the client is unknown. */
  async listKeys(clientId: string): Promise<ClientPublicJwk[] | null> {
    const client = await (await this.store()).findClient(clientId);
    return client ? (client.jwks?.keys ?? []) : null;
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
      authMethod: client.authMethod,
      kids: client.jwks?.keys.map((k) => k.kid) ?? [],
      jwksUri: client.jwksUri,
      permissions: client.permissions,
      requireDpop: client.requireDpop,
      resources: client.resources,
    };
  }
}
