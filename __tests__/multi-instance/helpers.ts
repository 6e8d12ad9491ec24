/**
 * Real processes for the multi-instance tests: the example server and the
 * DB-less resource server started with ts-node, free loopback ports, HTTP
 * helpers with bounded waits, the CLI run in-process on the same database,
 * and the bookkeeping that kills every process and gives back the failed
 * authentications these tests count in Redis.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { createServer } from 'node:net';
import path from 'node:path';
import Redis from 'ioredis';
import { main } from '../../lib/cli/main';
import { describeIfPostgres, postgresReachableSync } from '../helpers/postgres';
import { describeIfRedis } from '../helpers/redis';

export const ROOT = path.resolve(__dirname, '../..');
export const HOST = '127.0.0.1';

/**
 * `describe` when PostgreSQL and Redis are both reachable. Otherwise one line
 * and a skip, or a failing test when REQUIRE_SERVICES=1: the behaviour of the
 * two helpers, PostgreSQL checked first so that only one line is written.
 */
export function describeIfPostgresAndRedis(title: string, fn: () => void): void {
  if (!postgresReachableSync()) describeIfPostgres(title, fn);
  else describeIfRedis(title, fn);
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A port free on 127.0.0.1 right now: listen on port 0, read it, close. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, HOST, () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

// ---------- processes ----------

export interface Proc {
  name: string;
  child: ChildProcess;
  url: string;
  port: number;
  stdout(): string;
  stderr(): string;
  /** Resolves when the process has exited (at once if it has). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  exitInfo(): { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** Milliseconds from spawn to the first 200 from /health. */
  startupMs: number;
}

const live = new Set<ChildProcess>();

// Last resort if jest's worker exits without running afterAll: never leave a server behind.
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Spawns `node -r ts-node/register/transpile-only <script>` in the package folder, with only `env` (and PATH). */
export function spawnScript(name: string, script: string, port: number, env: Record<string, string>): Omit<Proc, 'startupMs'> {
  const child = spawn(process.execPath, ['-r', 'ts-node/register/transpile-only', script], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', PORT: String(port), HOST, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  let info: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      info = { code, signal };
      live.delete(child);
      resolve(info);
    });
    child.once('error', () => {
      info ??= { code: null, signal: null };
      live.delete(child);
      resolve(info);
    });
  });
  return {
    name,
    child,
    port,
    url: `http://${HOST}:${port}`,
    stdout: () => out,
    stderr: () => err,
    exited,
    exitInfo: () => info,
  };
}

/** Polls GET /health every 100 ms until 200, for at most `timeoutMs`; fails at once if the process exits. */
export async function waitHealthy(proc: Omit<Proc, 'startupMs'>, startedAt: number, timeoutMs = 20_000): Promise<Proc> {
  const deadline = startedAt + timeoutMs;
  while (Date.now() < deadline) {
    const info = proc.exitInfo();
    if (info) {
      throw new Error(`${proc.name} exited (code ${info.code}, signal ${info.signal}) before it was ready\nstdout: ${proc.stdout()}\nstderr: ${proc.stderr()}`);
    }
    try {
      const res = await fetch(`${proc.url}/health`, { signal: AbortSignal.timeout(1000) });
      if (res.status === 200) return { ...proc, startupMs: Date.now() - startedAt };
      await res.arrayBuffer();
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`${proc.name} not healthy within ${timeoutMs} ms\nstdout: ${proc.stdout()}\nstderr: ${proc.stderr()}`);
}

export async function startProcess(name: string, script: string, port: number, env: Record<string, string>, timeoutMs = 20_000): Promise<Proc> {
  const startedAt = Date.now();
  const proc = spawnScript(name, script, port, env);
  try {
    return await waitHealthy(proc, startedAt, timeoutMs);
  } catch (err) {
    await stopProcess(proc);
    throw err;
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone. Safe on an exited process. */
export async function stopProcess(proc: Pick<Proc, 'child' | 'exited' | 'exitInfo'>, graceMs = 3000): Promise<void> {
  if (proc.exitInfo() || proc.child.exitCode !== null || proc.child.signalCode !== null) return;
  proc.child.kill('SIGTERM');
  const timer = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), graceMs).unref());
  if ((await Promise.race([proc.exited, timer])) === 'timeout') {
    proc.child.kill('SIGKILL');
    await proc.exited;
  }
}

/** Kills every process these helpers started that is still running. */
export async function stopAll(): Promise<void> {
  await Promise.all(
    [...live].map(async (child) => {
      const exited = new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) resolve();
        else child.once('exit', () => resolve());
      });
      child.kill('SIGTERM');
      const timeout = await Promise.race([exited.then(() => false), sleep(3000).then(() => true)]);
      if (timeout) {
        child.kill('SIGKILL');
        await exited;
      }
      live.delete(child);
    }),
  );
}

/** The demo client an instance printed on its first start on an empty store, or undefined. */
export function demoClient(stdout: string): { id: string; secret: string } | undefined {
  const id = /client_id:\s+(\S+)/.exec(stdout)?.[1];
  const secret = /client_secret:\s+(\S+)/.exec(stdout)?.[1];
  return id && secret ? { id, secret } : undefined;
}

