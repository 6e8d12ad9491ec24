/**
 * What requests cost while the Redis behind an issuer stalls (connected, not
 * answering), through a TCP proxy this script owns (the Redis itself is never
 * touched); for planning and for the figures of a fix, not a test, not part
 * of `npm run bench`. One ioredis client with default options, as users make
 * one, holds the brute-force counters, the DPoP replay store and the
 * revocation push. Each scenario starts a fresh issuer, a fresh client and a
 * fresh stall; its first request is the one that meets the stall.
 *
 *   node -r ts-node/register/transpile-only bench/micro/redis-stall.ts
 *
 * Prints, per scenario, each request's status and milliseconds, then the
 * ioredis client's queues (commands sent and not answered, commands not yet
 * sent) and the heap after a bounded load; REDIS_URL picks the Redis
 * (default redis://127.0.0.1:6379).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express from 'express';
import Redis from 'ioredis';
import { createIssuer, requireBearer, type Issuer } from '../../lib';
import { DpopKey } from '../../lib/jwt/dpop-proof';
import { generateKeyPairSync } from 'node:crypto';
import { startFaultProxy, type FaultProxy } from '../../__tests__/helpers/fault-proxy';

const REDIS = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const LOAD = Number(process.env.LOAD ?? 400);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 20);

interface Rig {
  proxy: FaultProxy;
  redis: Redis;
  issuer: Issuer;
  base: string;
  server: Server;
  dataDir: string;
  client: { clientId: string; clientSecret: string };
  key: DpopKey;
  /** A DPoP-bound token got before the stall. */
  at: string;
}

async function rig(): Promise<Rig> {
  const proxy = await startFaultProxy(Number(REDIS.port || 6379), REDIS.hostname);
  const redis = new Redis({ host: '127.0.0.1', port: proxy.port });
  const prefix = `ecc:bench:stall:${process.pid}:${Date.now()}`;
  const dataDir = mkdtempSync(join(tmpdir(), 'ecc-bench-stall-'));
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const issuer = createIssuer({
    issuer: base,
    audience: `${base}/api`,
    dataDir,
    logger: false,
    bruteForce: { redis, keyPrefix: `${prefix}:bf` },
    dpop: { redis, keyPrefix: `${prefix}:dpop:` },
    revocationPush: { redis, channel: `${prefix}:revocations` },
  });
  await issuer.ready();
  const standalone = requireBearer({ issuer: base, audience: `${base}/api`, keys: await issuer.keys.jwks(), publicUrl: base, dpopProofs: { redis, keyPrefix: `${prefix}:rs:` }, logger: false });
  const app = express();
  app.use(issuer.router());
  app.get('/api/whoami', issuer.requireBearer(), (_req, res) => res.json({ ok: true }));
  app.get('/api/standalone', standalone, (_req, res) => res.json({ ok: true }));
  server.on('request', app);
  await redis.ping();
  const client = await issuer.clients.create({ name: 'bench', scopes: 'orders:read' });
  const key = new DpopKey({ privateKey: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey, alg: 'ES256' });
  const rig: Omit<Rig, 'at'> = { proxy, redis, issuer, base, server, dataDir, client, key };
  const first = await token(rig as Rig, 'dpop');
  if (first.status !== 200) throw new Error(`no token before the stall: ${first.status}`);
  return { ...rig, at: first.body.access_token as string };
}

async function close(r: Rig): Promise<void> {
  r.proxy.restore();
  await r.issuer.close();
  r.server.closeAllConnections();
  await new Promise((resolve) => r.server.close(resolve));
  r.redis.disconnect();
  await r.proxy.close();
  rmSync(r.dataDir, { recursive: true, force: true });
}

type Kind = 'plain' | 'dpop' | 'wrong' | 'api' | 'standalone';

async function token(r: Rig, kind: 'plain' | 'dpop' | 'wrong'): Promise<{ status: number; body: Record<string, unknown>; retryAfter: string | null }> {
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded' };
  if (kind === 'dpop') headers.dpop = r.key.proof({ htm: 'POST', htu: `${r.base}/oauth/token` });
  const body = new URLSearchParams({ grant_type: 'client_credentials', client_id: r.client.clientId, client_secret: kind === 'wrong' ? 'wrong' : r.client.clientSecret });
  const res = await fetch(`${r.base}/oauth/token`, { method: 'POST', headers, body });
  return { status: res.status, body: (await res.json()) as Record<string, unknown>, retryAfter: res.headers.get('retry-after') };
}

