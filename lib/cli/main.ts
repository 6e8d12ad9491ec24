/**
 * The `client-credentials` command line: clients and signing keys, straight
 * on the store through `lib/core`. It never loads Express.
 */
import { ClientService, type ClientInfo } from '../core/clients';
import { deferredKeyStore, KeyRing, SIGNING_ALGORITHMS, type LoadedKey, type SigningAlgorithm } from '../core/keys';
import { isScopeToken } from '../core/scope';
import pino from 'pino';
import { silentLogger, type Logger } from '../logger';
import { openStore } from '../stores/open';
import type { KeyStore, Store } from '../stores/types';
import { CommandError, UsageError, formatDuration, parseCommand, parseDuration, wantsHelp } from './args';
import { BIN, HELP, helpPointer } from './help';

export interface CliIo {
  stdout: (s: string) => void;
  stderr: (s: string) => void;
  env: NodeJS.ProcessEnv;
}

interface Context {
  io: CliIo;
  out: (line?: string) => void;
  err: (line?: string) => void;
  stores: LazyStore;
}

type Handler = (args: string[], ctx: Context) => Promise<number>;

/** Generated client ids: 16 random bytes in base64url, so one may start with "-". */
const CLIENT_ID_SHAPE = /^[A-Za-z0-9_-]{22}$/;

const SECRET_WARNING = 'warning: the client secret is shown only now and cannot be recovered; store it safely.';

/**
 * Audit events (client.created, client.revoked, client.secret_rotated) go as
 * pino JSON lines to stderr when LOG_LEVEL is set; stdout stays the CLI's own.
 */
function auditLogger(env: NodeJS.ProcessEnv): Logger {
  if (!env.LOG_LEVEL) return silentLogger;
  return pino({ name: 'client-credentials', level: env.LOG_LEVEL }, pino.destination(2));
}

/** Opens the store on first use only, so a usage error never creates a data folder or a connection. */
class LazyStore {
  private opening: Promise<Store> | undefined;

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  get = (): Promise<Store> => {
    this.opening ??= openStore({
      databaseUrl: this.env.DATABASE_URL || undefined,
      schema: this.env.DATABASE_SCHEMA || undefined,
      dataDir: this.env.DATA_DIR || './data',
    });
    return this.opening;
  };

  keyStore(): KeyStore {
    return deferredKeyStore(this.get);
  }

  async close(): Promise<void> {
    if (!this.opening) return;
    const store = await this.opening.catch(() => undefined);
    this.opening = undefined;
    await store?.close();
  }
}

// ---------- formatting ----------

/** ISO 8601 to the second. */
function iso(date: Date | number): string {
  return new Date(date).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Neutralises characters that could move the cursor or reorder text in a terminal. */
function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, '?');
}

/** A user-given value inside a message. */
function quoted(text: string): string {
  return `'${printable(text)}'`;
}

function table(header: string[], rows: string[][]): string[] {
  const all = [header, ...rows.map((r) => r.map(printable))];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)));
  return all.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ').trimEnd());
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

// ---------- environment ----------

interface KeySettings {
  /** From SIGNING_ALG, or undefined to keep the signing key's algorithm. */
  algorithm: SigningAlgorithm | undefined;
  accessTokenTtl: number;
  clockTolerance: number;
  leadTime: number;
}

function envNumber(env: NodeJS.ProcessEnv, name: string, fallback: number, max: number, command: string, min = 0): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  if (!/^\d+$/.test(text.trim()) || Number(text) < min || Number(text) > max) {
    throw new UsageError(`${name} must be a whole number of seconds from ${min} to ${max}, got ${JSON.stringify(text)}`, command);
  }
  return Number(text);
}

function keySettings(env: NodeJS.ProcessEnv, command: string): KeySettings {
  const alg = env.SIGNING_ALG || undefined;
  if (alg !== undefined && !(SIGNING_ALGORITHMS as readonly string[]).includes(alg)) {
    throw new UsageError(`SIGNING_ALG must be one of ${SIGNING_ALGORITHMS.join(', ')}, got ${JSON.stringify(alg)}`, command);
  }
  return {
    algorithm: alg as SigningAlgorithm | undefined,
    accessTokenTtl: envNumber(env, 'ACCESS_TOKEN_TTL', 3600, 86400, command, 1),
    clockTolerance: envNumber(env, 'CLOCK_TOLERANCE', 5, 300, command),
    leadTime: envNumber(env, 'KEY_ROTATION_LEAD_TIME', 300, 86400, command),
  };
}

