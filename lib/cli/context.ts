/** What every command shares: the I/O, the lazily opened store, the audit logger and output formatting. */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ClientService, storeClientRevocations, type ClientInfo } from '../core/clients';
import { deferredKeyStore } from '../core/keys';
import { withDeadline } from '../shared/deadline';
import { clip } from '../shared/visible-text';
import { REDIS_DEADLINE_MS } from '../stores/redis-deadline';
import { checkRedisUrl } from '../stores/redis-url';
import { RedisRevocationNotifier } from '../stores/redis-revocation-notifier';
import pino from 'pino';
import { silentLogger, type Logger } from '../logger';
import { openStore } from '../stores/open';
import { SchemaMissingError } from '../stores/postgres-schema';
import type { KeyStore, Store } from '../stores/types';
import { CommandError, wantsHelp } from './args';
import { BIN, HELP } from './help';

export interface CliIo {
  stdout: (s: string) => void;
  stderr: (s: string) => void;
  env: NodeJS.ProcessEnv;
  /**
   * Resolves once everything written to stdout so far was accepted (by the
   * terminal, the pipe or the file); rejects with the write's error (EPIPE:
   * the reader is gone, ENOSPC: the disk is full). Without it, a write is
   * done when stdout() returns, and fails when it throws.
   */
  flush?: () => Promise<void>;
}

export interface Context {
  io: CliIo;
  out: (line?: string) => void;
  err: (line?: string) => void;
  stores: LazyStore;
  /** Waits until stdout took everything printed so far; throws an OutputError when it could not. */
  delivered: () => Promise<void>;
}

/** stdout did not take the output: a closed pipe (EPIPE), a full disk (ENOSPC). */
export class OutputError extends Error {
  /** The write's error code, e.g. `EPIPE`, `ENOSPC`. */
  readonly code: string;

  constructor(cause: unknown) {
    const code = typeof (cause as { code?: unknown })?.code === 'string' ? (cause as { code: string }).code : 'error';
    super(`could not write to stdout (${code})`, { cause });
    this.name = 'OutputError';
    this.code = code;
  }
}

export type Handler = (args: string[], ctx: Context) => Promise<number>;

/** Generated client ids: 16 random bytes in base64url, so one may start with "-". */
export const CLIENT_ID_SHAPE = /^[A-Za-z0-9_-]{22}$/;

/** Kids this package makes (a signing key's, a client key's without one): RFC 7638 thumbprints, SHA-256 in base64url, so one may start with "-". */
export const THUMBPRINT_SHAPE = /^[A-Za-z0-9_-]{43}$/;

/**
 * A signing key's kid (`keys revoke KID`): a thumbprint, or any argument that
 * starts with one '-' and is no option of the command (a kid given by hand
 * elsewhere; one that is not there gets 'no signing key has kid', exit 1).
 */
export const KID_SHAPE = /^(?:[A-Za-z0-9_-]{43}|-[^-][\s\S]*)$/;

/**
 * A client id or a kid (`client-key remove CLIENT_ID KID`): a client key's
 * kid may be any 1 to 128 printable characters, so any argument starting
 * with one '-' that is no option is taken as one. A kid starting with '--'
 * goes after '--'.
 */
export const CLIENT_ID_OR_KID_SHAPE = /^(?:[A-Za-z0-9_-]{22}|[A-Za-z0-9_-]{43}|-[^-][\s\S]*)$/;

/**
 * Audit events (client.created, client.revoked, client.secret_rotated) go as
 * pino JSON lines to stderr when LOG_LEVEL is set; stdout stays the CLI's own.
 */
