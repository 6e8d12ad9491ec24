/**
 * WORKERS=N (examples/cluster.ts) as a real process group, through ts-node
 * like `npm run dev`: what the primary logs when a worker dies, and that
 * the log stays JSON when a worker fails at start.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { tempDir } from '../helpers/app';

const ROOT = path.resolve(__dirname, '../..');

interface Group {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the first JSON log line that matches, once it is there. */
  line: (match: (l: Record<string, unknown>) => boolean, timeoutMs?: number) => Promise<Record<string, unknown>>;
  exited: Promise<number | null>;
}

function startGroup(env: NodeJS.ProcessEnv): Group {
  const child = spawn(process.execPath, ['-r', 'ts-node/register/transpile-only', 'examples/server.ts'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DEMO_CLIENT: '0', WORKERS: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const lines = () => out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
  const line = async (match: (l: Record<string, unknown>) => boolean, timeoutMs = 20_000) => {
    for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
      const found = lines().find(match);
      if (found) return found;
    }
    throw new Error(`no such log line in:\n${out}\n${err}`);
  };
  return { child, stdout: () => out, stderr: () => err, line, exited };
}

describe('examples/cluster.ts (WORKERS=1)', () => {
  const dirs: string[] = [];
  const groups: Group[] = [];
  let blocker: Server | undefined;

  afterEach(async () => {
    for (const g of groups.splice(0)) {
      if (g.child.exitCode === null && g.child.signalCode === null) {
        g.child.kill('SIGTERM');
        const timer = setTimeout(() => g.child.kill('SIGKILL'), 5000);
        await g.exited;
        clearTimeout(timer);
      }
    }
    await new Promise<void>((resolve) => (blocker ? blocker.close(() => resolve()) : resolve()));
    blocker = undefined;
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('a worker killed by a signal: worker.exit says which (code null, signal SIGKILL), and another is started', async () => {
    dirs.push(tempDir());
    const g = startGroup({ PORT: '0', DATA_DIR: dirs[0] });
    groups.push(g);
    const first = await g.line((l) => l.event === 'server.listening');
    process.kill(first.pid as number, 'SIGKILL');
    const exit = await g.line((l) => l.event === 'worker.exit');
    expect(exit).toMatchObject({ level: 40, pid: first.pid, code: null, signal: 'SIGKILL' });
    await g.line((l) => l.event === 'server.listening' && l.pid !== first.pid);
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
  }, 40_000);

  it('a worker stopped on purpose (SIGTERM to it alone, exit 0) right after its start: logged at info and replaced at once, twice in a row (a failed start waits 1 s, then 2 s)', async () => {
    dirs.push(tempDir());
    const g = startGroup({ PORT: '0', DATA_DIR: dirs[0] });
    groups.push(g);
    let pid = (await g.line((l) => l.event === 'server.listening')).pid as number;
    for (let i = 0; i < 2; i++) {
      process.kill(pid, 'SIGTERM');
      const exit = await g.line((l) => l.event === 'worker.exit' && l.pid === pid);
      expect(exit).toMatchObject({ level: 30, code: 0, signal: null, restart_in_ms: 0, msg: 'worker stopped; starting another' });
      expect(exit.lived_ms as number).toBeLessThan(10_000);
      const gone = pid;
      pid = (await g.line((l) => l.event === 'server.listening' && l.pid !== gone && !(l.pid === undefined))).pid as number;
    }
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
  }, 60_000);

  it('a worker that fails at start logs a JSON line, not a plain `error:` line; the primary logs its exit with code 1', async () => {
    blocker = createServer();
    await new Promise<void>((resolve) => blocker!.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as { port: number }).port;
    dirs.push(tempDir());
    const g = startGroup({ PORT: String(port), DATA_DIR: dirs[0] });
    groups.push(g);
    const failed = await g.line((l) => l.event === 'worker.start_failed');
    expect(failed).toMatchObject({ level: 50, name: 'orders-api', err: expect.stringContaining('EADDRINUSE') });
    const exit = await g.line((l) => l.event === 'worker.exit');
    expect(exit).toMatchObject({ pid: failed.pid, code: 1, signal: null });
    g.child.kill('SIGTERM');
    await g.exited;
    // every line of the group's output is JSON, on stdout
    expect(g.stderr()).toBe('');
    for (const l of g.stdout().split('\n').filter(Boolean)) expect(() => JSON.parse(l)).not.toThrow();
  }, 40_000);
});
