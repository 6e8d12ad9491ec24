/**
 * Issue 7: failures from other addresses never stop the right secret. Real
 * sockets from many loopback addresses (every 127.0.0.0/8 address is local on
 * Linux), a real server on 127.0.0.1 and no `trust proxy`: `req.ip` is the
 * peer address. Default limits: 10 failures per (client_id, address) and 100
 * per address in 15 minutes, an alert at 20 failures per client.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Redis from 'ioredis';
import { createIssuer, openEmbeddedStore, type Issuer, type IssuerOptions, type Logger } from '../../lib';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { describeIfRedis, redisUrl } from '../helpers/redis';

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Record<string, unknown>;
}

interface Running {
  issuer: Issuer;
  url: string;
  alerts: Record<string, unknown>[];
  close(): Promise<void>;
}

/** An issuer behind `app.listen(0, '127.0.0.1')`, its `client.auth_failures_high` events collected. */
async function start(options: Partial<IssuerOptions>): Promise<Running> {
  const alerts: Record<string, unknown>[] = [];
  const noop = (): void => undefined;
  const logger: Logger = {
    info: noop,
    // warn: pino's default level (info) shows it
    warn: (obj) => void (obj.event === 'client.auth_failures_high' && alerts.push(obj)),
    error: noop,
  };
  const ownDir = options.dataDir === undefined && options.store === undefined ? tempDir() : undefined;
  const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir: ownDir, logger, ...options });
  await issuer.ready();
  const app = express();
  app.use(issuer.router());
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve, reject) => server.once('listening', resolve).once('error', reject));
  const { port } = server.address() as AddressInfo;
  return {
    issuer,
    url: `http://127.0.0.1:${port}`,
    alerts,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await issuer.close();
      if (ownDir) rmSync(ownDir, { recursive: true, force: true });
    },
  };
}

/** One keep-alive connection per source address. */
const agents = new Map<string, http.Agent>();
function agentFor(localAddress: string): http.Agent {
  let agent = agents.get(localAddress);
  if (!agent) {
    agent = new http.Agent({ keepAlive: true, maxSockets: 1, localAddress });
    agents.set(localAddress, agent);
  }
  return agent;
}