export function auditLogger(env: NodeJS.ProcessEnv): Logger {
  if (!env.LOG_LEVEL) return silentLogger;
  // in any case, as operators write it (DEBUG, Info): pino's names are lower case
  const level = env.LOG_LEVEL.trim().toLowerCase();
  if (level !== 'silent' && !Object.hasOwn(pino.levels.values, level)) {
    throw new TypeError(`LOG_LEVEL must be one of ${[...Object.keys(pino.levels.values), 'silent'].join(', ')} (any case), got ${JSON.stringify(env.LOG_LEVEL)}`);
  }
  // synchronous, so every line is out before the process ends; a stderr that fails (a full disk) loses the lines
  // but neither throws nor hangs the process (an asynchronous destination with a failing fd never lets it exit)
  const destination = pino.destination({ dest: 2, sync: true });
  destination.on('error', () => undefined);
  return pino({ name: 'client-credentials', level }, destination);
}

/** Opens the store on first use only, so a usage error never creates a data folder or a connection. */
export class LazyStore {
  private opening: Promise<Store> | undefined;
  private redis: { quit(): Promise<unknown>; disconnect(): void } | undefined;

  constructor(
    private readonly env: NodeJS.ProcessEnv,
    /** Where a warning line goes (the CLI's stderr). */
    private readonly warn: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
  ) {}

  /** Whether a command that finds no embedded store says so (every command but `create`, which starts one on purpose). */
  expectsStore = true;

  /**
   * A command that only reads (`list`, `keys list`, `client-key list`): on
   * an embedded store that does not exist (a mistyped DATA_DIR) it fails,
   * creating nothing, instead of showing an empty store it made.
   */
  readOnly = false;

  /**
   * A malformed REDIS_URL, through which the instances are rung after a change to a client (a revocation, a
   * rotated secret, a removed key), is a usage error before anything is changed, not a vague warning after.
   */
  checkRedisUrl(): void {
    if (this.env.REDIS_URL) checkRedisUrl(this.env.REDIS_URL);
  }

  get = (): Promise<Store> => {
    if (this.opening) return this.opening;
    const databaseUrl = this.env.DATABASE_URL || undefined;
    const dataDir = this.env.DATA_DIR || './data';
    const fresh = databaseUrl === undefined && !existsSync(join(dataDir, 'store.sqlite'));
    if (fresh && this.readOnly) {
      return Promise.reject(
        new CommandError(`no store in ${resolve(dataDir)}: there is no store.sqlite there (the server creates it at its first start, and '${BIN} create' does too). Is DATA_DIR the server's?`),
      );
    }
    const schema = this.env.DATABASE_SCHEMA || undefined;
    // read-only on PostgreSQL: a schema that does not exist (a mistyped DATABASE_SCHEMA) is not created either
    this.opening = openStore({ databaseUrl, schema, dataDir, createSchema: !this.readOnly }).catch((err: unknown) => {
      if (!(err instanceof SchemaMissingError)) throw err;
      throw new CommandError(
        `no schema ${err.schema} in that database (the server creates it at its first start, and '${BIN} create' does too). Is DATABASE_SCHEMA the server's?`,
      );
    });
    if (fresh && this.expectsStore) {
      // a mistyped DATA_DIR, or the CLI run in another folder than the server: every client would look unknown
      this.opening.then(
        () => this.warn(`note: there was no store in ${resolve(dataDir)}; an empty one was created. Is DATA_DIR the server's?`),
        () => undefined,
      );
    }
    if (databaseUrl !== undefined && this.expectsStore) {
      // the same with a mistyped (or missing) DATABASE_SCHEMA
      this.opening.then(
        (store) => {
          if ((store as { createdSchema?: boolean }).createdSchema) {
            this.warn(`note: there was no schema ${this.env.DATABASE_SCHEMA || 'client_credentials'} in that database; an empty one was created. Is DATABASE_SCHEMA the server's?`);
          }
        },
        () => undefined,
      );
    }
    return this.opening;
  };

