/**
 * SIGTERM while the compiled example is still starting (an orchestrator
 * stopping a container that has just started), as a real process: one
 * `server.stopping` line, no further step (no demo client, no listening),
 * what was opened closed, exit 0; for one process, for the cluster primary
 * preparing the store, and for a worker starting.
 *
 * The moment is made certain from outside the process: its PostgreSQL
 * connection goes through a gate here, which holds the connection (the
 * process waits for the database) until the test has sent the signal and
 * seen the process's answer, then lets it through to the database.
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import { Pool } from 'pg';
import { tempDir } from '../helpers/app';
import { compiledExamples } from '../helpers/compiled-example';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';

const examples = compiledExamples();
const SERVER_JS = examples.script('server');

type Line = Record<string, unknown>;

/** The compiled server as a process: its JSON log lines as they come, and how it ended. */
function start(env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [SERVER_JS], {
    env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal });
    }),
  );
  const lines = (): Line[] => stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
  return {
    child,
    exited,
    lines,
    stdout: () => stdout,
    stderr: () => stderr,
    /** The first log line that matches, once written; rejects if the process exits first. */
    async line(match: (l: Line) => boolean): Promise<Line> {
      for (;;) {
        const found = lines().find(match);
        if (found) return found;
        if (child.exitCode !== null || child.signalCode !== null) {
          throw new Error(`exited (code ${child.exitCode}, signal ${child.signalCode}) without that line; stdout:\n${stdout}\nstderr:\n${stderr}`);
        }
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

/**
 * A TCP gate in front of PostgreSQL: connections pass, except those `hold`
 * picks when they arrive, which wait (their bytes unread) until `release()`.
 * `held` resolves with the first one held.
 */
async function startGate(target: { host: string; port: number }, hold: (arrived: number, open: number) => boolean) {
  const held: net.Socket[] = [];
  const clients = new Set<net.Socket>(); // the connections open now
  const sockets = new Set<net.Socket>(); // every socket, to destroy at the end
  let arrived = 0;
  let heldOne!: () => void;
  const firstHeld = new Promise<void>((resolve) => (heldOne = resolve));
  const pass = (client: net.Socket): void => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  };
  const server = net.createServer((client) => {
    arrived += 1;
    const open = clients.size;
    clients.add(client);
    sockets.add(client);
    client.once('close', () => clients.delete(client));
    if (hold(arrived, open)) {
      client.pause();
      held.push(client);
      heldOne();
    } else {
      pass(client);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    held: firstHeld,
    release: () => held.splice(0).forEach(pass),
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const stopping = (l: Line): boolean => l.event === 'server.stopping';

describe('SIGTERM during start-up (compiled, as a real process)', () => {
  beforeAll(() => examples.build(), 130_000);

  it('after listening: the same line (starting: false), then the graceful close and exit 0', async () => {
    const p = start({ DATA_DIR: tempDir(), DEMO_CLIENT: '0' });
    await p.line((l) => l.event === 'server.listening');
    p.child.kill('SIGTERM');
    expect(await p.exited).toEqual({ code: 0, signal: null });
    expect(p.lines().find(stopping)).toMatchObject({ level: 30, signal: 'SIGTERM', starting: false });
    expect(p.stderr()).toBe('');
  }, 30_000);

  it('WORKERS=1, no worker running (one waiting out its restart pause): the primary exits 0 at once, not after the pause', async () => {
    // the port taken: each worker fails at start, and the pause before the next doubles (1 s, 2 s, 4 s)
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    try {
      const p = start({ DATA_DIR: tempDir(), DEMO_CLIENT: '0', WORKERS: '1', PORT: String((blocker.address() as net.AddressInfo).port) });
      await p.line((l) => l.event === 'worker.exit' && Number(l.restart_in_ms) >= 4000);
      const signalled = Date.now();
      p.child.kill('SIGTERM');
      expect(await p.exited).toEqual({ code: 0, signal: null });
      expect(Date.now() - signalled).toBeLessThan(2000);
      expect(p.lines().find(stopping)).toMatchObject({ signal: 'SIGTERM', starting: false, pid: p.child.pid });
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }
  }, 30_000);

  describeIfPostgres('while waiting for PostgreSQL', () => {
    const url = new URL(postgresUrl());
    const target = { host: url.hostname, port: Number(url.port || 5432) };
    const schemas: string[] = [];
    const cleanups: (() => Promise<void>)[] = [];
    let pool: Pool;

    beforeAll(() => {
      pool = new Pool({ connectionString: postgresUrl(), max: 1 });
    });
    afterEach(async () => {
      for (const cleanup of cleanups.splice(0)) await cleanup();
      for (const schema of schemas.splice(0)) await dropSchema(pool, schema);
    });
    afterAll(() => pool.end());

    /** The server started on PostgreSQL through a gate that holds the connections `hold` picks. */
    async function startGated(env: NodeJS.ProcessEnv, hold: (arrived: number, open: number) => boolean) {
      const gate = await startGate(target, hold);
      const gated = new URL(postgresUrl());
      gated.hostname = '127.0.0.1';
      gated.port = String(gate.port);
      const schema = uniqueSchemaName();
      schemas.push(schema);
      const p = start({ DATABASE_URL: gated.toString(), DATABASE_SCHEMA: schema, ...env });
      cleanups.push(async () => {
        p.child.kill('SIGKILL');
        await p.exited;
        await gate.close();
      });
      return { p, gate, schema };
    }

    async function schemaExists(schema: string): Promise<boolean> {
      return (await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount === 1;
    }

    it('one process, opening the store: it lets the step in progress end, then stops without a demo client or listening, and exits 0', async () => {
      const { p, gate, schema } = await startGated({}, () => true);
      await gate.held;
      p.child.kill('SIGTERM');
      expect(await p.line(stopping)).toMatchObject({ level: 30, signal: 'SIGTERM', starting: true, pid: p.child.pid });
      gate.release();
      expect(await p.exited).toEqual({ code: 0, signal: null });
      expect(p.lines().some((l) => l.event === 'server.listening')).toBe(false);
      expect(p.stdout()).not.toMatch(/demo client|client_secret/);
      expect(p.stderr()).toBe('');
      // the store's opening, under way at the signal, was completed (its migration committed), not cut
      expect(await schemaExists(schema)).toBe(true);
    }, 30_000);

    it('WORKERS=1, the primary preparing the store: the same, and no worker is started', async () => {
      const { p, gate } = await startGated({ WORKERS: '1' }, () => true);
      await gate.held;
      p.child.kill('SIGTERM');
      expect(await p.line(stopping)).toMatchObject({ signal: 'SIGTERM', starting: true, pid: p.child.pid });
      gate.release();
      expect(await p.exited).toEqual({ code: 0, signal: null });
      // one process only: no line from another pid
      expect(new Set(p.lines().map((l) => l.pid))).toEqual(new Set([p.child.pid]));
      expect(p.lines().some((l) => l.event === 'server.listening')).toBe(false);
      expect(p.stdout()).not.toMatch(/demo client|client_secret/);
      expect(p.stderr()).toBe('');
    }, 30_000);

    it('WORKERS=1, the worker starting: SIGTERM to the primary stops the worker in order too (its own line), and both exit', async () => {
      // the primary prepares the store and closes it before it forks: the first connection made after all of
      // the primary's were closed is the worker's
      const { p, gate } = await startGated({ WORKERS: '1', DEMO_CLIENT: '0' }, (arrived, open) => arrived > 1 && open === 0);
      await gate.held;
      p.child.kill('SIGTERM');
      expect(await p.line((l) => stopping(l) && l.pid === p.child.pid)).toMatchObject({ signal: 'SIGTERM' });
      expect(await p.line((l) => stopping(l) && l.pid !== p.child.pid)).toMatchObject({ signal: 'SIGTERM', starting: true });
      gate.release();
      expect(await p.exited).toEqual({ code: 0, signal: null });
      expect(p.lines().some((l) => l.event === 'server.listening' || l.event === 'worker.exit' || l.event === 'worker.start_failed')).toBe(false);
      expect(p.stderr()).toBe('');
    }, 30_000);
  });
});
