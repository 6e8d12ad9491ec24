/**
 * A Redis that stops answering without closing its connection (a stalled
 * server, a network that drops packets), cut through a proxy this test owns,
 * with an ioredis client as users make one (default options): no request,
 * and no shutdown, waits for it longer than the one-second deadline.
 */
import Redis from 'ioredis';
import request from 'supertest';
import { setup, type TestSetup } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import { ISSUER } from '../helpers/app';
import { cliPerTest } from '../helpers/cli';
import fs from 'node:fs';
import path from 'node:path';
import { compiledExamples, runUntil } from '../helpers/compiled-example';

const examples = compiledExamples();

type Logged = Record<string, unknown>;

describeIfRedis('a stalled Redis (connected, not answering)', () => {
  let proxy: FaultProxy;
  let redis: Redis;
  let t: TestSetup;
  const warnings: Logged[] = [];
  const errors: Logged[] = [];
  const cli = cliPerTest('ecc-stall-');

  beforeAll(async () => {
    const target = new URL(redisUrl());
    proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
    redis = new Redis({ host: '127.0.0.1', port: proxy.port });
    const prefix = `ecc:test:stall:${process.pid}:${Date.now()}`;
    t = await setup({
      bruteForce: { redis, keyPrefix: `${prefix}:bf`, maxFailuresPerClientAddress: 3 },
      dpop: { redis, keyPrefix: `${prefix}:dpop:` },
      revocationPush: { redis, channel: `${prefix}:revocations` },
      logger: { info: () => undefined, warn: (o: Logged) => void warnings.push(o), error: (o: Logged) => void errors.push(o) },
    }, (app, issuer) => {
      app.use(issuer.router());
      app.get('/api/whoami', issuer.requireBearer(), (req, res) => res.json({ client_id: req.auth!.clientId }));
    });
    await redis.ping();
    proxy.blackHole();
  });
  afterAll(async () => {
    proxy.restore();
    redis.disconnect();
    await proxy.close();
  });

  const token = (client: { clientId: string; clientSecret: string }, dpop?: string) => {
    let req = request(t.app).post('/oauth/token').type('form');
    if (dpop) req = req.set('DPoP', dpop);
    return req.send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
  };
  const timed = async <T>(run: () => Promise<T>): Promise<{ value: T; ms: number }> => {
    const started = Date.now();
    const value = await run();
    return { value, ms: Date.now() - started };
  };

  it('token requests are answered: the brute-force counts go to memory after one deadline, and still limit', async () => {
    const client = await t.issuer.clients.create({ name: 'stalled', scopes: 'orders:read' });
    const first = await timed(() => token(client));
    expect(first.value.status).toBe(200);
    expect(first.ms).toBeLessThan(2500);
    // the next ones skip Redis at once
    const second = await timed(() => token(client));
    expect(second.value.status).toBe(200);
    expect(second.ms).toBeLessThan(500);
    const wrong = { clientId: client.clientId, clientSecret: 'wrong' };
    for (let i = 0; i < 3; i++) expect((await token(wrong)).status).toBe(401);
    expect((await token(wrong)).status).toBe(429);
    expect(warnings.filter((w) => w.event === 'brute_force.redis_unavailable')).toHaveLength(1);
  });

  it('a DPoP proof is refused with 503 and Retry-After at once: the token requests before found Redis stalled', async () => {
    const client = await t.issuer.clients.create({ name: 'stalled-dpop', scopes: 'orders:read' });
    const res = await timed(() => token(client, newDpopKey().proof({ htm: 'POST', htu: `${ISSUER}/oauth/token` })));
    expect({ status: res.value.status, error: res.value.body.error }).toEqual({ status: 503, error: 'temporarily_unavailable' });
    expect(Number(res.value.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(res.ms).toBeLessThan(400);
  });

  it('a revocation is stored and in force; the ring that cannot get through is a warning', async () => {
    const client = await t.issuer.clients.create({ name: 'stalled-revoke', scopes: 'orders:read' });
    const at = (await token(client)).body.access_token as string;
    const res = await timed(() => request(t.app).post('/oauth/revoke').type('form').auth(client.clientId, client.clientSecret).send({ token: at }));
    expect(res.value.status).toBe(200);
    expect(res.ms).toBeLessThan(2500);
    expect(warnings.some((w) => w.event === 'revocation.not_announced' || w.event === 'revocation_push.unavailable')).toBe(true);
    const api = await request(t.app).get('/api/whoami').set('Authorization', `Bearer ${at}`);
    expect({ status: api.status, error: api.body.error }).toEqual({ status: 401, error: 'invalid_token' });
    // the one error line is the DPoP replay store's outage, known since the first test's brute-force check met it
    expect(errors.map((e) => e.event)).toEqual(['dpop_replay_store.unavailable']);
  });

  it('the CLI\'s revoke-tokens rings it, gives up after the deadline with a warning, and exits 0', async () => {
    const created = await cli.cli(['create', '--name', 'cli-stalled', '--json']);
    const { client_id: clientId } = JSON.parse(created.stdout) as { client_id: string };
    const run = await timed(() => cli.cli(['revoke-tokens', clientId], { REDIS_URL: `redis://127.0.0.1:${proxy.port}` }));
    expect(run.value.code).toBe(0);
    expect(run.value.stderr).toMatch(/warning: could not notify running instances through Redis/);
    expect(run.ms).toBeLessThan(4000);
  });

  it('the CLI as a process ends soon after its ring gave up: it waits neither for QUIT nor for the socket to close', async () => {
    await examples.build();
    const created = await cli.cli(['create', '--name', 'cli-process', '--json']);
    const { client_id: clientId } = JSON.parse(created.stdout) as { client_id: string };
    const bin = path.join(cli.tmp, 'cli.js');
    fs.writeFileSync(bin, `require(${JSON.stringify(path.join(path.dirname(examples.script('server')), '../lib/cli/main.js'))}).run();\n`);
    const started = Date.now();
    const exit = await runUntil(bin, { DATA_DIR: cli.dataDir, REDIS_URL: `redis://127.0.0.1:${proxy.port}` }, undefined, undefined, ['revoke-tokens', clientId]);
    const tookMs = Date.now() - started;
    expect(exit.code).toBe(0);
    expect(exit.stderr).toMatch(/warning: could not notify running instances through Redis \(Redis did not answer PUBLISH within 1000 ms\)/);
    // the ring's deadline (1 s) and a process start; it was 6 s: QUIT's second, then ioredis's 2 s wait on the socket and more
    expect(tookMs).toBeLessThan(3000);
  }, 20_000);

  it('closes within a few seconds', async () => {
    const closed = await timed(() => t.close());
    expect(closed.ms).toBeLessThan(3000);
  });
});
