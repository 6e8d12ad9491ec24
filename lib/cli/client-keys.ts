/**
 * Key-based clients (private_key_jwt): `create --auth private_key_jwt` and
 * `client-key add|remove|list`. Only public keys are ever registered; a
 * generated private key goes to a 0600 file and nowhere else.
 */
import { generateKeyPairSync } from 'node:crypto';
import type { JsonWebKey } from '../jwt/jwk';
import { closeSync, constants, existsSync, fsyncSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { checkClientKeys, type RegisteredKeyClient } from '../core/clients';
import { jwkThumbprint } from '../jwt/thumbprint';
import { CommandError, UsageError, parseCommand } from './args';
import {
  CLIENT_ID_OR_KID_SHAPE,
  CLIENT_ID_SHAPE,
  activeClient,
  clientPolicy,
  deliverFirst,
  noteSameName,
  policyJson,
  policyLines,
  printable,
  quoted,
  services,
  table,
  withHelp,
  type Context,
  type Handler,
} from './context';
import { HELP } from './help';

/** Reads a JWK Set or one JWK from `path`; a missing file or bad JSON is a usage error of `command`. */
function readJwkFile(path: string, command: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read ${quoted(path)}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`, command);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError(`${quoted(path)} is not JSON: expected a JWK Set or one JWK`, command);
  }
}

/** Key checks as usage errors: the one-line reason from core. Keys of the set that cannot sign are skipped, with a note on stderr. */
function checked(input: unknown, command: string, ctx?: Context): ReturnType<typeof checkClientKeys> {
  try {
    const notes: string[] = [];
    const keys = checkClientKeys(input, (i, reason) => notes.push(`note: key ${i + 1} of the set is not registered: ${reason}`));
    for (const note of notes) ctx?.err(note);
    return keys;
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, command);
    throw err;
  }
}

/** An existing key file is a usage error, before the store is opened (the file is created with O_EXCL all the same). */
function refuseExisting(path: string): void {
  if (existsSync(path)) throw new UsageError(`${quoted(path)} exists already; refusing to overwrite a key file`, 'create');
}

/**
 * Runs `fn` with SIGINT and SIGTERM caught: one of them meanwhile runs
 * `cleanup` (which says on stderr what is left), then ends the process with
 * 130 or 143, as a shell reports a command those signals ended. Only while
 * `fn` runs: before and after, the signals do what they always do.
 */
async function cleanedUpOnSignal<T>(cleanup: (signal: NodeJS.Signals) => void, fn: () => Promise<T>): Promise<T> {
  const onSignal = (signal: NodeJS.Signals): void => {
    try {
      cleanup(signal);
    } finally {
      process.exit(signal === 'SIGINT' ? 130 : 143);
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    return await fn();
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/**
 * Writes `text` to a new file with mode 0600 and syncs it to disk; refuses
 * an existing file. A write that fails (a full disk) removes the file: no
 * client is created then, and a retry finds no half-written file in its way.
 */
function writePrivateFile(path: string, text: string): void {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new UsageError(`${quoted(path)} exists already; refusing to overwrite a key file`, 'create');
    throw new UsageError(`cannot create ${quoted(path)}: ${code ?? 'error'}`, 'create');
  }
  try {
    const bytes = Buffer.from(text);
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(path, { force: true });
    throw new CommandError(`cannot write the private key to ${quoted(path)} (${(err as NodeJS.ErrnoException).code ?? 'error'}): nothing was changed, no client was created`);
  }
  closeSync(fd);
}

interface KeyClientFlags {
  json?: boolean;
  jwks?: string;
  'jwks-uri'?: string;
  'generate-key'?: boolean;
  out?: string;
  introspect?: boolean;
  'require-dpop'?: boolean;
  resource?: string[];
}

export async function createKeyClient(ctx: Context, name: string, scope: string | undefined, values: KeyClientFlags): Promise<number> {
  if (values.jwks !== undefined && values['jwks-uri'] !== undefined) throw new UsageError('give --jwks or --jwks-uri, not both', 'create');
  if (values['generate-key'] && (values.jwks !== undefined || values['jwks-uri'] !== undefined)) {
    throw new UsageError('give one of --jwks, --jwks-uri or --generate-key', 'create');
  }
  if (!values['generate-key'] && values.jwks === undefined && values['jwks-uri'] === undefined) {
    throw new UsageError('--auth private_key_jwt needs --jwks FILE, --jwks-uri URL or --generate-key --out FILE', 'create');
  }
  if (!values['generate-key'] && values.out !== undefined) throw new UsageError('--out goes with --generate-key', 'create');
  if (values['jwks-uri'] !== undefined) return createRemoteKeyClient(ctx, name, scope, values['jwks-uri'], values);
  if (values['generate-key'] && values.out === undefined) throw new UsageError('--generate-key needs --out FILE for the private key', 'create');

  let keys: ReturnType<typeof checkClientKeys>;
  let outFile: string | undefined;
  let privateText = '';
  if (values['generate-key']) {
    outFile = values.out!;
    // '-' is not stdout here: the private key would be mixed with the client's output, and sent where the client id goes
    if (outFile === '-' || outFile === '') throw new UsageError(`--out needs a file name for the private key, got ${quoted(outFile)} (it is never written to stdout)`, 'create');
    refuseExisting(outFile);
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pub = publicKey.export({ format: 'jwk' }) as JsonWebKey;
    const kid = jwkThumbprint(pub);
    keys = checked({ ...pub, kid, alg: 'ES256', use: 'sig' }, 'create');
    const privateJwk = { ...(privateKey.export({ format: 'jwk' }) as JsonWebKey), kid, alg: 'ES256', use: 'sig' };
    privateText = `${JSON.stringify(privateJwk, null, 2)}\n`;
  } else {
    keys = checked(readJwkFile(values.jwks!, 'create'), 'create', ctx);
  }

  const service = services(ctx);
  // the client is stored only once stdout took its client_id; with a generated key, the key file is written (and synced) before
  const removed = outFile ? `, and the key file ${quoted(outFile)} was removed` : '';
  // whether the key file exists, and whether the client was printed (its store write may then have been under way)
  let written = false;
  let printed = false;
  let created: RegisteredKeyClient;
  try {
    // a signal (Ctrl-C while the store is slow) leaves no key file without a client: it is removed, and the process ends
    created = await cleanedUpOnSignal(
      (signal) => {
        if (written) rmSync(outFile!, { force: true });
        ctx.err(
          printed
            ? `error: interrupted (${signal}) while the client printed above was being stored: it may have been created${written ? ` without its key file ${quoted(outFile!)}, which was removed` : ''}; 'list' shows whether it was (then revoke it)`
            : `error: interrupted (${signal}): nothing was changed, no client was created${written ? removed : ''}`,
        );
      },
      async () => {
        // the key file first (a full disk fails here, before the store is opened or created); from here on, a store
        // that fails or a signal removes it
        if (outFile) {
          writePrivateFile(outFile, privateText);
          written = true;
        }
        return deliverFirst(
          ctx,
          (c: RegisteredKeyClient) => {
            printed = true;
            const kids = c.keys.map((k) => k.kid);
            const scopeText = c.scopes.join(' ');
            if (values.json) {
              const base = { client_id: c.clientId, name: c.name, scope: scopeText, auth: 'private_key_jwt', ...policyJson(clientPolicy(values)) };
              ctx.out(JSON.stringify(outFile ? { ...base, kid: kids[0] } : { ...base, kids }));
              return;
            }
            printKeyClient(ctx, c, scopeText, `  kids:       ${kids.map(printable).join(', ')}`, values);
            // the whole path, however long: quoted() would cut it
            if (outFile) ctx.out(`The private key is in '${printable(outFile)}' (mode 0600); only its public key is registered. Keep it secret.`);
          },
          (deliver) => service.create({ name, scopes: scope, authMethod: 'private_key_jwt', jwks: { keys }, ...clientPolicy(values) }, { deliver }),
          { what: 'the new client', unsent: `nothing was changed, no client was created${removed}`, unstored: `the client printed above was NOT created${removed}` },
        );
      },
    );
  } catch (err) {
    if (written) rmSync(outFile!, { force: true }); // no client: the key file would be an orphan
    throw err;
  }
  await noteSameName(ctx, service, created);
  return 0;
}

/** The human-readable answer to a key-based `create`; `keys` is its last line (kids or jwks_uri). */
function printKeyClient(ctx: Context, created: { clientId: string; name: string }, scopeText: string, keys: string, values: KeyClientFlags): void {
  ctx.out('Client created.');
  ctx.out(`  client_id:  ${created.clientId}`);
  ctx.out(`  name:       ${printable(created.name)}`);
  ctx.out(`  scope:      ${scopeText || '(none)'}`);
  ctx.out('  auth:       private_key_jwt');
  ctx.out(keys);
  for (const line of policyLines(clientPolicy(values), 12)) ctx.out(line);
}

async function createRemoteKeyClient(ctx: Context, name: string, scope: string | undefined, jwksUri: string, values: KeyClientFlags): Promise<number> {
  const service = services(ctx);
  let created: RegisteredKeyClient;
  try {
    // the client is stored only once stdout took its client_id
    created = await deliverFirst(
      ctx,
      (c: RegisteredKeyClient) => {
        const scopeText = c.scopes.join(' ');
        if (values.json) {
          ctx.out(JSON.stringify({ client_id: c.clientId, name: c.name, scope: scopeText, auth: 'private_key_jwt', jwks_uri: c.jwksUri, ...policyJson(clientPolicy(values)) }));
          return;
        }
        printKeyClient(ctx, c, scopeText, `  jwks_uri:   ${printable(c.jwksUri ?? '')}`, values);
      },
      (deliver) => service.create({ name, scopes: scope, authMethod: 'private_key_jwt', jwksUri, ...clientPolicy(values) }, { deliver }),
      { what: 'the new client', unsent: 'nothing was changed, no client was created', unstored: 'the client printed above was NOT created' },
    );
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, 'create');
    throw err;
  }
  await noteSameName(ctx, service, created);
  return 0;
}

const keyAdd: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('client-key add', args, { json: { type: 'boolean' } }, { min: 2, max: 2, name: ['CLIENT_ID', 'FILE'], shape: CLIENT_ID_SHAPE });
  const [clientId, file] = positionals;
  const input = readJwkFile(file, 'client-key add');
  const keys = checked(input, 'client-key add', ctx);
  if (keys.length !== 1) throw new UsageError(`${quoted(file)} holds ${keys.length} keys; add one key at a time`, 'client-key add');
  const [key] = keys;
  const service = services(ctx);
  const client = await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked (since ${since})`);
  if (client.authMethod !== 'private_key_jwt') throw new CommandError(`client ${quoted(clientId)} authenticates with a secret, not with keys`);
  if (client.jwksUri) throw new CommandError(`client ${quoted(clientId)} publishes its keys at ${quoted(client.jwksUri)}; change them there`);
  let added;
  try {
    added = await service.addKey(clientId, key);
  } catch (err) {
    // the key itself was checked above: what is left depends on the client's keys (a kid or key it has, a full set), not on the command line
    if (err instanceof TypeError) throw new CommandError(err.message);
    throw err;
  }
  if (!added) throw new CommandError(`client ${quoted(clientId)} is unknown, revoked or not key-based`);
  if (values.json) ctx.out(JSON.stringify({ client_id: clientId, kid: added.kid, alg: added.alg }));
  else ctx.out(`Key ${printable(added.kid)} added to client ${clientId}. Both keys work; remove the old one once the client uses the new one.`);
  return 0;
};

