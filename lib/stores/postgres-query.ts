/**
 * What every part of the PostgreSQL store uses to run its SQL: a
 * transaction on one pooled connection, and the parsing of the values
 * node-postgres answers with.
 */
import type { Pool, PoolClient } from 'pg';

/** pg parses timestamptz into Date by default; a caller's pool may have custom parsers, so accept strings too. */
export function toDate(value: Date | string): Date {
  return value instanceof Date ? value : new Date(value);
}

export function toDateOrNull(value: Date | string | null): Date | null {
  return value === null ? null : toDate(value);
}

export function isUniqueViolation(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '23505';
}

/** Listens for the 'error' a checked-out connection emits when it ends; the query in flight fails with it on its own. */
const ignoreCheckedOutError = (): void => undefined;

/** Runs `fn` in a transaction on one pooled connection; rolls back when it throws. */
export async function inTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  // The pool listens for 'error' only on idle connections: one that ends while checked out
  // (PostgreSQL restarted, the network cut mid-transaction) would emit it with no listener,
  // which ends the process. The failed query reports the outage to the caller.
  client.on('error', ignoreCheckedOutError);
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    client.removeListener('error', ignoreCheckedOutError);
    client.release();
    return result;
  } catch (err) {
    try {
      await client.query('ROLLBACK');
      client.removeListener('error', ignoreCheckedOutError);
      client.release();
    } catch (rollbackErr) {
      // The connection is in an unknown state: destroy it rather than reuse it (it keeps the listener: it may still emit).
      client.release(rollbackErr instanceof Error ? rollbackErr : true);
    }
    throw err;
  }
}
