/**
 * The examples compiled once per test run and run as real processes, as
 * `npm start` runs them.
 *
 * The build is shared: every test file (in any jest worker) that asks for it
 * gets the same folder, `examples-<hash>` in the run's temporary folder
 * (ECC_TEST_TMP, __tests__/helpers/global-setup.js, removed at the run's
 * end), where <hash> is that of the compiled sources (lib/, examples/, the
 * tsconfigs) and the compiler's version: sources changed during a run get a
 * build of their own. One worker compiles under a lock file, the others wait
 * for it. The build is the same for both jest projects: the compiled
 * examples run in processes of their own, where `express` is the package's
 * (Express 5) whatever jest's moduleNameMapper says in the test's process.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export const ROOT = path.resolve(__dirname, '../..');

export interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** What tsconfig.build.json compiles, and with what: a changed file or compiler is a new build. */
function sourcesHash(): string {
  const hash = createHash('sha256');
  const add = (relative: string): void => {
    hash.update(`${relative}\0`);
    hash.update(readFileSync(path.join(ROOT, relative)));
    hash.update('\0');
  };
  const walk = (dir: string): void => {
    for (const entry of readdirSync(path.join(ROOT, dir), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const relative = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(relative);
      else if (entry.isFile()) add(relative);
    }
  };
  for (const file of ['tsconfig.json', 'tsconfig.build.json']) add(file);
  walk('lib');
  walk('examples');
  hash.update(`typescript ${(require('typescript/package.json') as { version: string }).version}`);
  return hash.digest('hex').slice(0, 16);
}

/** Whether the process that wrote `lock` (its pid) is gone; an empty lock is being written, so held. */
function holderGone(lock: string): boolean {
  let pid: number;
  try {
    pid = Number(readFileSync(lock, 'utf8'));
  } catch {
    return false; // removed meanwhile: the next turn sees it
  }
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** Compiles into `out` through a folder of this process's own, moved into place when complete. */
function compileInto(out: string): void {
  const partial = `${out}.partial-${process.pid}`;
  rmSync(partial, { recursive: true, force: true });
  try {
    const build = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', partial], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    if (!existsSync(path.join(partial, 'examples', 'server.js'))) throw new Error(`the build did not produce examples/server.js: ${build.stdout} ${build.stderr}`);
    // the compiled files resolve the package's dependencies from outside the package, through this link
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(partial, 'node_modules'), 'dir');
    try {
      renameSync(partial, out);
    } catch (err) {
      // another worker's build got there first (it took over a lock it thought abandoned): the same sources
      if (!existsSync(out)) throw err;
    }
  } finally {
    rmSync(partial, { recursive: true, force: true });
  }
}

/** Makes `out`, unless it is there: the first caller compiles, the others wait for it. */
async function ensureBuilt(out: string): Promise<void> {
  const lock = `${out}.lock`;
  for (const deadline = Date.now() + 120_000; Date.now() < deadline; ) {
    if (existsSync(out)) return;
    let fd: number;
    try {
      fd = openSync(lock, 'wx');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      // another worker compiles: wait for it (or take over from one that died)
      if (holderGone(lock)) rmSync(lock, { force: true });
      else await new Promise((resolve) => setTimeout(resolve, 100));
      continue;
    }
    try {
      writeSync(fd, String(process.pid));
      closeSync(fd);
      if (!existsSync(out)) compileInto(out);
    } finally {
      rmSync(lock, { force: true });
    }
  }
  if (!existsSync(out)) throw new Error(`no build of the examples at ${out} after 120 s (lock ${lock})`);
}

/** The run's compiled examples: `await build()` (in beforeAll) before running `script(name)`, a compiled example's path. */
export function compiledExamples(): { build(): Promise<void>; script(name: string): string } {
  const out = path.join(process.env.ECC_TEST_TMP ?? tmpdir(), `examples-${sourcesHash()}`);
  return {
    build: () => ensureBuilt(out),
    script: (name) => path.join(out, 'examples', `${name}.js`),
  };
}

/**
 * Runs `script` until its stdout matches `until` (then, once `onMatch`
 * resolved, SIGTERM; SIGKILL and a rejection if it rejects), or until it
 * exits by itself; killed after 20 s. `args` follow the script on its command line.
 */
export function runUntil(script: string, env: NodeJS.ProcessEnv, until?: RegExp, onMatch?: (stdout: string) => Promise<void>, args: string[] = []): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { cwd: ROOT, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
