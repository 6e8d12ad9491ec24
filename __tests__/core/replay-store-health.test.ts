import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ReplayStoreHealth } from '../../lib/core/replay-store-health';
import { ServiceGate } from '../../lib/core/service-gate';
import { recorder } from '../helpers/log-recorder';
import { until } from '../helpers/until';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collects garbage until `collected()` (or 50 tries, each after a turn of the event loop). */
async function collect(collected: () => boolean): Promise<boolean> {
  for (let i = 0; i < 50 && !collected(); i++) {
    await sleep(10);
    gc();
  }
  return collected();
}

describe('ReplayStoreHealth', () => {
  it('logs dpop_replay_store.unavailable once per outage and dpop_replay_store.recovered when a call succeeds again; counts the errors', () => {
    const { events, logger } = recorder();
    let now = 1_000;
    const health = new ReplayStoreHealth(logger, { kind: 'redis', now: () => now });
    health.succeeded(now);
    expect(health.up).toBe(true);
    expect(events).toEqual([]);

    for (let i = 0; i < 30; i++) health.failed(new Error('Redis did not answer within 1000 ms'));
    expect(health.up).toBe(false);
    expect(health.errors).toBe(30);
    now = 3_500;
    health.succeeded(now);
    health.succeeded(now);
    expect(health.up).toBe(true);
    expect(events).toEqual([
      { level: 'error', event: 'dpop_replay_store.unavailable', store: 'redis', reason: 'Redis did not answer within 1000 ms' },
      { level: 'info', event: 'dpop_replay_store.recovered', store: 'redis', down_ms: 2_500, failures: 30 },
    ]);

    // a second outage is a second event; the errors go on counting; a reason that is not an Error is its string
    health.failed('ECONNRESET');
    expect(events.at(-1)).toEqual({ level: 'error', event: 'dpop_replay_store.unavailable', store: 'redis', reason: 'ECONNRESET' });
    expect(events.filter((e) => e.event === 'dpop_replay_store.unavailable')).toHaveLength(2);
    expect(health.errors).toBe(31);
  });

  it('a call begun before the outage was seen does not end it when it succeeds late; one begun at or after does', () => {
    const { events, logger } = recorder();
    let now = 1_000;
    const health = new ReplayStoreHealth(logger, { kind: 'redis', now: () => now });
    const old = now;
    now = 1_010;
    health.failed(new Error('cut'));
    now = 1_020;
    health.succeeded(old);
    expect(health.up).toBe(false);
    health.succeeded(1_010);
    expect(health.up).toBe(true);
    expect(events.map((e) => e.event)).toEqual(['dpop_replay_store.unavailable', 'dpop_replay_store.recovered']);
    expect(events[1]).toMatchObject({ down_ms: 10, failures: 1 });
  });

  it('a failure not counted (a probe) starts an outage but counts no error and no failure', () => {
    const { events, logger } = recorder();
    let now = 1_000;
    const health = new ReplayStoreHealth(logger, { kind: 'redis', now: () => now });
    health.failed(new Error('probe failed'), false);
    expect(health.up).toBe(false);
    expect(health.errors).toBe(0);
    health.failed(new Error('probe failed'), false);
    health.failed(new Error('a proof'));
    expect(health.errors).toBe(1);
    now = 2_000;
    health.succeeded(now);
    expect(events).toEqual([
      { level: 'error', event: 'dpop_replay_store.unavailable', store: 'redis', reason: 'probe failed' },
      { level: 'info', event: 'dpop_replay_store.recovered', store: 'redis', down_ms: 1_000, failures: 1 },
    ]);
  });

  it('monitors a store: answers and errors are passed on and reported; a synchronous answer is not, a synchronous throw is', async () => {
    const { events, logger } = recorder();
    const health = new ReplayStoreHealth(logger, { kind: 'redis' });
    let down = true;
    const async_ = {
      async consume(key: string) {
        if (down) throw new Error('down');
        return key !== 'seen';
      },
      forgottenUntil: 42,
    };
    const watched = health.monitor(async_);
    expect(watched.forgottenUntil).toBe(42);
    async_.forgottenUntil = 43;
    expect(watched.forgottenUntil).toBe(43);
    await expect(watched.consume('a', 0)).rejects.toThrow('down');
    await expect(watched.consume('b', 0)).rejects.toThrow('down');
    expect(health.errors).toBe(2);
    down = false;
    await expect(watched.consume('c', 0)).resolves.toBe(true);
    await expect(watched.consume('seen', 0)).resolves.toBe(false);
    expect(health.up).toBe(true);
    expect(events.map((e) => e.event)).toEqual(['dpop_replay_store.unavailable', 'dpop_replay_store.recovered']);
    health.stop();

    const sync = new ReplayStoreHealth(logger, { kind: 'memory' });
    let throws = false;
    const watchedSync = sync.monitor({
      consume: (key: string) => {
        if (throws) throw new Error('broken');
        return key === 'first';
      },
    });
    expect(watchedSync.consume('first', 0)).toBe(true);
    expect(watchedSync.forgottenUntil).toBeUndefined();
    throws = true;
    expect(() => watchedSync.consume('x', 0)).toThrow('broken');
    expect(sync.up).toBe(false);
    expect(sync.errors).toBe(1);
    throws = false;
    expect(watchedSync.consume('first', 0)).toBe(true); // a synchronous answer reports nothing
    expect(sync.up).toBe(false);
    sync.stop();
  });

  it('asks the store while it is down, so its return shows without traffic; no more once it is up, or stopped', async () => {
    const { events, logger } = recorder();
    const health = new ReplayStoreHealth(logger, { kind: 'redis', probeEveryMs: 20 });
    let down = true;
    const keys: string[] = [];
    const watched = health.monitor({
      async consume(key: string) {
        keys.push(key);
        if (down) throw new Error('down');
        return true;
      },
    });
    try {
      await expect(watched.consume('proof', 0)).rejects.toThrow('down');
      await until(() => keys.length >= 3);
      expect(keys.slice(1).every((k) => k.startsWith('health-probe:'))).toBe(true);
      expect(health.errors).toBe(1); // the probes count no error
      down = false;
      await until(() => health.up);
      const seen = keys.length;
      await sleep(50);
      expect(keys.length).toBe(seen);
      expect(events.map((e) => e.event)).toEqual(['dpop_replay_store.unavailable', 'dpop_replay_store.recovered']);
      expect(events[1]).toMatchObject({ failures: 1 });

      // stopped: an outage is still seen, but the store is not asked
      health.stop();
      down = true;
      await expect(watched.consume('proof', 0)).rejects.toThrow('down');
      const after = keys.length;
      await sleep(50);
      expect(keys.length).toBe(after);
      expect(await health.check()).toBe(false); // nothing to ask: what was seen
    } finally {
      health.stop();
    }
  });

  it('at most one probe in flight: with a store that does not answer, 20 readiness checks and the timer\'s ticks make one call; all get its answer', async () => {
    const { events, logger } = recorder();
    const health = new ReplayStoreHealth(logger, { kind: 'redis', probeEveryMs: 10 });
    let probes = 0;
    let answer!: (ok: boolean) => void;
    const store = {
      consume(key: string): Promise<boolean> {
        if (!key.startsWith('health-probe:')) return Promise.reject(new Error('connect ECONNREFUSED'));
        probes++;
        // black-holed until the test answers
        return new Promise<boolean>((resolve) => (answer = resolve));
      },
    };
    const watched = health.monitor(store);
    try {
      // down: the timer probes every 10 ms
      await expect(watched.consume('proof', 0)).rejects.toThrow('ECONNREFUSED');
      await until(() => probes === 1);
      const checks = Array.from({ length: 20 }, () => health.check());
      await sleep(100);
      expect(probes).toBe(1);
      answer(true);
      expect(await Promise.all(checks)).toEqual(Array(20).fill(true));
      expect(events.map((e) => e.event)).toEqual(['dpop_replay_store.unavailable', 'dpop_replay_store.recovered']);
      // answered: the next check asks again
      const next = health.check();
      expect(probes).toBe(2);
      answer(true);
      expect(await next).toBe(true);
    } finally {
      health.stop();
    }
  });

  it('check() asks the store now (for readiness): its outage and its return show without a DPoP proof', async () => {
    const { events, logger } = recorder();
    const unmonitored = new ReplayStoreHealth(logger, { kind: 'redis' });
    expect(await unmonitored.check()).toBe(true);

    const health = new ReplayStoreHealth(logger, { kind: 'redis', probeEveryMs: 60_000 });
    let down = false;
    let asked = 0;
    health.monitor({
      async consume() {
        asked++;
        if (down) throw new Error('ECONNREFUSED');
        return true;
      },
    });
    try {
      expect(await health.check()).toBe(true);
      expect(asked).toBe(1);
      down = true;
      expect(await health.check()).toBe(false);
      expect(await health.check()).toBe(false);
      expect(health.errors).toBe(0);
      down = false;
      expect(await health.check()).toBe(true);
      expect(events).toEqual([
        { level: 'error', event: 'dpop_replay_store.unavailable', store: 'redis', reason: 'ECONNREFUSED' },
        { level: 'info', event: 'dpop_replay_store.recovered', store: 'redis', down_ms: expect.any(Number), failures: 0 },
      ]);
    } finally {
      health.stop();
    }
  });

  describe('left without stop() (an issuer never closed), on a gate that outlives it (one per Redis client, for the whole process)', () => {
    /** A health on `gate` watching a store that counts its calls, made in a function of its own so that nothing else keeps it. */
    const made = (gate: ServiceGate, logger: ReturnType<typeof recorder>['logger'], calls: { n: number }) => {
      const health = new ReplayStoreHealth(logger, { kind: 'redis', gate, probeEveryMs: 10 });
      health.monitor({
        async consume() {
          calls.n++;
          throw new Error('ECONNREFUSED');
        },
      });
      return new WeakRef(health);
    };

    it('is not kept by the gate: once collected, the next outage is not logged or probed for it', async () => {
      const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000 });
      const { events, logger } = recorder();
      const calls = { n: 0 };
      const dropped = made(gate, logger, calls);
      expect(await collect(() => dropped.deref() === undefined)).toBe(true);
      gate.failed(new Error('connect ECONNREFUSED'));
      await sleep(50);
      expect([events, calls.n]).toEqual([[], 0]);
    });

    it('dropped in an outage, its probe timer stops and keeps it no more', async () => {
      const gate = new ServiceGate({ name: 'Redis', deadlineMs: 1000 });
      gate.failed(new Error('connect ECONNREFUSED'));
      const { events, logger } = recorder();
      const calls = { n: 0 };
      const dropped = made(gate, logger, calls);
      await until(() => calls.n >= 2); // probing every 10 ms
      expect(await collect(() => dropped.deref() === undefined)).toBe(true);
      const seen = calls.n;
      await sleep(50);
      expect(calls.n).toBe(seen);
      expect(events.map((e) => e.event)).toEqual(['dpop_replay_store.unavailable']);
    });
  });
});
