/** `create`, `list`, `update`, `revoke`, `revoke-tokens`, `rotate-secret`: the client commands. */
import { SecretRotationConflictError, type ClientChanges, type ClientInfo, type ClientUpdate, type IssuedCredentials } from '../core/clients';
import { isScopeToken, scopeOption } from '../core/scope';
import { CommandError, UsageError, formatDuration, parseCommand, parseDuration } from './args';
import { createKeyClient } from './client-keys';
import { BIN } from './help';
import {
  CLIENT_ID_SHAPE,
  activeClient,
  clientPolicy,
  deliverFirst,
  iso,
  noteSameName,
  policyJson,
  policyLines,
  printable,
  quoted,
  services,
  table,
  type Handler,
} from './context';

const SECRET_WARNING = 'warning: the client secret is shown only now and cannot be recovered; store it safely.';

/**
 * SCOPES_SUPPORTED, the scopes the server offers (the example server
 * advertises them as scopes_supported), checked as the server checks it:
 * scopeOption(), the check of createIssuer()'s `scopesSupported`, so a value
 * one refuses the other refuses too. `undefined` when unset or empty: the CLI
 * cannot know the server's scopes then, and checks nothing.
 */
function offeredScopes(env: NodeJS.ProcessEnv, command: string): string[] | undefined {
  const raw = env.SCOPES_SUPPORTED;
  if (raw === undefined || raw === '') return undefined;
  try {
    return scopeOption('SCOPES_SUPPORTED', raw);
  } catch {
    throw new UsageError(`SCOPES_SUPPORTED must be scope tokens separated by single spaces (RFC 6749 §3.3), as the server takes it, got ${JSON.stringify(raw)}`, command);
  }
}

/**
 * The `--scope` values (repeatable; "" is none) as one space-separated list,
 * checked; with SCOPES_SUPPORTED set, each must be one it lists: the issuer
 * grants a client the scopes registered with it, whatever it offers, so a
 * typo (orders:raed) would give a client that never gets the scope meant.
 */
function scopeFlag(values: string[] | undefined, command: string, env: NodeJS.ProcessEnv): string | undefined {
  const offered = offeredScopes(env, command);
  const scope = values?.filter((s) => s !== '').join(' ');
  if (scope === undefined || scope === '') return scope;
  if (!scope.split(' ').every(isScopeToken)) {
    throw new UsageError(`--scope takes scope tokens separated by single spaces (RFC 6749 §3.3), got ${JSON.stringify(scope)}`, command);
  }
  const unknown = offered ? [...new Set(scope.split(' '))].filter((s) => !offered.includes(s)) : [];
  if (unknown.length > 0) {
    const named = unknown.map((s) => JSON.stringify(s)).join(', ');
    throw new UsageError(`--scope ${named} ${unknown.length === 1 ? 'is' : 'are'} not offered by the server: SCOPES_SUPPORTED is ${JSON.stringify(offered!.join(' '))}`, command);
  }
  return scope;
}

export const create: Handler = async (args, ctx) => {
  const { values } = parseCommand('create', args, {
    name: { type: 'string' },
    scope: { type: 'string', multiple: true },
    json: { type: 'boolean' },
    auth: { type: 'string' },
    jwks: { type: 'string' },
    'jwks-uri': { type: 'string' },
    'generate-key': { type: 'boolean' },
    out: { type: 'string' },
    introspect: { type: 'boolean' },
    'require-dpop': { type: 'boolean' },
    resource: { type: 'string', multiple: true },
  });
  if (values.name === undefined) throw new UsageError('missing required option --name', 'create');
  const scope = scopeFlag(values.scope, 'create', ctx.io.env);
  const auth = values.auth ?? 'client_secret';
  if (auth !== 'client_secret' && auth !== 'private_key_jwt') {
    throw new UsageError(`--auth must be client_secret or private_key_jwt, got ${JSON.stringify(auth)}`, 'create');
  }
  if (auth === 'private_key_jwt') return createKeyClient(ctx, values.name, scope, values);
  for (const flag of ['jwks', 'jwks-uri', 'generate-key', 'out'] as const) {
    if (values[flag] !== undefined) throw new UsageError(`--${flag} goes with --auth private_key_jwt`, 'create');
  }
  const policy = clientPolicy(values);
  const service = services(ctx);
  const input = { name: values.name, scopes: scope, ...policy };
  // the client is stored only once stdout took its secret
  const created = await deliverFirst(
    ctx,
    (c: IssuedCredentials) => {
      const scopeText = c.scopes.join(' ');
      if (values.json) {
        ctx.out(JSON.stringify({ client_id: c.clientId, client_secret: c.clientSecret, name: c.name, scope: scopeText, auth: 'client_secret', ...policyJson(policy) }));
        return;
      }
      ctx.out('Client created.');
      ctx.out(`  client_id:     ${c.clientId}`);
      ctx.out(`  client_secret: ${c.clientSecret}`);
      ctx.out(`  name:          ${printable(c.name)}`);
      ctx.out(`  scope:         ${scopeText || '(none)'}`);
      for (const line of policyLines(policy, 15)) ctx.out(line);
    },
    (deliver) => service.create(input, { deliver }),
    {
      what: "the new client's secret",
      unsent: 'nothing was changed, no client was created',
      unstored: 'the client printed above was NOT created: its secret does not work',
    },
  );
  ctx.err(SECRET_WARNING);
  await noteSameName(ctx, service, created);
  return 0;
};