/**
 * The key ring, loaded (creating the first key when there is none) unless
 * `load` is false. The algorithm is SIGNING_ALG or else the newest key's,
 * so that loading never triggers KeyRing.init()'s immediate rotation on an
 * algorithm change; a change of algorithm goes through `keys rotate` and its lead time.
 */
async function loadKeyRing(ctx: Context, settings: KeySettings, load = true): Promise<KeyRing> {
  const keyStore = ctx.stores.keyStore();
  const stored = await keyStore.listKeys();
  const newest = stored.at(-1)?.alg;
  const algorithm =
    settings.algorithm ?? ((SIGNING_ALGORITHMS as readonly string[]).includes(newest ?? '') ? (newest as SigningAlgorithm) : 'ES256');
  const ring = new KeyRing(keyStore, {
    algorithm,
    maxTokenTtl: settings.accessTokenTtl + settings.clockTolerance,
    reloadCooldownMs: 0,
    refreshMs: Number.POSITIVE_INFINITY,
    rotationLeadTimeMs: settings.leadTime * 1000,
    logger: auditLogger(ctx.io.env),
    now: Date.now,
  });
  if (!load) return ring;
  if (stored.some((k) => k.retiredAt === null)) await ring.reload();
  else await ring.init(); // no key yet: creates the first one
  return ring;
}

function keyStatus(key: LoadedKey, now: number): 'pending' | 'current' | 'retired' {
  if (key.retiredAt !== null && key.retiredAt <= now) return 'retired';
  return key.activatesAt > now ? 'pending' : 'current';
}

// ---------- commands ----------

function services(ctx: Context): ClientService {
  return new ClientService(ctx.stores.get, auditLogger(ctx.io.env));
}

/** The client, or a CommandError when it is unknown or revoked. */
async function activeClient(service: ClientService, clientId: string, whenRevoked: (since: string) => string): Promise<ClientInfo> {
  const client = await service.get(clientId);
  if (!client) throw new CommandError(`no client with id ${quoted(clientId)}`);
  if (client.revokedAt) throw new CommandError(whenRevoked(iso(client.revokedAt)));
  return client;
}

const create: Handler = async (args, ctx) => {
  const { values } = parseCommand('create', args, {
    name: { type: 'string' },
    scope: { type: 'string', multiple: true },
    json: { type: 'boolean' },
  });
  if (values.name === undefined) throw new UsageError('missing required option --name', 'create');
  const scope = values.scope?.filter((s) => s !== '').join(' ');
  if (scope !== undefined && scope !== '' && !scope.split(' ').every(isScopeToken)) {
    throw new UsageError(`--scope takes scope tokens separated by single spaces (RFC 6749 §3.3), got ${JSON.stringify(scope)}`, 'create');
  }
  const created = await services(ctx).create({ name: values.name, scopes: scope });
  const scopeText = created.scopes.join(' ');
  if (values.json) {
    ctx.out(JSON.stringify({ client_id: created.clientId, client_secret: created.clientSecret, name: created.name, scope: scopeText }));
  } else {
    ctx.out('Client created.');
    ctx.out(`  client_id:     ${created.clientId}`);
    ctx.out(`  client_secret: ${created.clientSecret}`);
    ctx.out(`  name:          ${printable(created.name)}`);
    ctx.out(`  scope:         ${scopeText || '(none)'}`);
  }
  ctx.err(SECRET_WARNING);
  return 0;
};

const list: Handler = async (args, ctx) => {
  const { values } = parseCommand('list', args, { json: { type: 'boolean' } });
  const clients = await services(ctx).list();
  if (values.json) {
    ctx.out(
      JSON.stringify(
        clients.map((c) => ({
          client_id: c.clientId,
          name: c.name,
          scope: c.scopes.join(' '),
          status: c.revokedAt ? 'revoked' : 'active',
          created_at: c.createdAt.toISOString(),
          revoked_at: c.revokedAt ? c.revokedAt.toISOString() : null,
          active_secrets: c.activeSecrets,
        })),
      ),
    );
    return 0;
  }
  if (clients.length === 0) {
    ctx.out(`No clients. Create one with '${BIN} create --name NAME'.`);
    return 0;
  }
  const rows = clients.map((c) => [c.clientId, c.name, c.scopes.join(' ') || '-', c.revokedAt ? 'revoked' : 'active', iso(c.createdAt)]);
  for (const line of table(['CLIENT_ID', 'NAME', 'SCOPE', 'STATUS', 'CREATED'], rows)) ctx.out(line);
  return 0;
};