// ---------- HTTP ----------

export interface HttpResult {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
}

/** Failed client authentications (401 from the token endpoint) caused by these tests, from 127.0.0.1. */
let invalidClientResponses = 0;
export const countedFailures = (): number => invalidClientResponses;

async function asJson(res: Response): Promise<HttpResult> {
  const text = await res.text();
  let body: Record<string, unknown>;
  try {
    body = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
  } catch {
    body = { raw: text };
  }
  return { status: res.status, headers: res.headers, body };
}

/** POST /oauth/token with HTTP Basic client authentication. */
export async function tokenRequest(baseUrl: string, clientId: string, clientSecret: string, scope?: string): Promise<HttpResult> {
  const form = new URLSearchParams({ grant_type: 'client_credentials' });
  if (scope) form.set('scope', scope);
  const basic = Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`).toString('base64');
  const res = await asJson(
    await fetch(`${baseUrl}/oauth/token`, {
      method: 'POST',
      headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded' },
      body: form.toString(),
      signal: AbortSignal.timeout(5000),
    }),
  );
  if (res.status === 401) invalidClientResponses++;
  return res;
}

/** A loopback address other than HOST, fresh for each run (all of 127.0.0.0/8 is local). */
export function otherLoopbackAddress(): string {
  const [x, y, z] = randomBytes(3);
  return `127.${1 + (x % 254)}.${y}.${1 + (z % 254)}`;
}

/**
 * POST /oauth/token with HTTP Basic client authentication from `localAddress`
 * (not HOST, so its failures are not counted for giving back).
 */
export function tokenRequestFrom(localAddress: string, baseUrl: string, clientId: string, clientSecret: string): Promise<HttpResult> {
  const body = new URLSearchParams({ grant_type: 'client_credentials' }).toString();
  const basic = Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`).toString('base64');
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${baseUrl}/oauth/token`,
      {
        method: 'POST',
        agent: false, // one connection, closed after the answer
        localAddress,
        timeout: 5000,
        headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          const headers = new Headers();
          for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers.set(name, value);
          resolve({ status: res.statusCode!, headers, body: JSON.parse(text) as Record<string, unknown> });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`token request from ${localAddress} timed out`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** The access token, or an error that says what the endpoint answered. */
export async function getToken(baseUrl: string, clientId: string, clientSecret: string): Promise<string> {
  const res = await tokenRequest(baseUrl, clientId, clientSecret);
  if (res.status !== 200 || typeof res.body.access_token !== 'string') {
    throw new Error(`token request to ${baseUrl} answered ${res.status} ${JSON.stringify(res.body)}`);
  }
  return res.body.access_token;
}

export async function getWithToken(url: string, token: string): Promise<HttpResult> {
  return asJson(await fetch(url, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(5000) }));
}

export async function getJson(url: string): Promise<HttpResult> {
  return asJson(await fetch(url, { signal: AbortSignal.timeout(5000) }));
}

export function jwtHeader(token: string): { alg?: string; kid?: string; typ?: string } {
  return JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString('utf8')) as { alg?: string; kid?: string; typ?: string };
}

export function jwtClaims(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8')) as Record<string, unknown>;
}

// ---------- CLI ----------

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the `client-credentials` CLI in-process with exactly `env`. */
export async function cli(args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { stdout: (s) => (stdout += s), stderr: (s) => (stderr += s), env });
  return { code, stdout, stderr };
}

/** Runs the CLI with `--json` among `args` and parses its stdout; throws with its stderr on a non-zero exit. */
export async function cliJson<T>(args: string[], env: NodeJS.ProcessEnv): Promise<T> {
  const res = await cli(args, env);
  if (res.code !== 0) throw new Error(`client-credentials ${args.join(' ')} exited ${res.code}: ${res.stderr}`);
  return JSON.parse(res.stdout) as T;
}

// ---------- Redis bookkeeping ----------

/**
 * The per-address counter of failed client authentications that the example
 * server keeps in Redis (rate-limiter-flexible, keyPrefix `ecc:authfail:addr`).
 * Every request of these tests comes from 127.0.0.1, and the counter outlives
 * the run for the 15-minute window: without giving our failures back, a few
 * runs in a row would reach the limit of 100 and get 429 for every client.
 */
export const ADDRESS_COUNTER_KEY = `ecc:authfail:addr:${HOST}`;

export async function addressFailures(redis: Redis): Promise<{ count: number; ttlMs: number }> {
  const [count, ttl] = await Promise.all([redis.get(ADDRESS_COUNTER_KEY), redis.pttl(ADDRESS_COUNTER_KEY)]);
  return { count: Number(count ?? 0), ttlMs: ttl };
}

/** Subtracts our own failures from the shared counter (never below zero; others' counts stay). */
export async function giveBackAddressFailures(redis: Redis, n: number): Promise<void> {
  if (n <= 0) return;
  await redis.eval(
    `local v = tonumber(redis.call('GET', KEYS[1]) or '0')
     local d = math.min(v, tonumber(ARGV[1]))
     if d > 0 then redis.call('DECRBY', KEYS[1], d) end
     return d`,
    1,
    ADDRESS_COUNTER_KEY,
    String(n),
  );
}
