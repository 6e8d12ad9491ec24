/**
 * PostgreSQL outages: which errors mean the database cannot be reached or
 * used right now, and the store wrapper that turns them into
 * StoreUnavailableError (the issuer answers 503 and logs the outage once).
 */
import { StoreUnavailableError } from '../errors';

/** Socket errors that mean the server cannot be reached (or stopped answering). */
const CONNECTION_ERRNOS = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ECONNABORTED', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN',
]);
/** node-postgres's own messages for lost connections and its timeouts. */
const CONNECTION_MESSAGES = /connection terminated|timeout exceeded when trying to connect|query read timeout|connection timeout|not queryable/i;

/**
 * Whether `err` says the database cannot be reached or used right now, as
 * opposed to a bug or bad data: socket errors, node-postgres's lost-connection
 * and timeout errors, SQLSTATE class 08 (connection exception), 57P01-57P03
 * (shutting down, cannot connect now), 53300 (too many connections),
 * 57014 (a statement cancelled by statement_timeout), and what stops writes
 * while reads work: 53100 (disk full), 53200 (out of memory) and 25006 (a
 * read-only transaction: a standby, or default_transaction_read_only).
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '57014', '53100', '53200', '25006']);

export function isPostgresUnavailable(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  if (err instanceof AggregateError) return err.errors.some(isPostgresUnavailable);
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (CONNECTION_ERRNOS.has(code)) return true;
    if (/^08[0-9A-Z]{3}$/.test(code) || UNAVAILABLE_SQLSTATES.has(code)) return true;
  }
  return err instanceof Error && CONNECTION_MESSAGES.test(err.message);
}

/** `err` as a StoreUnavailableError when it is one (see isPostgresUnavailable), else unchanged. */
export function classify(err: unknown): unknown {
  if (err instanceof StoreUnavailableError || !isPostgresUnavailable(err)) return err;
  const first = err instanceof AggregateError ? err.errors.find(isPostgresUnavailable) : err;
  const reason = (first as Error).message || (first as { code?: string }).code || 'connection failed';
  return new StoreUnavailableError(`PostgreSQL is unavailable: ${reason}`, { cause: err });
}

/** The same store, every method rejecting with StoreUnavailableError for an outage. */
export function guarded<T extends object>(store: T): T {
  const out = { ...store } as Record<string, unknown>;
  for (const [name, fn] of Object.entries(store)) {
    if (typeof fn !== 'function') continue;
    out[name] = async (...args: unknown[]) => {
      try {
        return await (fn as (...a: unknown[]) => Promise<unknown>).apply(store, args);
      } catch (err) {
        throw classify(err);
      }
    };
  }
  return out as T;
}
