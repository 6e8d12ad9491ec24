/**
 * The compiled example's graceful stop as a real process, as clients and an
 * operator meet it: keep-alive clients under load across SIGTERM lose no
 * request they wrote; a second stop signal, of either kind, ends a stop that
 * is held up (by a request whose body does not come), at once.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tempDir } from '../helpers/app';
import { compiledExamples } from '../helpers/compiled-example';

const examples = compiledExamples();
const SERVER_JS = examples.script('server');
const RESOURCE_SERVER_JS = examples.script('resource-server');

type Line = Record<string, unknown>;

/** The compiled server as a process (`detached`: a process group of its own, as a terminal's): its JSON log lines, and how it ended. */
function start(env: NodeJS.ProcessEnv, detached = false, script = SERVER_JS) {
  const child = spawn(process.execPath, [script], {
    env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DEMO_CLIENT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const killer = setTimeout(() => (detached ? process.kill(-child.pid!, 'SIGKILL') : child.kill('SIGKILL')), 25_000);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once('exit', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal, at: Date.now() });
    }),
  );
  const lines = (): Line[] => stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
  return {
    child,
    exited,
    lines,
    stderr: () => stderr,
    /** The first log line that matches, once written; rejects if the process exits first. */
    async line(match: (l: Line) => boolean): Promise<Line> {
      for (;;) {
        const found = lines().find(match);
        if (found) return found;
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`exited (code ${child.exitCode}) without that line; stdout:\n${stdout}\nstderr:\n${stderr}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

const listening = (l: Line): boolean => l.event === 'server.listening';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Seen = 'answered' | 'refused' | 'lost after written' | 'lost before written';

/** One GET through `agent`: what the client saw. */
function get(url: string, agent: http.Agent): Promise<Seen> {
  return new Promise((resolve) => {
    let written = false;
    const req = http.get(`${url}/health`, { agent }, (res) => {
      res.resume();
      res.on('end', () => resolve('answered'));
      res.on('error', () => resolve('lost after written'));
    });
    req.on('finish', () => (written = true));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED' ? 'refused' : written ? 'lost after written' : 'lost before written'));
  });
}

/**
 * A POST /oauth/token whose body comes only when `finish()` is called: a request in flight that holds the
 * stop (until the 10 s bound) meanwhile. `received()`: what the server answered.
 */
function slowBody(url: string) {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  let received = '';
  socket.setEncoding('utf8').on('data', (d: string) => (received += d));
  socket.on('error', () => undefined);
  const body = 'grant_type=client_credentials';
  socket.write(`POST /oauth/token HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\ngrant_type=`);
  return {
    finish: () => socket.write(body.slice('grant_type='.length)),
    received: () => received,
    destroy: () => socket.destroy(),
  };
}

/**
 * Starts `script`, has six keep-alive connections GET /health in a loop, SIGTERMs it after `afterMs` and
 * waits for its exit: what the clients saw, the exit, the process's log lines. Bounded: the process exits
 * within the stop's 10 s bound, and the loops with it.
 */
async function stopUnderLoad(env: NodeJS.ProcessEnv, afterMs: number, script = SERVER_JS) {
  const p = start(env, false, script);
  const url = String((await p.line(listening)).url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 6 });
  const seen: Record<Seen, number> = { answered: 0, refused: 0, 'lost after written': 0, 'lost before written': 0 };
  let exited = false;
  const loop = async () => {
    while (!exited) {
      const what = await get(url, agent);
      seen[what] += 1;
      if (what === 'refused') await sleep(5);
    }
  };
  const loops = Array.from({ length: 6 }, loop);
  await sleep(afterMs);
  p.child.kill('SIGTERM');
  const exit = await p.exited;
  exited = true;
  await Promise.all(loops);
  agent.destroy();
  return { seen, exit, lines: p.lines() };
}

describe('the graceful stop (compiled, as a real process)', () => {
  beforeAll(() => examples.build(), 130_000);

  it('keep-alive clients under load across SIGTERM: every request is answered or refused as a new connection, none reset after being written (5 stops)', async () => {
    // Before: each stop reset about one request per connection (the server closed connections it saw
    // idle while their clients were writing the next request on them).
    const dataDir = tempDir();
    for (let round = 0; round < 5; round++) {
      const { seen, exit } = await stopUnderLoad({ DATA_DIR: dataDir }, 150 + 50 * round);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(seen['lost after written']).toBe(0);
      expect(seen['lost before written']).toBe(0);
      expect(seen.answered).toBeGreaterThan(0);
    }
  }, 60_000);

  it('the resource server (examples/resource-server.ts) too: keep-alive clients across SIGTERM lose no request they wrote (3 stops)', async () => {
    // Before: it closed with server.close() and closeIdleConnections(), the race the orders API had.
    for (let round = 0; round < 3; round++) {
      const { seen, exit, lines } = await stopUnderLoad({}, 150 + 50 * round, RESOURCE_SERVER_JS);
      expect(exit).toMatchObject({ code: 0, signal: null });
      expect(lines.filter((l) => l.event === 'server.stopping')).toEqual([expect.objectContaining({ signal: 'SIGTERM' })]);
      expect(seen['lost after written']).toBe(0);
      expect(seen['lost before written']).toBe(0);
      expect(seen.answered).toBeGreaterThan(0);
    }
  }, 40_000);

  it.each([
    ['SIGTERM', 'SIGINT', 130],
    ['SIGINT', 'SIGTERM', 143],
    ['SIGTERM', 'SIGTERM', 143],
  ] as const)('%s, then %s a second later while a request holds the stop: one server.stop_forced line and exit %i at once', async (first, second, code) => {
    const p = start({ DATA_DIR: tempDir() });
    const url = String((await p.line(listening)).url);
    const held = slowBody(url);
    try {
      await sleep(100); // the request has arrived
      p.child.kill(first);
      await p.line((l) => l.event === 'server.stopping');
      await sleep(1_100); // the stop is held (the request's body is not coming), and past SAME_STOP_MS
      expect(p.child.exitCode).toBeNull();
      const sent = Date.now();
      p.child.kill(second);
      const exit = await p.exited;
      expect(exit).toMatchObject({ code, signal: null });
      expect(exit.at - sent).toBeLessThan(1_000); // not the stop's 10 s bound
      expect(p.lines().filter((l) => l.event === 'server.stop_forced')).toEqual([expect.objectContaining({ level: 40, signal: second })]);
      expect(p.stderr()).toBe('');
    } finally {
      held.destroy();
      p.child.kill('SIGKILL');
    }
  }, 30_000);

  it('WORKERS=1, Ctrl-C in a terminal (SIGINT to the whole group, then the primary passes SIGTERM to the worker): one graceful stop each, exit 0', async () => {
    const p = start({ DATA_DIR: tempDir(), WORKERS: '1' }, true);
    let held: ReturnType<typeof slowBody> | undefined;
    try {
      const worker = await p.line(listening);
      // a request in flight: the worker is still stopping when the primary's SIGTERM comes
      held = slowBody(String(worker.url));
      await sleep(100);
      process.kill(-p.child.pid!, 'SIGINT');
      await p.line((l) => l.event === 'server.stopping' && l.pid === worker.pid);
      await sleep(300);
      held.finish();
      expect(await p.exited).toMatchObject({ code: 0, signal: null });
      // answered (no credentials: 401), on a connection then closed
      expect(held.received()).toMatch(/^HTTP\/1\.1 401 [^]*\r\nConnection: close\r\n/i);
      expect(p.lines().filter((l) => l.event === 'server.stopping').map((l) => l.pid).sort()).toEqual([p.child.pid, worker.pid].sort());
      expect(p.lines().some((l) => l.event === 'server.stop_forced' || l.event === 'worker.exit')).toBe(false);
      expect(p.stderr()).toBe('');
    } finally {
      held?.destroy();
      try {
        process.kill(-p.child.pid!, 'SIGKILL');
      } catch {
        // the group is gone
      }
    }
  }, 30_000);

  it('WORKERS=1, a second signal to the primary while a request holds the worker\'s stop: both exit at once, the primary with 130', async () => {
    const p = start({ DATA_DIR: tempDir(), WORKERS: '1' }, true);
    let held: ReturnType<typeof slowBody> | undefined;
    try {
      const worker = await p.line(listening);
      held = slowBody(String(worker.url));
      await sleep(100);
      p.child.kill('SIGTERM');
      await p.line((l) => l.event === 'server.stopping' && l.pid === worker.pid);
      await sleep(1_100);
      const sent = Date.now();
      p.child.kill('SIGINT');
      const exit = await p.exited;
      expect(exit).toMatchObject({ code: 130, signal: null });
      expect(exit.at - sent).toBeLessThan(1_000);
      expect(p.lines().find((l) => l.event === 'server.stop_forced' && l.pid === p.child.pid)).toMatchObject({ signal: 'SIGINT' });
      // the worker was stopped too, not left behind
      for (let i = 0; i < 50 && alive(Number(worker.pid)); i++) await sleep(20);
      expect({ alive: alive(Number(worker.pid)), lines: p.lines() }).toMatchObject({ alive: false });
    } finally {
      held?.destroy();
      try {
        process.kill(-p.child.pid!, 'SIGKILL');
      } catch {
        // the group is gone
      }
    }
  }, 30_000);
});

/** Whether `pid` runs: not gone, nor a zombie (an orphan that exited, not reaped yet by whoever adopted it). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return existsSync(`/proc/${pid}`);
  }
}
