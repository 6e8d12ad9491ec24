/**
 * PostgreSQL store (node-postgres). All tables live in one schema that is
 * created and migrated when the store opens. Every query is parameterised;
 * the schema name is the only identifier put into SQL text, and only after
 * it has been validated against a strict pattern and double-quoted.
 *
 * This file opens the store (pool, migrations) and composes its parts, one
 * file each: postgres-schema.ts (migrations), postgres-clients.ts,
 * postgres-keys.ts, postgres-revocations.ts (with LISTEN/NOTIFY),
 * postgres-jtis.ts; postgres-outage.ts turns outages into
 * StoreUnavailableError, postgres-query.ts holds the shared SQL helpers.
 */
import { Pool, type ClientConfig } from 'pg';
import { postgresClients } from './postgres-clients';
import { postgresJtis } from './postgres-jtis';
import { postgresKeys } from './postgres-keys';
import { classify, guarded } from './postgres-outage';
import { postgresRevocations } from './postgres-revocations';
import { migrate, quotedSchema } from './postgres-schema';
import type { Store } from './types';

export { isPostgresUnavailable } from './postgres-outage';

export interface PostgresStoreOptions {
  /** Used to create a pool when `pool` is not given (otherwise the usual PG* environment variables apply). */
  connectionString?: string;
  /** An existing pool. The store never ends a pool it did not create. */
  pool?: Pool;
  /** Schema holding the tables; created when missing. Default `client_credentials`. */
  schema?: string;
  /**
   * `false`: a schema that does not exist is not created; the store fails to open with a SchemaMissingError
   * (what a tool that only reads wants: a mistyped schema name should create nothing). Default `true`.
   */
  createSchema?: boolean;
  /** Size of the pool the store creates (ignored with `pool`). */
  max?: number;
  /** How long to wait for a connection (new or from the pool), in ms. Default 3000 (ignored with `pool`). */
  connectionTimeoutMillis?: number;
  /** How long to wait for a query's answer, in ms, so a database that stopped answering fails fast. Default 5000 (ignored with `pool`). */
  queryTimeoutMillis?: number;
  /**
   * How often the connection that LISTENs for revocations checks that it
   * still reaches the database, in ms (a `SELECT 1` within the query
   * timeout). A connection lost without a word (a network that dropped it)
   * is replaced at most this long plus the query timeout later; meanwhile
   * the 2 s reload still applies revocations. Default 30000.
   */
  listenCheckMillis?: number;
}

export interface PostgresStore extends Store {
  readonly kind: 'postgres';
  /** Whether opening it created its schema (none existed under that name): a CLI run with a mistyped DATABASE_SCHEMA would otherwise work on an empty set of clients without a word. */
  readonly createdSchema: boolean;
}

export async function createPostgresStore(options: PostgresStoreOptions = {}): Promise<PostgresStore> {
  const schema = options.schema ?? 'client_credentials';
  const S = quotedSchema(schema);

  const ownsPool = options.pool === undefined;
  const pool =
    options.pool ??
    new Pool({
      connectionString: options.connectionString,
      max: options.max,
      connectionTimeoutMillis: options.connectionTimeoutMillis ?? 3000,
      query_timeout: options.queryTimeoutMillis ?? 5000,
      keepAlive: true,
    });
  if (ownsPool) {
    // An idle connection that dies (server restart) emits 'error' on the pool;
    // without a listener that would crash the process. The pool already drops
    // the broken connection, and the next query reports any lasting failure.
    pool.on('error', () => undefined);
  }

  let createdSchema: boolean;
  try {
    createdSchema = await migrate(pool, S, schema, options.createSchema !== false);
  } catch (err) {
    if (ownsPool) await pool.end().catch(() => undefined);
    throw classify(err);
  }

  let closed = false;
  const jtis = postgresJtis(pool, S, () => closed);
  // the LISTEN connection waits no longer than the pool's: a connection attempt that never completes would leave it deaf for good
  const clientConfig: ClientConfig = options.pool
    ? { ...(options.pool as unknown as { options: ClientConfig }).options }
    : { connectionString: options.connectionString, connectionTimeoutMillis: options.connectionTimeoutMillis ?? 3000, query_timeout: options.queryTimeoutMillis ?? 5000 };
  const revocations = postgresRevocations(pool, schema, S, { clientConfig, listenCheckMillis: options.listenCheckMillis ?? 30_000 });

  return guarded<PostgresStore>({
    kind: 'postgres',
    createdSchema,

    async ping() {
      await pool.query('SELECT 1');
    },

    ...postgresClients(pool, S),
    ...jtis.methods,
    ...postgresKeys(pool, S),
    ...revocations.methods,

    async close() {
      if (closed) return;
      closed = true;
      // jtis already accepted are written before the pool ends
      await jtis.flush();
      await revocations.stopListening();
      if (ownsPool) await pool.end();
    },
  });
}
