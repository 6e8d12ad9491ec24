/**
 * `create --generate-key` never leaves a private key file without a client:
 * a store that cannot be reached, or SIGINT or SIGTERM while the store is
 * being reached or written, removes the file (the latter ends the process
 * with 130 or 143).
 * Before, the file was written first, and Ctrl-C against a slow store left
 * it behind: the retry was refused ("exists already", exit 2).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { main } from '../../lib/cli/main';
import * as open from '../../lib/stores/open';
import { compiledExamples } from '../helpers/compiled-example';
import { cliPerTest } from '../helpers/cli';

const dirs = cliPerTest('ecc-cli-key-signal-');
const examples = compiledExamples();
/** The CLI as built from these sources (lib/cli/main.js next to the compiled examples). */
const MAIN_JS = path.join(path.dirname(path.dirname(examples.script('server'))), 'lib/cli/main.js');

beforeAll(() => examples.build(), 130_000);
afterEach(() => jest.restoreAllMocks());

/** A PostgreSQL address that accepts connections and never answers: the store is slow, not down. */
async function silentListener(port: number): Promise<{ connected: Promise<void>; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let connected!: () => void;
  const first = new Promise<void>((resolve) => (connected = resolve));
  const server = net.createServer((s) => {
    s.on('error', () => undefined);
    sockets.add(s);
    connected();
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve));
  return {
    connected: first,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The built CLI as a process; `signal` is sent once the listener saw its connection. */
function runCli(args: string[], env: NodeJS.ProcessEnv, whenConnected?: Promise<void>, signal?: NodeJS.Signals) {
  const script = path.join(dirs.tmp, 'cli.js');
  fs.writeFileSync(script, `require(${JSON.stringify(MAIN_JS)}).run();\n`);
  const child = spawn(process.execPath, [script, ...args], { cwd: dirs.tmp, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const killer = setTimeout(() => child.kill('SIGKILL'), 8000);
  if (whenConnected && signal) void whenConnected.then(() => child.kill(signal));
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((resolve) =>
    child.once('close', (code, sig) => {
      clearTimeout(killer);
      resolve({ code, signal: sig, stdout, stderr });
    }),
  );
}

test('SIGINT or SIGTERM while the store does not answer: no key file is left, exit 130 or 143, and the same command can be run again', async () => {
  const out = path.join(dirs.tmp, 'sig.key.json');
  const args = ['create', '--name', 'z', '--auth', 'private_key_jwt', '--generate-key', '--out', out];
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    const listener = await silentListener(47397);
    try {
      const r = await runCli(args, { DATABASE_URL: 'postgres://postgres@127.0.0.1:47397/x' }, listener.connected, signal);
      expect({ code: r.code, signal: r.signal, exists: fs.existsSync(out) }).toEqual({ code, signal: null, exists: false });
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(`error: interrupted (${signal}): nothing was changed, no client was created, and the key file '${out}' was removed\n`);
    } finally {
      await listener.close();
    }
  }
  // nothing listens there now: the store cannot be reached, and the file is removed
  const refused = await runCli(args, { DATABASE_URL: 'postgres://postgres@127.0.0.1:47397/x' });
  expect(refused.code).toBe(1);
  expect(refused.stderr).toMatch(/^error: PostgreSQL is unavailable: [^\n]+\n$/);
  expect(fs.existsSync(out)).toBe(false);
}, 15_000);

test('a signal while the client is being stored removes the key file, says the printed client may exist, ends with 130; the handler is gone afterwards', async () => {
  const out = path.join(dirs.tmp, 'slow.key.json');
  let storing!: () => void;
  const reached = new Promise<void>((resolve) => (storing = resolve));
  let fail!: (err: Error) => void;
  const real = open.openStore;
  jest.spyOn(open, 'openStore').mockImplementation(async (options) => {
    const store = await real(options);
    // the store write that never ends (until the test lets it fail)
    return Object.assign(store, {
      createClient: () =>
        new Promise<never>((_, reject) => {
          fail = reject;
          storing();
        }),
    });
  });
  const exit = jest.spyOn(process, 'exit').mockImplementation((() => undefined) as never);
  const before = process.listeners('SIGINT');
  let stdout = '';
  let stderr = '';
  const run = main(['create', '--name', 'slow', '--auth', 'private_key_jwt', '--generate-key', '--out', out], {
    stdout: (s) => void (stdout += s),
    stderr: (s) => void (stderr += s),
    env: { DATA_DIR: dirs.dataDir },
  });
  await reached;
  expect(fs.statSync(out).mode & 0o777).toBe(0o600); // written, and the client printed: the store write is under way
  expect(stdout).toContain('Client created.');
  const added = process.listeners('SIGINT').filter((l) => !before.includes(l));
  expect(added).toHaveLength(1);
  (added[0] as (signal: NodeJS.Signals) => void)('SIGINT');
  expect(exit).toHaveBeenCalledWith(130);
  expect(fs.existsSync(out)).toBe(false);
  expect(stderr.split('\n')[0]).toBe(
    `error: interrupted (SIGINT) while the client printed above was being stored: it may have been created without its key file '${out}', which was removed; 'list' shows whether it was (then revoke it)`,
  );
  fail(new Error('gone'));
  expect(await run).toBe(1);
  expect(process.listeners('SIGINT')).toEqual(before);
  expect(process.listeners('SIGTERM').filter((l) => l === added[0])).toEqual([]);
});
