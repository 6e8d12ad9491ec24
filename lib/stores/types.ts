import type { RateLimiterAbstract } from 'rate-limiter-flexible';

/**
 * The storage contract. Every store (embedded SQLite, PostgreSQL, or one of
 * your own) implements `ClientStore` and `KeyStore`. Stores hold data only:
 * what revocation or a scope means is decided in `lib/core`, never here.
 *
 * When the backing database cannot be reached or used (connection refused or
 * lost, timeouts, a read-only or full disk), a store rejects with
 * `StoreUnavailableError` from `lib/errors.ts`: the issuer then answers 503
 * instead of 500 and logs the outage once.
 */

/** One hashed client secret. A client has one current secret and, during a rotation window, older ones. */
export interface StoredSecret {
  /** Opaque hash produced by `core/secrets.ts`; never the secret itself. */
  hash: string;
  createdAt: Date;
  /** When the secret stops authenticating; `null` = until replaced or revoked. */
  expiresAt: Date | null;
}

export interface ClientRecord {
  clientId: string;
  name: string;
  /** Scopes the client may request; each an RFC 6749 §3.3 scope-token (no spaces). */
  scopes: string[];
  /** Grant types the client may use, e.g. `["client_credentials"]`; each without spaces. */
  grantTypes: string[];
  createdAt: Date;
  /** Set once the client is revoked; a revoked client never authenticates again. */
  revokedAt: Date | null;
  /** Newest first. */
  secrets: StoredSecret[];
  /** How the client authenticates: a shared secret, or a JWT signed with its private key (RFC 7523). */
  authMethod: ClientAuthKind;
  /** The client's public keys (`private_key_jwt` only), public members only; `null` otherwise. */
  jwks: ClientJwks | null;
  /** Where a `private_key_jwt` client publishes its public keys, instead of `jwks`; `null` otherwise. */
  jwksUri: string | null;
  /**
   * RFC 8707 resources (APIs) the client may request tokens for, as the
   * issuer spells them; empty = the issuer's default resource only.
   */
  resources: string[];
  /** What the client may do besides getting tokens: `introspect` (call `/oauth/introspect`). */
  permissions: ClientPermission[];
  /** RFC 9449 `dpop_bound_access_tokens`: token requests without a DPoP proof are refused. */
  requireDpop: boolean;
  /**
   * The client's token generation as the store had it when the record was
   * read (0, or absent, before any `revoke-tokens`): new tokens carry at
   * least this one, so a token issued after a cut-off is not refused once
   * the instance learns of the cut-off.
   */
  tokenGeneration?: number;
}

export type ClientPermission = 'introspect';

export type ClientAuthKind = 'client_secret' | 'private_key_jwt';

/** A public JWK as registered for a client; always with a `kid`. */
export interface ClientPublicJwk {
  kty: string;
  kid: string;
  [member: string]: unknown;
}

export interface ClientJwks {
  keys: ClientPublicJwk[];
}

export interface NewClient {
  clientId: string;
  name: string;
  scopes: string[];
  grantTypes: string[];
  createdAt: Date;
  /** The first secret; `null` for a key-based client. */
  secret: StoredSecret | null;
  /** Default `client_secret`. */
  authMethod?: ClientAuthKind;
  /** With `private_key_jwt`: the public keys (non-empty), or else `jwksUri`. */
  jwks?: ClientJwks | null;
  jwksUri?: string | null;
  /** Default `[]` (the default resource only). */
  resources?: string[];
  /** Default `[]`. */
  permissions?: ClientPermission[];
  /** Default `false`. */
  requireDpop?: boolean;
}

/** The settings of a client that `updateClient` may change. */
export interface ClientSettings {
  name: string;
  scopes: string[];
  resources: string[];
  permissions: ClientPermission[];
  requireDpop: boolean;
}

/** What `updateClient` writes: the changes, and whether the client's tokens issued until now go with them. */
export interface ClientSettingsChange {
  changes: StoredClientChanges;
  revokeTokens: boolean;
}

