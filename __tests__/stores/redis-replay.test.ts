import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { verifyDpopProof, type DpopVerifyOptions } from '../../lib/core/dpop';
import { RedisReplayStore } from '../../lib/stores/redis-replay';
import { InvalidDpopProofError, TemporarilyUnavailableError } from '../../lib/errors';
import { newDpopKey } from '../helpers/dpop';
import { describeIfRedis, redisUrl } from '../helpers/redis';

describe('RedisReplayStore (no server needed)', () => {
  it('sends SET prefix+key 1 PX <ms to expiry> NX and reads OK as first use', async () => {
    const calls: unknown[][] = [];
    const replies: Array<'OK' | null> = ['OK', null];
    const client = { set: async (...args: unknown[]) => (calls.push(args), replies.shift() ?? null) };
    const now = 1_000_000;
    const s = new RedisReplayStore({ client, prefix: 'p:', now: () => now });
    expect(await s.consume('k', now + 1500)).toBe(true);
    expect(await s.consume('k', now + 1500)).toBe(false);
    expect(calls[0]).toEqual(['p:k', '1', 'PX', 1500, 'NX']);
    expect(await s.consume('gone', now)).toBe(true);
    expect(calls).toHaveLength(2);
  });
});

describeIfRedis('RedisReplayStore: instances sharing one Redis', () => {
  const prefix = `test:dpop:${randomBytes(6).toString('hex')}:`;
  const a = new Redis(redisUrl(), { lazyConnect: true });
  const b = new Redis(redisUrl(), { lazyConnect: true });
  const key = newDpopKey();
  const htu = 'https://api.test/api/orders';

  afterAll(async () => {
    const keys = await a.keys(`${prefix}*`);
    if (keys.length > 0) await a.del(...keys);
    await a.quit();
    await b.quit();
  });

  // two instances: their own verify options, one Redis
  const instance = (client: Redis): DpopVerifyOptions => ({ replay: new RedisReplayStore({ client, prefix }) });
  const instanceA = instance(a);
  const instanceB = instance(b);

  it('refuses a proof replayed to another instance (DR11)', async () => {
    const proof = key.proof({ htm: 'GET', htu });
    await expect(verifyDpopProof(proof, { htm: 'GET', htu }, instanceA)).resolves.toHaveProperty('jkt', key.jkt);
    const replayed = await Promise.resolve(verifyDpopProof(proof, { htm: 'GET', htu }, instanceB)).catch((e: unknown) => e);
    expect(replayed).toBeInstanceOf(InvalidDpopProofError);
    expect((replayed as InvalidDpopProofError).reason).toBe('replayed');
  });

  it('lets exactly one of 20 concurrent uses of one proof through, split over two instances', async () => {
    const proof = key.proof({ htm: 'GET', htu });
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => Promise.resolve().then(() => verifyDpopProof(proof, { htm: 'GET', htu }, i % 2 ? instanceA : instanceB))),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(refused.every((r) => r.reason instanceof InvalidDpopProofError && r.reason.reason === 'replayed')).toBe(true);
  });

  it('stores one hashed key per proof under the prefix, expiring with the proof', async () => {
    const iat = Math.floor(Date.now() / 1000);
    const before = new Set(await a.keys(`${prefix}*`));
    await verifyDpopProof(key.proof({ htm: 'GET', htu, iat, jti: 'x'.repeat(200) }), { htm: 'GET', htu }, instanceA);
    const added = (await a.keys(`${prefix}*`)).filter((k) => !before.has(k));
    expect(added).toHaveLength(1);
    expect(added[0]).toMatch(new RegExp(`^${prefix}[A-Za-z0-9_-]{22}$`));
    const ttl = await a.pttl(added[0]);
    expect(ttl).toBeGreaterThan(290_000);
    expect(ttl).toBeLessThanOrEqual(306_000);
  });

  it('answers 503 when Redis cannot be reached', async () => {
    const down = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null });
    down.on('error', () => undefined);
    try {
      const err = await Promise.resolve(verifyDpopProof(key.proof({ htm: 'GET', htu }), { htm: 'GET', htu }, instance(down))).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TemporarilyUnavailableError);
      expect((err as TemporarilyUnavailableError).status).toBe(503);
    } finally {
      down.disconnect();
    }
  });
});
