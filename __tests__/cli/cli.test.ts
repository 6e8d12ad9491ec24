import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { createIssuer } from '../../lib';
import { main } from '../../lib/cli/main';
import { authenticateClient } from '../../lib/core/client-auth';
import { generateStoredKey } from '../../lib/core/keys';
import { hashSecret, verifySecret } from '../../lib/core/secrets';
import { openEmbeddedStore, type EmbeddedStore } from '../../lib/stores/embedded';
import { openStore } from '../../lib/stores/open';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';
import { fetchToken, headerOf } from '../helpers/tokens';

const ROOT = path.resolve(__dirname, '../..');

let tmp: string;
let dataDir: string;

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-cli-'));
  dataDir = path.join(tmp, 'data');
});

afterEach(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

async function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: (s) => {
      stdout += s;
    },
    stderr: (s) => {
      stderr += s;
    },
    env: { DATA_DIR: dataDir, ...env },
  });
  return { code, stdout, stderr };
}

/** Opens the same embedded store the CLI wrote to, runs `fn`, closes it. */
async function withStore<T>(fn: (store: EmbeddedStore) => Promise<T>): Promise<T> {
  const store = await openEmbeddedStore({ dataDir });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

async function createJson(name = 'svc', scope?: string): Promise<{ client_id: string; client_secret: string; name: string; scope: string }> {
  const r = await cli(['create', '--name', name, ...(scope === undefined ? [] : ['--scope', scope]), '--json']);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

/** Whether `secret` authenticates `clientId` at `at`, by the rules the token endpoint uses. */
async function authenticates(clientId: string, secret: string, at = new Date()): Promise<boolean> {
  return withStore((store) =>
    authenticateClient((id) => store.findClient(id), { clientId, clientSecret: secret, method: 'client_secret_basic' }, at).then(
      () => true,
      () => false,
    ),
  );
}

/** A usage error: exit 2, nothing on stdout, one line naming the problem and pointing at the help. */
function expectUsageError(r: Run, problem: string | RegExp, command: string): void {
  expect(r.code).toBe(2);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^error: /);
  if (typeof problem === 'string') expect(lines[0]).toContain(problem);
  else expect(lines[0]).toMatch(problem);
  expect(lines[0]).toContain(`client-credentials ${command} --help`);
}

/** Stores a client whose id starts with "-", as generated ids may (base64url), and returns its secret. */
async function dashClient(clientId: string): Promise<string> {
  const secret = 'dash-secret';
  const now = new Date();
  await withStore((s) =>
    s.createClient({ clientId, name: 'dash', scopes: [], grantTypes: ['client_credentials'], createdAt: now, secret: { hash: hashSecret(secret), createdAt: now, expiresAt: null } }),
  );
  return secret;
}

describe('top level', () => {
  test('no command prints the usage on stderr and exits 2', async () => {
    const r = await cli([]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('Usage: client-credentials <command>');
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test.each([[['--help']], [['-h']], [['help']], [['help', '--help']], [['help', '-h']]])('%j prints the usage on stdout and exits 0', async (args) => {
    const r = await cli(args);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('Usage: client-credentials <command>');
    for (const command of ['create', 'list', 'revoke', 'rotate-secret', 'keys list', 'keys rotate', 'keys prune']) {
      expect(r.stdout).toContain(command);
    }
  });

  test('an unknown command is one line on stderr naming it and the commands, exit 2', async () => {
    const r = await cli(['frobnicate', '--json']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      "error: unknown command 'frobnicate' (commands: create, list, show, update, revoke, revoke-tokens, rotate-secret, keys, client-key, help; client-credentials --help describes them)\n",
    );
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test('no command at all prints the usage on stderr, exit 2', async () => {
    const r = await cli([]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('Usage: client-credentials <command>');
  });

  test('an option before any command is a usage error, in one line', async () => {
    const r = await cli(['--json']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: expected a command before '--json' \(commands: create, .*\)\n$/);
  });

  test('help COMMAND --help is the help of COMMAND', async () => {
    const r = await cli(['help', 'create', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('create --name NAME');
  });

  test('help for an unknown topic exits 2', async () => {
    const r = await cli(['help', 'nope']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: no help for 'nope'/);
  });

  test('keys without a subcommand prints the keys usage on stderr and exits 2; an unknown one is named', async () => {
    const none = await cli(['keys']);
    expect(none.code).toBe(2);
    expect(none.stdout).toBe('');
    expect(none.stderr).toContain('Usage: client-credentials keys <list|rotate|revoke|prune>');
    const unknown = await cli(['keys', 'burn']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe("error: unknown command 'keys burn' (keys list, keys rotate, keys revoke, keys prune; client-credentials keys --help describes them)\n");
  });
});

describe('--help on every command', () => {
  test.each([
    [['create', '--help'], 'create --name NAME'],
    [['create', '-h', '--bogus'], 'create --name NAME'],
    [['list', '--help'], 'list [--json]'],
    [['revoke', '-h'], 'revoke CLIENT_ID'],
    [['rotate-secret', '--help'], 'rotate-secret CLIENT_ID [--keep-old DURATION]'],
    [['keys', '--help'], 'keys <list|rotate|revoke|prune>'],
    [['keys', 'list', '--help'], 'keys list [--json]'],
    [['keys', 'rotate', '-h'], 'keys rotate [--lead-time DURATION]'],
    [['keys', 'revoke', '--help'], 'keys revoke KID [--json]'],
    [['keys', 'prune', '--help'], 'keys prune'],
    [['help', 'create'], 'create --name NAME'],
    [['help', 'keys', 'rotate'], 'keys rotate [--lead-time DURATION]'],
  ])('%j', async (args, usage) => {
    const r = await cli(args);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain(`Usage: client-credentials ${usage}`);
    expect(fs.existsSync(dataDir)).toBe(false);
  });
});

describe('create', () => {
  test('prints the id and the secret once, warns, and stores only a hash', async () => {
    const r = await cli(['create', '--name', 'billing service', '--scope', 'orders:read orders:write']);
    expect(r.code).toBe(0);
    const clientId = /client_id:\s+(\S+)/.exec(r.stdout)?.[1];
    const secret = /client_secret:\s+(\S+)/.exec(r.stdout)?.[1];
    expect(clientId).toBeDefined();
    expect(secret).toBeDefined();
    expect(r.stdout.split(secret!)).toHaveLength(2); // shown exactly once
    expect(r.stdout).toContain('billing service');
    expect(r.stdout).toContain('orders:read orders:write');
    expect(r.stderr).toMatch(/^warning: the client secret is shown only now/);
    expect(r.stderr).not.toContain(secret!);

    const stored = await withStore((s) => s.findClient(clientId!));
    expect(stored).toMatchObject({ name: 'billing service', scopes: ['orders:read', 'orders:write'], revokedAt: null });
    expect(stored!.secrets).toHaveLength(1);
    const { hash } = stored!.secrets[0];
    expect(hash).not.toBe(secret);
    expect(hash).not.toContain(secret!);
    expect(hash.startsWith('hmac-sha256$')).toBe(true);
    expect(verifySecret(secret!, hash)).toBe(true);
    expect(await authenticates(clientId!, secret!)).toBe(true);
  });

  test('a name other active clients have: created all the same, with a one-line note naming them', async () => {
    const first = await createJson('dup');
    const warning = 'warning: the client secret is shown only now and cannot be recovered; store it safely.\n';
    const second = await cli(['create', '--name', 'dup', '--json']);
    expect(second.code).toBe(0);
    const b = JSON.parse(second.stdout);
    expect(b.name).toBe('dup');
    expect(second.stderr).toBe(`${warning}note: another active client is named 'dup' too: ${first.client_id} (names are labels; the client_id tells clients apart)\n`);
    const third = await cli(['create', '--name', 'dup']);
    expect(third.code).toBe(0);
    expect(third.stderr).toBe(`${warning}note: 2 other active clients are named 'dup' too: ${first.client_id}, ${b.client_id} (names are labels; the client_id tells clients apart)\n`);
    // a revoked one is not named; a key-based create notes too
    expect((await cli(['revoke', first.client_id])).code).toBe(0);
    const keyed = await cli(['create', '--name', 'dup', '--auth', 'private_key_jwt', '--jwks-uri', 'https://keys.example.com/jwks.json']);
    expect(keyed.code).toBe(0);
    expect(keyed.stderr).toMatch(new RegExp(`^note: 2 other active clients are named 'dup' too: ${b.client_id}, \\S+ \\(`));
    expect(keyed.stderr).not.toContain(first.client_id);
    expect((await cli(['create', '--name', 'other'])).stderr).toBe(warning);
  });

  test('--json prints exactly one JSON object and nothing else on stdout', async () => {
    const r = await cli(['create', '--name', 'svc', '--scope', 'a b', '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout.endsWith('\n')).toBe(true);
    expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
    const body = JSON.parse(r.stdout);
    expect(Object.keys(body)).toEqual(['client_id', 'client_secret', 'name', 'scope', 'auth']);
    expect(body).toMatchObject({ name: 'svc', scope: 'a b', auth: 'client_secret' });
    expect(r.stderr).toMatch(/^warning: /);
    const stored = await withStore((s) => s.findClient(body.client_id));
    expect(verifySecret(body.client_secret, stored!.secrets[0].hash)).toBe(true);
  });

  test('without --scope the client has no scope; --scope may be repeated', async () => {
    expect((await createJson('none')).scope).toBe('');
    const r = await cli(['create', '--name', 'two', '--scope', 'a b', '--scope', 'c', '--json']);
    expect(JSON.parse(r.stdout).scope).toBe('a b c');
  });

  test('a repeated --resource is stored and printed once', async () => {
    const r = await cli(['create', '--name', 'api-caller', '--resource', 'https://a.example/api', '--resource', 'https://a.example/api', '--resource', 'https://b.example/api', '--json']);
    expect(r.code).toBe(0);
    const body = JSON.parse(r.stdout);
    expect(body.resources).toEqual(['https://a.example/api', 'https://b.example/api']);
    expect((await withStore((s) => s.findClient(body.client_id)))!.resources).toEqual(['https://a.example/api', 'https://b.example/api']);
    const text = await cli(['create', '--name', 'api-caller-2', '--resource', 'https://a.example/api', '--resource', 'https://a.example/api']);
    expect(text.stdout.match(/https:\/\/a\.example\/api/g)).toHaveLength(1);
  });

  test('missing --name is a usage error and touches no store', async () => {
    expectUsageError(await cli(['create', '--scope', 'a']), 'missing required option --name', 'create');
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test.each([
    [['create', '--name'], "option '--name' needs a value"],
    [['create', '--name', '--json'], "option '--name' needs a value; to give one that starts with '-', write --name=VALUE"],
    [['create', '--nam', 'x'], "unknown option '--nam'"],
    [['create', '--name', 'x', '--json=yes'], "option '--json' does not take a value"],
    [['create', '--name', 'x', 'extra'], "unexpected argument 'extra'"],
  ])('bad flags %j', async (args, problem) => {
    expectUsageError(await cli(args), problem, 'create');
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test.each([['a  b'], [' a'], ['a"b'], ['caf\u00e9']])('a malformed scope %j exits 2 and creates nothing', async (scope) => {
    const r = await cli(['create', '--name', 'x', '--scope', scope]);
    expectUsageError(r, '--scope', 'create');
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test.each([
    ['   '],
    ['a\u0001b'],
    ['x'.repeat(201)],
    ['a\u0085b'], // C1 control
    ['a\u009bb'], // C1 CSI
    ['evil\u202etxt.exe'], // right-to-left override
    ['a\u200bb'], // zero-width space
    ['a\u2066b'], // bidi isolate
    ['a\u2028b'], // line separator inside the name
    ['a\u061cb'], // Arabic letter mark (bidi)
    ['a\u00adb'], // soft hyphen
    ['a\u{E0041}b'], // tag character
    ['a\ud800b'], // lone surrogate
    ['\u3164'], // Hangul filler alone
  ])('a bad name %j is rejected by the core: exit 2, the message', async (name) => {
    const r = await cli(['create', '--name', name]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('error: a client needs a name of 1 to 200 printable characters (no control, invisible or bidi characters)\n');
    expect(await withStore((s) => s.listClients())).toEqual([]);
  });

  test('a name of 200 characters counts characters, not UTF-16 units (150 emoji are fine)', async () => {
    const name = '\u{1F511}'.repeat(150);
    const r = await cli(['create', '--name', name, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).name).toBe(name);
  });

  test.each([
    [Array.from({ length: 101 }, (_, i) => `s${i}`).join(' '), 'at most 100 scopes per client, got 101'],
    [Array.from({ length: 21 }, (_, i) => `${'x'.repeat(96)}${String(i).padStart(3, '0')}`).join(' '), 'the scopes of a client take at most 2000 characters (every token carries them), got 2099'],
  ])('too many scopes, or too long in all: exit 2 and nothing created (%#)', async (scope, message) => {
    const r = await cli(['create', '--name', 'x', '--scope', scope]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`error: ${message}\n`);
    expect(await withStore((s) => s.listClients())).toEqual([]);
  });
});

describe('list', () => {
  test('with no clients', async () => {
    await withStore(async () => undefined); // an empty store, as the server's first start leaves it
    const r = await cli(['list']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('No clients');
    expect(JSON.parse((await cli(['list', '--json'])).stdout)).toEqual([]);
  });

  test('a table of clients with their status, never a secret or a hash', async () => {
    const a = await createJson('alpha', 'read');
    const b = await createJson('beta');
    expect((await cli(['revoke', b.client_id])).code).toBe(0);
    const r = await cli(['list']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^CLIENT_ID\s+NAME\s+SCOPE\s+STATUS\s+CREATED\s+AUTH$/);
    expect(lines[1]).toMatch(new RegExp(`^${a.client_id}\\s+alpha\\s+read\\s+active\\s+\\d{4}-\\d\\d-\\d\\dT`));
    expect(lines[2]).toMatch(new RegExp(`^${b.client_id}\\s+beta\\s+-\\s+revoked\\s+`));
    for (const text of [a.client_secret, b.client_secret, 'hmac-sha256$']) expect(r.stdout).not.toContain(text);
  });

  test('--json: an array of clients, never a secret or a hash', async () => {
    const a = await createJson('alpha', 'read write');
    const b = await createJson('beta');
    await cli(['revoke', b.client_id]);
    const r = await cli(['list', '--json']);
    expect(r.code).toBe(0);
    const list = JSON.parse(r.stdout);
    expect(list).toHaveLength(2);
    for (const c of list) {
      expect(Object.keys(c).sort()).toEqual(['active_secrets', 'auth', 'client_id', 'created_at', 'name', 'revoked_at', 'scope', 'status']);
    }
    expect(list[0]).toMatchObject({ client_id: a.client_id, name: 'alpha', scope: 'read write', status: 'active', revoked_at: null, active_secrets: 1 });
    expect(new Date(list[0].created_at).getTime()).toBeGreaterThan(Date.now() - 60_000);
    expect(list[1]).toMatchObject({ client_id: b.client_id, status: 'revoked', active_secrets: 0 });
    expect(typeof list[1].revoked_at).toBe('string');
    for (const text of [a.client_secret, b.client_secret, 'hmac-sha256$']) expect(r.stdout).not.toContain(text);
  });

  test('bad flags', async () => {
    expectUsageError(await cli(['list', '--all']), "unknown option '--all'", 'list');
    expectUsageError(await cli(['list', 'extra']), "unexpected argument 'extra'", 'list');
  });
});

describe('read-only commands on a DATA_DIR without a store (a typo)', () => {
  test.each([[['list']], [['list', '--json']], [['keys', 'list']], [['keys', 'list', '--json']], [['client-key', 'list', 'AAAAAAAAAAAAAAAAAAAAAA']]])(
    '%j: exit 1, one line naming the path, nothing created',
    async (args) => {
      const r = await cli(args);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(
        `error: no store in ${path.resolve(dataDir)}: there is no store.sqlite there (the server creates it at its first start, and 'client-credentials create' does too). Is DATA_DIR the server's?\n`,
      );
      expect(fs.existsSync(dataDir)).toBe(false);
    },
  );

  test('once a store exists they read it; write commands still create one', async () => {
    const made = await cli(['create', '--name', 'x']);
    expect(made.code).toBe(0);
    expect((await cli(['list'])).code).toBe(0);
    expect((await cli(['keys', 'list'])).code).toBe(0);
  });
});

describe('revoke and revoke-tokens with REDIS_URL', () => {
  it('Redis unreachable: the revocation is stored all the same, exit 0, and one warning on stderr says the instances learn of it within their resync', async () => {
    const a = await createJson('a');
    const b = await createJson('b');
    const env = { REDIS_URL: 'redis://127.0.0.1:1' };
    const revoked = await cli(['revoke', a.client_id], env);
    expect(revoked.code).toBe(0);
    expect(revoked.stderr).toMatch(/^warning: could not notify running instances through Redis \(.+\); they pick the revocation up within their revocationResync\n$/);
    const tokens = await cli(['revoke-tokens', b.client_id], env);
    expect(tokens.code).toBe(0);
    expect(tokens.stderr).toMatch(/^warning: could not notify running instances through Redis/);
    await withStore(async (store) => {
      expect((await store.findClient(a.client_id))?.revokedAt).toBeInstanceOf(Date);
      const { clients } = await store.listRevocations(new Date(), new Date(Date.now() - 3_600_000));
      expect(clients.find((c) => c.client_id === b.client_id)).toMatchObject({ generation: 1, revoked_at: null });
    });
  });

  it('a malformed REDIS_URL is a usage error before anything changes (revoke, revoke-tokens, update), and hides its password', async () => {
    const c = await createJson('a', 'orders:read orders:write');
    const shown: Record<string, string> = { 'redis://:hunter2@': 'redis://…@', 'http://:pass/word@127.0.0.1:6379': 'http://…@127.0.0.1:6379' };
    for (const url of ['redis//127.0.0.1:6379', 'localhost:6379', 'http://127.0.0.1:6379', 'redis://:hunter2@', 'http://:pass/word@127.0.0.1:6379']) {
      const env = { REDIS_URL: url };
      for (const args of [['revoke', c.client_id], ['revoke-tokens', c.client_id], ['update', c.client_id, '--scope', 'orders:read'], ['rotate-secret', c.client_id]]) {
        const r = await cli(args, env);
        expect(r.code).toBe(2);
        expect(r.stdout).toBe('');
        expect(r.stderr).toBe(`error: REDIS_URL must be redis://… or rediss://… (or a unix socket's absolute path), got ${JSON.stringify(shown[url] ?? url)}\n`);
      }
    }
    expect(await authenticates(c.client_id, c.client_secret)).toBe(true);
    await withStore(async (store) => {
      const stored = await store.findClient(c.client_id);
      expect(stored?.revokedAt).toBeNull();
      expect(stored?.scopes).toEqual(['orders:read', 'orders:write']);
      const { clients } = await store.listRevocations(new Date(), new Date(Date.now() - 3_600_000));
      expect(clients.find((x) => x.client_id === c.client_id)).toBeUndefined();
    });
    // create too (every command that changes a client builds the service that may ring), and nothing is created
    const created = await cli(['create', '--name', 'b'], { REDIS_URL: 'localhost:6379' });
    expect(created.code).toBe(2);
    expect(created.stdout).toBe('');
    expect(JSON.parse((await cli(['list', '--json'])).stdout)).toHaveLength(1);
    // a command that only reads is not held up by it
    expect((await cli(['list'], { REDIS_URL: 'localhost:6379' })).code).toBe(0);
  });
});

describe('revoke', () => {
  test('revokes the client: its secret stops working', async () => {
    const c = await createJson();
    const r = await cli(['revoke', c.client_id]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Client ${c.client_id} revoked`);
    expect(r.stdout).not.toContain(c.client_secret);
    const stored = await withStore((s) => s.findClient(c.client_id));
    expect(stored!.revokedAt).toBeInstanceOf(Date);
    expect(await authenticates(c.client_id, c.client_secret)).toBe(false);
  });

  test('--json prints {client_id, status, revoked_at}', async () => {
    const c = await createJson();
    const r = await cli(['revoke', c.client_id, '--json']);
    expect(r.code).toBe(0);
    const body = JSON.parse(r.stdout);
    expect(Object.keys(body)).toEqual(['client_id', 'status', 'revoked_at']);
    expect(body).toMatchObject({ client_id: c.client_id, status: 'revoked' });
    const stored = await withStore((s) => s.findClient(c.client_id));
    expect(body.revoked_at).toBe(stored!.revokedAt!.toISOString());
  });

  test('an already revoked client: exit 1 with a clear message', async () => {
    const c = await createJson();
    await cli(['revoke', c.client_id]);
    const r = await cli(['revoke', c.client_id]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(new RegExp(`^error: client '${c.client_id}' is revoked already \\(since .+\\)\\n$`));
  });

  test('an unknown client: exit 1 with a clear message', async () => {
    await createJson();
    const r = await cli(['revoke', 'no-such-client']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe("error: no client with id 'no-such-client'\n");
  });

  test('in a folder without a store (a mistyped DATA_DIR), a note says so before the error', async () => {
    const r = await cli(['revoke', 'no-such-client']);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(`note: there was no store in ${path.resolve(dataDir)}; an empty one was created. Is DATA_DIR the server's?\nerror: no client with id 'no-such-client'\n`);
    // once there is one, no note; create never notes (it starts a store on purpose)
    expect((await cli(['list'])).stderr).toBe('');
    const other = path.join(tmp, 'other');
    const created = await cli(['create', '--name', 'x'], { DATA_DIR: other });
    expect(created.code).toBe(0);
    expect(created.stderr).not.toContain('note:');
  });

  test.each([['-AbCdEfGhIjKlMnOpQrStU'], ['--bCdEfGhIjKlMnOpQrStU']])('a client id starting with "-" (%s) is an id, not an option', async (clientId) => {
    await dashClient(clientId);
    const r = await cli(['revoke', clientId]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect((await withStore((s) => s.findClient(clientId)))!.revokedAt).toBeInstanceOf(Date);
  });

  test('a missing or extra id is a usage error', async () => {
    expectUsageError(await cli(['revoke']), 'missing CLIENT_ID', 'revoke');
    expectUsageError(await cli(['revoke', 'a', 'b']), "unexpected argument 'b'", 'revoke');
    expectUsageError(await cli(['revoke', 'a', '--force']), "unknown option '--force'", 'revoke');
  });
});

describe('rotate-secret', () => {
  test('a new secret, shown once; the old one ends at once by default', async () => {
    const c = await createJson();
    const r = await cli(['rotate-secret', c.client_id]);
    expect(r.code).toBe(0);
    const secret = /client_secret:\s+(\S+)/.exec(r.stdout)?.[1];
    expect(secret).toBeDefined();
    expect(secret).not.toBe(c.client_secret);
    expect(r.stdout).not.toContain(c.client_secret);
    expect(r.stdout).toContain('The previous secret no longer works.');
    expect(r.stderr).toMatch(/^warning: the client secret is shown only now/);

    const stored = await withStore((s) => s.findClient(c.client_id));
    expect(stored!.secrets).toHaveLength(2);
    expect(verifySecret(secret!, stored!.secrets[0].hash)).toBe(true);
    expect(stored!.secrets[0].expiresAt).toBeNull();
    expect(stored!.secrets[1].expiresAt!.getTime()).toBeLessThanOrEqual(Date.now());
    expect(await authenticates(c.client_id, secret!)).toBe(true);
    expect(await authenticates(c.client_id, c.client_secret)).toBe(false);
  });

  test('--json prints exactly {client_id, client_secret}', async () => {
    const c = await createJson();
    const r = await cli(['rotate-secret', c.client_id, '--json']);
    expect(r.code).toBe(0);
    expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
    const body = JSON.parse(r.stdout);
    expect(Object.keys(body)).toEqual(['client_id', 'client_secret']);
    expect(body.client_id).toBe(c.client_id);
    expect(await authenticates(c.client_id, body.client_secret)).toBe(true);
  });

  test('--keep-old keeps the old secret working inside the window only', async () => {
    const c = await createJson();
    const before = Date.now();
    const r = await cli(['rotate-secret', c.client_id, '--keep-old', '2h', '--json']);
    const after = Date.now();
    expect(r.code).toBe(0);
    const fresh = JSON.parse(r.stdout).client_secret;

    const stored = await withStore((s) => s.findClient(c.client_id));
    const old = stored!.secrets.find((s) => verifySecret(c.client_secret, s.hash))!;
    expect(old.expiresAt!.getTime()).toBeGreaterThanOrEqual(before + 7_200_000);
    expect(old.expiresAt!.getTime()).toBeLessThanOrEqual(after + 7_200_000);

    expect(await authenticates(c.client_id, c.client_secret)).toBe(true);
    expect(await authenticates(c.client_id, fresh)).toBe(true);
    const later = new Date(after + 7_200_000 + 1000);
    expect(await authenticates(c.client_id, c.client_secret, later)).toBe(false);
    expect(await authenticates(c.client_id, fresh, later)).toBe(true);
    expect((await cli(['list', '--json'])).stdout).toContain('"active_secrets":2');
  });

  test.each([
    ['30s', 30],
    ['15m', 900],
    ['1d', 86_400],
    ['90', 90],
  ])('--keep-old %s is %i seconds', async (text, seconds) => {
    const c = await createJson();
    const before = Date.now();
    const r = await cli(['rotate-secret', c.client_id, '--keep-old', text]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/The previous secret keeps working for \S+, until \d{4}-/);
    const stored = await withStore((s) => s.findClient(c.client_id));
    const end = stored!.secrets[1].expiresAt!.getTime();
    expect(end).toBeGreaterThanOrEqual(before + seconds * 1000);
    expect(end).toBeLessThan(Date.now() + seconds * 1000 + 1);
  });

  test.each([['5x'], ['-1'], ['2w'], ['1.5h'], [''], ['366d']])('a bad --keep-old %j is a usage error and changes nothing', async (text) => {
    const c = await createJson();
    expectUsageError(await cli(['rotate-secret', c.client_id, `--keep-old=${text}`]), '--keep-old', 'rotate-secret');
    const stored = await withStore((s) => s.findClient(c.client_id));
    expect(stored!.secrets).toHaveLength(1);
  });

  test('an unknown or revoked client: exit 1, no secret', async () => {
    const c = await createJson();
    const unknown = await cli(['rotate-secret', 'nope', '--json']);
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toBe('');
    expect(unknown.stderr).toBe("error: no client with id 'nope'\n");

    await cli(['revoke', c.client_id]);
    const revoked = await cli(['rotate-secret', c.client_id]);
    expect(revoked.code).toBe(1);
    expect(revoked.stdout).toBe('');
    expect(revoked.stderr).toMatch(/^error: client '.+' is revoked \(since .+\); a revoked client cannot get a new secret\n$/);
    expect((await withStore((s) => s.findClient(c.client_id)))!.secrets).toHaveLength(1);
  });

  test('a client id starting with "-" is an id, also next to options', async () => {
    const clientId = '-AbCdEfGhIjKlMnOpQrStU';
    const old = await dashClient(clientId);
    const r = await cli(['rotate-secret', '--keep-old', '1h', clientId, '--json']);
    expect(r.stderr).toMatch(/^warning: /);
    expect(r.code).toBe(0);
    const body = JSON.parse(r.stdout);
    expect(body.client_id).toBe(clientId);
    expect(await authenticates(clientId, body.client_secret)).toBe(true);
    expect(await authenticates(clientId, old)).toBe(true);
    // and after "--", any id
    expect((await cli(['rotate-secret', '--', clientId])).code).toBe(0);
    expect(await authenticates(clientId, old)).toBe(false);
  });

  test('a missing id or a bad flag is a usage error', async () => {
    expectUsageError(await cli(['rotate-secret']), 'missing CLIENT_ID', 'rotate-secret');
    expectUsageError(await cli(['rotate-secret', 'x', '--keep-old']), "option '--keep-old' needs a value", 'rotate-secret');
    expectUsageError(await cli(['rotate-secret', 'x', '--keep']), "unknown option '--keep'", 'rotate-secret');
  });
});

interface ListedKey {
  kid: string;
  alg: string;
  status: string;
  activates_at: string;
  retired_at: string | null;
}

/**
 * `keys rotate` twice while the first rotation is pending, then a third time
 * (on the store `env` names): what the user reads and what `keys list` shows,
 * then, an hour later, which key is current. Only the clock is fake.
 */
async function rotateWhilePending(env: NodeJS.ProcessEnv): Promise<void> {
  // a store without keys, as the server's first start leaves it (keys list only reads: it creates no store, nor schema)
  if (!env.DATABASE_URL) await withStore(async () => undefined);
  else await (await openStore({ databaseUrl: env.DATABASE_URL, schema: env.DATABASE_SCHEMA })).close();
  const list = async (): Promise<ListedKey[]> => {
    const r = await cli(['keys', 'list', '--json'], env);
    expect(r.code).toBe(0);
    return JSON.parse(r.stdout);
  };
  // the clock stands still but between commands, a second on
  const tick = () => jest.setSystemTime(Date.now() + 1000);
  const [first] = await list();
  expect(first.status).toBe('current');
  tick();
  const second = JSON.parse((await cli(['keys', 'rotate', '--lead-time', '10m', '--json'], env)).stdout);
  tick();

  // the second rotation, shorter: the first key is the one that signs until then
  const r = await cli(['keys', 'rotate', '--lead-time', '5m'], env);
  expect(r.code).toBe(0);
  expect(r.stderr).toBe('');
  const lines = r.stdout.trimEnd().split('\n');
  const third = /^New signing key (\S+) \(ES256\) published\.$/.exec(lines[0])?.[1];
  expect(third).toBeDefined();
  expect(lines[1]).toMatch(new RegExp(`^It signs from \\S+Z \\(in 5m\\); ${first.kid} signs until then\\.$`));
  expect(lines[2]).toBe(`The pending key ${second.kid} (due at ${second.activates_at.replace(/\.\d{3}Z$/, 'Z')}) is withdrawn: it will not sign.`);
  expect(lines).toHaveLength(3);

  let keys = await list();
  expect(keys.map((k) => [k.kid, k.status])).toEqual([
    [first.kid, 'current'],
    [second.kid, 'retired'],
    [third, 'pending'],
  ]);
  // the first key signs until the third activates; the second retires as it would activate, never before
  expect(keys[0].retired_at).toBe(keys[2].activates_at);
  expect(keys[1].retired_at).toBe(keys[1].activates_at);
  const table = (await cli(['keys', 'list'], env)).stdout.trimEnd().split('\n');
  expect(table.filter((l) => /\scurrent\s/.test(l))).toEqual([expect.stringMatching(new RegExp(`^${first.kid}\\s`))]);

  // a third rotation, longer than the pending one: still the first key signs until then
  tick();
  const longer = await cli(['keys', 'rotate', '--lead-time', '1h', '--json'], env);
  expect(longer.code).toBe(0);
  const fourth = JSON.parse(longer.stdout);
  keys = await list();
  expect(keys.map((k) => [k.kid, k.status])).toEqual([
    [first.kid, 'current'],
    [second.kid, 'retired'],
    [third, 'retired'],
    [fourth.kid, 'pending'],
  ]);
  expect(keys[0].retired_at).toBe(fourth.activates_at);
  expect(keys[2].retired_at).toBe(keys[2].activates_at);

  // 6 and 11 minutes on, the first key still signs (no withdrawn key ever does); an hour on, the fourth
  for (const [minutes, current] of [[6, first.kid], [11, first.kid], [61, fourth.kid]] as const) {
    jest.setSystemTime(Date.now() + minutes * 60_000);
    try {
      const statuses = (await list()).map((k) => [k.kid, k.status]);
      expect(statuses.filter(([, status]) => status === 'current')).toEqual([[current, 'current']]);
      expect(statuses.filter(([, status]) => status === 'pending')).toEqual(minutes < 60 ? [[fourth.kid, 'pending']] : []);
    } finally {
      jest.setSystemTime(Date.now() - minutes * 60_000);
    }
  }
}

/** Only the clock is fake: timers, sockets and PostgreSQL run as they do. */
const fakeClockOnly = () =>
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });

describe('keys', () => {
  interface KeyRow {
    kid: string;
    alg: string;
    status: string;
    activates_at: string;
    retired_at: string | null;
  }
  const keysJson = async (env: NodeJS.ProcessEnv = {}): Promise<KeyRow[]> => {
    // `keys list` reads an existing store only: start one as the server's first start does
    if (!env.DATABASE_URL && !fs.existsSync(dataDir)) await withStore(async () => undefined);
    const r = await cli(['keys', 'list', '--json'], env);
    expect(r.code).toBe(0);
    return JSON.parse(r.stdout);
  };

  test('keys list creates the first key and shows it; --json shape', async () => {
    await withStore(async () => undefined); // a store without keys, as the server's first start leaves it before its issuer signs
    const r = await cli(['keys', 'list']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^KID\s+ALG\s+STATUS\s+ACTIVATES_AT\s+RETIRED_AT$/);
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatch(/^\S{43}\s+ES256\s+current\s+\d{4}-\S+Z\s+-$/);

    const keys = await keysJson();
    expect(keys).toHaveLength(1);
    expect(Object.keys(keys[0])).toEqual(['kid', 'alg', 'status', 'activates_at', 'retired_at']);
    expect(keys[0]).toMatchObject({ alg: 'ES256', status: 'current', retired_at: null });
    expect(r.stdout).not.toMatch(/"d"|private/i);
  });

  test('keys rotate publishes a pending key that signs after the lead time', async () => {
    const [first] = await keysJson();
    const before = Date.now();
    const r = await cli(['keys', 'rotate', '--lead-time', '1h', '--json']);
    expect(r.code).toBe(0);
    const body = JSON.parse(r.stdout);
    expect(Object.keys(body)).toEqual(['kid', 'alg', 'status', 'activates_at', 'signs_until_then', 'withdrawn']);
    expect(body).toMatchObject({ alg: 'ES256', status: 'pending', signs_until_then: first.kid, withdrawn: [] });
    expect(body.kid).not.toBe(first.kid);
    expect(Date.parse(body.activates_at)).toBeGreaterThanOrEqual(before + 3_600_000);

    const keys = await keysJson();
    expect(keys.map((k) => [k.kid, k.status])).toEqual([
      [first.kid, 'current'],
      [body.kid, 'pending'],
    ]);
    expect(keys[0].retired_at).toBe(body.activates_at);
  });

  test('keys rotate while a rotation is pending: the key that signs keeps signing until the new key does, the pending one never signs', async () => {
    fakeClockOnly();
    try {
      await rotateWhilePending({});
    } finally {
      jest.useRealTimers();
    }
  });

  test('keys rotate withdrawing a pending key due in under 30 s warns that issuers that have not refreshed may sign with it', async () => {
    await keysJson();
    const soon = JSON.parse((await cli(['keys', 'rotate', '--lead-time', '10s', '--json'])).stdout);
    const r = await cli(['keys', 'rotate', '--lead-time', '5m']);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`^warning: the pending key ${soon.kid} was due to sign in under 30 s: running issuers that have not refreshed their keys`));
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    const keys = await keysJson();
    expect(keys.find((k) => k.kid === soon.kid)).toMatchObject({ status: 'retired', retired_at: soon.activates_at });
  });

  test('keys made inconsistent by an earlier version (a key retired before it activates, two unretired active keys): one current, and a rotation repairs them', async () => {
    await withStore(async () => undefined);
    expect((await cli(['keys', 'list'])).code).toBe(0); // creates the first key
    const now = Date.now();
    const at = (ms: number) => new Date(now + ms);
    // what two rotations in a row used to leave: a still signing, b retired before it activates, c signing
    const a = { ...generateStoredKey('ES256', at(-20 * 60_000), at(-20 * 60_000)), retiredAt: at(10 * 60_000) };
    const b = { ...generateStoredKey('ES256', at(-10 * 60_000), at(10 * 60_000)), retiredAt: at(-60_000) };
    const c = generateStoredKey('ES256', at(-9 * 60_000), at(-60_000));
    const { default: Database } = await import('better-sqlite3');
    const db = new Database(path.join(dataDir, 'store.sqlite'));
    try {
      db.prepare('DELETE FROM signing_keys').run();
      const insert = db.prepare('INSERT INTO signing_keys (kid, alg, private_jwk, public_jwk, created_at, activates_at, retired_at, token_ttl) VALUES (?, ?, ?, ?, ?, ?, ?, 0)');
      for (const k of [a, b, c]) insert.run(k.kid, k.alg, k.privateJwk, k.publicJwk, k.createdAt.getTime(), k.activatesAt.getTime(), k.retiredAt?.getTime() ?? null);
    } finally {
      db.close();
    }
    expect((await keysJson()).map((k) => [k.kid, k.status])).toEqual([
      [a.kid, 'retired'],
      [b.kid, 'retired'],
      [c.kid, 'current'],
    ]);
    const r = await cli(['keys', 'rotate', '--lead-time', '5m']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`; ${c.kid} signs until then.`);
    const keys = await keysJson();
    expect(keys.map((k) => k.status)).toEqual(['retired', 'retired', 'current', 'pending']);
    // a and c both stop at the new key's activation; b keeps its retirement (it is past)
    expect(keys[0].retired_at).toBe(keys[3].activates_at);
    expect(keys[2].retired_at).toBe(keys[3].activates_at);
    expect(keys[1].retired_at).toBe(b.retiredAt.toISOString());
  });

  test('keys rotate --lead-time 0 signs at once and retires the previous key; prints the kid', async () => {
    const [first] = await keysJson();
    const r = await cli(['keys', 'rotate', '--lead-time', '0']);
    expect(r.code).toBe(0);
    const kid = /New signing key (\S+) \(ES256\) published\./.exec(r.stdout)?.[1];
    expect(kid).toBeDefined();
    expect(r.stdout).toContain('It signs from now on.');
    expect(r.stderr).toMatch(/^warning: a lead time under 30 s: running issuers publish the new key at their next key refresh/);
    expect((await cli(['keys', 'rotate', '--lead-time', '30s'])).stderr).toBe('');
    const keys = await keysJson();
    expect(keys.find((k) => k.kid === first.kid)!.status).toBe('retired');
    expect(keys.find((k) => k.kid === kid)!.status).toBe('current'); // until the 30 s key takes over
  });

  test('the default lead time is KEY_ROTATION_LEAD_TIME, else 300 seconds', async () => {
    let before = Date.now();
    let body = JSON.parse((await cli(['keys', 'rotate', '--json'])).stdout);
    expect(Date.parse(body.activates_at)).toBeGreaterThanOrEqual(before + 300_000);
    expect(Date.parse(body.activates_at)).toBeLessThanOrEqual(Date.now() + 300_000);
    before = Date.now();
    body = JSON.parse((await cli(['keys', 'rotate', '--json'], { KEY_ROTATION_LEAD_TIME: '60' })).stdout);
    expect(Date.parse(body.activates_at)).toBeGreaterThanOrEqual(before + 60_000);
    expect(Date.parse(body.activates_at)).toBeLessThanOrEqual(Date.now() + 60_000);
  });

  test('SIGNING_ALG picks the algorithm of new keys; without it the signing key’s algorithm is kept', async () => {
    const rotated = await cli(['keys', 'rotate', '--lead-time', '0', '--json'], { SIGNING_ALG: 'RS256' });
    expect(JSON.parse(rotated.stdout).alg).toBe('RS256');
    // listing without SIGNING_ALG neither rotates nor switches back to ES256
    const keys = await keysJson();
    expect(keys).toHaveLength(2);
    expect(keys.filter((k) => k.status === 'current').map((k) => k.alg)).toEqual(['RS256']);
    const again = await cli(['keys', 'rotate', '--lead-time', '0', '--json']);
    expect(JSON.parse(again.stdout).alg).toBe('RS256');
  });

  test('keys prune removes retired keys whose tokens have expired, and only those', async () => {
    const day = 86_400_000;
    const old = new Date(Date.now() - 2 * day);
    const expired = generateStoredKey('ES256', old);
    await withStore(async (s) => {
      await s.insertFirstKey(expired);
      // retires `expired` two days ago
      expect(await s.rotateKey(generateStoredKey('ES256', old, new Date(old.getTime() + 1000)), [expired.kid])).toBe(true);
    });
    // retires a key now: its tokens are still valid, so it stays
    expect((await cli(['keys', 'rotate', '--lead-time', '0'])).code).toBe(0);
    expect(await keysJson()).toHaveLength(3);

    const r = await cli(['keys', 'prune']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('Removed 1 retired key.\n');
    const kids = (await keysJson()).map((k) => k.kid);
    expect(kids).toHaveLength(2);
    expect(kids).not.toContain(expired.kid);

    const again = await cli(['keys', 'prune', '--json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({ removed: 0 });
  });

  test('keys prune keeps a retired key while the tokens an instance with a longer lifetime signed with it are valid', async () => {
    // an instance on the defaults (3600 s): it records its lifetime on its key before it signs
    const issuer = createIssuer({ issuer: 'http://issuer.test', audience: 'http://issuer.test/api', dataDir, logger: false });
    const app = express().use(issuer.router());
    const client = await issuer.clients.create({ name: 'svc', scopes: ['a'] });
    const token = await fetchToken(app, client);
    await issuer.close();
    expect(await withStore((s) => s.listKeys())).toEqual([expect.objectContaining({ kid: headerOf(token).kid, tokenTtl: expect.any(Number) })]);
    // retired now; a CLI run with a 1 s lifetime prunes what it thinks expired
    expect((await cli(['keys', 'rotate', '--lead-time', '0'])).code).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(JSON.parse((await cli(['keys', 'prune', '--json'], { ACCESS_TOKEN_TTL: '1', CLOCK_TOLERANCE: '0' })).stdout)).toEqual({ removed: 0 });
    // the token still verifies at an instance started afterwards
    const again = createIssuer({ issuer: 'http://issuer.test', audience: 'http://issuer.test/api', dataDir, logger: false });
    const api = express().get('/me', again.requireBearer(), (req, res) => void res.json({ client_id: req.auth!.clientId }));
    try {
      const res = await request(api).get('/me').set('Authorization', `Bearer ${token}`);
      expect({ status: res.status, body: res.body }).toEqual({ status: 200, body: { client_id: client.clientId } });
    } finally {
      await again.close();
    }
  });

  test('keys rotate with a lead time under the servers\' KEY_REFRESH_INTERVAL records that much more lifetime on the key it replaces', async () => {
    await withStore(async () => undefined); // a store without keys, as the server's first start leaves it
    expect((await cli(['keys', 'list'])).code).toBe(0);
    const [first] = await withStore((s) => s.listKeys());
    expect((await cli(['keys', 'rotate', '--lead-time', '0'], { KEY_REFRESH_INTERVAL: '600' })).code).toBe(0);
    const replaced = (await withStore((s) => s.listKeys())).find((k) => k.kid === first.kid)!;
    // 3600 + 5 (the defaults) + 600: a server may sign with it for one refresh after the rotation
    expect(replaced.tokenTtl).toBe(4205);
    // a lead time under the servers' refresh warns, whatever the 30 s floor
    const warned = await cli(['keys', 'rotate', '--lead-time', '60s'], { KEY_REFRESH_INTERVAL: '120' });
    expect(warned.code).toBe(0);
    expect(warned.stderr).toContain('warning: a lead time under 120 s: running issuers publish the new key at their next key refresh (keyRefreshInterval, 120 s here)');
    expectUsageError(await cli(['keys', 'rotate'], { KEY_REFRESH_INTERVAL: 'soon' }), 'KEY_REFRESH_INTERVAL must be a number of seconds from 0.1 to 3600', 'keys rotate');
    expectUsageError(await cli(['keys', 'prune'], { KEY_REFRESH_INTERVAL: '0' }), 'KEY_REFRESH_INTERVAL', 'keys prune');
  });

  test('keys prune on an empty store removes nothing and creates no key', async () => {
    expect((await cli(['keys', 'prune'])).stdout).toBe('Removed 0 retired keys.\n');
    expect(await withStore((s) => s.listKeys())).toEqual([]);
  });

  test('keys prune keeps a key retired within ACCESS_TOKEN_TTL + CLOCK_TOLERANCE', async () => {
    const retiredAt = new Date(Date.now() - 120_000);
    const key = generateStoredKey('ES256', new Date(retiredAt.getTime() - 1000));
    await withStore(async (s) => {
      await s.insertFirstKey(key);
      await s.rotateKey(generateStoredKey('ES256', retiredAt), [key.kid]);
    });
    expect(JSON.parse((await cli(['keys', 'prune', '--json'], { ACCESS_TOKEN_TTL: '3600' })).stdout)).toEqual({ removed: 0 });
    expect(JSON.parse((await cli(['keys', 'prune', '--json'], { ACCESS_TOKEN_TTL: '60', CLOCK_TOLERANCE: '0' })).stdout)).toEqual({ removed: 1 });
  });

  test('bad flags and bad values are usage errors', async () => {
    expectUsageError(await cli(['keys', 'rotate', '--lead-time', 'soon']), '--lead-time must be a duration', 'keys rotate');
    expectUsageError(await cli(['keys', 'rotate', '--lead-time', '2d']), '--lead-time must be at most 1d', 'keys rotate');
    expectUsageError(await cli(['keys', 'rotate', '--lead']), "unknown option '--lead'", 'keys rotate');
    expectUsageError(await cli(['keys', 'list', 'x']), "unexpected argument 'x'", 'keys list');
    expectUsageError(await cli(['keys', 'prune', '--all']), "unknown option '--all'", 'keys prune');
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test.each([
    [{ SIGNING_ALG: 'HS256' }, 'SIGNING_ALG must be one of ES256, RS256'],
    [{ ACCESS_TOKEN_TTL: 'abc' }, 'ACCESS_TOKEN_TTL must be a whole number of seconds from 1 to 86400'],
    [{ ACCESS_TOKEN_TTL: '0' }, 'ACCESS_TOKEN_TTL must be'],
    [{ KEY_ROTATION_LEAD_TIME: '-5' }, 'KEY_ROTATION_LEAD_TIME must be'],
  ])('a bad environment %j is a usage error', async (env, problem) => {
    expectUsageError(await cli(['keys', 'rotate'], env), problem, 'keys rotate');
    expect(fs.existsSync(dataDir)).toBe(false);
  });
});

describe('errors', () => {
  test('a non-postgres DATABASE_URL is an input error from the core: exit 2', async () => {
    const r = await cli(['list'], { DATABASE_URL: 'mysql://localhost/db' });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('error: DATABASE_URL must be a postgres:// URL\n');
  });

  test('an unreachable DATABASE_URL: one line saying the store is unavailable, exit 1', async () => {
    const r = await cli(['list'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test' });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^error: PostgreSQL is unavailable: connect ECONNREFUSED 127\.0\.0\.1:1\n$/);
  });

  test.each([
    [{ LOG_LEVEL: 'bogus' }, 'LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent (any case), got "bogus"'],
    [{ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test', DATABASE_SCHEMA: 'bad-schema' }, 'Invalid PostgreSQL schema name "bad-schema" (DATABASE_SCHEMA'],
  ])('a bad environment %j: one line naming the variable, exit 2, nothing created', async (env, problem) => {
    const r = await cli(['list'], env);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trimEnd().split('\n')).toEqual([expect.stringContaining(`error: ${problem}`)]);
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test.each([['DEBUG'], ['Info'], ['SILENT'], [' warn ']])('LOG_LEVEL=%s is taken in any case, as the server takes it', async (level) => {
    const r = await cli(['create', '--name', 'x', '--json'], { LOG_LEVEL: level });
    expect(r.code).toBe(0);
    expect(r.stderr).not.toContain('error:');
  });

  test('a DATA_DIR that cannot be made (under /proc): one line, exit 1, at once', async () => {
    const r = await cli(['create', '--name', 'x'], { DATA_DIR: '/proc/ecc-cannot-be-made/data' });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: .*ENOENT.*\n$/);
  });

  test('anything unexpected: one line "error: <message>", exit 1, no stack trace', async () => {
    fs.writeFileSync(dataDir, 'not a folder');
    const r = await cli(['create', '--name', 'x']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^error: \S.*\n$/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describeIfPostgres('with DATABASE_URL (PostgreSQL, schema client_credentials)', () => {
  const created: string[] = [];

  afterAll(async () => {
    // the CLI always uses the default schema: remove only the clients this suite made
    const { Pool } = await import('pg');
    const pool = new Pool({ connectionString: postgresUrl(), max: 1 });
    try {
      await pool.query('DELETE FROM "client_credentials".clients WHERE client_id = ANY($1)', [created]);
    } finally {
      await pool.end();
    }
  });

  test('create, list, rotate-secret and revoke go to PostgreSQL; DATA_DIR is not used', async () => {
    const env = { DATABASE_URL: postgresUrl() };
    const name = `cli-test-${process.pid}-${Date.now()}`;
    const c = await cli(['create', '--name', name, '--scope', 'a', '--json'], env);
    expect(c.code).toBe(0);
    const body = JSON.parse(c.stdout);
    created.push(body.client_id);
    const listed = JSON.parse((await cli(['list', '--json'], env)).stdout);
    expect(listed.find((x: { client_id: string }) => x.client_id === body.client_id)).toMatchObject({ name, scope: 'a', status: 'active' });
    expect((await cli(['rotate-secret', body.client_id, '--keep-old', '1m'], env)).code).toBe(0);
    expect((await cli(['revoke', body.client_id], env)).code).toBe(0);
    expect((await cli(['revoke', body.client_id], env)).code).toBe(1);
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  test('keys rotate while a rotation is pending, on PostgreSQL: the key that signs keeps signing until the new key does, the pending one never signs', async () => {
    const schema = uniqueSchemaName();
    const { Pool } = await import('pg');
    const admin = new Pool({ connectionString: postgresUrl(), max: 1 });
    fakeClockOnly();
    try {
      await rotateWhilePending({ DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema });
      expect(fs.existsSync(dataDir)).toBe(false);
    } finally {
      jest.useRealTimers();
      await dropSchema(admin, schema);
      await admin.end();
    }
  });

  test('a DATABASE_SCHEMA with no schema behind it (mistyped): the read-only commands exit 1 naming it and create nothing; a write command creates it with a note, not again, and never for create', async () => {
    const schema = uniqueSchemaName();
    const env = { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema };
    const { Pool } = await import('pg');
    const admin = new Pool({ connectionString: postgresUrl(), max: 1 });
    const exists = async (name: string): Promise<boolean> => (await admin.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [name])).rowCount !== 0;
    try {
      // list, keys list and client-key list only read: before, each created the schema (keys list a signing key too) and exited 0
      for (const args of [['list'], ['list', '--json'], ['keys', 'list'], ['keys', 'list', '--json'], ['client-key', 'list', 'AAAAAAAAAAAAAAAAAAAAAA']]) {
        const r = await cli(args, env);
        expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({
          args,
          code: 1,
          stdout: '',
          stderr: `error: no schema ${schema} in that database (the server creates it at its first start, and 'client-credentials create' does too). Is DATABASE_SCHEMA the server's?\n`,
        });
        expect(await exists(schema)).toBe(false);
      }
      const first = await cli(['revoke', 'AAAAAAAAAAAAAAAAAAAAAA'], env);
      expect(first.code).toBe(1);
      expect(first.stderr).toMatch(new RegExp(`^note: there was no schema ${schema} in that database; an empty one was created\\. Is DATABASE_SCHEMA the server's\\?\n`));
      expect(await exists(schema)).toBe(true);
      const listed = await cli(['list'], env);
      expect({ code: listed.code, stderr: listed.stderr }).toEqual({ code: 0, stderr: '' });
      const other = uniqueSchemaName();
      const made = await cli(['create', '--name', 'x'], { ...env, DATABASE_SCHEMA: other });
      expect(made.stderr).not.toContain('note:');
      await dropSchema(admin, other);
    } finally {
      await dropSchema(admin, schema);
      await admin.end();
    }
  });
});

describe('the CLI modules', () => {
  test('never import Express or the issuer', () => {
    for (const file of fs.readdirSync(path.join(ROOT, 'lib/cli'))) {
      const text = fs.readFileSync(path.join(ROOT, 'lib/cli', file), 'utf8');
      expect(text).not.toMatch(/from '(express|\.\.\/create-issuer|\.\.\/express\/[^']*|\.\.\/index)'/);
    }
  });
});

describe('bin/client-credentials.js', () => {
  // Built once when the suite is collected, so the test can be skipped (with the reason in its name) when it cannot be built.
  const mainJs = path.join(ROOT, 'dist/lib/cli/main.js');
  const started = Date.now();
  const build = spawnSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['run', 'build'], { cwd: ROOT, encoding: 'utf8', timeout: 180_000 });
  const built = fs.existsSync(mainJs) && fs.statSync(mainJs).mtimeMs >= started - 1000;
  const why = `${build.error?.message ?? ''} ${build.stdout ?? ''} ${build.stderr ?? ''}`.replace(/\s+/g, ' ').trim().slice(-200);
  const bin = path.join(ROOT, 'bin/client-credentials.js');

  const node = (args: string[], env: NodeJS.ProcessEnv) =>
    spawnSync(process.execPath, args, { cwd: tmp, encoding: 'utf8', timeout: 30_000, env: { ...process.env, ...env } });

  (built ? test : test.skip)(
    built ? 'create --name x --json works end to end, in a process that exits' : `SKIPPED: npm run build did not produce dist/lib/cli/main.js (${why})`,
    async () => {
      const r = node([bin, 'create', '--name', 'x', '--json'], { DATA_DIR: dataDir });
      expect(r.error).toBeUndefined();
      expect(r.signal).toBeNull();
      expect(r.status).toBe(0);
      const body = JSON.parse(r.stdout);
      expect(Object.keys(body)).toEqual(['client_id', 'client_secret', 'name', 'scope', 'auth']);
      expect(body.name).toBe('x');
      expect(r.stderr).toMatch(/^warning: /);
      const stored = await withStore((s) => s.findClient(body.client_id));
      expect(verifySecret(body.client_secret, stored!.secrets[0].hash)).toBe(true);

      const usage = node([bin], { DATA_DIR: dataDir });
      expect(usage.status).toBe(2);
      expect(usage.stderr).toContain('Usage: client-credentials');
      const unknown = node([bin, 'revoke', 'nope'], { DATA_DIR: dataDir });
      expect(unknown.status).toBe(1);
      expect(unknown.stderr).toBe("error: no client with id 'nope'\n");

      const loaded = node(['-e', `require(${JSON.stringify(mainJs)}); console.log(Object.keys(require.cache).filter((f) => /node_modules[\\\\/]express/.test(f)).length)`], {});
      expect(loaded.stdout.trim()).toBe('0');
    },
    60_000,
  );

  (built ? test : test.skip)(
    built ? 'against an unreachable DATABASE_URL the process exits 1 with one line on stderr' : `SKIPPED: npm run build did not produce dist/lib/cli/main.js (${why})`,
    () => {
      const r = node([bin, 'list'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test' });
      expect(r.status).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^error: PostgreSQL is unavailable: [^\n]+\n$/);
    },
    30_000,
  );

  /** Runs the bin with its stdout on `stdout`: a file descriptor, or 'closed' for a pipe whose reader is gone. */
  const withStdout = (args: string[], stdout: number | 'closed'): Promise<{ status: number | null; stderr: string }> =>
    new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [bin, ...args], { cwd: tmp, env: { ...process.env, DATA_DIR: dataDir }, stdio: ['ignore', stdout === 'closed' ? 'pipe' : stdout, 'pipe'] });
      if (stdout === 'closed') child.stdout!.destroy(); // as `| (exec 0<&-; sleep 1)`: the reader closes before the CLI writes
      let stderr = '';
      child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
      child.on('error', reject);
      child.on('close', (status) => resolve({ status, stderr }));
    });
  const devFull = process.platform === 'linux' && fs.existsSync('/dev/full');

  (built && devFull ? test : test.skip)(
    built ? 'rotate-secret and create into /dev/full (ENOSPC) or a closed pipe (EPIPE): exit 1, one line, nothing stored, no stack trace' : `SKIPPED: npm run build did not produce dist/lib/cli/main.js (${why})`,
    async () => {
      const c = JSON.parse(node([bin, 'create', '--name', 'victim', '--json'], { DATA_DIR: dataDir }).stdout);
      const full = fs.openSync('/dev/full', 'w');
      try {
        for (const [stdout, code] of [[full, 'ENOSPC'], ['closed', 'EPIPE']] as const) {
          for (const flags of [[], ['--json']]) {
            const r = await withStdout(['rotate-secret', c.client_id, ...flags], stdout);
            expect(r.status).toBe(1);
            expect(r.stderr).toBe(`error: could not write the new secret to stdout (${code}): nothing was changed, the old secret still works\n`);
            const made = await withStdout(['create', '--name', 'lost', ...flags], stdout);
            expect(made.status).toBe(1);
            expect(made.stderr).toBe(`error: could not write the new client's secret to stdout (${code}): nothing was changed, no client was created\n`);
          }
        }
        const listed = await withStdout(['list'], full);
        expect(listed.status).toBe(1);
        expect(listed.stderr).toBe('error: could not write to stdout (ENOSPC); the output is incomplete\n');
      } finally {
        fs.closeSync(full);
      }
      expect(await authenticates(c.client_id, c.client_secret)).toBe(true);
      const clients = JSON.parse(node([bin, 'list', '--json'], { DATA_DIR: dataDir }).stdout);
      expect(clients.map((x: { client_id: string; active_secrets: number }) => [x.client_id, x.active_secrets])).toEqual([[c.client_id, 1]]);
    },
    60_000,
  );

  (built && devFull ? test : test.skip)(
    built ? 'with LOG_LEVEL set and stderr on /dev/full, create still ends (exit 0) and stores the client' : `SKIPPED: npm run build did not produce dist/lib/cli/main.js (${why})`,
    () => {
      const full = fs.openSync('/dev/full', 'w');
      try {
        const r = spawnSync(process.execPath, [bin, 'create', '--name', 'logged', '--json'], {
          cwd: tmp,
          encoding: 'utf8',
          timeout: 15_000,
          env: { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'info' },
          stdio: ['ignore', 'pipe', full],
        });
        expect(r.signal).toBeNull();
        expect(r.status).toBe(0);
        expect(JSON.parse(r.stdout).name).toBe('logged');
      } finally {
        fs.closeSync(full);
      }
    },
    30_000,
  );

  test('the shim is executable and without dist prints a hint and exits 1', () => {
    expect(fs.readFileSync(bin, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    if (process.platform !== 'win32') expect(fs.statSync(bin).mode & 0o111).not.toBe(0);
    const lonely = path.join(tmp, 'pkg/bin/client-credentials.js');
    fs.mkdirSync(path.dirname(lonely), { recursive: true });
    fs.copyFileSync(bin, lonely);
    const r = node([lonely, 'list'], { DATA_DIR: dataDir });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe("client-credentials: dist/ is missing; run 'npm run build' first\n");
  });
});