/** What `updateClient` changes; an absent member stays as it is. */
export interface StoredClientChanges {
  name?: string;
  scopes?: string[];
  resources?: string[];
  permissions?: ClientPermission[];
  requireDpop?: boolean;
}

/** What `addClientKey` did. `duplicate_key`: the client has the same public key already, under another kid. */
export type AddClientKeyResult = 'added' | 'unknown_client' | 'duplicate_kid' | 'duplicate_key' | 'too_many_keys';

export interface ClientStore {
  /**
   * `true` when the store keeps found clients in memory and invalidates them
   * itself as soon as they change anywhere; the issuer then adds no cache of
   * its own (otherwise it keeps them for `clientCacheTtl`).
   */
  readonly cachesClients?: boolean;
  /** The client, with its secrets, or `null` when unknown. Revoked clients are returned too. */
  findClient(clientId: string): Promise<ClientRecord | null>;
  /** Rejects when `clientId` already exists. */
  createClient(client: NewClient): Promise<void>;
  /** Every client, oldest first. */
  listClients(): Promise<ClientRecord[]>;
  /** Marks the client revoked and ends all its secrets; `false` when unknown or already revoked. */
  revokeClient(clientId: string, at: Date): Promise<boolean>;
  /**
   * Adds `secret` as the current secret. Every older secret gets
   * `expiresAt = min(its expiresAt, keepOldUntil ?? secret.createdAt)`: with
   * `keepOldUntil` null the old secrets end as the new one starts. Only if
   * the client's secrets are still the ones the caller read (their hashes,
   * `expectedSecrets`, in any order), checked in the same transaction as the
   * write: a rotation decided on a view another rotation changed meanwhile
   * would end that rotation's brand-new secret. `false` (and no change) when
   * the client is unknown or revoked, or its secrets are not `expectedSecrets`.
   *
   * Declare all four parameters. A store written for the older three
   * (`clientId, secret, keepOldUntil`) still compiles, since TypeScript lets
   * an implementation take fewer, but rotates unconditionally: of two
   * rotations at once (two instances, or one and the CLI) both succeed and
   * the later ends the secret the earlier handed out. `createIssuer()` logs
   * `store.rotate_secret_unconditional` (warn, once per store) when this
   * function declares 1 to 3 parameters.
   */
  rotateSecret(clientId: string, secret: StoredSecret, keepOldUntil: Date | null, expectedSecrets: readonly string[]): Promise<boolean>;
  /**
   * Changes a live client's settings in one transaction: reads them, kept
   * from other writers until the end, asks `decide` what to write (`null`:
   * nothing), writes it, and when it says `revokeTokens` raises the client's
   * token generation (as `bumpTokenGeneration()`, dated `at`), so that the
   * change and the revocation of the tokens issued before it land together
   * or not at all, decided on what the client had at that moment. `null`
   * when the client is unknown or revoked; else its settings before, what
   * was written, and the new generation when raised.
   */
  updateClient(
    clientId: string,
    decide: (current: ClientSettings) => ClientSettingsChange | null,
    at: Date,
  ): Promise<{ before: ClientSettings; written: ClientSettingsChange | null; generation: number | null } | null>;
  /**
   * Appends `jwk` to a live `private_key_jwt` client's key set, atomically
   * refusing a `kid` already there or a set that would exceed `maxKeys`.
   * `unknown_client` for an unknown, revoked or secret-based client, or one whose keys are at a `jwksUri`.
   */
  addClientKey(clientId: string, jwk: ClientPublicJwk, maxKeys: number): Promise<AddClientKeyResult>;
  /**
   * Removes the key `kid` from a live `private_key_jwt` client; `false` (and
   * no change) when there is no such key or it is the client's last one.
   */
  removeClientKey(clientId: string, kid: string): Promise<boolean>;
  /**
   * Records a client assertion's `jti` (its SHA-256, base64url) as used,
   * atomically: `true` the first time for (clientId, jtiHash, expiresAt),
   * `false` when it was recorded already (a replay). Kept at least until
   * `expiresAt`. A replayed assertion comes with the same `expiresAt` (the
   * issuer derives it from the assertion's `exp` and its `clockTolerance`,
   * which instances sharing a store share too), so a store may key by it:
   * the embedded one orders its entries by expiry; PostgreSQL's refuses a
   * (clientId, jtiHash) whatever the expiry.
   */
  consumeJti(clientId: string, jtiHash: string, expiresAt: Date): Promise<boolean>;
  /** Deletes recorded jtis that expired before `before`; returns how many. */
  purgeJtis(before: Date): Promise<number>;
  /**
   * Resolves when the store answers a trivial read now; rejects (with a
   * `StoreUnavailableError`) when it cannot. Optional: readiness checks fall
   * back to `listKeys()`. Should answer within a few seconds either way.
   */
  ping?(): Promise<void>;
  /** Releases files, pools and timers. */
  close(): Promise<void>;
}

