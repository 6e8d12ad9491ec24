import { EventEmitter } from 'node:events';
import { RedisRevocationNotifier, type RedisDoorbellSubscriber, type RedisPublishClient } from '../../lib/stores/redis-revocation-notifier';

/** A subscriber connection whose events the test drives. */
class FakeSubscriber extends EventEmitter {
  subscribed: string[] = [];
  failNextSubscribe = false;
  quitCalls = 0;
  async subscribe(channel: string): Promise<unknown> {
    if (this.failNextSubscribe) {
      this.failNextSubscribe = false;
      throw new Error("Stream isn't writeable and enableOfflineQueue options is false");
    }
    this.subscribed.push(channel);
    return 1;
  }
  async quit(): Promise<unknown> {
    this.quitCalls++;
    return 'OK';
  }
  disconnect(): void {}
}

function fakeRedis(opts: { failPublish?: boolean } = {}) {
  const published: [string, string][] = [];
  const subscriber = new FakeSubscriber();
  const redis: RedisPublishClient = {
    async publish(channel, message) {
      if (opts.failPublish) throw new Error('Connection is closed.');
      published.push([channel, message]);
      return 1;
    },
    duplicate: () => subscriber as unknown as RedisDoorbellSubscriber,
  };
  return { redis, published, subscriber };
}

describe('RedisRevocationNotifier (Redis pub/sub doorbell)', () => {
  it('notify publishes on its channel (default ecc:revocation:changed, or the one given)', async () => {
    const a = fakeRedis();
    await new RedisRevocationNotifier({ redis: a.redis }).notifyRevocations();
    await new RedisRevocationNotifier({ redis: a.redis, channel: 'issuer-2' }).notifyRevocations();
    expect(a.published.map(([c]) => c)).toEqual(['ecc:revocation:changed', 'issuer-2']);
  });

  it('a failed publish is reported and never fails the revocation (already in the store)', async () => {
    const a = fakeRedis({ failPublish: true });
    const errors: unknown[] = [];
    await expect(new RedisRevocationNotifier({ redis: a.redis, onError: (e) => errors.push(e) }).notifyRevocations()).resolves.toBeUndefined();
    expect(errors).toHaveLength(1);
  });

  it('listen subscribes on a connection of its own, calls back on its channel only, and stops with quit()', async () => {
    const a = fakeRedis();
    let calls = 0;
    const stop = await new RedisRevocationNotifier({ redis: a.redis, channel: 'ch' }).listenRevocations(() => calls++);
    expect(a.subscriber.subscribed).toEqual(['ch']);
    a.subscriber.emit('message', 'other', '1');
    expect(calls).toBe(0);
    a.subscriber.emit('message', 'ch', '1');
    a.subscriber.emit('message', 'ch', '1');
    expect(calls).toBe(2);
    await stop();
    expect(a.subscriber.quitCalls).toBe(1);
  });

  it('after a lost connection comes back it calls back once to catch up (what was published meanwhile was missed)', async () => {
    const a = fakeRedis();
    let calls = 0;
    await new RedisRevocationNotifier({ redis: a.redis, channel: 'ch' }).listenRevocations(() => calls++);
    a.subscriber.emit('ready'); // first connection: nothing to catch up on
    expect(calls).toBe(0);
    a.subscriber.emit('ready'); // reconnected
    expect(calls).toBe(1);
  });

  it('Redis down at start: the failure is reported, and the subscription is made when it comes back', async () => {
    const a = fakeRedis();
    a.subscriber.failNextSubscribe = true;
    const errors: unknown[] = [];
    let calls = 0;
    await new RedisRevocationNotifier({ redis: a.redis, channel: 'ch', onError: (e) => errors.push(e) }).listenRevocations(() => calls++);
    expect(errors).toHaveLength(1);
    expect(a.subscriber.subscribed).toEqual([]);
    a.subscriber.emit('ready');
    await new Promise((r) => setImmediate(r));
    expect(a.subscriber.subscribed).toEqual(['ch']);
    a.subscriber.emit('message', 'ch', '1');
    expect(calls).toBe(1);
    // connection errors go to onError, not to an unhandled 'error' event
    a.subscriber.emit('error', new Error('ECONNREFUSED'));
    expect(errors).toHaveLength(2);
  });
});

describe('RedisRevocationNotifier with a connection still being made (ioredis, offline queue off)', () => {
  /** A subscriber that refuses commands until its connection is ready, as ioredis does with enableOfflineQueue: false. */
  class ConnectingSubscriber extends FakeSubscriber {
    status = 'connecting';
    override async subscribe(channel: string): Promise<unknown> {
      if (this.status !== 'ready') throw new Error("Stream isn't writeable and enableOfflineQueue options is false");
      return super.subscribe(channel);
    }
  }
  function connecting() {
    const subscriber = new ConnectingSubscriber();
    const redis: RedisPublishClient = { publish: async () => 1, duplicate: () => subscriber as unknown as RedisDoorbellSubscriber };
    return { redis, subscriber };
  }

  it('waits for the connection and subscribes then: no failure reported, calls back on messages', async () => {
    const a = connecting();
    const errors: unknown[] = [];
    let calls = 0;
    let listening = false;
    const started = new RedisRevocationNotifier({ redis: a.redis, channel: 'ch', onError: (e) => errors.push(e) })
      .listenRevocations(() => calls++)
      .then(() => (listening = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(listening).toBe(false);
    a.subscriber.status = 'ready';
    a.subscriber.emit('ready');
    await started;
    expect(a.subscriber.subscribed).toEqual(['ch']);
    expect(errors).toEqual([]);
    a.subscriber.emit('message', 'ch', '1');
    expect(calls).toBe(1);
  });

  it('a connection that fails is reported at once (not after the wait), and the subscription is made when Redis comes', async () => {
    const a = connecting();
    const errors: unknown[] = [];
    const started = Date.now();
    const listening = new RedisRevocationNotifier({ redis: a.redis, channel: 'ch', onError: (e) => errors.push(e) }).listenRevocations(() => undefined);
    a.subscriber.emit('error', new Error('connect ECONNREFUSED 127.0.0.1:6379'));
    await listening;
    expect(Date.now() - started).toBeLessThan(1000);
    expect(errors.map((e) => (e as Error).message)).toEqual(['connect ECONNREFUSED 127.0.0.1:6379', "Stream isn't writeable and enableOfflineQueue options is false"]);
    a.subscriber.status = 'ready';
    a.subscriber.emit('ready');
    await new Promise((r) => setImmediate(r));
    expect(a.subscriber.subscribed).toEqual(['ch']);
  });
});
