import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import { InProcessRevocationHub, RedisRevocationFeed, type RevocationFeed } from '../../lib/core/revocation-feed';
import { RevocationState } from '../../lib/core/revocation';
import { describeIfRedis, redisUrl } from '../helpers/redis';

const inAMinute = () => Math.floor(Date.now() / 1000) + 60;

async function until(check: () => boolean, limitMs: number): Promise<number> {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > limitMs) throw new Error(`not within ${limitMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
  return Date.now() - started;
}

describe('InProcessRevocationHub', () => {
  it('an event published by one state reaches every attached state; a state attached later loads what happened', async () => {
    const hub = new InProcessRevocationHub();
    const a = new RevocationState({ maxTokenTtl: 600 });
    const b = new RevocationState({ maxTokenTtl: 600 });
    const fa = hub.feed(a);
    const fb = hub.feed(b);
    await fa.start();
    await fb.start();
    await fa.publish({ type: 'token', jti: 'j', clientId: 'c1', exp: inAMinute() });
    expect(b.isRevoked({ jti: 'j', client_id: 'c1' })).toBe('token_revoked');
    await fb.publish(b.revokeTokensEvent('c2'));
    expect(a.generation('c2')).toBe(1);
    const c = new RevocationState({ maxTokenTtl: 600 });
    const fc = hub.feed(c);
    await fc.start();
    expect(c.snapshot()).toEqual(a.snapshot());
    await fc.close();
    await fa.publish({ type: 'client', clientId: 'c3', at: Date.now() });
    expect(c.isRevoked({ jti: 'x', client_id: 'c3' })).toBe(false);
    expect(b.isRevoked({ jti: 'x', client_id: 'c3' })).toBe('client_revoked');
  });
});

describeIfRedis('RedisRevocationFeed (real Redis)', () => {
  const prefix = `ecc-test:revfeed:${process.pid}:${randomBytes(4).toString('hex')}`;
  const connections: Redis[] = [];
  const feeds: RevocationFeed[] = [];
  const connect = () => {
    const r = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
    connections.push(r);
    return r;
  };
  const instance = (opts: { resyncMs?: number } = {}) => {
    const state = new RevocationState({ maxTokenTtl: 600 });
    const subscriber = connect();
    const feed = new RedisRevocationFeed({ state, redis: connect(), subscriber, prefix, maxTokenTtl: 600, resyncMs: opts.resyncMs ?? 30_000 });
    feeds.push(feed);
    return { state, feed, subscriber };
  };

  afterAll(async () => {
    for (const f of feeds) await f.close().catch(() => undefined);
    const r = connect();
    const keys = await r.keys(`${prefix}:*`);
    if (keys.length > 0) await r.del(...keys);
    for (const c of connections) c.disconnect();
  });

  it('pushes a revocation to the other instance (latency measured), applies it on the publisher at once', async () => {
    const a = instance();
    const b = instance();
    await a.feed.start();
    await b.feed.start();
    const published = a.feed.publish({ type: 'token', jti: 'pushed', clientId: 'c1', exp: inAMinute() });
    expect(a.state.isRevoked({ jti: 'pushed', client_id: 'c1' })).toBe('token_revoked');
    await published;
    const ms = await until(() => b.state.isRevoked({ jti: 'pushed', client_id: 'c1' }) === 'token_revoked', 2_000);
    process.stdout.write(`redis push: the other instance refused the token ${ms} ms after publish returned\n`);
    await b.feed.publish([b.state.revokeTokensEvent('c2'), { type: 'client', clientId: 'c3', at: Date.now() }]);
    await until(() => a.state.generation('c2') === 1 && a.state.isRevoked({ jti: 'z', client_id: 'c3' }) === 'client_revoked', 2_000);
  });

  it('ignores unreadable messages on its channel (told through onError) and keeps working; its timer is unref\'d', async () => {
    const state = new RevocationState({ maxTokenTtl: 600 });
    const errors: unknown[] = [];
    const feed = new RedisRevocationFeed({ state, redis: connect(), subscriber: connect(), prefix, maxTokenTtl: 600, onError: (e) => errors.push(e) });
    feeds.push(feed);
    await feed.start();
    expect((feed as unknown as { timer: NodeJS.Timeout }).timer.hasRef()).toBe(false);
    const r = connect();
    await r.publish(`${prefix}:events`, 'not json');
    await r.publish(`${prefix}:events`, JSON.stringify([{ type: 'token', jti: 'after-garbage', clientId: 'c1', exp: inAMinute() }]));
    await until(() => state.isRevoked({ jti: 'after-garbage', client_id: 'c1' }) === 'token_revoked', 2_000);
    expect(errors).toHaveLength(1);
  });

  it('a message lost (subscription dropped) is caught up by the next resync', async () => {
    const a = instance();
    const b = instance({ resyncMs: 300 });
    await a.feed.start();
    await b.feed.start();
    await b.subscriber.unsubscribe(`${prefix}:events`);
    await a.feed.publish({ type: 'tokens', clientId: 'lost', generation: 5, at: Date.now() });
    const ms = await until(() => b.state.generation('lost') === 5, 3_000);
    expect(ms).toBeLessThan(3_000);
  });

  it('a restarted instance loads the revocations from Redis; a generation never goes down; expired entries leave Redis', async () => {
    const a = instance();
    await a.feed.start();
    await a.feed.publish([
      { type: 'token', jti: 'persisted', clientId: 'c1', exp: inAMinute() },
      { type: 'tokens', clientId: 'g', generation: 3, at: Date.now() },
      { type: 'tokens', clientId: 'g', generation: 2, at: Date.now() },
    ]);
    // an entry that expired already (written as another instance would have, a while ago)
    const r = connect();
    await r.zadd(`${prefix}:tokens`, Math.floor(Date.now() / 1000) - 10, JSON.stringify(['dead', 'c1']));
    const fresh = instance();
    await fresh.feed.start();
    expect(fresh.state.isRevoked({ jti: 'persisted', client_id: 'c1' })).toBe('token_revoked');
    expect(fresh.state.generation('g')).toBe(3);
    expect(await r.hget(`${prefix}:generations`, 'g')).toBe('3');
    expect(await r.zscore(`${prefix}:tokens`, JSON.stringify(['dead', 'c1']))).toBeNull();
    expect(fresh.state.isRevoked({ jti: 'dead', client_id: 'c1' })).toBe(false);
  });
});