/** A client as `list --json` and `show --json` print it: never a secret or a hash. */
function clientJson(c: ClientInfo): Record<string, unknown> {
  return {
    client_id: c.clientId,
    name: c.name,
    scope: c.scopes.join(' '),
    status: c.revokedAt ? 'revoked' : 'active',
    created_at: c.createdAt.toISOString(),
    revoked_at: c.revokedAt ? c.revokedAt.toISOString() : null,
    active_secrets: c.activeSecrets,
    auth: c.authMethod,
    ...(c.jwksUri && { jwks_uri: c.jwksUri }),
    ...(c.kids.length > 0 && { kids: c.kids }),
    ...policyJson(c),
  };
}

export const list: Handler = async (args, ctx) => {
  const { values } = parseCommand('list', args, { json: { type: 'boolean' } });
  ctx.stores.readOnly = true;
  const clients = await services(ctx).list();
  if (values.json) {
    ctx.out(
      JSON.stringify(
        clients.map(clientJson),
      ),
    );
    return 0;
  }
  if (clients.length === 0) {
    ctx.out(`No clients. Create one with '${BIN} create --name NAME'.`);
    return 0;
  }
  const rows = clients.map((c) => [c.clientId, c.name, c.scopes.join(' ') || '-', c.revokedAt ? 'revoked' : 'active', iso(c.createdAt), c.authMethod]);
  for (const line of table(['CLIENT_ID', 'NAME', 'SCOPE', 'STATUS', 'CREATED', 'AUTH'], rows)) ctx.out(line);
  return 0;
};

export const show: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('show', args, { json: { type: 'boolean' } }, { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE });
  const clientId = positionals[0];
  ctx.stores.readOnly = true;
  const c = await services(ctx).get(clientId);
  if (!c) throw new CommandError(`no client with id ${quoted(clientId)}`);
  if (values.json) {
    ctx.out(JSON.stringify(clientJson(c)));
    return 0;
  }
  const line = (label: string, value: string): void => ctx.out(`${`${label}:`.padEnd(14)}${value}`);
  line('client_id', c.clientId);
  line('name', printable(c.name));
  line('status', c.revokedAt ? `revoked since ${iso(c.revokedAt)}` : 'active');
  line('created', iso(c.createdAt));
  if (c.authMethod === 'private_key_jwt') {
    line('auth', 'private_key_jwt (a signed assertion; no secret)');
    if (c.jwksUri) line('jwks_uri', printable(c.jwksUri));
    else line('keys', c.kids.length > 0 ? c.kids.map(printable).join(' ') : '(none)');
  } else {
    const secrets = c.activeSecrets === 0 ? 'no secret works' : c.activeSecrets === 1 ? '1 secret works' : `${c.activeSecrets} secrets work: a rotation's overlap`;
    line('auth', `client_secret (${secrets})`);
  }
  line('scope', c.scopes.join(' ') || '(none)');
  line('resources', c.resources.length > 0 ? c.resources.map(printable).join(' ') : '(none: tokens for the default audience only)');
  line('permissions', c.permissions.length > 0 ? c.permissions.join(' ') : '(none)');
  line('dpop', c.requireDpop ? 'required (every token request must carry a DPoP proof)' : 'optional');
  return 0;
};