/** A signing key as persisted. Private material never leaves the key store and `core/keys.ts`. */
export interface StoredKey {
  kid: string;
  alg: string;
  /** Private key as a JWK (JSON text). */
  privateJwk: string;
  /** Public key as a JWK (JSON text), without `kid`/`alg`/`use`. */
  publicJwk: string;
  createdAt: Date;
  /** The key signs from this moment on; it is published in the JWKS from `createdAt`. */
  activatesAt: Date;
  /** Set when a newer key took over; the key stays published until `retiredAt + max token lifetime`. */
  retiredAt: Date | null;
  /**
   * The longest a token signed with this key may stay valid, in seconds (its
   * lifetime plus the clock tolerance), as the instances that may sign with
   * it recorded it: instances with different lifetimes on one store keep the
   * key for the longest. 0 or absent: not recorded (a key of an older version).
   */
  tokenTtl?: number;
}

/**
 * The longest a token can be valid at any instance, in seconds:
 * accessTokenTtl's bound (86,400) plus clockTolerance's (300). The lifetime
 * the migrations record on keys written before lifetimes were recorded.
 */
export const LONGEST_TOKEN_TTL = 86_400 + 300;

export interface KeyStore {
  /** Every key not yet pruned, oldest first. */
  listKeys(): Promise<StoredKey[]>;
  /**
   * Inserts `key` only when no key exists whose `retiredAt` is null, atomically
   * (two instances starting at once end with exactly one key). Returns the
   * keys as they are after the call.
   */
  insertFirstKey(key: StoredKey): Promise<StoredKey[]>;
  /**
   * Inserts `key`, in one transaction, only if the set of kids whose
   * `retiredAt` is null is still `expectedCurrent`; returns `false` (and
   * changes nothing) otherwise. As of `key.createdAt` (now), the keys not yet
   * retired then change too: one that has activated (the key that signs now)
   * retires at `key.activatesAt`, so it signs until the new key does; one
   * still pending (an earlier rotation's, not active yet) is withdrawn: its
   * `retiredAt` becomes its own `activatesAt`, so it never signs, and it stays
   * published until the tokens it could have signed (an instance that has
   * not reloaded yet) have expired. No key retires before it activates.
   */
  rotateKey(key: StoredKey, expectedCurrent: string[]): Promise<boolean>;
  /**
   * Deletes keys retired before `retiredBefore`, except, when `now` is given,
   * those whose `retiredAt + tokenTtl` is still after it. Returns how many
   * were deleted.
   */
  pruneKeys(retiredBefore: Date, now?: Date): Promise<number>;
  /** Raises the recorded `tokenTtl` of these keys to `tokenTtl` where it is lower (optional: without it each instance prunes by its own lifetime). */
  raiseKeyTokenTtl?(kids: string[], tokenTtl: number): Promise<void>;
  /**
   * Deletes the key `kid` at once, whatever tokens it signed are still
   * valid (a key whose private part leaked: `keys revoke`), but only if it
   * signs no more: retired at or before `now`, or withdrawn (retired as it
   * would activate). Answers whether a key was deleted. Optional: without
   * it, `keys revoke` is refused.
   */
  deleteKey?(kid: string, now: Date): Promise<boolean>;
  /**
   * Optional, cheap: a value that changes whenever the keys may have changed
   * (written by anyone on the same data); undefined when the store cannot
   * tell. A running issuer reads it every few seconds and reloads its keys
   * when it moved, so a rotation or a revoked key made elsewhere is in force
   * there at once, where it would wait for the next key refresh. A store
   * that rings the instances (RevocationNotifier) needs none.
   */
  keysVersion?(): Promise<string | number | undefined>;
}

