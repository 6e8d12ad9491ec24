/**
 * `npm start` runs the compiled example (node dist/examples/server.js). The
 * example is compiled here into a folder of its own inside the package (so
 * node_modules resolves and no other test's dist/ is touched), then started
 * as a real process.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { tempDir } from '../helpers/app';

const ROOT = path.resolve(__dirname, '../..');
const OUT = path.join(ROOT, `.test-build-${process.pid}`);
const SERVER_JS = path.join(OUT, 'examples/server.js');

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the compiled server until it prints `until` (then SIGTERM) or exits by itself. */
function run(env: NodeJS.ProcessEnv, until?: RegExp, onMatch?: (stdout: string) => Promise<void>): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SERVER_JS], { cwd: ROOT, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let matched = false;
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      if (until && !matched && until.test(stdout)) {
        matched = true;
        (onMatch ? onMatch(stdout) : Promise.resolve()).then(
          () => child.kill('SIGTERM'),
          (err: unknown) => {
            child.kill('SIGKILL');
            reject(err);
          },
        );
      }
    });
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('the compiled example (npm start)', () => {
  beforeAll(() => {
    const build = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', OUT], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    if (!existsSync(SERVER_JS)) throw new Error(`the build did not produce ${SERVER_JS}: ${build.stdout} ${build.stderr}`);
  }, 130_000);

  afterAll(() => {
    rmSync(OUT, { recursive: true, force: true });
  });

  it('npm start is node dist/examples/server.js; npm run dev keeps ts-node; the package ships no example', () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
    expect(pkg.scripts.start).toBe('node dist/examples/server.js');
    expect(pkg.scripts.dev).toMatch(/^ts-node .*examples\/server\.ts$/);
    expect(pkg.files).toEqual(['bin', 'dist/lib']);
  });

  it('starts, answers /health and /health/ready, and stops on SIGTERM with exit 0', async () => {
    const dataDir = tempDir();
    try {
      const exit = await run({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ISSUER: 'http://localhost:3000' }, /"event":"server.listening"/, async (stdout) => {
        const url = /"url":"(http:[^"]+)"/.exec(stdout)![1];
        const live = await fetch(`${url}/health`);
        expect(live.status).toBe(200);
        const ready = await fetch(`${url}/health/ready`);
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
        expect((await fetch(`${url}/health`)).status).toBe(200);
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