const keyRemove: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('client-key remove', args, { json: { type: 'boolean' } }, { min: 2, max: 2, name: ['CLIENT_ID', 'KID'], shape: CLIENT_ID_OR_KID_SHAPE });
  const [clientId, kid] = positionals;
  const service = services(ctx);
  const client = await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked (since ${since})`);
  if (!client.kids.includes(kid)) throw new CommandError(`client ${quoted(clientId)} has no key with kid ${quoted(kid)}`);
  if (client.kids.length === 1) throw new CommandError(`${quoted(kid)} is the last key of client ${quoted(clientId)}; add its successor first, or revoke the client`);
  if (!(await service.removeKey(clientId, kid))) throw new CommandError(`could not remove key ${quoted(kid)} from client ${quoted(clientId)}`);
  if (values.json) ctx.out(JSON.stringify({ client_id: clientId, removed: kid }));
  else ctx.out(`Key ${printable(kid)} removed from client ${clientId}: assertions signed with it no longer work.`);
  return 0;
};

const keyList: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('client-key list', args, { json: { type: 'boolean' } }, { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE });
  const [clientId] = positionals;
  ctx.stores.readOnly = true;
  const keys = await services(ctx).listKeys(clientId);
  if (!keys) throw new CommandError(`no client with id ${quoted(clientId)}`);
  const rows = keys.map((k) => ({ kid: k.kid, kty: k.kty, alg: String(k.alg ?? ''), crv: typeof k.crv === 'string' ? k.crv : null }));
  // no registered keys: a client with a secret, or one whose keys are at its jwks_uri (fetched when it authenticates)
  const jwksUri = rows.length === 0 ? (await services(ctx).get(clientId))?.jwksUri : undefined;
  if (values.json) {
    // always the array of registered keys, so `jq length` and `.[].kid` work for every client; keys at a URI are
    // none stored: a note on stderr names it (as `list --json` and `update --json` do in their jwks_uri field)
    ctx.out(JSON.stringify(rows));
    if (jwksUri) ctx.err(`note: client ${clientId} publishes its keys at ${printable(jwksUri)}: none are stored, the issuer fetches them from there`);
    return 0;
  }
  if (rows.length === 0) {
    ctx.out(
      jwksUri
        ? `Client ${clientId} publishes its keys at ${printable(jwksUri)}: the issuer fetches them from there, none are stored.`
        : `Client ${clientId} has no keys: it authenticates with a secret.`,
    );
    return 0;
  }
  for (const line of table(['KID', 'KTY', 'ALG'], rows.map((r) => [r.kid, r.crv ? `${r.kty} ${r.crv}` : r.kty, r.alg]))) ctx.out(line);
  return 0;
};

const KEY_COMMANDS: Record<string, Handler> = { add: keyAdd, remove: keyRemove, list: keyList };

export const clientKey: Handler = async (args, ctx) => {
  const [sub, ...rest] = args;
  if (sub === '-h' || sub === '--help') {
    ctx.io.stdout(HELP['client-key']);
    return 0;
  }
  if (sub === undefined) {
    ctx.io.stderr(HELP['client-key']);
    return 2;
  }
  const handler = Object.hasOwn(KEY_COMMANDS, sub) ? KEY_COMMANDS[sub] : undefined;
  if (!handler) {
    ctx.err(`error: unknown command 'client-key ${printable(sub)}' (client-key ${Object.keys(KEY_COMMANDS).join(', client-key ')}; client-credentials client-key --help describes them)`);
    return 2;
  }
  return withHelp(`client-key ${sub}`, handler)(rest, ctx);
};
