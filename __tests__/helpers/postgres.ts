/**
 * PostgreSQL for tests: where it is, whether it is reachable, and throwaway
 * schemas so that runs never see each other's data.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Client, type Pool } from 'pg';
import { describeIfReachable } from './services';

export function postgresUrl(): string {
  return process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
}

/** Whether a connection succeeds within 2 s. */
export async function postgresAvailable(url = postgresUrl()): Promise<boolean> {
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

let probed: boolean | undefined;

/**
 * Synchronous reachability check, because jest `describe` bodies are sync:
 * a child `node` process connects with pg and exits 0 or 1. Cached per test file.
 */
export function postgresReachableSync(): boolean {
  if (probed !== undefined) return probed;
  const script = `
    const { Client } = require(process.env.ECC_PG_MODULE);
    const client = new Client({ connectionString: process.env.ECC_PG_URL, connectionTimeoutMillis: 2000 });
    client.connect()
      .then(() => client.query('SELECT 1'))
      .then(() => client.end())
      .then(() => process.exit(0), () => process.exit(1));`;
  const result = spawnSync(process.execPath, ['-e', script], {
    env: { ...process.env, ECC_PG_MODULE: require.resolve('pg'), ECC_PG_URL: postgresUrl() },
    timeout: 3000,
    stdio: 'ignore',
  });
  probed = result.status === 0;
  return probed;
}

/** The URL without its password, for messages. */
function displayUrl(): string {
  try {
    const url = new URL(postgresUrl());
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '(unparseable TEST_DATABASE_URL)';
  }
}

/** `describe` when PostgreSQL is reachable (see describeIfReachable). */
export function describeIfPostgres(title: string, fn: () => void): void {
  describeIfReachable('PostgreSQL', postgresReachableSync(), displayUrl(), title, fn);
}

/** A schema name no other run uses: `ecc_test_<pid>_<random>`. */
export function uniqueSchemaName(): string {
  return `ecc_test_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Drops a test schema and everything in it (the name is generated, never user input). */
export async function dropSchema(pool: Pool, schema: string): Promise<void> {
  if (!/^ecc_test_[a-z0-9_]+$/.test(schema)) throw new Error(`refusing to drop schema ${schema}`);
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}