function tokenRequest(baseUrl: string, from: string, clientId: string, clientSecret: string): Promise<Reply> {
  const body = new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }).toString();
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${baseUrl}/oauth/token`,
      {
        method: 'POST',
        agent: agentFor(from),
        localAddress: from,
        timeout: 10_000,
        headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) as Record<string, unknown> }));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`token request from ${from} timed out`)));
    req.on('error', reject);
    req.end(body);
  });
}

function expect429(res: Reply): void {
  expect(res.status).toBe(429);
  const retryAfter = Number(res.headers['retry-after']);
  expect(Number.isInteger(retryAfter)).toBe(true);
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(900);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.headers['cache-control']).toBe('no-store');
  expect(res.headers.pragma).toBe('no-cache');
  expect(res.body).toEqual({ error: 'invalid_request', error_description: expect.stringContaining('too many failed') });
}

/** Runs `work` for every item, `concurrency` at a time. */
async function pool<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await work(items[next++]);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

const ATTACKERS = Array.from({ length: 50 }, (_, i) => `127.0.3.${i + 10}`);
const PER_ATTACKER = 20; // 50 × 20 = 1,000 wrong secrets
const FRESH = '127.0.4.200';

/**
 * 1,000 wrong secrets for one client_id from 50 addresses, each address in
 * order on its own connection, 10 addresses at a time, spread over `servers`.
 * Returns the statuses each address saw.
 */
async function attack(servers: Running[], clientId: string): Promise<Map<string, string[]>> {
  const seen = new Map<string, string[]>();
  await pool(ATTACKERS, 10, async (from) => {
    const statuses: string[] = [];
    for (let i = 0; i < PER_ATTACKER; i++) {
      const res = await tokenRequest(servers[(i + ATTACKERS.indexOf(from)) % servers.length].url, from, clientId, `wrong-${i}`);
      if (res.status === 429) expect429(res);
      statuses.push(`${res.status} ${String(res.body.error)}`);
    }
    seen.set(from, statuses);
  });
  return seen;
}

/** Each attacking address: 10 × 401 (its limit for this client_id), then 429 for the rest. */
function expectPairLimited(seen: Map<string, string[]>): void {
  const expected = [...Array(10).fill('401 invalid_client'), ...Array(PER_ATTACKER - 10).fill('429 invalid_request')];
  for (const from of ATTACKERS) expect({ from, statuses: seen.get(from) }).toEqual({ from, statuses: expected });
}

afterAll(() => {
  for (const agent of agents.values()) agent.destroy();
});

describe('real sockets from many loopback addresses, one instance, counters in memory', () => {
  let s: Running;
  beforeEach(async () => {
    s = await start({});
  });
  afterEach(() => s.close());

  it('1,000 wrong secrets for one client_id from 50 addresses: the right secret works from a fresh address, 429 from an attacking one', async () => {
    const victim = await s.issuer.clients.create({ name: 'victim' });
    const bystander = await s.issuer.clients.create({ name: 'bystander' });

    expectPairLimited(await attack([s], victim.clientId));

    const fresh = await tokenRequest(s.url, FRESH, victim.clientId, victim.clientSecret);
    expect(fresh.status).toBe(200);
    expect(typeof fresh.body.access_token).toBe('string');
    expect429(await tokenRequest(s.url, ATTACKERS[7], victim.clientId, victim.clientSecret));
    // an attacking address is not blocked for other clients: 10 failures are far below its limit of 100
    expect((await tokenRequest(s.url, ATTACKERS[7], bystander.clientId, bystander.clientSecret)).status).toBe(200);

    // 500 failures counted (the 429s are refused before the secret is checked): alerts at 20, 40, 80, 160, 320
    expect(s.alerts).toEqual([20, 40, 80, 160, 320].map((failures) => ({
      event: 'client.auth_failures_high',
      client_id: victim.clientId,
      failures,
      threshold: 20,
      window_s: 900,
      ip: expect.stringMatching(/^127\.0\.3\.\d+$/),
    })));
  }, 120_000);

  it('an address that keeps failing is refused for every client_id, the right secret included (RFC 6749 §2.3.1)', async () => {
    const good = await s.issuer.clients.create({ name: 'good' });
    const from = '127.0.5.9';
    for (let i = 0; i < 100; i++) expect((await tokenRequest(s.url, from, `guess-${i}`, 'x')).status).toBe(401);
    expect429(await tokenRequest(s.url, from, good.clientId, good.clientSecret));
    expect((await tokenRequest(s.url, '127.0.5.10', good.clientId, good.clientSecret)).status).toBe(200);
    // guessing client_ids raises no per-client alert
    expect(s.alerts).toEqual([]);
  }, 60_000);
});

describeIfRedis('real sockets from many loopback addresses, two instances sharing Redis', () => {
  const redis = new Redis(redisUrl(), { lazyConnect: true });
  const keyPrefix = `ecc-test:${randomBytes(6).toString('hex')}`;
  let a: Running;
  let b: Running;
  let dataDir: string;
  beforeAll(async () => {
    await redis.connect();
    dataDir = tempDir();
    // two issuers on one store and one Redis: two instances behind a load balancer
    a = await start({ dataDir, bruteForce: { redis, keyPrefix } });
    b = await start({ store: await openEmbeddedStore({ dataDir }), bruteForce: { redis, keyPrefix } });
  });
  afterAll(async () => {
    await b.close();
    await a.close();
    const keys = await redis.keys(`${keyPrefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('1,000 wrong secrets spread over A and B from 50 addresses: the right secret works from a fresh address on both, 429 from an attacking one on both', async () => {
    const victim = await a.issuer.clients.create({ name: 'victim' });

    // every address alternates between A and B, and still gets exactly 10 failures in all
    expectPairLimited(await attack([a, b], victim.clientId));

    for (const s of [a, b]) {
      const fresh = await tokenRequest(s.url, FRESH, victim.clientId, victim.clientSecret);
      expect({ on: s.url, status: fresh.status }).toEqual({ on: s.url, status: 200 });
      expect429(await tokenRequest(s.url, ATTACKERS[31], victim.clientId, victim.clientSecret));
    }
    // each crossing is seen by exactly one instance (one counter in Redis)
    const failures = [...a.alerts, ...b.alerts].map((e) => e.failures as number).sort((x, y) => x - y);
    expect(failures).toEqual([20, 40, 80, 160, 320]);
    expect(await redis.exists(`${keyPrefix}:addr:${ATTACKERS[31]}`)).toBe(1);
  }, 120_000);
});
