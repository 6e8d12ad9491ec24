import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import request from 'supertest';
import { openEmbeddedStore } from '../../lib';
import { setup, tempDir, type TestSetup } from '../helpers/app';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import type { Logger } from '../../lib';

function attempt(s: TestSetup, id: string, secret: string, address = '203.0.113.1') {
  return request(s.app).post('/oauth/token').set('X-Forwarded-For', address).type('form')
    .send({ grant_type: 'client_credentials', client_id: id, client_secret: secret });
}

function expect429(res: request.Response): void {
  expect(res.status).toBe(429);
  expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(res.headers['cache-control']).toBe('no-store');
  expect(res.body).toEqual({ error: 'invalid_request', error_description: expect.stringContaining('too many failed') });
}

const trustProxy = (s: TestSetup) => s.app.set('trust proxy', true);

interface Logged {
  level: 'info' | 'warn' | 'error';
  obj: Record<string, unknown>;
}

function capture(): { logger: Logger; lines: Logged[] } {
  const lines: Logged[] = [];
  const at = (level: Logged['level']) => (obj: Record<string, unknown>) => void lines.push({ level, obj });
  return { logger: { info: at('info'), warn: at('warn'), error: at('error') }, lines };
}

describe('failed client authentications are limited (RFC 6749 §2.3.1)', () => {
  let s: TestSetup;
  let log: ReturnType<typeof capture>;
  beforeEach(async () => {
    log = capture();
    s = await setup({
      bruteForce: { maxFailuresPerClientAddress: 3, maxFailuresPerAddress: 6, alertFailuresPerClient: 4, window: 60 },
      logger: log.logger,
    });
    trustProxy(s);
  });
  afterEach(() => s.close());

  // Before issue 7 a per-client_id limit answered 429 to the right secret from any address:
  // anyone who knew a client_id could lock it out. Now only the address and the (client_id, address) pair refuse.
  it('per (client_id, address): 429 with Retry-After for that pair only, even for the right secret; the client works from any other address', async () => {
    const victim = await s.issuer.clients.create({ name: 'victim' });
    for (let i = 0; i < 3; i++) expect((await attempt(s, victim.clientId, 'wrong', '198.51.100.1')).status).toBe(401);
    expect429(await attempt(s, victim.clientId, 'wrong', '198.51.100.1'));
    expect429(await attempt(s, victim.clientId, victim.clientSecret, '198.51.100.1'));
    expect((await attempt(s, victim.clientId, victim.clientSecret, '198.51.100.9')).status).toBe(200);
  });

  it('a burst of wrong secrets sent together, on a store that answers later (as PostgreSQL does): 401 up to the limit, 429 beyond it, each failure counted', async () => {
    const slow = await openEmbeddedStore({ dataDir: tempDir() });
    const findClient = slow.findClient.bind(slow);
    slow.findClient = async (id) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return findClient(id);
    };
    const b = await setup({ store: slow, bruteForce: { maxFailuresPerClientAddress: 3, maxFailuresPerAddress: 6, window: 60 } });
    trustProxy(b);
    try {
      const victim = await b.issuer.clients.create({ name: 'victim' });
      const burst = await Promise.all(Array.from({ length: 40 }, () => attempt(b, victim.clientId, 'wrong', '198.51.100.7')));
      const statuses = burst.map((r) => r.status).sort();
      expect(statuses.filter((x) => x === 401)).toHaveLength(3);
      expect(statuses.filter((x) => x === 429)).toHaveLength(37);
      for (const r of burst.filter((x) => x.status === 429)) expect429(r);
      // a burst of unknown ids from one address stops at the address limit (6)
      const unknown = await Promise.all(Array.from({ length: 20 }, (_, i) => attempt(b, `nobody-${i}`, 'wrong', '198.51.100.8')));
      expect(unknown.filter((r) => r.status === 401)).toHaveLength(6);
    } finally {
      await b.close();
    }
  });

  it('client.rate_limited: the first 429 of a minute at warn, the rest at debug, the next warn line counting them', async () => {
    const lines: { level: string; obj: Record<string, unknown> }[] = [];
    const at = (level: string) => (obj: Record<string, unknown>) => void lines.push({ level, obj });
    // only the clock is fake: sockets and timers run as they do
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
    const b = await setup({ bruteForce: { maxFailuresPerClientAddress: 1, window: 600 }, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } });
    trustProxy(b);
    try {
      const victim = await b.issuer.clients.create({ name: 'victim' });
      expect((await attempt(b, victim.clientId, 'wrong', '198.51.100.3')).status).toBe(401);
      for (let i = 0; i < 5; i++) expect429(await attempt(b, victim.clientId, 'wrong', '198.51.100.3'));
      const limited = () => lines.filter((l) => l.obj.event === 'client.rate_limited').map((l) => [l.level, l.obj.debug_only_since_last]);
      expect(limited()).toEqual([['warn', 0], ['debug', undefined], ['debug', undefined], ['debug', undefined], ['debug', undefined]]);
      jest.setSystemTime(Date.now() + 61_000);
      expect429(await attempt(b, victim.clientId, 'wrong', '198.51.100.3'));
      expect(limited().at(-1)).toEqual(['warn', 4]);
    } finally {
      jest.useRealTimers();
      await b.close();
    }
  });

  it('a request without credentials is logged as client.auth_failed (no_credentials), and counts nothing', async () => {
    const noCredentials = () => request(s.app).post('/oauth/token').set('X-Forwarded-For', '198.51.100.4').type('form').send({ grant_type: 'client_credentials' });
    for (let i = 0; i < 8; i++) expect((await noCredentials()).status).toBe(401);
    const failed = log.lines.filter((l) => l.obj.event === 'client.auth_failed');
    // one warn line a minute per address (the other 7 go to debug, which this logger has not): a flood without credentials does not set the log's rate
    expect(failed).toHaveLength(1);
    expect(failed[0]).toEqual({ level: 'warn', obj: expect.objectContaining({ reason: 'no_credentials', method: 'none', ip: '198.51.100.4' }) });
    // the address limit (6) was not reached: nothing was guessed
    const victim = await s.issuer.clients.create({ name: 'victim' });
    expect((await attempt(s, victim.clientId, victim.clientSecret, '198.51.100.4')).status).toBe(200);
  });

  it('wrong secrets for one client_id from many addresses never refuse its right secret from another address', async () => {
    const victim = await s.issuer.clients.create({ name: 'victim' });
    for (let a = 0; a < 10; a++) {
      for (let i = 0; i < 3; i++) expect((await attempt(s, victim.clientId, 'wrong', `198.51.100.${a}`)).status).toBe(401);
      expect429(await attempt(s, victim.clientId, 'wrong', `198.51.100.${a}`));
    }
    const ok = await attempt(s, victim.clientId, victim.clientSecret, '198.51.100.200');
    expect(ok.status).toBe(200);
    expect(typeof ok.body.access_token).toBe('string');
  });

  it('raises client.auth_failures_high at the threshold and each doubling, with counts and never the secret', async () => {
    const victim = await s.issuer.clients.create({ name: 'victim' });
    // 10 addresses × 3 failures = 30 failures of the client: events at 4, 8 and 16
    for (let a = 0; a < 10; a++) {
      for (let i = 0; i < 3; i++) await attempt(s, victim.clientId, `wrong-secret-${a}-${i}`, `198.51.100.${a}`);
    }
    const events = log.lines.filter((l) => l.obj.event === 'client.auth_failures_high');
    expect(events.map((e) => ({ level: e.level, ...e.obj }))).toEqual([4, 8, 16].map((failures) => ({
      level: 'warn',
      event: 'client.auth_failures_high',
      client_id: victim.clientId,
      failures,
      threshold: 4,
      window_s: 60,
      ip: expect.stringMatching(/^198\.51\.100\.\d+$/),
    })));
    expect(JSON.stringify(events)).not.toMatch(/wrong-secret|hmac/);
    // an unknown client_id raises none
    for (let a = 0; a < 10; a++) await attempt(s, 'no-such-client', 'x', `192.0.2.${a}`);
    expect(log.lines.filter((l) => l.obj.event === 'client.auth_failures_high')).toHaveLength(3);
  });

  it('per address: failures with many client ids from one address trip the limit for that address only', async () => {
    const good = await s.issuer.clients.create({ name: 'good' });
    for (let i = 0; i < 6; i++) expect((await attempt(s, `guess-${i}`, 'x', '203.0.113.7')).status).toBe(401);
    expect429(await attempt(s, good.clientId, good.clientSecret, '203.0.113.7'));
    expect((await attempt(s, good.clientId, good.clientSecret, '203.0.113.8')).status).toBe(200);
  });

  it('correct requests never count, and a success clears the (client_id, address) count', async () => {
    const c = await s.issuer.clients.create({ name: 'c' });
    for (let i = 0; i < 10; i++) expect((await attempt(s, c.clientId, c.clientSecret, '192.0.2.1')).status).toBe(200);
    // 2 rounds of 2 failures: without the clearing, the 4th failure would be over the pair limit of 3
    // (and a 3rd round would reach the address limit of 6, which a success does not clear)
    for (let round = 0; round < 2; round++) {
      expect((await attempt(s, c.clientId, 'wrong', '192.0.2.1')).status).toBe(401);
      expect((await attempt(s, c.clientId, 'wrong', '192.0.2.1')).status).toBe(401);
      expect((await attempt(s, c.clientId, c.clientSecret, '192.0.2.1')).status).toBe(200);
    }
  });

  it('can be turned off', async () => {
    const off = await setup({ bruteForce: false });
    try {
      const c = await off.issuer.clients.create({ name: 'c' });
      for (let i = 0; i < 30; i++) expect((await attempt(off, c.clientId, 'wrong')).status).toBe(401);
      expect((await attempt(off, c.clientId, c.clientSecret)).status).toBe(200);
    } finally {
      await off.close();
    }
  });

  it('refuses bad limits at start-up', async () => {
    await expect(setup({ bruteForce: { maxFailuresPerClientAddress: 0 } })).rejects.toThrow(TypeError);
    await expect(setup({ bruteForce: { alertFailuresPerClient: 1.5 } })).rejects.toThrow(TypeError);
    await expect(setup({ bruteForce: { window: -1 } })).rejects.toThrow(TypeError);
    await expect(setup({ bruteForce: { keyPrefix: '' } })).rejects.toThrow(TypeError);
    await expect(setup({ bruteForce: { perMinute: 1 } as never })).rejects.toThrow(/unknown option perMinute/);
    // the per-client lockout of the first release is refused with a pointer to its replacements
    await expect(setup({ bruteForce: { maxFailuresPerClient: 20 } as never })).rejects.toThrow(/maxFailuresPerClientAddress.*alertFailuresPerClient/);
  });
});

