/** The shared store on Redis (ioredis): a second client with its own connection reuses the first one's token. */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Redis from 'ioredis';
import { createTokenClient, redisTokenStore, type TokenClientEvent } from '../../lib/client';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import { fakeTokenEndpoint, type FakeServer } from './fakes';

describeIfRedis('redisTokenStore', () => {
  const prefix = `ecc-test:${randomBytes(6).toString('hex')}:`;
  let endpoint: FakeServer & { tokenUrl: string };
  const connections: Redis[] = [];
  const clients: Array<{ close(): Promise<void> }> = [];

  function connect(): Redis {
    const r = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
    connections.push(r);
    return r;
  }

  beforeEach(async () => {
    endpoint = await fakeTokenEndpoint(120);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
    await endpoint.close();
  });
  afterAll(async () => {
    const r = connect();
    const keys = await r.keys(`${prefix}*`);
    if (keys.length) await r.del(...keys);
    connections.forEach((c) => c.disconnect());
  });

  it("a second client (its own connection) reuses the first one's token; the key expires with the token", async () => {
    const first = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }) });
    const second = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }) });
    clients.push(first, second);
    expect((await first.getToken()).accessToken).toBe('tok-1');
    const r = connect();
    let keys: string[] = [];
    for (let i = 0; i < 100 && keys.length === 0; i++) {
      keys = await r.keys(`${prefix}*`);
      if (!keys.length) await new Promise((res) => setTimeout(res, 10));
    }
    expect(keys).toHaveLength(1);
    const ttl = await r.pttl(keys[0]);
    expect(ttl).toBeGreaterThan(100_000);
    expect(ttl).toBeLessThanOrEqual(120_000);
    expect(await r.get(keys[0])).not.toContain('svc'); // the key is a hash; the value is the token record only
    for (let i = 0; i < 100; i++) expect((await second.getToken()).accessToken).toBe('tok-1');
    expect(endpoint.requests).toHaveLength(1);
  });

  it("a second process reuses the first one's token", async () => {
    const store = redisTokenStore({ client: connect(), prefix });
    const first = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'proc', clientSecret: 'x', store });
    clients.push(first);
    const token = (await first.getToken()).accessToken;
    const r = connect();
    for (let i = 0; i < 100 && (await r.keys(`${prefix}*`)).length < 1; i++) await new Promise((res) => setTimeout(res, 10));
    const script = `
      const Redis = require('ioredis');
      const { createTokenClient, redisTokenStore } = require(${JSON.stringify(join(__dirname, '../../lib/client'))});
      const redis = new Redis(process.env.URL);
      const c = createTokenClient({ tokenEndpoint: process.env.EP, clientId: 'proc', clientSecret: 'x', store: redisTokenStore({ client: redis, prefix: process.env.PREFIX }) });
      c.getToken().then((t) => { process.stdout.write(t.accessToken); redis.disconnect(); }, (e) => { console.error(e); process.exit(1); });`;
    const { stdout } = await promisify(execFile)(process.execPath, ['-r', 'ts-node/register/transpile-only', '-e', script], {
      cwd: join(__dirname, '../..'),
      env: { ...process.env, URL: redisUrl(), EP: endpoint.tokenUrl, PREFIX: prefix },
      timeout: 60_000,
    });
    expect(stdout).toBe(token);
    expect(endpoint.requests).toHaveLength(1);
  }, 70_000);

  it('a Redis that is down: calls go to the token endpoint, with store.error events', async () => {
    const down = new Redis({ port: 1, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
    connections.push(down);
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: down, prefix }), onEvent: (e) => events.push(e) });
    clients.push(c);
    expect((await c.getToken()).accessToken).toBe('tok-1');
    await new Promise((r) => setTimeout(r, 20));
    expect(events.filter((e) => e.type === 'store.error').length).toBeGreaterThanOrEqual(1);
  });
});
