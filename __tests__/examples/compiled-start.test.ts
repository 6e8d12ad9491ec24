/**
 * `npm start` runs the compiled example (node dist/examples/server.js). The
 * example is compiled into a folder of the test run's own (the build the
 * example tests share, __tests__/helpers/compiled-example.ts: no dist/ is
 * touched), then started as a real process.
 */
import { spawn } from 'node:child_process';
import { readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { tempDir } from '../helpers/app';
import { ROOT, compiledExamples, runUntil, type Exit } from '../helpers/compiled-example';

const examples = compiledExamples();
const SERVER_JS = examples.script('server');
/** For fetch: the connection closed after the answer (the graceful stop would wait for it, idle, up to its keep-alive timeout). */
const ONCE: RequestInit = { headers: { connection: 'close' } };

/** Runs the compiled server until it prints `until` (then SIGTERM) or exits by itself. */
function run(env: NodeJS.ProcessEnv, until?: RegExp, onMatch?: (stdout: string) => Promise<void>): Promise<Exit> {
  return runUntil(SERVER_JS, env, until, onMatch);
}

describe('the compiled example (npm start)', () => {
  beforeAll(() => {
    return examples.build();
  }, 130_000);

  it('npm start is node dist/examples/server.js; npm run dev keeps ts-node; the package ships no example', () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.scripts.start).toBe('exec node dist/examples/server.js');
    expect(pkg.scripts.dev).toMatch(/^ts-node .*examples\/server\.ts$/);
    expect(pkg.files).toEqual(['bin', 'dist/lib']);
  });

  it('npm start, then SIGTERM to npm (as a container runtime or supervisor sends it): the server stops gracefully, none is left running', async () => {
    // a folder laid out like the project: its package.json's scripts, dist/ the run's build
    const dir = tempDir();
    const dataDir = tempDir();
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'npm-start-check', private: true, scripts: { prestart: pkg.scripts.prestart, start: pkg.scripts.start } }));
    symlinkSync(path.dirname(path.dirname(SERVER_JS)), path.join(dir, 'dist'), 'dir');
    // its own process group, so that whatever is left can be killed at the end
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: dir,
      detached: true,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, npm_config_update_notifier: 'false', PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ISSUER: 'http://localhost:3000', DEMO_CLIENT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    npm.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 20_000;
      while (!/"event":"server.listening"/.test(stdout) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const url = /"url":"(http:[^"]+)"/.exec(stdout)![1];
      expect((await fetch(`${url}/health`, ONCE)).status).toBe(200);
      process.kill(npm.pid!, 'SIGTERM');
      expect(await exited).toBe(0);
      // the server's own lines: it was told, and it stopped
      const stopped = Date.now() + 5_000;
      while (!/"event":"server.stopping"/.test(stdout) && Date.now() < stopped) await new Promise((r) => setTimeout(r, 50));
      expect(stdout).toContain('"event":"server.stopping"');
      await expect(fetch(`${url}/health`)).rejects.toThrow();
    } finally {
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        // the group is gone
      }
      rmSync(dir, { recursive: true, force: true });
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 40_000);

  it('starts, answers /health and /health/ready, and stops on SIGTERM with exit 0', async () => {
    const dataDir = tempDir();
    try {
      const exit = await run({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ISSUER: 'http://localhost:3000' }, /"event":"server.listening"/, async (stdout) => {
        const url = /"url":"(http:[^"]+)"/.exec(stdout)![1];
        const live = await fetch(`${url}/health`, ONCE);
        expect(live.status).toBe(200);
        const ready = await fetch(`${url}/health/ready`, ONCE);
        expect(ready.status).toBe(200);
        expect(await ready.json()).toMatchObject({ ok: true, store: 'up' });
      });
      expect(exit.stdout).toContain('Created a demo client');
      expect(exit.code).toBe(0);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 30_000);

  it('WORKERS=1 DEMO_CLIENT=0: the primary creates no demo client either; the worker serves, and SIGTERM stops both', async () => {
    const dataDir = tempDir();
    try {
      const exit = await run({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ISSUER: 'http://localhost:3000', WORKERS: '1', DEMO_CLIENT: '0' }, /"event":"server.listening"/, async (stdout) => {
        const url = /"url":"(http:[^"]+)"/.exec(stdout)![1];
        expect((await fetch(`${url}/health`, ONCE)).status).toBe(200);
      });
      expect(exit.stdout).not.toMatch(/demo client|client_secret/);
      expect(exit.code).toBe(0);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 30_000);

  it('warns when DATABASE_URL is set without ISSUER, and with an unreachable database exits 1 with one line', async () => {
    const exit = await run({ PORT: '0', DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test' });
    expect(exit.code).toBe(1);
    const warning = exit.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l)).find((l) => l.event === 'config.warning');
    expect(warning).toMatchObject({ level: 40, setting: 'ISSUER', msg: expect.stringContaining('DATABASE_URL is set but ISSUER is not') });
    expect(exit.stderr).toMatch(/^error: PostgreSQL is unavailable: connect ECONNREFUSED 127\.0\.0\.1:1\n$/);

    const quiet = await run({ PORT: '0', DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test', ISSUER: 'http://localhost:3000' });
    expect(quiet.stdout).not.toContain('config.warning');
  }, 30_000);
});
