/**
 * The embedded store's clients: a client with its secrets, found through a
 * cache that empties whenever any connection changes a client; creation,
 * revocation, secret rotation, settings, and the key sets of key-based
 * clients, each change one immediate transaction.
 */
import type Database from 'better-sqlite3';
import { LRUCache } from 'lru-cache';
import { authMethodOf, jwksOf, keySetOf, permissionsOf, sameHashes, withKeyAdded, withKeyRemoved } from './client-fields';
import { date, words } from './embedded-schema';
import type { AddClientKeyResult, ClientJwks, ClientPublicJwk, ClientRecord, ClientSettings, ClientSettingsChange, NewClient, StoredSecret } from './types';

interface ClientRow {
  client_id: string;
  name: string;
  scopes: string;
  grant_types: string;
  created_at: number;
  revoked_at: number | null;
  auth_method: string;
  jwks: string | null;
  jwks_uri: string | null;
  resources: string;
  permissions: string;
  require_dpop: number;
  /** From token_generations (0 without a row). */
  token_generation: number;
}
interface SecretRow {
  client_id: string;
  hash: string;
  created_at: number;
  expires_at: number | null;
}

function toSecret(row: SecretRow): StoredSecret {
  return { hash: row.hash, createdAt: new Date(row.created_at), expiresAt: date(row.expires_at) };
}

function toClient(row: ClientRow, secrets: SecretRow[]): ClientRecord {
  return {
    clientId: row.client_id,
    name: row.name,
    scopes: words(row.scopes),
    grantTypes: words(row.grant_types),
    createdAt: new Date(row.created_at),
    revokedAt: date(row.revoked_at),
    secrets: secrets.map(toSecret),
    authMethod: authMethodOf(row.auth_method),
    jwks: jwksOf(row.jwks),
    jwksUri: row.jwks_uri,
    resources: words(row.resources),
    permissions: permissionsOf(words(row.permissions)),
    requireDpop: row.require_dpop === 1,
    tokenGeneration: row.token_generation,
  };
}

/**
 * The ClientStore methods for clients on `db`, synchronous (the store wraps
 * each one). `bumpGeneration` raises a client's token generation inside
 * updateClient's transaction; `wrote(fn)` runs a write that changes what
 * found clients carry, then empties this connection's cache.
 */