export const revoke: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('revoke', args, { json: { type: 'boolean' } }, { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE });
  const clientId = positionals[0];
  const service = services(ctx);
  await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked already (since ${since})`);
  if (!(await service.revoke(clientId))) throw new CommandError(`client ${quoted(clientId)} is unknown or revoked already`);
  const revoked = await service.get(clientId);
  if (values.json) {
    ctx.out(JSON.stringify({ client_id: clientId, status: 'revoked', revoked_at: revoked?.revokedAt?.toISOString() ?? null }));
  } else {
    ctx.out(`Client ${clientId} revoked: its secrets and keys no longer work, and its access tokens are refused`);
    ctx.out('by running issuers within their revocation reload interval (2 s by default).');
  }
  return 0;
};

export const revokeTokens: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand('revoke-tokens', args, { json: { type: 'boolean' } }, { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE });
  const clientId = positionals[0];
  const service = services(ctx);
  await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked (since ${since}); its tokens are refused already`);
  const done = await service.revokeTokens(clientId);
  if (!done) throw new CommandError(`client ${quoted(clientId)} is unknown or revoked`);
  if (values.json) {
    ctx.out(JSON.stringify({ client_id: clientId, tokens_revoked: true, generation: done.generation }));
  } else {
    ctx.out(`Every access token issued to client ${clientId} until now is revoked; the client stays active and`);
    ctx.out('its new tokens work. Running issuers refuse the old ones within their revocation reload interval (2 s by default).');
  }
  return 0;
};

const MAX_KEEP_OLD = 365 * 86400;

export const rotateSecret: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand(
    'rotate-secret',
    args,
    { 'keep-old': { type: 'string' }, json: { type: 'boolean' } },
    { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE },
  );
  const clientId = positionals[0];
  const keepOld = values['keep-old'] === undefined ? 0 : parseDuration(values['keep-old'], '--keep-old', 'rotate-secret', MAX_KEEP_OLD);
  const service = services(ctx);
  const client = await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked (since ${since}); a revoked client cannot get a new secret`);
  // a failed operation (exit 1), as client-key add on a secret client; the core's TypeError would read as a usage error
  if (client.authMethod === 'private_key_jwt') {
    throw new CommandError(`client ${quoted(clientId)} authenticates with a key (private_key_jwt), so it has no secret to rotate`);
  }
  // the new secret is stored, and the old one ended, only once stdout took the new one
  await deliverFirst(
    ctx,
    (rotated: { clientId: string; clientSecret: string }) => {
      if (values.json) {
        ctx.out(JSON.stringify({ client_id: rotated.clientId, client_secret: rotated.clientSecret }));
        return;
      }
      ctx.out(`New secret for client ${rotated.clientId}:`);
      ctx.out(`  client_secret: ${rotated.clientSecret}`);
      ctx.out(
        keepOld > 0
          ? `The previous secret keeps working for ${formatDuration(keepOld)}, until ${iso(Date.now() + keepOld * 1000)}.`
          : 'The previous secret no longer works.',
      );
    },
    async (deliver) => {
      const rotated = await service.rotateSecret(clientId, { keepOldFor: keepOld, deliver });
      if (!rotated) throw new CommandError(`client ${quoted(clientId)} is unknown or revoked`);
      return rotated;
    },
    {
      what: 'the new secret',
      unsent: 'nothing was changed, the old secret still works',
      unstored: 'the secret printed above was NOT stored: nothing was changed, the old secret still works',
      refused: (err) =>
        err instanceof SecretRotationConflictError
          ? `another rotation of the secret of client ${quoted(clientId)} happened at the same time; the secret printed above was NOT stored: the other rotation's new secret is the one that works`
          : undefined,
    },
  );
  ctx.err(SECRET_WARNING);
  return 0;
};

/** A flag and its --no- form: true, false, or undefined when neither is given; both at once is a usage error. */
function toggle(on: boolean | undefined, off: boolean | undefined, flag: string): boolean | undefined {
  if (on && off) throw new UsageError(`give --${flag} or --no-${flag}, not both`, 'update');
  return on ? true : off ? false : undefined;
}

