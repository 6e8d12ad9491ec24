/**
 * The embedded store's schema: the migrations, numbered by their place in
 * the list (SQLite's user_version), applied when the store opens.
 */
import type Database from 'better-sqlite3';
import { LONGEST_TOKEN_TTL } from './types';

/** Times are stored as epoch ms (INTEGER): a nullable one as a Date or null. */
export const date = (ms: number | null): Date | null => (ms === null ? null : new Date(ms));
/** Lists (scopes, grant types, resources, permissions) are stored as space-separated words (TEXT). */
export const words = (text: string): string[] => (text === '' ? [] : text.split(' '));

/** Triggers that count every change to `table` under `counter` in store_changes, whichever connection makes it. */
function changeTriggers(table: string, counter: 'clients' | 'revocations' | 'keys'): string {
  return ['INSERT', 'UPDATE', 'DELETE']
    .map((op) => `CREATE TRIGGER ${table}_${op.toLowerCase()}_changes AFTER ${op} ON ${table} BEGIN UPDATE store_changes SET n = n + 1 WHERE name = '${counter}'; END;`)
    .join('\n   ');
}

/** Whether `table` has `column` (a migration that adds one may meet it already there). */
function hasColumn(db: Database.Database, table: string, column: string): boolean {
  return (db.prepare(`SELECT 1 FROM pragma_table_info(?) WHERE name = ?`).all(table, column) as unknown[]).length > 0;
}