const revoke: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('revoke', args, { json: { type: 'boolean' } }, { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE });
  const clientId = positionals[0];
  const service = services(ctx);
  await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked already (since ${since})`);
  if (!(await service.revoke(clientId))) throw new CommandError(`client ${quoted(clientId)} is unknown or revoked already`);
  const revoked = await service.get(clientId);
  if (values.json) {
    ctx.out(JSON.stringify({ client_id: clientId, status: 'revoked', revoked_at: revoked?.revokedAt?.toISOString() ?? null }));
  } else {
    ctx.out(`Client ${clientId} revoked: its secrets no longer work. Access tokens issued before stay valid until they expire.`);
  }
  return 0;
};

const MAX_KEEP_OLD = 365 * 86400;

const rotateSecret: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand(
    'rotate-secret',
    args,
    { 'keep-old': { type: 'string' }, json: { type: 'boolean' } },
    { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE },
  );
  const clientId = positionals[0];
  const keepOld = values['keep-old'] === undefined ? 0 : parseDuration(values['keep-old'], '--keep-old', 'rotate-secret', MAX_KEEP_OLD);
  const service = services(ctx);
  await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked (since ${since}); a revoked client cannot get a new secret`);
  const rotated = await service.rotateSecret(clientId, { keepOldFor: keepOld });
  if (!rotated) throw new CommandError(`client ${quoted(clientId)} is unknown or revoked`);
  if (values.json) {
    ctx.out(JSON.stringify({ client_id: rotated.clientId, client_secret: rotated.clientSecret }));
  } else {
    ctx.out(`New secret for client ${rotated.clientId}:`);
    ctx.out(`  client_secret: ${rotated.clientSecret}`);
    ctx.out(
      keepOld > 0
        ? `The previous secret keeps working for ${formatDuration(keepOld)}, until ${iso(Date.now() + keepOld * 1000)}.`
        : 'The previous secret no longer works.',
    );
  }
  ctx.err(SECRET_WARNING);
  return 0;
};

const keysList: Handler = async (args, ctx) => {
  const { values } = parseCommand('keys list', args, { json: { type: 'boolean' } });
  const settings = keySettings(ctx.io.env, 'keys list');
  const ring = await loadKeyRing(ctx, settings);
  const now = Date.now();
  const keys = ring.list().map((k) => ({
    kid: k.kid,
    alg: k.alg,
    status: keyStatus(k, now),
    activates_at: new Date(k.activatesAt).toISOString(),
    retired_at: k.retiredAt === null ? null : new Date(k.retiredAt).toISOString(),
  }));
  if (values.json) {
    ctx.out(JSON.stringify(keys));
    return 0;
  }
  const rows = keys.map((k) => [k.kid, k.alg, k.status, iso(new Date(k.activates_at)), k.retired_at ? iso(new Date(k.retired_at)) : '-']);
  for (const line of table(['KID', 'ALG', 'STATUS', 'ACTIVATES_AT', 'RETIRED_AT'], rows)) ctx.out(line);
  return 0;
};

const keysRotate: Handler = async (args, ctx) => {
  const { values } = parseCommand('keys rotate', args, { 'lead-time': { type: 'string' }, json: { type: 'boolean' } });
  const settings = keySettings(ctx.io.env, 'keys rotate');
  const leadTime =
    values['lead-time'] === undefined ? settings.leadTime : parseDuration(values['lead-time'], '--lead-time', 'keys rotate', 86400);
  const ring = await loadKeyRing(ctx, settings);
  const replaced = ring.list().filter((k) => k.retiredAt === null);
  const key = await ring.rotate(leadTime * 1000);
  if (values.json) {
    ctx.out(
      JSON.stringify({ kid: key.kid, alg: key.alg, status: keyStatus(key, Date.now()), activates_at: new Date(key.activatesAt).toISOString() }),
    );
    return 0;
  }
  ctx.out(`New signing key ${key.kid} (${key.alg}) published.`);
  ctx.out(
    leadTime > 0
      ? `It signs from ${iso(key.activatesAt)} (in ${formatDuration(leadTime)}); ${replaced.map((k) => k.kid).join(', ') || 'the previous key'} signs until then.`
      : 'It signs from now on.',
  );
  return 0;
};

