/**
 * A secret is never stored unless it was delivered: `create` and
 * `rotate-secret` print first, wait until stdout took the output (io.flush),
 * and only then write the store. An output failure (EPIPE, ENOSPC) changes
 * nothing and says so in one line, exit 1; a store failure after the output
 * says that what was printed was not stored.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { main } from '../../lib/cli/main';
import { authenticateClient } from '../../lib/core/client-auth';
import { Pool } from 'pg';
import * as open from '../../lib/stores/open';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';

let tmp: string;
let dataDir: string;

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-cli-delivery-'));
  dataDir = path.join(tmp, 'data');
});

afterEach(() => {
  jest.restoreAllMocks();
  fs.rmSync(tmp, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI; `flush` stands for stdout's answer (default: everything taken); `env` adds to DATA_DIR. */
async function cli(args: string[], io: { flush?: () => Promise<void>; stdout?: (s: string) => void; env?: NodeJS.ProcessEnv } = {}): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const cliIo = {
    stdout: (s: string) => {
      stdout += s;
      io.stdout?.(s);
    },
    stderr: (s: string) => {
      stderr += s;
    },
    flush: io.flush,
    env: { DATA_DIR: dataDir, ...io.env },
  };
  const code = await main(args, cliIo);
  return { code, stdout, stderr };
}

const failing = (code: string) => () => Promise.reject(Object.assign(new Error(`${code}: write failed`), { code }));

/** Whether `secret` authenticates `clientId` now, by the token endpoint's rules, on the store as it is (the CLI's, by `env`). */
async function authenticates(clientId: string, secret: string, env: NodeJS.ProcessEnv = {}): Promise<boolean> {
  const store = await open.openStore({ dataDir, databaseUrl: env.DATABASE_URL, schema: env.DATABASE_SCHEMA });
  try {
    return await authenticateClient((id) => store.findClient(id), { clientId, clientSecret: secret, method: 'client_secret_basic' }, new Date()).then(
      () => true,
      () => false,
    );
  } finally {
    await store.close();
  }
}