  /**
   * Rings the running instances after a revocation: the store's own notifier
   * (PostgreSQL NOTIFY), and with REDIS_URL (the instances' revocationPush)
   * Redis too, so they reload at once instead of within their
   * revocationResync. Best effort: the revocation is in the store either way.
   */
  notifyRevocations = async (): Promise<void> => {
    // both rings, whatever the other does; the revocation is stored already, so a failed ring is a warning
    const store = await this.get();
    try {
      await store.notifyRevocations?.();
    } catch (err) {
      this.warn(`warning: could not notify running instances through the store (${(err as Error)?.message ?? err}); they pick the revocation up within their revocationResync`);
    }
    await this.redisPush()?.notifyRevocations();
  };

  private push: RedisRevocationNotifier | undefined;

  private redisPush(): RedisRevocationNotifier | undefined {
    if (!this.env.REDIS_URL) return undefined;
    if (this.push) return this.push;
    // ioredis is loaded only when REDIS_URL is set
    const Redis = (require('ioredis') as typeof import('ioredis')).default;
    // disconnectTimeout: a Redis that does not answer does not close its end either; the socket is destroyed
    // 100 ms after the CLI lets go of it (ioredis waits 2 s by default), so the command ends when its ring gave up
    const redis = new Redis(this.env.REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1, connectTimeout: 2000, disconnectTimeout: 100, retryStrategy: () => null });
    redis.on('error', () => undefined); // reported by onError below
    this.redis = redis;
    this.push = new RedisRevocationNotifier({
      redis,
      channel: this.env.REVOCATION_CHANNEL || undefined,
      onError: (err) => {
        this.redisFailed = true;
        this.warn(`warning: could not notify running instances through Redis (${(err as Error)?.message ?? err}); they pick the revocation up within their revocationResync`);
      },
    });
    return this.push;
  }

  /** A ring through Redis failed: QUIT is not waited for (a Redis that did not answer PUBLISH will not answer it). */
  private redisFailed = false;

  keyStore(): KeyStore {
    return deferredKeyStore(this.get);
  }

  async close(): Promise<void> {
    const redis = this.redis;
    this.redis = undefined;
    this.push = undefined;
    // a stalled Redis would never answer QUIT
    if (redis && this.redisFailed) redis.disconnect();
    else if (redis) await withDeadline(redis.quit(), REDIS_DEADLINE_MS, () => new Error('QUIT')).catch(() => redis.disconnect());
    if (!this.opening) return;
    const store = await this.opening.catch(() => undefined);
    this.opening = undefined;
    await store?.close();
  }
}

// ---------- formatting ----------