describeIfRedis('with Redis, instances count failures together', () => {
  const redis = new Redis(redisUrl(), { lazyConnect: true });
  const keyPrefix = `ecc-test:${randomBytes(6).toString('hex')}`;
  let a: TestSetup;
  let b: TestSetup;
  beforeAll(async () => {
    await redis.connect();
    // one store, two issuers: as two instances on one database
    const bruteForce = { maxFailuresPerClientAddress: 4, redis, keyPrefix };
    a = await setup({ bruteForce });
    const { openEmbeddedStore } = await import('../../lib');
    b = await setup({ store: await openEmbeddedStore({ dataDir: a.dataDir }), bruteForce });
    trustProxy(a);
    trustProxy(b);
  });
  afterAll(async () => {
    await b.issuer.close();
    await a.close();
    const keys = await redis.keys(`${keyPrefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it('failures from one address spread over A and B lock that pair on both; the right secret from another address works on both', async () => {
    const c = await a.issuer.clients.create({ name: `spread-${randomBytes(4).toString('hex')}` });
    expect((await attempt(a, c.clientId, 'w', '10.0.0.1')).status).toBe(401);
    expect((await attempt(b, c.clientId, 'w', '10.0.0.1')).status).toBe(401);
    expect((await attempt(a, c.clientId, 'w', '10.0.0.1')).status).toBe(401);
    expect((await attempt(b, c.clientId, 'w', '10.0.0.1')).status).toBe(401);
    expect429(await attempt(a, c.clientId, c.clientSecret, '10.0.0.1'));
    expect429(await attempt(b, c.clientId, c.clientSecret, '10.0.0.1'));
    expect((await attempt(a, c.clientId, c.clientSecret, '10.0.0.2')).status).toBe(200);
    expect((await attempt(b, c.clientId, c.clientSecret, '10.0.0.3')).status).toBe(200);
    expect(await redis.exists(`${keyPrefix}:addr:10.0.0.1`)).toBe(1);
  });

  // A client that swaps its id and secret (a common Basic mistake) sent its secret as the client_id: it was written
  // into the key name, `…:pair:i.<SECRET>:<address>`, readable with SCAN or MONITOR for the window.
  it('a secret sent as the client_id (id and secret swapped) never appears in a key name; a client id does', async () => {
    const c = await a.issuer.clients.create({ name: `swapped-${randomBytes(4).toString('hex')}` });
    const swapped = await request(a.app).post('/oauth/token').set('X-Forwarded-For', '10.0.0.7')
      .auth(c.clientSecret, c.clientId).type('form').send({ grant_type: 'client_credentials' });
    expect(swapped.status).toBe(401);
    expect((await attempt(b, c.clientId, 'wrong', '10.0.0.7')).status).toBe(401);
    const keys = await redis.keys(`${keyPrefix}:*`);
    expect(keys.filter((k) => k.includes(c.clientSecret))).toEqual([]);
    const pairs = keys.filter((k) => k.startsWith(`${keyPrefix}:pair:`) && k.endsWith(':10.0.0.7'));
    expect(pairs).toHaveLength(2);
    expect(pairs).toContain(`${keyPrefix}:pair:i.${c.clientId}:10.0.0.7`);
    expect(pairs.find((k) => !k.includes(':pair:i.'))).toMatch(new RegExp(`^${keyPrefix}:pair:h\\.[A-Za-z0-9_-]{22}:10\\.0\\.0\\.7$`));
    // the digest is the same on every instance: failures of the swapped pair on A and B add up to its limit
    for (let i = 0; i < 3; i++) {
      await request(b.app).post('/oauth/token').set('X-Forwarded-For', '10.0.0.7').auth(c.clientSecret, c.clientId).type('form').send({ grant_type: 'client_credentials' });
    }
    expect429(await request(a.app).post('/oauth/token').set('X-Forwarded-For', '10.0.0.7').auth(c.clientSecret, c.clientId).type('form').send({ grant_type: 'client_credentials' }));
  });
});