/** Every revocation in force, JSON-safe: what `listRevocations()` answers, and what `RevocationState` (core/revocation.ts) snapshots, loads and the signed list carries. */
export interface RevocationSnapshot {
  /** Denylisted tokens. */
  tokens: { jti: string; client_id: string; exp: number }[];
  /** Per-client cut-offs: `generation` > 0 after revoke-tokens; `revoked_at` (epoch ms) for a revoked client. */
  clients: { client_id: string; generation: number; revoked_at: number | null }[];
}

/**
 * What a store keeps for revocations (PostgreSQL tables, the embedded file),
 * so that they survive restarts and every instance shares them. Times are
 * Dates as elsewhere in the stores.
 */
export interface RevocationStore {
  /** Adds a jti to the denylist until `exp`; adding it twice changes nothing. */
  revokeToken(entry: { jti: string; clientId: string; exp: Date }): Promise<void>;
  /**
   * Raises the client's token generation by one, atomically; answers the new generation. In the same
   * transaction it should delete the client's denylisted tokens: the new generation refuses them all, and an
   * instance drops them from memory when it learns of it. (A store that keeps them until they expire is
   * still right, but they count again toward `maxRevokedTokensPerClient` at each reload, so past the cap
   * each revocation by that client takes all its tokens until they expire.)
   */
  bumpTokenGeneration(clientId: string, at: Date): Promise<number>;
  /**
   * The denylist entries not yet expired at `now`, every client generation
   * above 0, and clients revoked after `revokedSince` (older ones have no
   * live token left). All as of one moment (one transaction, or a snapshot
   * isolation): a listed token must never be of a generation above the one
   * listed for its client, since instances drop its entry once they learn of
   * a generation above that (read the generations in one statement and the
   * tokens in another, outside a transaction, and a cut-off with a token
   * revoked after it could land in between: that token's entry would go at
   * the next cut-off an instance hears of, and the token pass until the next reload).
   */
  listRevocations(now: Date, revokedSince: Date): Promise<RevocationSnapshot>;
  /** Deletes denylist entries whose token expired before `now`; answers how many. */
  purgeExpiredRevocations(now: Date): Promise<number>;
  /**
   * Optional, cheap: a value that changes whenever the revocations may have
   * changed (written by this store object or by anyone else on the same
   * data). While it stays the same, a periodic reload is skipped: with
   * thousands of entries, listRevocations() is the expensive part.
   */
  revocationsVersion?(): Promise<string | number>;
}

/**
 * Optional push between the instances on one store (PostgreSQL
 * LISTEN/NOTIFY): `notifyRevocations()` after a revocation is persisted;
 * `listenRevocations(cb)` calls `cb` whenever any instance notified.
 * Without it, instances learn of revocations by polling the store.
 */
export interface RevocationNotifier {
  notifyRevocations(): Promise<void>;
  /** Answers a function that stops listening. */
  listenRevocations(onNotify: () => void): Promise<() => Promise<void>>;
}

export type Store = ClientStore & KeyStore & RevocationStore & Partial<RevocationNotifier>;

/**
 * Single-use memory for DPoP proof `jti`s (RFC 9449 §11.1): remembers a key
 * until `expiresAt` (epoch ms). `consume` answers true when the key was not
 * remembered yet (first use) and records it in the same step, so two
 * requests racing with one proof cannot both see true.
 */