const keysPrune: Handler = async (args, ctx) => {
  const { values } = parseCommand('keys prune', args, { json: { type: 'boolean' } });
  const settings = keySettings(ctx.io.env, 'keys prune');
  const ring = await loadKeyRing(ctx, settings, false); // pruning needs no key, and creates none
  const removed = await ring.prune();
  if (values.json) ctx.out(JSON.stringify({ removed }));
  else ctx.out(`Removed ${removed} retired key${removed === 1 ? '' : 's'}.`);
  return 0;
};

const KEY_COMMANDS: Record<string, Handler> = { list: keysList, rotate: keysRotate, prune: keysPrune };

const keys: Handler = async (args, ctx) => {
  const [sub, ...rest] = args;
  if (sub === '-h' || sub === '--help') {
    ctx.io.stdout(HELP.keys);
    return 0;
  }
  if (sub === undefined) {
    ctx.io.stderr(HELP.keys);
    return 2;
  }
  const handler = Object.hasOwn(KEY_COMMANDS, sub) ? KEY_COMMANDS[sub] : undefined;
  if (!handler) {
    ctx.err(`error: unknown command 'keys ${printable(sub)}'`);
    ctx.err();
    ctx.io.stderr(HELP.keys);
    return 2;
  }
  return withHelp(`keys ${sub}`, handler)(rest, ctx);
};

const help: Handler = async (args, ctx) => {
  const topic = args.join(' ');
  if (!Object.hasOwn(HELP, topic)) {
    ctx.err(`error: no help for ${quoted(topic)}`);
    ctx.err();
    ctx.io.stderr(HELP['']);
    return 2;
  }
  ctx.io.stdout(HELP[topic]);
  return 0;
};

/** `--help` / `-h` anywhere (before `--`) shows the command's help, whatever else is there. */
function withHelp(command: string, handler: Handler): Handler {
  return (args, ctx) => {
    if (wantsHelp(args)) {
      ctx.io.stdout(HELP[command]);
      return Promise.resolve(0);
    }
    return handler(args, ctx);
  };
}

const COMMANDS: Record<string, Handler> = {
  create: withHelp('create', create),
  list: withHelp('list', list),
  revoke: withHelp('revoke', revoke),
  'rotate-secret': withHelp('rotate-secret', rotateSecret),
  keys,
  help,
};

async function dispatch(argv: string[], ctx: Context): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '-h' || command === '--help') {
    ctx.io.stdout(HELP['']);
    return 0;
  }
  const handler = command !== undefined && Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (!handler) {
    if (command !== undefined) {
      ctx.err(command.startsWith('-') ? `error: expected a command before ${quoted(command)}` : `error: unknown command ${quoted(command)}`);
      ctx.err();
    }
    ctx.io.stderr(HELP['']);
    return 2;
  }
  return handler(rest, ctx);
}

/**
 * Runs one command. Exit codes: 0 done, 1 failed (unknown or revoked client,
 * store error), 2 usage error (bad flags, bad values, bad environment).
 */
export async function main(argv: string[], io: CliIo): Promise<number> {
  const ctx: Context = {
    io,
    out: (line = '') => io.stdout(`${line}\n`),
    err: (line = '') => io.stderr(`${line}\n`),
    stores: new LazyStore(io.env),
  };
  let code: number;
  try {
    code = await dispatch(argv, ctx);
  } catch (error) {
    await ctx.stores.close().catch(() => undefined);
    return report(error, ctx);
  }
  try {
    await ctx.stores.close();
  } catch (error) {
    return report(error, ctx);
  }
  return code;
}

function report(error: unknown, ctx: Context): number {
  if (error instanceof UsageError) {
    ctx.err(`error: ${oneLine(error.message)} (${helpPointer(error.command)})`);
    return 2;
  }
  const message = oneLine(error instanceof Error ? error.message : String(error)) || 'unknown error';
  ctx.err(`error: ${message}`);
  // TypeError is how the core rejects input (a malformed scope, a bad name, a bad DATABASE_URL)
  return error instanceof TypeError ? 2 : 1;
}

/** Entry point of `bin/client-credentials.js`. */
export async function run(): Promise<void> {
  // `client-credentials list | head` closes the pipe early: not an error
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE') throw err;
    });
  }
  try {
    process.exitCode = await main(process.argv.slice(2), {
      stdout: (s) => process.stdout.write(s),
      stderr: (s) => process.stderr.write(s),
      env: process.env,
    });
  } catch (err) {
    process.stderr.write(`error: ${oneLine(err instanceof Error ? err.message : String(err))}\n`);
    process.exitCode = 1;
  }
}
