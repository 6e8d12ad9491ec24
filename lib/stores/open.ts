import { openEmbeddedStore } from './embedded';
import type { Store } from './types';

/**
 * Picks the store: a `postgres://` (or `postgresql://`) URL opens PostgreSQL,
 * in `schema` (default `client_credentials`); anything else the embedded
 * store under `dataDir`.
 */
export async function openStore(options: { databaseUrl?: string; schema?: string; dataDir: string }): Promise<Store & { kind: string }> {
  const url = options.databaseUrl;
  if (url) {
    if (!/^postgres(ql)?:\/\//i.test(url)) throw new TypeError('DATABASE_URL must be a postgres:// URL');
    const { createPostgresStore } = await import('./postgres');
    return createPostgresStore({ connectionString: url, schema: options.schema });
  }
  return openEmbeddedStore({ dataDir: options.dataDir });
}
