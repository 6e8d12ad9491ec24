/**
 * The PostgreSQL store's schema: the schema name check, and the numbered
 * migrations applied when the store opens.
 */
import type { Pool } from 'pg';
import { inTransaction } from './postgres-query';
import { LONGEST_TOKEN_TTL } from './types';

const SCHEMA_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;

/** `schema` double-quoted for SQL text; a TypeError for a name outside SCHEMA_PATTERN. */
export function quotedSchema(schema: string): string {
  if (!SCHEMA_PATTERN.test(schema)) {
    throw new TypeError(`Invalid PostgreSQL schema name ${JSON.stringify(schema)} (DATABASE_SCHEMA, option schema): must match ${SCHEMA_PATTERN}`);
  }
  return `"${schema}"`; // safe: the pattern admits no quotes
}

/**
 * Advisory-lock key (a bigint, passed as text) that serialises migrations.
 * Advisory locks are database-wide, so the value is arbitrary but fixed and
 * distinct from KEY_LOCK (postgres-keys.ts), which serialises key-set changes.
 */
const MIGRATION_LOCK = '7310293881530437001';

/** Numbered migrations; `S` is the quoted schema name. Append only, never edit an applied one. */
const MIGRATIONS: { version: number; statements: (S: string) => string[] }[] = [
  {
    version: 1,
    statements: (S) => [
      `CREATE TABLE ${S}.clients (
         client_id   text PRIMARY KEY,
         name        text NOT NULL,
         scopes      text[] NOT NULL,
         grant_types text[] NOT NULL,
         created_at  timestamptz NOT NULL,
         revoked_at  timestamptz NULL
       )`,
      `CREATE TABLE ${S}.client_secrets (
         id         bigserial PRIMARY KEY,
         client_id  text NOT NULL REFERENCES ${S}.clients (client_id) ON DELETE CASCADE,
         hash       text NOT NULL,
         created_at timestamptz NOT NULL,
         expires_at timestamptz NULL
       )`,
      `CREATE INDEX client_secrets_client_id_idx ON ${S}.client_secrets (client_id)`,
      `CREATE TABLE ${S}.signing_keys (
         kid          text PRIMARY KEY,
         alg          text NOT NULL,
         private_jwk  text NOT NULL,
         public_jwk   text NOT NULL,
         created_at   timestamptz NOT NULL,
         activates_at timestamptz NOT NULL,
         retired_at   timestamptz NULL
       )`,
    ],
  },
  {
    // private_key_jwt clients (issue 9): the auth method, the public key set, used assertion jtis
    version: 2,
    statements: (S) => [
      `ALTER TABLE ${S}.clients ADD COLUMN auth_method text NOT NULL DEFAULT 'client_secret'`,
      `ALTER TABLE ${S}.clients ADD COLUMN jwks text NULL`,
      `CREATE TABLE ${S}.client_assertion_jtis (
         client_id  text NOT NULL,
         jti_hash   text NOT NULL,
         expires_at timestamptz NOT NULL,
         PRIMARY KEY (client_id, jti_hash)
       )`,
      `CREATE INDEX client_assertion_jtis_expiry_idx ON ${S}.client_assertion_jtis (expires_at)`,
    ],
  },
  {
    // private_key_jwt clients that publish their keys at a URL
    version: 3,
    statements: (S) => [`ALTER TABLE ${S}.clients ADD COLUMN IF NOT EXISTS jwks_uri text NULL`],
  },
  {
    // resources (RFC 8707), permissions, DPoP-only clients; revocations: denylisted tokens until exp, per-client token generations
    version: 4,
    statements: (S) => [
      `ALTER TABLE ${S}.clients ADD COLUMN resources text[] NOT NULL DEFAULT '{}'`,
      `ALTER TABLE ${S}.clients ADD COLUMN permissions text[] NOT NULL DEFAULT '{}'`,
      `ALTER TABLE ${S}.clients ADD COLUMN require_dpop boolean NOT NULL DEFAULT false`,
      `CREATE TABLE ${S}.revoked_tokens (
         jti       text PRIMARY KEY,
         client_id text NOT NULL,
         exp       timestamptz NOT NULL
       )`,
      `CREATE INDEX revoked_tokens_exp_idx ON ${S}.revoked_tokens (exp)`,
      `CREATE TABLE ${S}.token_generations (
         client_id  text PRIMARY KEY,
         generation bigint NOT NULL,
         updated_at timestamptz NOT NULL
       )`,
    ],
  },
  {
    // a revision counter of the revocations, moved by triggers, whoever writes (any instance, the CLI, an
    // older version of this package): an instance's periodic resync reads it and skips the full list while
    // it stands still. Deleting rows (the purge of expired entries) does not move it: an expired entry
    // changes no answer, and every instance reloads in full after its own purge anyway.
    version: 5,
    statements: (S) => [
      `CREATE TABLE ${S}.revocations_revision (
         singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
         revision  bigint NOT NULL
       )`,
      `INSERT INTO ${S}.revocations_revision (singleton, revision) VALUES (true, 0)`,
      `CREATE FUNCTION ${S}.bump_revocations_revision() RETURNS trigger LANGUAGE plpgsql AS $fn$
       BEGIN
         UPDATE ${S}.revocations_revision SET revision = revision + 1;
         RETURN NULL;
       END
       $fn$`,
      `CREATE TRIGGER revoked_tokens_revision AFTER INSERT OR UPDATE ON ${S}.revoked_tokens
         FOR EACH STATEMENT EXECUTE FUNCTION ${S}.bump_revocations_revision()`,
      `CREATE TRIGGER token_generations_revision AFTER INSERT OR UPDATE OR DELETE ON ${S}.token_generations
         FOR EACH STATEMENT EXECUTE FUNCTION ${S}.bump_revocations_revision()`,
      `CREATE TRIGGER clients_revoked_revision AFTER UPDATE OF revoked_at OR DELETE ON ${S}.clients
         FOR EACH STATEMENT EXECUTE FUNCTION ${S}.bump_revocations_revision()`,
    ],
  },
  {
    // the longest token lifetime any instance signs with a key: a retired key is pruned after that, not
    // after the lifetime of whichever instance prunes (one with a shorter one dropped keys others' tokens need)
    version: 6,
    statements: (S) => [`ALTER TABLE ${S}.signing_keys ADD COLUMN token_ttl integer NOT NULL DEFAULT 0`],
  },
  {
    // keys written before the lifetimes were recorded (by an earlier version, or by one that had the column but
    // never wrote it): tokens they signed may be valid for as long as any instance's lifetime, so they are pruned
    // only after the longest there can be
    version: 7,
    statements: (S) => [`UPDATE ${S}.signing_keys SET token_ttl = ${LONGEST_TOKEN_TTL} WHERE token_ttl < ${LONGEST_TOKEN_TTL}`],
  },
];