export function embeddedClients(db: Database.Database, bumpGeneration: (clientId: string, at: number) => number) {
  const q = {
    dataVersion: db.prepare('PRAGMA data_version').pluck(),
    changes: db.prepare<[string], number>('SELECT n FROM store_changes WHERE name = ?').pluck(),
    client: db.prepare<[string], ClientRow>(
      'SELECT c.*, coalesce(g.generation, 0) AS token_generation FROM clients c LEFT JOIN token_generations g ON g.client_id = c.client_id WHERE c.client_id = ?',
    ),
    secrets: db.prepare<[string], SecretRow>('SELECT * FROM client_secrets WHERE client_id = ? ORDER BY created_at DESC, id DESC'),
    allClients: db.prepare<[], ClientRow>(
      'SELECT c.*, coalesce(g.generation, 0) AS token_generation FROM clients c LEFT JOIN token_generations g ON g.client_id = c.client_id ORDER BY c.created_at, c.rowid',
    ),
    allSecrets: db.prepare<[], SecretRow>('SELECT * FROM client_secrets ORDER BY created_at DESC, id DESC'),
    insertClient: db.prepare(
      'INSERT INTO clients (client_id, name, scopes, grant_types, created_at, revoked_at, auth_method, jwks, jwks_uri, resources, permissions, require_dpop) VALUES (?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?)',
    ),
    setJwks: db.prepare('UPDATE clients SET jwks = ? WHERE client_id = ?'),
    // a NULL leaves the column as it is
    updateClient: db.prepare<[string | null, string | null, string | null, string | null, number | null, string]>(
      'UPDATE clients SET name = coalesce(?, name), scopes = coalesce(?, scopes), resources = coalesce(?, resources), ' +
        'permissions = coalesce(?, permissions), require_dpop = coalesce(?, require_dpop) WHERE client_id = ? AND revoked_at IS NULL',
    ),
    insertSecret: db.prepare('INSERT INTO client_secrets (client_id, hash, created_at, expires_at) VALUES (?, ?, ?, ?)'),
    revoke: db.prepare('UPDATE clients SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL'),
    capSecrets: db.prepare(
      'UPDATE client_secrets SET expires_at = ? WHERE client_id = ? AND (expires_at IS NULL OR expires_at > ?)',
    ),
  };

  // one read transaction, so a concurrent rotation is seen whole or not at all
  const readClient = db.transaction((clientId: string): ClientRecord | null => {
    const row = q.client.get(clientId);
    return row ? toClient(row, q.secrets.all(clientId)) : null;
  });

  // Found clients are kept in memory until a client changes. SQLite's
  // data_version moves whenever another connection (the CLI, another
  // process) commits, whatever it wrote; only then is the clients counter
  // (store_changes, kept by triggers) read, and the cache emptied if it
  // moved. This connection's own writes clear the cache directly. So a
  // revoke from the CLI counts from the next request, a lookup costs one
  // PRAGMA instead of a transaction and two queries, and the assertion jtis
  // other cluster workers write leave the cache alone.
  const cache = new LRUCache<string, ClientRecord>({ max: 10_000 });
  let seenVersion = q.dataVersion.get() as number;
  let seenClientChanges = q.changes.get('clients') as number;
  const findClient = (clientId: string): ClientRecord | null => {
    const version = q.dataVersion.get() as number;
    if (version !== seenVersion) {
      // read after data_version: a change committed in between is seen now, or moves data_version again
      seenVersion = version;
      const changes = q.changes.get('clients') as number;
      if (changes !== seenClientChanges) {
        cache.clear();
        seenClientChanges = changes;
      }
    }
    const hit = cache.get(clientId);
    if (hit) return hit;
    const client = readClient(clientId);
    if (client) cache.set(clientId, client);
    return client;
  };
  const wrote = <A extends unknown[], R>(fn: (...args: A) => R) => (...args: A): R => {
    try {
      return fn(...args);
    } finally {
      cache.clear();
    }
  };
  const createClient = db.transaction((c: NewClient) => {
    const jwks = c.jwks ? JSON.stringify(c.jwks) : null;
    q.insertClient.run(
      c.clientId,
      c.name,
      c.scopes.join(' '),
      c.grantTypes.join(' '),
      c.createdAt.getTime(),
      c.authMethod ?? 'client_secret',
      jwks,
      c.jwksUri ?? null,
      (c.resources ?? []).join(' '),
      (c.permissions ?? []).join(' '),
      c.requireDpop ? 1 : 0,
    );
    if (c.secret) q.insertSecret.run(c.clientId, c.secret.hash, c.secret.createdAt.getTime(), c.secret.expiresAt?.getTime() ?? null);
  });
  /** The live key-based client's key set, read inside the caller's transaction; null otherwise. */
  const liveKeys = (clientId: string): ClientJwks | null => {
    const row = q.client.get(clientId);
    if (!row || row.revoked_at !== null || row.auth_method !== 'private_key_jwt' || row.jwks_uri !== null) return null;
    return keySetOf(row.jwks);
  };
  const addClientKey = db.transaction((clientId: string, jwk: ClientPublicJwk, maxKeys: number): AddClientKeyResult => {
    const jwks = liveKeys(clientId);
    if (!jwks) return 'unknown_client';
    const added = withKeyAdded(jwks, jwk, maxKeys);
    if (typeof added === 'string') return added;
    q.setJwks.run(JSON.stringify(added), clientId);
    return 'added';
  });
  const updateClient = db.transaction((clientId: string, decide: (current: ClientSettings) => ClientSettingsChange | null, at: number) => {
    const row = q.client.get(clientId);
    if (!row || row.revoked_at !== null) return null;
    const client = toClient(row, []);
    const before: ClientSettings = { name: client.name, scopes: client.scopes, resources: client.resources, permissions: client.permissions, requireDpop: client.requireDpop };
    const written = decide(before);
    if (!written) return { before, written, generation: null };
    const c = written.changes;
    const joined = (list: readonly string[] | undefined): string | null => (list === undefined ? null : list.join(' '));
    const dpop = c.requireDpop === undefined ? null : c.requireDpop ? 1 : 0;
    q.updateClient.run(c.name ?? null, joined(c.scopes), joined(c.resources), joined(c.permissions), dpop, clientId);
    return { before, written, generation: written.revokeTokens ? bumpGeneration(clientId, at) : null };
  });
  const removeClientKey = db.transaction((clientId: string, kid: string): boolean => {
    const jwks = liveKeys(clientId);
    const remaining = jwks && withKeyRemoved(jwks, kid);
    if (!remaining) return false;
    q.setJwks.run(JSON.stringify(remaining), clientId);
    return true;
  });
  const revokeClient = db.transaction((clientId: string, at: number): boolean => {
    if (q.revoke.run(at, clientId).changes === 0) return false;
    q.capSecrets.run(at, clientId, at);
    return true;
  });
  const rotateSecret = db.transaction((clientId: string, secret: StoredSecret, keepOldUntil: number, expectedSecrets: readonly string[]): boolean => {
    const row = q.client.get(clientId);
    if (!row || row.revoked_at !== null) return false;
    // decided on what the caller read: another rotation since then is refused, not capped
    if (!sameHashes(q.secrets.all(clientId).map((s) => s.hash), expectedSecrets)) return false;
    q.capSecrets.run(keepOldUntil, clientId, keepOldUntil);
    q.insertSecret.run(clientId, secret.hash, secret.createdAt.getTime(), secret.expiresAt?.getTime() ?? null);
    return true;
  });

  return {
    findClient,
    createClient: (client: NewClient) => {
      try {
        wrote(createClient)(client);
      } catch (err) {
        if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY') throw new Error(`client id ${JSON.stringify(client.clientId)} exists already`);
        throw err;
      }
    },
    listClients: (): ClientRecord[] => {
      const secrets = new Map<string, SecretRow[]>();
      for (const s of q.allSecrets.all()) {
        const list = secrets.get(s.client_id);
        if (list) list.push(s);
        else secrets.set(s.client_id, [s]);
      }
      return q.allClients.all().map((row) => toClient(row, secrets.get(row.client_id) ?? []));
    },
    revokeClient: (clientId: string, at: Date) => {
      return wrote(revokeClient.immediate)(clientId, at.getTime());
    },
    rotateSecret: (clientId: string, secret: StoredSecret, keepOldUntil: Date | null, expectedSecrets: readonly string[]) =>
      wrote(rotateSecret.immediate)(clientId, secret, (keepOldUntil ?? secret.createdAt).getTime(), expectedSecrets),
    addClientKey: (clientId: string, jwk: ClientPublicJwk, maxKeys: number) => wrote(addClientKey.immediate)(clientId, jwk, maxKeys),
    removeClientKey: (clientId: string, kid: string) => wrote(removeClientKey.immediate)(clientId, kid),
    updateClient: (clientId: string, decide: (current: ClientSettings) => ClientSettingsChange | null, at: Date) => {
      const done = updateClient.immediate(clientId, decide, at.getTime());
      if (done?.written) cache.clear(); // as wrote() does, for a write only: nothing to change leaves the cache alone
      return done;
    },
    wrote,
  };
}