async function call(r: Rig, kind: Kind): Promise<{ status: number; retryAfter: string | null }> {
  if (kind === 'plain' || kind === 'dpop' || kind === 'wrong') return token(r, kind);
  const path = kind === 'api' ? '/api/whoami' : '/api/standalone';
  const res = await fetch(`${r.base}${path}`, { headers: { authorization: `DPoP ${r.at}`, dpop: r.key.proof({ htm: 'GET', htu: `${r.base}${path}`, accessToken: r.at }) } });
  await res.arrayBuffer();
  return { status: res.status, retryAfter: res.headers.get('retry-after') };
}

async function timed(r: Rig, kind: Kind): Promise<string> {
  const started = performance.now();
  const res = await call(r, kind);
  return `${res.status}${res.retryAfter ? `(RA ${res.retryAfter})` : ''} ${Math.round(performance.now() - started)} ms`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The first request meets the stall; then 5 in a row; then one every 500 ms for 7 s (past any 5 s pause). */
async function latency(first: Kind, then: Kind[]): Promise<void> {
  const r = await rig();
  r.proxy.blackHole();
  const lines: string[] = [`first ${first}: ${await timed(r, first)}`];
  for (const kind of then) {
    const row: string[] = [];
    for (let i = 0; i < 5; i++) row.push(await timed(r, kind));
    lines.push(`  then ${kind} x5: ${row.join(', ')}`);
  }
  const slow: string[] = [];
  const until = Date.now() + 7000;
  let n = 0;
  while (Date.now() < until) {
    for (const kind of then) {
      const started = performance.now();
      const res = await call(r, kind);
      const ms = Math.round(performance.now() - started);
      n++;
      if (ms > 200) slow.push(`${kind} ${res.status} ${ms} ms at +${Math.round(7000 - (until - Date.now()))} ms`);
    }
    await sleep(500);
  }
  lines.push(`  over 7 s, ${n} more requests (${then.join(', ')}); over 200 ms: ${slow.length ? slow.join('; ') : 'none'}`);
  console.log(lines.join('\n'));
  await close(r);
}

/** LOAD requests of `kind`, CONCURRENCY at a time, during a stall: the ioredis client's queues and the heap after. */
async function queues(kind: Kind): Promise<void> {
  const r = await rig();
  r.proxy.blackHole();
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const started = Date.now();
  let next = 0;
  const statuses = new Map<number, number>();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < LOAD) {
        next++;
        const res = await call(r, kind);
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      }
    }),
  );
  const ms = Date.now() - started;
  const internal = r.redis as unknown as { commandQueue: { length: number }; offlineQueue: { length: number } };
  global.gc?.();
  const heapAfter = process.memoryUsage().heapUsed;
  console.log(
    `${LOAD} ${kind} requests, ${CONCURRENCY} at a time, in ${ms} ms: ${[...statuses].map(([s, c]) => `${c}x${s}`).join(' ')}; ` +
      `ioredis commandQueue ${internal.commandQueue.length}, offlineQueue ${internal.offlineQueue.length}; heap ${((heapAfter - heapBefore) / 1024).toFixed(0)} KiB more`,
  );
  await close(r);
}

async function main(): Promise<void> {
  console.log(`node ${process.version}, ioredis ${require('ioredis/package.json').version}, Redis at ${REDIS.host} behind a black-holing proxy\n`);
  console.log('-- latency (status, Retry-After, ms)');
  await latency('dpop', ['dpop']);
  await latency('plain', ['plain', 'dpop']);
  await latency('api', ['api']);
  await latency('standalone', ['standalone']);
  await latency('wrong', ['wrong']);
  console.log('\n-- queues after a bounded load');
  for (const kind of ['dpop', 'plain', 'wrong', 'api', 'standalone'] as Kind[]) await queues(kind);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