export interface ReplayStore {
  consume(key: string, expiresAt: number): Promise<boolean> | boolean;
  /**
   * For a bounded store that had to forget keys to make room: epoch ms at or
   * before which a key may have been forgotten. A proof expiring by then can
   * no longer be told from a replay; verifyDpopProof refuses it as too old
   * (and consume() answers false for it).
   */
  readonly forgottenUntil?: number | undefined;
}

/**
 * One counter of failed client authentications (core/brute-force.ts), with
 * rate-limiter-flexible's meaning: `get` answers the key's count in the
 * window (null when none), `consume` counts one more and rejects with the
 * count (a RateLimiterRes, not an Error) once it is over `points`, `delete`
 * clears the key.
 */
export type FailureCounter = Pick<RateLimiterAbstract, 'get' | 'consume' | 'delete'>;

/** Makes the counter for one limit: `points` failures per `duration` seconds, keys under `keyPrefix`. */
export type FailureCounterFactory = (limit: { points: number; duration: number; keyPrefix: string }) => FailureCounter;

/**
 * The way to a service that may stall (a Redis: connected, not answering),
 * shared by everything that calls it through one client (core/service-gate.ts):
 * a call gets its answer within a deadline, or why not; once one has not
 * answered, the others are not sent and get why not at once, until the
 * service answers again. A store hands it its client's calls as they are
 * (no deadline of its own), so that it knows which ones are still unanswered.
 */
export interface ServiceGateway {
  run<T>(call: () => Promise<T>, options?: GatedCallOptions<T>): Promise<T>;
}

/**
 * What a gate (core/service-gate.ts) learns from the client it guards,
 * beyond the calls themselves (stores/redis-client.ts reads an ioredis or
 * node-redis client).
 */
export interface ServiceClient {
  /**
   * Whether every call goes over one connection, answered in order, so that
   * one unanswered call holds up those after it (an ioredis `Redis`). False
   * for a client over many (a Cluster: a stalled shard holds up only its
   * own calls): its calls are never held back, each has its own deadline.
   */
  readonly oneConnection: boolean;
  /**
   * Calls `listener` each time the client has made its connection again:
   * what it held on the one before is then answered anew (resent) or
   * dropped, never to settle (ioredis with autoResendUnfulfilledCommands
   * off), so it holds up nothing any more.
   */
  onConnect(listener: () => void): void;
  /**
   * Whether a call made now would be sent at once (ioredis: status `ready`),
   * rather than wait in the client's queue for a connection (ioredis's
   * offline queue keeps it until maxRetriesPerRequest clears it).
   */
  connected(): boolean;
  /** Whether a rejection is the service's own answer (a Redis error reply): the client let go of the call. */
  isReply(rejection: unknown): boolean;
  /**
   * Whether a rejection is the client's own timeout: it stopped waiting, but
   * may still hold the call (ioredis's commandTimeout keeps the command in
   * its queue until Redis answers it or the connection drops).
   */
  isClientTimeout(rejection: unknown): boolean;
  /**
   * Optional: drops the connection and makes it again (ioredis:
   * `disconnect(true)`). A connection a network dropped without closing it
   * looks open until TCP gives up on it (about 15 minutes on Linux), and
   * nothing sent on it is ever answered: the gate calls this when calls have
   * gone unanswered on a connected client for its reconnectAfterMs.
   */
  reconnect?(): void;
}

export interface GatedCallOptions<T> {
  /** The answer instead when the service gives none (known down, past the deadline, or the call failed); without it the call rejects with why. */
  otherwise?: (why: Error) => T | Promise<T>;
  /** Rejections that are answers, not failures (rate-limiter-flexible's over-the-limit result). */
  isAnswer?: (rejection: unknown) => boolean;
  /**
   * Failures of this call alone, which the service answered (a Redis error reply, such as a script
   * its ACL refuses): the call gets `otherwise`, and the service is taken neither as down nor as back.
   */
  isCallError?: (rejection: unknown) => boolean;
}

/** One used assertion jti as a store writes it (Store.consumeJti's arguments): who used it, its hash, until when it is kept. */
export interface JtiUse {
  clientId: string;
  jtiHash: string;
  expiresAt: Date;
}
