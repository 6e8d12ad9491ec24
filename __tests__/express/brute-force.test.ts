import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import request from 'supertest';
import { setup, type TestSetup } from '../helpers/app';
import { describeIfRedis, redisUrl } from '../helpers/redis';

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

describe('failed client authentications are limited (RFC 6749 §2.3.1)', () => {
  let s: TestSetup;
  beforeEach(async () => {
    s = await setup({ bruteForce: { maxFailuresPerClient: 3, maxFailuresPerAddress: 6, window: 60 } });
    trustProxy(s);
  });
  afterEach(() => s.close());

  it('per client_id: 429 with Retry-After after the limit, even for the right secret; other clients unaffected', async () => {
    const victim = await s.issuer.clients.create({ name: 'victim' });
    const other = await s.issuer.clients.create({ name: 'other' });
    for (let i = 0; i < 3; i++) expect((await attempt(s, victim.clientId, 'wrong', `198.51.100.${i}`)).status).toBe(401);
    expect429(await attempt(s, victim.clientId, victim.clientSecret, '198.51.100.9'));
    expect((await attempt(s, other.clientId, other.clientSecret, '198.51.100.9')).status).toBe(200);
  });

  it('per address: failures with many client ids from one address trip the limit for that address only', async () => {
    const good = await s.issuer.clients.create({ name: 'good' });
    for (let i = 0; i < 6; i++) expect((await attempt(s, `guess-${i}`, 'x', '203.0.113.7')).status).toBe(401);
    expect429(await attempt(s, good.clientId, good.clientSecret, '203.0.113.7'));
    expect((await attempt(s, good.clientId, good.clientSecret, '203.0.113.8')).status).toBe(200);
  });

  it('correct requests never count, and a success clears the client count', async () => {
    const c = await s.issuer.clients.create({ name: 'c' });
    for (let i = 0; i < 10; i++) expect((await attempt(s, c.clientId, c.clientSecret)).status).toBe(200);
    for (let round = 0; round < 3; round++) {
      expect((await attempt(s, c.clientId, 'wrong', `192.0.2.${round}`)).status).toBe(401);
      expect((await attempt(s, c.clientId, 'wrong', `192.0.2.${round + 10}`)).status).toBe(401);
      expect((await attempt(s, c.clientId, c.clientSecret, `192.0.2.${round + 20}`)).status).toBe(200);
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
    await expect(setup({ bruteForce: { maxFailuresPerClient: 0 } })).rejects.toThrow(TypeError);
    await expect(setup({ bruteForce: { window: -1 } })).rejects.toThrow(TypeError);
    await expect(setup({ bruteForce: { perMinute: 1 } as never })).rejects.toThrow(/unknown option perMinute/);
  });
});

describeIfRedis('with Redis, instances count failures together', () => {
  const redis = new Redis(redisUrl(), { lazyConnect: true });
  let a: TestSetup;
  let b: TestSetup;
  beforeAll(async () => {
    await redis.connect();
    // one store, two issuers: as two instances on one database
    a = await setup({ bruteForce: { maxFailuresPerClient: 4, redis } });
    const { openEmbeddedStore } = await import('../../lib');
    b = await setup({ store: await openEmbeddedStore({ dataDir: a.dataDir }), bruteForce: { maxFailuresPerClient: 4, redis } });
    trustProxy(a);
    trustProxy(b);
  });
  afterAll(async () => {
    await b.issuer.close();
    await a.close();
    await redis.quit();
  });

  it('failures spread over A and B trip the limit on both', async () => {
    const c = await a.issuer.clients.create({ name: `spread-${randomBytes(4).toString('hex')}` });
    const addr = () => `10.${randomBytes(1)[0]}.${randomBytes(1)[0]}.1`;
    expect((await attempt(a, c.clientId, 'w', addr())).status).toBe(401);
    expect((await attempt(b, c.clientId, 'w', addr())).status).toBe(401);
    expect((await attempt(a, c.clientId, 'w', addr())).status).toBe(401);
    expect((await attempt(b, c.clientId, 'w', addr())).status).toBe(401);
    expect429(await attempt(a, c.clientId, c.clientSecret, addr()));
    expect429(await attempt(b, c.clientId, c.clientSecret, addr()));
  });
});