/** The schema a store was opened on with `createSchema: false` does not exist; nothing was created. */
export class SchemaMissingError extends Error {
  constructor(readonly schema: string) {
    super(`there is no schema ${JSON.stringify(schema)} in that database`);
    this.name = 'SchemaMissingError';
  }
}

/**
 * Creates the schema if needed (unless `create` is false: then a missing schema is a SchemaMissingError and
 * nothing is written) and applies missing migrations, serialised by an advisory lock; answers whether the
 * schema had to be created.
 */
export async function migrate(pool: Pool, S: string, schema: string, create = true): Promise<boolean> {
  if (!create && (await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount === 0) throw new SchemaMissingError(schema);
  // up to date already (the usual start): nothing to write, no lock to take, so an instance starts on a database
  // that cannot be written now (a standby during a failover) and serves what only reads, as running ones do
  if (await upToDate(pool, S)) return false;
  return inTransaction(pool, async (client) => {
    // Held until COMMIT: a second process starting at the same moment waits
    // here and then sees the schema and the versions this one committed.
    await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK]);
    const existed = (await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount !== 0;
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${S}`);
    await client.query(`CREATE TABLE IF NOT EXISTS ${S}.schema_migrations (version int PRIMARY KEY)`);
    const applied = await client.query<{ version: number }>(`SELECT version FROM ${S}.schema_migrations`);
    const done = new Set(applied.rows.map((r) => Number(r.version)));
    for (const migration of MIGRATIONS) {
      if (done.has(migration.version)) continue;
      for (const sql of migration.statements(S)) await client.query(sql);
      await client.query(`INSERT INTO ${S}.schema_migrations (version) VALUES ($1)`, [migration.version]);
    }
    return !existed;
  });
}

/**
 * Whether every migration is recorded in the schema: read only; false when the schema or its table is
 * missing (a first start). Asked without a failing statement: pg's pool drops a connection a query failed
 * on, and the migration would have to make another.
 */
async function upToDate(pool: Pool, S: string): Promise<boolean> {
  const table = await pool.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [`${S}.schema_migrations`]);
  if (table.rows[0]?.t == null) return false;
  const applied = await pool.query<{ version: number }>(`SELECT version FROM ${S}.schema_migrations`);
  const done = new Set(applied.rows.map((r) => Number(r.version)));
  return MIGRATIONS.every((m) => done.has(m.version));
}
