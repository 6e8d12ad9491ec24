import { openEmbeddedStore } from './embedded';
import type { Store } from './types';

export interface OpenStoreOptions {
  /** A `postgres://` (or `postgresql://`) URL: the PostgreSQL store. Unset or empty: the embedded store. */
  databaseUrl?: string | undefined;
  /** PostgreSQL schema (default `client_credentials`), created and migrated at start. */
  schema?: string | undefined;
  /** The embedded store's folder (default `./data`, relative to the working folder). */
  dataDir?: string | undefined;
  /** `false`: a PostgreSQL schema that does not exist is not created (SchemaMissingError). Default `true`. */
  createSchema?: boolean;
}

/**
 * Picks the store: a `postgres://` (or `postgresql://`) URL opens PostgreSQL,
 * in `schema` (default `client_credentials`); anything else the embedded
 * store under `dataDir` (default `./data`).
 */
export async function openStore(options: OpenStoreOptions): Promise<Store & { kind: string }> {
  const url = options.databaseUrl;
  if (url) {
    if (!/^postgres(ql)?:\/\//i.test(url)) throw new TypeError('DATABASE_URL must be a postgres:// URL');
    const { createPostgresStore } = await import('./postgres');
    return createPostgresStore({ connectionString: url, schema: options.schema, createSchema: options.createSchema });
  }
  return openEmbeddedStore({ dataDir: options.dataDir ?? './data' });
}
