/**
 * The examples compiled into a folder of their own inside the package (so
 * node_modules resolves and no other test's dist/ is touched), and run as
 * real processes, as `npm start` runs them.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';

export const ROOT = path.resolve(__dirname, '../..');

export interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Compiles the package and its examples into `.test-build-<tag>-<pid>`; `script(name)` is a compiled example's path. */
export function compiledExamples(tag: string): { build(): void; remove(): void; script(name: string): string } {
  const out = path.join(ROOT, `.test-build-${tag}-${process.pid}`);
  const script = (name: string): string => path.join(out, 'examples', `${name}.js`);
  return {
    build() {
      const build = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', out], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
      if (!existsSync(script('server'))) throw new Error(`the build did not produce ${script('server')}: ${build.stdout} ${build.stderr}`);
    },
    remove() {
      rmSync(out, { recursive: true, force: true });
    },
    script,
  };
}

/**
 * Runs `script` until its stdout matches `until` (then, once `onMatch`
 * resolved, SIGTERM; SIGKILL and a rejection if it rejects), or until it
 * exits by itself; killed after 20 s.
 */
export function runUntil(script: string, env: NodeJS.ProcessEnv, until?: RegExp, onMatch?: (stdout: string) => Promise<void>): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script], { cwd: ROOT, env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