/** SQL, or a function of the database for a migration that looks before it changes. */
const MIGRATIONS: (string | ((db: Database.Database) => void))[] = [
  `CREATE TABLE clients (
     client_id   TEXT PRIMARY KEY,
     name        TEXT NOT NULL,
     scopes      TEXT NOT NULL,
     grant_types TEXT NOT NULL,
     created_at  INTEGER NOT NULL,
     revoked_at  INTEGER
   );
   CREATE TABLE client_secrets (
     id          INTEGER PRIMARY KEY AUTOINCREMENT,
     client_id   TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
     hash        TEXT NOT NULL,
     created_at  INTEGER NOT NULL,
     expires_at  INTEGER
   );
   CREATE INDEX client_secrets_client ON client_secrets(client_id);
   CREATE TABLE signing_keys (
     kid          TEXT PRIMARY KEY,
     alg          TEXT NOT NULL,
     private_jwk  TEXT NOT NULL,
     public_jwk   TEXT NOT NULL,
     created_at   INTEGER NOT NULL,
     activates_at INTEGER NOT NULL,
     retired_at   INTEGER
   );`,
  // private_key_jwt clients (issue 9): the auth method, the public key set, used assertion jtis
  `ALTER TABLE clients ADD COLUMN auth_method TEXT NOT NULL DEFAULT 'client_secret';
   ALTER TABLE clients ADD COLUMN jwks TEXT;
   CREATE TABLE client_assertion_jtis (
     client_id  TEXT NOT NULL,
     jti_hash   TEXT NOT NULL,
     expires_at INTEGER NOT NULL,
     PRIMARY KEY (client_id, jti_hash)
   ) WITHOUT ROWID;
   CREATE INDEX client_assertion_jtis_expiry ON client_assertion_jtis(expires_at);`,
  // private_key_jwt clients that publish their keys at a URL (a development version of this package added the
  // column in migration 2 already: such a database has it, and opens)
  (db) => {
    if (!hasColumn(db, 'clients', 'jwks_uri')) db.exec(`ALTER TABLE clients ADD COLUMN jwks_uri TEXT;`);
  },
  // resources (RFC 8707), permissions, DPoP-only clients; revocations: denylisted tokens until exp, per-client token generations
  `ALTER TABLE clients ADD COLUMN resources TEXT NOT NULL DEFAULT '';
   ALTER TABLE clients ADD COLUMN permissions TEXT NOT NULL DEFAULT '';
   ALTER TABLE clients ADD COLUMN require_dpop INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE revoked_tokens (
     jti       TEXT PRIMARY KEY,
     client_id TEXT NOT NULL,
     exp       INTEGER NOT NULL
   ) WITHOUT ROWID;
   CREATE INDEX revoked_tokens_exp ON revoked_tokens(exp);
   CREATE TABLE token_generations (
     client_id  TEXT PRIMARY KEY,
     generation INTEGER NOT NULL,
     updated_at INTEGER NOT NULL
   ) WITHOUT ROWID;`,
  // used assertion jtis ordered by expiry: one B-tree, new rows at its end (a random (client, hash)
  // key with an expiry index wrote two or three scattered pages per token request), purged from its start
  `CREATE TABLE client_assertion_jtis_by_expiry (
     expires_at INTEGER NOT NULL,
     client_id  TEXT NOT NULL,
     jti_hash   TEXT NOT NULL,
     PRIMARY KEY (expires_at, client_id, jti_hash)
   ) WITHOUT ROWID;
   INSERT INTO client_assertion_jtis_by_expiry (expires_at, client_id, jti_hash) SELECT expires_at, client_id, jti_hash FROM client_assertion_jtis;
   DROP TABLE client_assertion_jtis;
   ALTER TABLE client_assertion_jtis_by_expiry RENAME TO client_assertion_jtis;`,
  // what other connections' commits changed: PRAGMA data_version moves for any table, so each
  // assertion jti written by one cluster worker emptied the other workers' client caches and
  // reloaded their revocations; these counters move only with the tables those depend on
  `CREATE TABLE store_changes (
     name TEXT PRIMARY KEY,
     n    INTEGER NOT NULL
   ) WITHOUT ROWID;
   INSERT INTO store_changes (name, n) VALUES ('clients', 0), ('revocations', 0);
   ${changeTriggers('clients', 'clients')}
   ${changeTriggers('client_secrets', 'clients')}
   ${changeTriggers('revoked_tokens', 'revocations')}
   ${changeTriggers('token_generations', 'revocations')}
   CREATE TRIGGER clients_revoked_changes AFTER UPDATE OF revoked_at ON clients
     BEGIN UPDATE store_changes SET n = n + 1 WHERE name = 'revocations'; END;`,
  // a found client carries its token generation: a new one (revoke-tokens, an update that takes
  // something away) empties the other connections' client caches too
  ['INSERT', 'UPDATE', 'DELETE']
    .map((op) => `CREATE TRIGGER token_generations_${op.toLowerCase()}_client_changes AFTER ${op} ON token_generations BEGIN UPDATE store_changes SET n = n + 1 WHERE name = 'clients'; END;`)
    .join('\n   '),
  // the longest token lifetime any process signs with a key (seconds): a retired key is pruned after that
  `ALTER TABLE signing_keys ADD COLUMN token_ttl INTEGER NOT NULL DEFAULT 0;`,
  // keys written before the lifetimes were recorded (by an earlier version, or by one that had the column but
  // never wrote it): tokens they signed may be valid for as long as any instance's lifetime, so they are pruned
  // only after the longest there can be
  `UPDATE signing_keys SET token_ttl = ${LONGEST_TOKEN_TTL} WHERE token_ttl < ${LONGEST_TOKEN_TTL};`,
  // what the running issuers on the file check every few seconds (keysVersion): a rotation or a revoked key
  // made by the CLI or another process is in force there at once, not at their next key refresh
  `INSERT INTO store_changes (name, n) VALUES ('keys', 0);
   ${changeTriggers('signing_keys', 'keys')}`,
];

/** Applies the missing migrations in one immediate transaction. */
export function migrate(db: Database.Database): void {
  db.transaction(() => {
    const version = db.pragma('user_version', { simple: true }) as number;
    for (let v = version; v < MIGRATIONS.length; v++) {
      const migration = MIGRATIONS[v];
      if (typeof migration === 'string') db.exec(migration);
      else migration(db);
    }
    if (version < MIGRATIONS.length) db.pragma(`user_version = ${MIGRATIONS.length}`);
  }).immediate();
}