/** ISO 8601 to the second. */
export function iso(date: Date | number): string {
  return new Date(date).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Neutralises characters that could move the cursor or reorder text in a terminal. */
export function printable(text: string): string {
  return text.replace(/[\p{C}\p{Zl}\p{Zp}]/gu, '?');
}

/** The most of a user-given value a message repeats; the rest is cut, with an ellipsis. */
export const MAX_QUOTED = 200;

/** A user-given value inside a message: printable(), at most MAX_QUOTED characters. */
export function quoted(text: string): string {
  return `'${printable(clip(text, MAX_QUOTED))}'`;
}

export function table(header: string[], rows: string[][]): string[] {
  const all = [header, ...rows.map((r) => r.map(printable))];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ').trimEnd());
}

export function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

/** The client commands' ClientService; one that may write (not `readOnly`) first checks REDIS_URL, which it may ring. */
export function services(ctx: Context): ClientService {
  if (!ctx.stores.readOnly) ctx.stores.checkRedisUrl();
  const { get, notifyRevocations } = ctx.stores;
  return new ClientService(get, auditLogger(ctx.io.env), Date.now, storeClientRevocations(get, notifyRevocations));
}

/** What `create --introspect`, `--require-dpop` and `--resource` ask for, for any kind of client. */
export function clientPolicy(values: { introspect?: boolean; 'require-dpop'?: boolean; resource?: string[] }): {
  permissions: 'introspect'[];
  requireDpop: boolean;
  resources: string[];
} {
  return { permissions: values.introspect ? ['introspect'] : [], requireDpop: values['require-dpop'] === true, resources: [...new Set(values.resource ?? [])] };
}

/** What `create` prints about them, labels padded to `width` (nothing for a plain client). */
export function policyLines(c: { permissions: readonly string[]; requireDpop: boolean; resources: readonly string[] }, width: number): string[] {
  const lines: string[] = [];
  if (c.resources.length > 0) lines.push(`  ${'resources:'.padEnd(width)}${c.resources.map(printable).join(' ')}`);
  if (c.permissions.length > 0) lines.push(`  ${'permissions:'.padEnd(width)}${c.permissions.join(' ')}`);
  if (c.requireDpop) lines.push(`  ${'dpop:'.padEnd(width)}required (every token request must carry a DPoP proof)`);
  return lines;
}

/** The same in `create --json`: `resources`, `permissions`, `dpop_bound_access_tokens`, only when set. */
export function policyJson(c: { permissions: readonly string[]; requireDpop: boolean; resources: readonly string[] }): Record<string, unknown> {
  return {
    ...(c.resources.length > 0 && { resources: c.resources }),
    ...(c.permissions.length > 0 && { permissions: c.permissions }),
    ...(c.requireDpop && { dpop_bound_access_tokens: true }),
  };
}

/** The client, or a CommandError when it is unknown or revoked. */
export async function activeClient(service: ClientService, clientId: string, whenRevoked: (since: string) => string): Promise<ClientInfo> {
  const client = await service.get(clientId);
  if (!client) throw new CommandError(`no client with id ${quoted(clientId)}`);
  if (client.revokedAt) throw new CommandError(whenRevoked(iso(client.revokedAt)));
  return client;
}

/**
 * Shows new credentials and stores them only once stdout took them, through
 * a core call that takes a `deliver` callback (create, rotateSecret). When
 * stdout fails, nothing is stored and the error says so (`unsent`); when
 * the store fails after the output went out, the error says that what was
 * printed was not stored (`unstored`), or, for a refusal `refused` names
 * (the store changed meanwhile), that line instead. All are CommandErrors (exit 1).
 */
export async function deliverFirst<T, R>(
  ctx: Context,
  show: (created: T) => void,
  commit: (deliver: (created: T) => Promise<void>) => Promise<R>,
  said: { what: string; unsent: string; unstored: string; refused?: (err: unknown) => string | undefined },
): Promise<R> {
  let sent = false;
  try {
    return await commit(async (created) => {
      show(created);
      await ctx.delivered();
      sent = true;
    });
  } catch (err) {
    if (err instanceof OutputError) throw new CommandError(`could not write ${said.what} to stdout (${err.code}): ${said.unsent}`);
    if (!sent) throw err;
    const refused = said.refused?.(err);
    if (refused !== undefined) throw new CommandError(refused);
    throw new CommandError(`${oneLine(err instanceof Error ? err.message : String(err))}; ${said.unstored}`);
  }
}

/** After a create: a note on stderr naming the other active clients of the same name (names are labels, not ids). */
export async function noteSameName(ctx: Context, service: ClientService, created: { clientId: string; name: string }): Promise<void> {
  let same: string[];
  try {
    same = (await service.list()).filter((c) => c.clientId !== created.clientId && !c.revokedAt && c.name === created.name).map((c) => c.clientId);
  } catch {
    return; // the client is created; the note is a courtesy
  }
  if (same.length === 0) return;
  ctx.err(`note: ${same.length === 1 ? 'another active client is' : `${same.length} other active clients are`} named ${quoted(created.name)} too: ${same.join(', ')} (names are labels; the client_id tells clients apart)`);
}

/** `--help` / `-h` anywhere (before `--`) shows the command's help, whatever else is there. */
export function withHelp(command: string, handler: Handler): Handler {
  return (args, ctx) => {
    if (wantsHelp(args)) {
      ctx.io.stdout(HELP[command]);
      return Promise.resolve(0);
    }
    return handler(args, ctx);
  };
}
