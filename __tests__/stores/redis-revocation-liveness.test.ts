/**
 * The revocation doorbell's subscription over a connection a network
 * dropped without a word (the test's proxy black-holes it, then forwards
 * new connections again): the liveness check finds the silent connection,
 * makes a new one, and rings reach the instance again, with a catch-up
 * ring for what it may have missed.
 */
import Redis from 'ioredis';
import { RedisRevocationNotifier } from '../../lib/stores/redis-revocation-notifier';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy';
import { describeIfRedis, redisUrl } from '../helpers/redis';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeIfRedis('RedisRevocationNotifier liveness', () => {
  let proxy: FaultProxy;
  let listenerRedis: Redis;
  let direct: Redis;
  const channel = `ecc:test:liveness:${process.pid}:${Date.now()}`;

  beforeAll(async () => {
    const target = new URL(redisUrl());
    proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
    listenerRedis = new Redis({ host: '127.0.0.1', port: proxy.port, maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: false });
    direct = new Redis(redisUrl());
    await direct.ping();
  });
  afterAll(async () => {
    listenerRedis.disconnect();
    direct.disconnect();
    await proxy.close();
  });

  /** Publishes (not through the proxy) until the listener has rung `count` times, or `ms` passed. */
  async function ringsWithin(rings: () => number, count: number, ms: number): Promise<boolean> {
    const end = Date.now() + ms;
    while (rings() < count && Date.now() < end) {
      await direct.publish(channel, '1');
      await sleep(50);
    }
    return rings() >= count;
  }

  it('a silently dropped subscription is found by PING and made again; rings arrive again', async () => {
    let rings = 0;
    const errors: string[] = [];
    const notifier = new RedisRevocationNotifier({ redis: listenerRedis, channel, checkEveryMs: 300, onError: (err) => errors.push((err as Error).message) });
    const stop = await notifier.listenRevocations(() => rings++);
    try {
      expect(await ringsWithin(() => rings, 1, 3_000)).toBe(true);

      proxy.blackHole();
      await sleep(100);
      const before = rings;
      await direct.publish(channel, '1');
      await sleep(200);
      expect(rings).toBe(before); // the connection is silent: nothing reaches the listener
      proxy.heal(); // new connections go through; the old one stays open and silent

      expect(await ringsWithin(() => rings, before + 2, 5_000)).toBe(true);
      expect(errors.some((m) => m.includes('did not answer PING on the revocation subscription'))).toBe(true);
    } finally {
      await stop();
    }
  }, 15_000);
});
