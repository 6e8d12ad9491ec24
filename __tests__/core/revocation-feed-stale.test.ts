/**
 * StoreRevocationFeed's staleness: once no reload has reached the store for
 * maxStaleMs, the feed says so (what another instance revoked since may be
 * missing here); the next reload that reaches it ends that.
 */
import { StoreRevocationFeed } from '../../lib/core/revocation-feed';
import { RevocationState } from '../../lib/core/revocation';
import type { RevocationStore } from '../../lib/stores/types';
import { memoryRevocationStore } from './revocation-store-contract';

test('stale past maxStaleMs without a reload that reached the store, told once each way; a version read that finds nothing new counts as reaching it', async () => {
  let clock = Date.parse('2030-01-01T00:00:00Z');
  const now = () => clock;
  const shared = memoryRevocationStore();
  let down = false;
  let versionReads = 0;
  const failing = (): Promise<never> => Promise.reject(new Error('connection refused'));
  const store: RevocationStore = {
    ...shared.store,
    listRevocations: (...args) => (down ? failing() : shared.store.listRevocations(...args)),
    purgeExpiredRevocations: (...args) => (down ? failing() : shared.store.purgeExpiredRevocations(...args)),
    revocationsVersion: async () => {
      if (down) return failing();
      versionReads++;
      return 1;
    },
  };
  const told: [boolean, number, string | undefined][] = [];
  const feed = new StoreRevocationFeed({
    state: new RevocationState({ maxTokenTtl: 600, now }),
    store,
    maxTokenTtl: 600,
    now,
    maxStaleMs: 300_000,
    onStale: (stale, { sinceMs, err }) => told.push([stale, sinceMs, err instanceof Error ? err.message : undefined]),
  });
  await feed.start();
  clock += 60_000;
  await feed.resync(); // the version did not move: no reload, but the store answered
  expect(versionReads).toBe(2);
  expect(feed.stale).toBe(false);

  down = true;
  clock += 200_000;
  await expect(feed.resync()).rejects.toThrow('connection refused');
  expect(feed.stale).toBe(false); // 200 s since the store last answered: within 300 s
  clock += 100_001;
  await expect(feed.resync()).rejects.toThrow('connection refused');
  expect(feed.stale).toBe(true);
  clock += 10_000;
  await expect(feed.resync()).rejects.toThrow('connection refused');
  expect(told).toEqual([[true, 300_001, 'connection refused']]);

  down = false;
  clock += 1_000;
  await feed.resync();
  expect(feed.stale).toBe(false);
  expect(told).toEqual([
    [true, 300_001, 'connection refused'],
    [false, 311_001, undefined],
  ]);
  await feed.close();
});

test('without maxStaleMs, never stale', async () => {
  let clock = 0;
  const shared = memoryRevocationStore();
  let down = false;
  const store: RevocationStore = { ...shared.store, listRevocations: (...args) => (down ? Promise.reject(new Error('down')) : shared.store.listRevocations(...args)) };
  const feed = new StoreRevocationFeed({ state: new RevocationState({ maxTokenTtl: 600, now: () => clock }), store, maxTokenTtl: 600, now: () => clock, purgeEveryMs: 1e12 });
  await feed.start();
  down = true;
  clock += 86_400_000;
  await expect(feed.resync()).rejects.toThrow('down');
  expect(feed.stale).toBe(false);
  await feed.close();
});