async function clients(): Promise<Array<{ client_id: string; name: string; active_secrets: number }>> {
  const r = await cli(['list', '--json']);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

async function createJson(name = 'svc', env: NodeJS.ProcessEnv = {}): Promise<{ client_id: string; client_secret: string }> {
  const r = await cli(['create', '--name', name, '--json'], { env });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

/** One line on stderr, no stack trace. */
function oneErrorLine(r: Run): string {
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  expect(r.stderr).not.toMatch(/\n\s+at /);
  return lines[0];
}

/** The secret printed in human or --json form. */
function printedSecret(stdout: string): string {
  const json = stdout.trim().startsWith('{') ? (JSON.parse(stdout.trim()) as { client_secret?: string }) : undefined;
  return json?.client_secret ?? /client_secret: (\S+)/.exec(stdout)![1];
}

describe('rotate-secret', () => {
  test.each([
    ['EPIPE', []],
    ['ENOSPC', []],
    ['EPIPE', ['--json']],
    ['ENOSPC', ['--keep-old', '1h']],
  ])('stdout fails (%s, %j): exit 1, one line saying nothing changed, the old secret still works and the new one does not', async (code, flags) => {
    const c = await createJson();
    const r = await cli(['rotate-secret', c.client_id, ...flags], { flush: failing(code) });
    expect(r.code).toBe(1);
    expect(oneErrorLine(r)).toBe(`error: could not write the new secret to stdout (${code}): nothing was changed, the old secret still works`);
    expect(await authenticates(c.client_id, c.client_secret)).toBe(true);
    expect(await authenticates(c.client_id, printedSecret(r.stdout))).toBe(false);
    expect((await clients())[0].active_secrets).toBe(1);
  });

  test('a stdout that throws (no flush) is the same failure', async () => {
    const c = await createJson();
    const r = await cli(['rotate-secret', c.client_id], {
      stdout: () => {
        throw Object.assign(new Error('EPIPE'), { code: 'EPIPE' });
      },
    });
    expect(r.code).toBe(1);
    expect(oneErrorLine(r)).toBe('error: could not write the new secret to stdout (EPIPE): nothing was changed, the old secret still works');
    expect(await authenticates(c.client_id, c.client_secret)).toBe(true);
  });

  test('the store is written only after stdout took the new secret', async () => {
    const c = await createJson();
    let atFlush: { old: boolean; new: boolean } | undefined;
    let printed = '';
    const r = await cli(['rotate-secret', c.client_id, '--json'], {
      stdout: (s) => void (printed += s),
      flush: async () => {
        // the first flush: the one before the store write (main flushes again at its end)
        atFlush ??= { old: await authenticates(c.client_id, c.client_secret), new: await authenticates(c.client_id, printedSecret(printed)) };
      },
    });
    expect(r.code).toBe(0);
    expect(atFlush).toEqual({ old: true, new: false });
    expect(await authenticates(c.client_id, c.client_secret)).toBe(false);
    expect(await authenticates(c.client_id, printedSecret(r.stdout))).toBe(true);
  });

  test('the store fails after the output: the error says the printed secret was NOT stored, and the old one still works', async () => {
    const c = await createJson();
    const real = open.openStore;
    jest.spyOn(open, 'openStore').mockImplementation(async (options) => {
      const store = await real(options);
      return Object.assign(store, { rotateSecret: () => Promise.reject(new Error('disk I/O error')) });
    });
    const r = await cli(['rotate-secret', c.client_id]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('client_secret: ');
    expect(oneErrorLine(r)).toBe('error: disk I/O error; the secret printed above was NOT stored: nothing was changed, the old secret still works');
    jest.restoreAllMocks();
    expect(await authenticates(c.client_id, c.client_secret)).toBe(true);
    expect(await authenticates(c.client_id, printedSecret(r.stdout))).toBe(false);
  });
});

/**
 * Two `rotate-secret` runs on one client at the same moment: each holds at
 * its flush (its secret printed, the client read, nothing stored yet) until
 * both got there, as two operators' runs, or three servers' admin calls, can.
 */
async function rotateTogether(clientId: string, flags: string[], env: NodeJS.ProcessEnv): Promise<Run[]> {
  let arrived = 0;
  let release!: () => void;
  const both = new Promise<void>((resolve) => (release = resolve));
  const flush = async (): Promise<void> => {
    if (++arrived === 2) release();
    await both;
  };
  return Promise.all([0, 1].map(() => cli(['rotate-secret', clientId, ...flags], { flush, env })));
}

function rotateRace(env: () => NodeJS.ProcessEnv): void {
  test.each([[[]], [['--keep-old', '1h']], [['--json']]])(
    'two runs at once (%j): exactly one exits 0 and its secret works; the other exits 1 saying its printed secret was NOT stored, and it does not work',
    async (flags) => {
      const c = await createJson('svc', env());
      const runs = await rotateTogether(c.client_id, flags, env());
      expect(runs.map((r) => r.code).sort()).toEqual([0, 1]);
      const won = runs.find((r) => r.code === 0)!;
      const lost = runs.find((r) => r.code === 1)!;
      expect(await authenticates(c.client_id, printedSecret(won.stdout), env())).toBe(true);
      expect(oneErrorLine(lost)).toBe(
        `error: another rotation of the secret of client '${c.client_id}' happened at the same time; the secret printed above was NOT stored: the other rotation's new secret is the one that works`,
      );
      expect(await authenticates(c.client_id, printedSecret(lost.stdout), env())).toBe(false);
      // the old secret as the winner said: kept for an hour, or ended
      expect(await authenticates(c.client_id, c.client_secret, env())).toBe(flags[0] === '--keep-old');
    },
  );
}

describe('rotate-secret twice at the same moment (embedded store)', () => {
  rotateRace(() => ({}));
});

describeIfPostgres('rotate-secret twice at the same moment (PostgreSQL)', () => {
  const schemas: string[] = [];
  let schema = '';
  beforeEach(() => {
    schema = uniqueSchemaName();
    schemas.push(schema);
  });
  afterAll(async () => {
    const admin = new Pool({ connectionString: postgresUrl(), max: 1 });
    try {
      for (const s of schemas) await dropSchema(admin, s);
    } finally {
      await admin.end();
    }
  });
  rotateRace(() => ({ DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema }));
});

describe('create', () => {
  test.each([['EPIPE'], ['ENOSPC']])('stdout fails (%s): exit 1, one line, no client is created', async (code) => {
    for (const flags of [[], ['--json']]) {
      const r = await cli(['create', '--name', 'lost', ...flags], { flush: failing(code) });
      expect(r.code).toBe(1);
      expect(oneErrorLine(r)).toBe(`error: could not write the new client's secret to stdout (${code}): nothing was changed, no client was created`);
    }
    expect(await clients()).toEqual([]);
  });

  test('the store fails after the output: the error says the printed client was NOT created', async () => {
    const real = open.openStore;
    jest.spyOn(open, 'openStore').mockImplementation(async (options) => {
      const store = await real(options);
      return Object.assign(store, { createClient: () => Promise.reject(new Error('disk I/O error')) });
    });
    const r = await cli(['create', '--name', 'lost']);
    expect(r.code).toBe(1);
    expect(oneErrorLine(r)).toBe('error: disk I/O error; the client printed above was NOT created: its secret does not work');
    jest.restoreAllMocks();
    expect(await clients()).toEqual([]);
  });

  test('--auth private_key_jwt --generate-key: stdout fails: no client, and the key file is removed', async () => {
    const out = path.join(tmp, 'k.json');
    const r = await cli(['create', '--name', 'lost', '--auth', 'private_key_jwt', '--generate-key', '--out', out], { flush: failing('EPIPE') });
    expect(r.code).toBe(1);
    expect(oneErrorLine(r)).toBe(`error: could not write the new client to stdout (EPIPE): nothing was changed, no client was created, and the key file '${out}' was removed`);
    expect(fs.existsSync(out)).toBe(false);
    expect(await clients()).toEqual([]);
  });

  test('--generate-key: the key file cannot be written (a full disk): no client, no half-written file, one line', async () => {
    const out = path.join(tmp, 'k.json');
    jest.spyOn(fs, 'writeSync').mockImplementation(() => {
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    });
    const r = await cli(['create', '--name', 'lost', '--auth', 'private_key_jwt', '--generate-key', '--out', out, '--json']);
    jest.restoreAllMocks();
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(oneErrorLine(r)).toBe(`error: cannot write the private key to '${out}' (ENOSPC): nothing was changed, no client was created`);
    expect(fs.existsSync(out)).toBe(false);
    expect(fs.existsSync(dataDir)).toBe(false); // no client, not even a store
  });

  test('--auth private_key_jwt --jwks-uri: stdout fails: no client', async () => {
    const r = await cli(['create', '--name', 'lost', '--auth', 'private_key_jwt', '--jwks-uri', 'https://keys.example.com/jwks.json'], { flush: failing('ENOSPC') });
    expect(r.code).toBe(1);
    expect(oneErrorLine(r)).toBe('error: could not write the new client to stdout (ENOSPC): nothing was changed, no client was created');
    expect(await clients()).toEqual([]);
  });
});

describe('other commands', () => {
  test('a reader that went away (EPIPE) ends quietly, as for any Unix tool', async () => {
    await createJson();
    const r = await cli(['list'], { flush: failing('EPIPE') });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
  });

  test('any other output error: exit 1, one line, no stack trace', async () => {
    await createJson();
    const r = await cli(['list'], { flush: failing('ENOSPC') });
    expect(r.code).toBe(1);
    expect(oneErrorLine(r)).toBe('error: could not write to stdout (ENOSPC); the output is incomplete');
  });
});
