/**
 * Embedded store outages: which errors mean the SQLite file cannot be used
 * right now, turned into StoreUnavailableError (the issuer answers 503 and
 * logs the outage once).
 */
import { StoreUnavailableError } from '../errors';

/**
 * SQLite result codes (extended ones start with the primary's name) that say
 * the file cannot be used right now: read-only, full, I/O error, cannot be
 * opened, locked past busy_timeout, damaged or not a database; and the file
 * system's own errors for the folder and file.
 */
const SQLITE_UNAVAILABLE = /^SQLITE_(READONLY|FULL|IOERR|CANTOPEN|BUSY|LOCKED|CORRUPT|NOTADB|PERM)/;
const FS_UNAVAILABLE = new Set(['EACCES', 'EPERM', 'EROFS', 'ENOSPC', 'EDQUOT', 'EIO']);

export function isSqliteUnavailable(err: unknown): boolean {
  const code = typeof err === 'object' && err !== null ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' && (SQLITE_UNAVAILABLE.test(code) || FS_UNAVAILABLE.has(code));
}

/** `err` as a StoreUnavailableError when it is one (see isSqliteUnavailable), else unchanged. */
export function classify(err: unknown, path: string): unknown {
  if (!isSqliteUnavailable(err)) return err;
  const { code, message } = err as { code: string; message?: string };
  return new StoreUnavailableError(`the embedded store ${path} is unavailable: ${message || code} (${code})`, { cause: err });
}
