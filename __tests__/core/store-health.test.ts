import { StoreUnavailableError, TemporarilyUnavailableError } from '../../lib/errors';
import { asTemporarilyUnavailable, StoreHealth } from '../../lib/core/store-health';
import { recorder } from '../helpers/log-recorder';
import { until } from '../helpers/until';

describe('StoreHealth', () => {
  it('logs store.unavailable once per outage and store.recovered when a call succeeds again', () => {
    const { events, logger } = recorder();
    let now = 1_000;
    const health = new StoreHealth(logger, () => now);
    health.succeeded();
    expect(events).toEqual([]);

    for (let i = 0; i < 50; i++) health.failed(new StoreUnavailableError('PostgreSQL is unavailable: connect ECONNREFUSED'));
    expect(health.up).toBe(false);
    now = 4_500;
    health.succeeded();
    health.succeeded();
    expect(health.up).toBe(true);
    expect(events).toEqual([
      { level: 'error', event: 'store.unavailable', reason: 'PostgreSQL is unavailable: connect ECONNREFUSED', access: 'read' },
      { level: 'info', event: 'store.recovered', down_ms: 3_500, failures: 50 },
    ]);

    // a second outage is a second event
    health.failed(new StoreUnavailableError('again'));
    expect(events.filter((e) => e.event === 'store.unavailable')).toHaveLength(2);
  });

  it('a call begun before the outage was seen does not end it when it succeeds late; one begun after does', async () => {
    const { events, logger } = recorder();
    let now = 1_000;
    const health = new StoreHealth(logger, () => now);
    let finishOld!: () => void;
    const old = health.watch(new Promise<void>((resolve) => (finishOld = resolve)));
    now = 1_010;
    await health.watch(Promise.reject(new StoreUnavailableError('cut'))).catch(() => undefined);
    now = 1_020;
    finishOld();
    await old;
    expect(health.up).toBe(false);
    await health.watch(Promise.resolve());
    expect(health.up).toBe(true);
    expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
  });

  it('does not count other errors', () => {
    const { events, logger } = recorder();
    const health = new StoreHealth(logger);
    health.failed(new TypeError('x'));
    expect(health.up).toBe(true);
    expect(events).toEqual([]);
  });

  it('turns an outage into a 503 with Retry-After, and leaves other errors alone', () => {
    const mapped = asTemporarilyUnavailable(new StoreUnavailableError('PostgreSQL is unavailable: x'));
    expect(mapped).toBeInstanceOf(TemporarilyUnavailableError);
    expect((mapped as TemporarilyUnavailableError).status).toBe(503);
    expect((mapped as TemporarilyUnavailableError).headers).toEqual({ 'Retry-After': '5' });
    expect((mapped as TemporarilyUnavailableError).toJSON()).toEqual({ error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' });
    const bug = new TypeError('x');
    expect(asTemporarilyUnavailable(bug)).toBe(bug);
  });

  it('monitors a store: each call is reported, results and errors are passed on', async () => {
    const { events, logger } = recorder();
    const health = new StoreHealth(logger);
    let down = true;
    const store = {
      kind: 'fake',
      async listKeys() {
        if (down) throw new StoreUnavailableError('down');
        return [];
      },
    };
    const watched = health.monitor(store as never) as unknown as typeof store;
    expect(watched.kind).toBe('fake');
    await expect(watched.listKeys()).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(watched.listKeys()).rejects.toBeInstanceOf(StoreUnavailableError);
    down = false;
    await expect(watched.listKeys()).resolves.toEqual([]);
    expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
  });
});

describe('StoreHealth: a store that reads but cannot write (a full disk)', () => {
  const full = () => new StoreUnavailableError('the embedded store is unavailable: database or disk is full (SQLITE_FULL)');

  it('is one outage that reads do not end: one store.unavailable, read_only, and one store.recovered when a write works', () => {
    const { events, logger } = recorder();
    let now = 1_000;
    const health = new StoreHealth(logger, () => now);
    for (let i = 0; i < 20; i++) {
      health.failed(full(), 'write');
      now += 10;
      health.succeeded(now - 5, 'read');
    }
    expect(health.up).toBe(false);
    expect(health.state).toBe('read_only');
    expect(events).toEqual([{ level: 'error', event: 'store.unavailable', reason: expect.stringContaining('SQLITE_FULL'), access: 'write' }]);
    now = 2_000;
    health.succeeded(now, 'write');
    expect(health.state).toBe('up');
    expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
    expect(events[1]).toMatchObject({ down_ms: 1_000, failures: 20 });
  });

  it('reads failing too make it down; reads back leave it read_only until a write works', () => {
    const { events, logger } = recorder();
    const health = new StoreHealth(logger);
    health.failed(full(), 'write');
    health.failed(new StoreUnavailableError('cut'), 'read');
    expect(health.state).toBe('down');
    health.succeeded(undefined, 'read');
    expect(health.state).toBe('read_only');
    health.succeeded(undefined, 'write');
    expect(health.state).toBe('up');
    expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
  });

  it('probes writes while they fail, so the end of the outage shows without traffic', async () => {
    const { events, logger } = recorder();
    let writable = false;
    let probes = 0;
    const health = new StoreHealth(logger, Date.now, {
      probeEveryMs: 20,
      probeWrite: async () => {
        probes++;
        if (!writable) throw full();
      },
    });
    try {
      health.failed(full(), 'write');
      await until(() => probes >= 2);
      expect(health.state).toBe('read_only');
      writable = true;
      await until(() => health.state === 'up');
      const seen = probes;
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(probes).toBe(seen); // no probe once it is up
      expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
    } finally {
      health.stop();
    }
  });

  it('a read that succeeds while writes fail probes a write at once, at most once a second, one probe at a time', async () => {
    const { events, logger } = recorder();
    let now = 10_000;
    let probes = 0;
    let settle: ((ok: boolean) => void) | undefined;
    const health = new StoreHealth(logger, () => now, {
      probeEveryMs: 60_000,
      probeWrite: () => {
        probes++;
        return new Promise<void>((resolve, reject) => (settle = (ok) => (ok ? resolve() : reject(full()))));
      },
    });
    const tick = () => new Promise((resolve) => setImmediate(resolve));
    try {
      health.failed(full(), 'write');
      health.succeeded(now, 'read');
      expect(probes).toBe(1);
      now += 2_000;
      health.succeeded(now, 'read'); // a probe is under way: no second one
      expect(probes).toBe(1);
      settle!(false);
      await tick();
      expect(health.state).toBe('read_only');
      now += 500;
      health.succeeded(now, 'read'); // the last probe began 2.5 s ago
      expect(probes).toBe(2);
      settle!(false);
      await tick();
      now += 500;
      health.succeeded(now, 'read'); // the last probe began 500 ms ago
      expect(probes).toBe(2);
      now += 500;
      health.succeeded(now, 'read');
      expect(probes).toBe(3);
      settle!(true);
      await tick();
      expect(health.state).toBe('up');
      expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
      expect(events[1]).toMatchObject({ down_ms: 3_500, failures: 3 });
    } finally {
      health.stop();
    }
  });

  it('stop() ends the write probe, and no probe starts after it', async () => {
    const { logger } = recorder();
    let probes = 0;
    const health = new StoreHealth(logger, Date.now, {
      probeEveryMs: 10,
      probeWrite: async () => {
        probes++;
        throw full();
      },
    });
    health.failed(full(), 'write');
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(probes).toBeGreaterThanOrEqual(1);
    health.stop();
    const seen = probes;
    health.succeeded(undefined, 'read');
    health.failed(full(), 'write');
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(probes).toBe(seen);
    expect(health.state).toBe('read_only');
  });

  it('monitors a store: a write that changed nothing does not end an outage of writes; a row written does', async () => {
    const { events, logger } = recorder();
    const health = new StoreHealth(logger);
    let full_ = true;
    const store = {
      async consumeJti() {
        if (full_) throw full();
        return true;
      },
      async pruneKeys() {
        return 0;
      },
      async findClient() {
        return null;
      },
    };
    const watched = health.monitor(store as never) as unknown as typeof store;
    await expect(watched.consumeJti()).rejects.toBeInstanceOf(StoreUnavailableError);
    await watched.findClient();
    await watched.pruneKeys();
    expect(health.state).toBe('read_only');
    full_ = false;
    await watched.consumeJti();
    expect(health.state).toBe('up');
    expect(events.map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
  });
});
