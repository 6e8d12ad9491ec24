/**
 * METRICS=1 with WORKERS=2 (examples/cluster-metrics.ts), the compiled
 * example as `npm start` runs it: GET /metrics answers with the sum over the
 * workers, whichever worker takes the connection. Each request here is on a
 * connection of its own, so that the cluster's round robin spreads them over
 * both workers (the log says which worker refused which request).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import { rmSync } from 'node:fs';
import { tempDir } from '../helpers/app';
import { ROOT, compiledExamples } from '../helpers/compiled-example';
import { RETRY_AFTER_S, REUSE_MS, SCRAPE_TIMEOUT_MS } from '../../examples/cluster-metrics';

const examples = compiledExamples();
const UNKNOWN_CLIENT = 'ecc_token_requests_total{outcome="invalid_client",reason="unknown_client"}';
const N = 10;

type Line = Record<string, unknown>;

interface Group {
  child: ChildProcess;
  port: number;
  lines: () => Line[];
  /** The first log line that matches, once it is there. */
  line: (match: (l: Line) => boolean, timeoutMs?: number) => Promise<Line>;
  exited: Promise<number | null>;
}

/** A port from 42000-42999 nothing listens on. */
async function freePort(): Promise<number> {
  for (;;) {
    const port = 42000 + Math.floor(Math.random() * 1000);
    const ok = await new Promise<boolean>((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (ok) return port;
  }
}

async function startGroup(dataDir: string, extra: NodeJS.ProcessEnv = {}): Promise<Group> {
  const port = await freePort();
  const child = spawn(process.execPath, [examples.script('server')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      PORT: String(port),
      ISSUER: `http://localhost:${port}`,
      DATA_DIR: dataDir,
      DEMO_CLIENT: '0',
      WORKERS: '2',
      METRICS: '1',
      // every refused authentication logged (the first of a minute only, at info), so that the log says which worker refused it
      LOG_LEVEL: 'debug',
      ...extra,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const lines = (): Line[] => out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
  const line = async (match: (l: Line) => boolean, timeoutMs = 20_000): Promise<Line> => {
    for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
      const found = lines().find(match);
      if (found) return found;
    }
    throw new Error(`no such log line in:\n${out}\n${err}`);
  };
  return { child, port, lines, line, exited };
}

/** One request, on a connection of its own unless `agent` says which. */
function send(port: number, method: string, path: string, body?: string, agent: Agent | false = false): Promise<{ status: number; text: string; ms: number; retryAfter?: string }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, method, path, agent, headers: body ? { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) } : {} },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, text, ms: Date.now() - started, retryAfter: res.headers['retry-after'] }));
      },
    );
    req.setTimeout(15_000, () => req.destroy(new Error(`${method} ${path}: no answer in 15 s`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** Each sample line of a scrape: `name{labels}` → value. */
function samples(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const l of text.split('\n')) {
    const m = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(l);
    if (m) values.set(m[1], Number(m[2]));
  }
  return values;
}

/** The samples of counters and of the histogram, which must never go down from one scrape to the next. */
const monotonic = (name: string): boolean => /_total(\{|$)|_bucket\{|_count$|_sum$/.test(name);

/** The counter and histogram samples of `before` that are lower (or absent) in `after`. */
function decreases(before: Map<string, number>, after: Map<string, number>): string[] {
  return [...before].filter(([name, value]) => monotonic(name) && !((after.get(name) ?? -Infinity) >= value)).map(([name, value]) => `${name}: ${value} → ${after.get(name)}`);
}

/** N refused token requests (unknown clients), each on a new connection; resolves with how many each worker (pid) refused. */
async function refuseUnknownClients(g: Group): Promise<Map<number, number>> {
  for (let i = 0; i < N; i++) {
    const res = await send(g.port, 'POST', '/oauth/token', `grant_type=client_credentials&client_id=nobody-${i}&client_secret=x`);
    expect(res.status).toBe(401);
  }
  const failed = (): Line[] => g.lines().filter((l) => l.event === 'client.auth_failed' && l.reason === 'unknown_client' && l.summary === undefined);
  await g.line(() => failed().length >= N);
  const byPid = new Map<number, number>();
  for (const l of failed()) byPid.set(l.pid as number, (byPid.get(l.pid as number) ?? 0) + 1);
  return byPid;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One keep-alive connection to each worker: an agent of one socket each, and the worker (pid) that took it, from
 * the log line of a token request without a secret sent on it (reason no_credentials, not unknown_client).
 */
async function agentPerWorker(g: Group, workers: number[]): Promise<Map<number, Agent>> {
  const byPid = new Map<number, Agent>();
  for (let i = 0; byPid.size < workers.length && i < 20; i++) {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const res = await send(g.port, 'POST', '/oauth/token', `grant_type=client_credentials&client_id=pin-${i}`, agent);
    expect(res.status).toBe(401);
    const pid = (await g.line((l) => l.event === 'client.auth_failed' && l.client_id === `pin-${i}`)).pid as number;
    if (byPid.has(pid)) agent.destroy();
    else byPid.set(pid, agent);
  }
  expect([...byPid.keys()].sort()).toEqual([...workers].sort());
  return byPid;
}

describe('examples/cluster-metrics.ts (WORKERS=2 METRICS=1)', () => {
  const dirs: string[] = [];
  const groups: Group[] = [];
  const agentsToClose: Agent[] = [];

  beforeAll(() => examples.build(), 130_000);

  afterEach(async () => {
    for (const agent of agentsToClose.splice(0)) agent.destroy();
    for (const g of groups.splice(0)) {
      if (g.child.exitCode === null && g.child.signalCode === null) {
        g.child.kill('SIGTERM');
        const timer = setTimeout(() => g.child.kill('SIGKILL'), 5000);
        await g.exited;
        clearTimeout(timer);
      }
    }
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  async function started(extra: NodeJS.ProcessEnv = {}): Promise<{ g: Group; workers: number[] }> {
    dirs.push(tempDir());
    const g = await startGroup(dirs[dirs.length - 1], extra);
    groups.push(g);
    await g.line(() => new Set(g.lines().filter((l) => l.event === 'server.listening').map((l) => l.pid)).size === 2);
    const workers = [...new Set(g.lines().filter((l) => l.event === 'server.listening').map((l) => l.pid as number))];
    return { g, workers };
  }

  it('every scrape, whichever worker takes it, reads the N refused requests of both workers; no counter goes down; ecc_store_up reads 1', async () => {
    const { g, workers } = await started();
    const byPid = await refuseUnknownClients(g);
    // both workers refused some (the finding: each answered /metrics with its own share)
    expect([...byPid.keys()].sort()).toEqual([...workers].sort());
    expect([...byPid.values()].reduce((a, b) => a + b, 0)).toBe(N);

    let previous = new Map<string, number>();
    for (let i = 0; i < 6; i++) {
      const res = await send(g.port, 'GET', '/metrics');
      expect(res.status).toBe(200);
      const now = samples(res.text);
      expect({ scrape: i, value: now.get(UNKNOWN_CLIENT) }).toEqual({ scrape: i, value: N });
      expect(now.get('ecc_token_request_duration_seconds_count')).toBe(N);
      // a gauge is not summed: 1, not 2
      expect(now.get('ecc_store_up')).toBe(1);
      const ages = [...now.keys()].filter((k) => k.startsWith('ecc_signing_key_age_seconds'));
      expect(ages).toHaveLength(1);
      expect(now.get(ages[0])).toBeLessThan(60);
      expect(decreases(previous, now)).toEqual([]);
      previous = now;
    }
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
  }, 60_000);

  it('METRICS_PORT: every worker serves the sum on that port (the cluster shares it), none on the API port', async () => {
    const metricsPort = await freePort();
    const { g, workers } = await started({ METRICS_PORT: String(metricsPort) });
    for (const pid of workers) {
      expect(await g.line((l) => l.event === 'server.listening' && l.pid === pid)).toMatchObject({ metrics_url: `http://127.0.0.1:${metricsPort}/metrics` });
    }
    const byPid = await refuseUnknownClients(g);
    expect([...byPid.keys()].sort()).toEqual([...workers].sort());
    for (let i = 0; i < 4; i++) {
      const res = await send(metricsPort, 'GET', '/metrics');
      expect(res.status).toBe(200);
      expect({ scrape: i, value: samples(res.text).get(UNKNOWN_CLIENT) }).toEqual({ scrape: i, value: N });
      const onApi = await send(g.port, 'GET', '/metrics');
      expect({ status: onApi.status, text: onApi.text }).toEqual({ status: 404, text: '{"error":"not_found"}' });
    }
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
    await expect(send(metricsPort, 'GET', '/metrics')).rejects.toThrow(/ECONNREFUSED/);
  }, 60_000);

  it('a worker that does not answer: the scrape answers within 5 s with its counters as last seen, the next ones at once; once it dies, its counts stay in the sums', async () => {
    const { g, workers } = await started();
    const byPid = await refuseUnknownClients(g);
    expect(byPid.size).toBe(2);
    const [stuck, live] = workers;
    const agents = await agentPerWorker(g, workers);
    agents.forEach((agent) => agentsToClose.push(agent));
    // both workers answer this one: the primary now knows each one's counts
    const before = samples((await send(g.port, 'GET', '/metrics')).text);
    expect(before.get(UNKNOWN_CLIENT)).toBe(N);
    // past the time its sum is reused for
    await sleep(REUSE_MS + 100);

    process.kill(stuck, 'SIGSTOP');
    let stopped = true;
    try {
      // a scrape on the stopped worker's connection, answered once it runs again
      const held = send(g.port, 'GET', '/metrics', undefined, agents.get(stuck));
      const first = await send(g.port, 'GET', '/metrics', undefined, agents.get(live));
      expect(first.status).toBe(200);
      expect(first.ms).toBeLessThan(5_000);
      const now = samples(first.text);
      expect(now.get(UNKNOWN_CLIENT)).toBe(N);
      // the N refused requests and the requests that found each worker's connection
      expect(now.get('ecc_token_request_duration_seconds_count')).toBe(before.get('ecc_token_request_duration_seconds_count'));
      expect(now.get('ecc_store_up')).toBe(1);
      expect(await g.line((l) => l.event === 'metrics.worker_unanswered')).toMatchObject({ level: 40, pid: stuck });
      // the next scrape, once the sum is not reused any more, does not wait for the worker that still owes its answer
      // (before: 3 s each, with one more collection queued in the stopped worker each time)
      await sleep(REUSE_MS + 100);
      const next = await send(g.port, 'GET', '/metrics', undefined, agents.get(live));
      expect(next.status).toBe(200);
      expect(next.ms).toBeLessThan(1_000);
      expect(samples(next.text).get(UNKNOWN_CLIENT)).toBe(N);
      process.kill(stuck, 'SIGCONT');
      stopped = false;
      const late = await held;
      expect(late.status).toBe(200);
      expect(samples(late.text).get(UNKNOWN_CLIENT)).toBe(N);
      await g.line((l) => l.event === 'metrics.worker_answered' && l.pid === stuck);
    } finally {
      if (stopped) process.kill(stuck, 'SIGCONT');
    }
    for (const agent of agents.values()) agent.destroy();

    process.kill(stuck, 'SIGKILL');
    await g.line((l) => l.event === 'worker.exit' && l.pid === stuck);
    // before and after its replacement starts: what the dead worker counted stays in
    let previous = samples((await send(g.port, 'GET', '/metrics')).text);
    expect(previous.get(UNKNOWN_CLIENT)).toBe(N);
    await g.line((l) => l.event === 'server.listening' && !workers.includes(l.pid as number));
    for (let i = 0; i < 3; i++) {
      const res = await send(g.port, 'GET', '/metrics');
      expect(res.status).toBe(200);
      const now = samples(res.text);
      expect(now.get(UNKNOWN_CLIENT)).toBe(N);
      expect(now.get('ecc_store_up')).toBe(1);
      expect(decreases(previous, now)).toEqual([]);
      previous = now;
    }
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
  }, 60_000);

  it('a worker stopped gracefully (SIGTERM to it alone): what it counted since the last scrape stays in the sums, and the group goes on with its replacement', async () => {
    const { g, workers } = await started();
    // a collection before the counts: the primary has seen each worker with none (and reuses that sum for REUSE_MS)
    expect((await send(g.port, 'GET', '/metrics')).status).toBe(200);
    await sleep(REUSE_MS + 100);
    const byPid = await refuseUnknownClients(g);
    expect([...byPid.keys()].sort()).toEqual([...workers].sort());
    const [gone, stays] = workers;

    process.kill(gone, 'SIGTERM');
    expect(await g.line((l) => l.event === 'worker.exit' && l.pid === gone)).toMatchObject({ code: 0, signal: null });
    // the finding: N minus what `gone` refused (its counts since the last scrape were lost with it)
    const previous = samples((await send(g.port, 'GET', '/metrics')).text);
    expect({ unknown_client: previous.get(UNKNOWN_CLIENT), refused_by_gone: byPid.get(gone) }).toEqual({ unknown_client: N, refused_by_gone: byPid.get(gone) });
    expect(previous.get('ecc_token_request_duration_seconds_count')).toBe(N);
    expect(previous.get('ecc_store_up')).toBe(1);
    expect(g.lines().filter((l) => l.event === 'metrics.worker_unanswered')).toEqual([]);

    // its replacement listens, and the group counts on
    const replacement = (await g.line((l) => l.event === 'server.listening' && !workers.includes(l.pid as number))).pid as number;
    await sleep(REUSE_MS + 100);
    for (let i = 0; i < 4; i++) {
      const res = await send(g.port, 'POST', '/oauth/token', `grant_type=client_credentials&client_id=later-${i}&client_secret=x`);
      expect(res.status).toBe(401);
    }
    const later = (): Line[] => g.lines().filter((l) => l.event === 'client.auth_failed' && String(l.client_id).startsWith('later-'));
    await g.line(() => later().length === 4);
    expect(new Set(later().map((l) => l.pid))).toEqual(new Set([stays, replacement]));
    const now = samples((await send(g.port, 'GET', '/metrics')).text);
    expect(now.get(UNKNOWN_CLIENT)).toBe(N + 4);
    expect(decreases(previous, now)).toEqual([]);
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
  }, 60_000);

  it('the primary does not answer: each scrape gets 503 with Retry-After after 5 s, and each worker says so once, then that it answers again', async () => {
    const { g, workers } = await started();
    const agents = await agentPerWorker(g, workers);
    agents.forEach((agent) => agentsToClose.push(agent));
    expect((await send(g.port, 'GET', '/metrics', undefined, agents.get(workers[0]))).status).toBe(200);

    // stopped, the primary answers nothing (and hands no new connection over): a scrape on each worker's connection
    const primary = g.child.pid!;
    process.kill(primary, 'SIGSTOP');
    let stopped = true;
    try {
      const refused = await Promise.all(workers.map((pid) => send(g.port, 'GET', '/metrics', undefined, agents.get(pid))));
      for (const res of refused) {
        expect(res).toMatchObject({ status: 503, retryAfter: String(RETRY_AFTER_S) });
        expect(res.ms).toBeGreaterThanOrEqual(SCRAPE_TIMEOUT_MS - 100);
      }
      for (const pid of workers) {
        expect(await g.line((l) => l.event === 'metrics.primary_unanswered' && l.pid === pid)).toMatchObject({ level: 40, reason: `the primary did not answer within ${SCRAPE_TIMEOUT_MS} ms` });
      }
      process.kill(primary, 'SIGCONT');
      stopped = false;
    } finally {
      if (stopped) process.kill(primary, 'SIGCONT');
    }
    for (const pid of workers) {
      const res = await send(g.port, 'GET', '/metrics', undefined, agents.get(pid));
      expect(res.status).toBe(200);
      expect(res.retryAfter).toBeUndefined();
      expect(await g.line((l) => l.event === 'metrics.primary_answered' && l.pid === pid)).toMatchObject({ level: 30, failures: 1 });
    }
    expect(g.lines().filter((l) => l.event === 'metrics.primary_unanswered')).toHaveLength(2);
    g.child.kill('SIGTERM');
    expect(await g.exited).toBe(0);
  }, 60_000);
});