/** How `update` names what changed: by its flags, and in --json by the keys of its answer. */
const FLAG_NAMES: Record<ClientUpdate['changed'][number], string> = {
  name: 'name',
  scopes: 'scope',
  resources: 'resources',
  permissions: 'introspect',
  requireDpop: 'require-dpop',
};
const JSON_NAMES: Record<ClientUpdate['changed'][number], string> = {
  name: 'name',
  scopes: 'scope',
  resources: 'resources',
  permissions: 'permissions',
  requireDpop: 'dpop_bound_access_tokens',
};

export const update: Handler = async (args, ctx) => {
  const { values, positionals } = parseCommand(
    'update',
    args,
    {
      name: { type: 'string' },
      scope: { type: 'string', multiple: true },
      resource: { type: 'string', multiple: true },
      'no-resources': { type: 'boolean' },
      introspect: { type: 'boolean' },
      'no-introspect': { type: 'boolean' },
      'require-dpop': { type: 'boolean' },
      'no-require-dpop': { type: 'boolean' },
      json: { type: 'boolean' },
    },
    { min: 1, max: 1, name: 'CLIENT_ID', shape: CLIENT_ID_SHAPE },
  );
  const clientId = positionals[0];
  const changes: ClientChanges = {};
  if (values.name !== undefined) changes.name = values.name;
  const scope = scopeFlag(values.scope, 'update', ctx.io.env);
  if (scope !== undefined) changes.scopes = scope;
  if (values.resource !== undefined && values['no-resources']) throw new UsageError('give --resource or --no-resources, not both', 'update');
  if (values.resource !== undefined) changes.resources = [...new Set(values.resource)];
  else if (values['no-resources']) changes.resources = [];
  const introspect = toggle(values.introspect, values['no-introspect'], 'introspect');
  if (introspect !== undefined) changes.permissions = introspect ? ['introspect'] : [];
  const requireDpop = toggle(values['require-dpop'], values['no-require-dpop'], 'require-dpop');
  if (requireDpop !== undefined) changes.requireDpop = requireDpop;
  if (Object.keys(changes).length === 0) {
    throw new UsageError('nothing to change: give --name, --scope, --resource, --no-resources, --[no-]introspect or --[no-]require-dpop', 'update');
  }
  const service = services(ctx);
  const { authMethod, jwksUri } = await activeClient(service, clientId, (since) => `client ${quoted(clientId)} is revoked (since ${since}); a revoked client cannot be changed`);
  let done: ClientUpdate | null;
  try {
    done = await service.update(clientId, changes);
  } catch (err) {
    if (err instanceof TypeError) throw new UsageError(err.message, 'update');
    throw err;
  }
  if (!done) throw new CommandError(`client ${quoted(clientId)} is unknown or revoked`);
  const { settings, tokensRevoked } = done;
  const scopeText = settings.scopes.join(' ');
  if (values.json) {
    const changed = done.changed.map((c) => JSON_NAMES[c]);
    ctx.out(
      JSON.stringify({
        client_id: clientId,
        name: settings.name,
        scope: scopeText,
        auth: authMethod,
        ...(jwksUri && { jwks_uri: jwksUri }),
        ...policyJson(settings),
        changed,
        tokens_revoked: tokensRevoked,
      }),
    );
  } else if (done.changed.length === 0) {
    ctx.out(`Client ${clientId} has these settings already; nothing changed.`);
  } else {
    ctx.out('Client updated.');
    ctx.out(`  client_id:    ${clientId}`);
    ctx.out(`  name:         ${printable(settings.name)}`);
    ctx.out(`  scope:        ${scopeText || '(none)'}`);
    for (const line of policyLines(settings, 14)) ctx.out(line);
    ctx.out(`  changed:      ${done.changed.map((c) => FLAG_NAMES[c]).join(', ')}`);
    if (tokensRevoked) {
      ctx.out('Something was taken away, so every access token issued to it until now is revoked, as with');
      ctx.out("'revoke-tokens': running issuers refuse them within their revocation reload interval (2 s by");
      ctx.out('default; at once with a push), and its next token request gets what it may have now.');
    } else {
      ctx.out('Nothing was taken away: its tokens keep working. Running issuers use the new settings for token');
      ctx.out('requests at once on the embedded store, within their client cache time (2 s) on PostgreSQL.');
    }
  }
  return 0;
};
