import { Revoker, StoreRevocationFeed, type RevocationFeed } from '../../lib/core/revocation-feed';
import { RevocationState } from '../../lib/core/revocation';
import { memoryRevocationStore, revocationStoreContract } from './revocation-store-contract';

revocationStoreContract('in-memory reference', async () => memoryRevocationStore());

describe('StoreRevocationFeed + Revoker (shared store, no Redis)', () => {
  let clock = Date.parse('2030-01-01T00:00:00Z');
  const now = () => clock;

  it('an instance that revokes refuses at once; another learns on its next resync; a restarted one loads it all', async () => {
    const shared = memoryRevocationStore();
    const a = new RevocationState({ maxTokenTtl: 600, now });
    const b = new RevocationState({ maxTokenTtl: 600, now });
    const feedA = new StoreRevocationFeed({ state: a, store: shared.store, maxTokenTtl: 600, now });
    const feedB = new StoreRevocationFeed({ state: b, store: shared.store, maxTokenTtl: 600, now });
    await feedA.start();
    await feedB.start();
    const revoker = new Revoker(shared.store, feedA);
    const exp = Math.floor(clock / 1000) + 600;
    await revoker.token('j1', 'c1', exp);
    expect(await revoker.clientTokens('c2', new Date(clock))).toBe(1);
    await shared.revokeClient('c3', new Date(clock));
    await revoker.client('c3', new Date(clock));
    expect(a.isRevoked({ jti: 'j1', client_id: 'c1' })).toBe('token_revoked');
    expect(a.generation('c2')).toBe(1);
    expect(b.isRevoked({ jti: 'j1', client_id: 'c1' })).toBe(false);
    await feedB.resync(); // what its timer (resyncMs, default 2 s) or a NOTIFY does
    expect(b.isRevoked({ jti: 'j1', client_id: 'c1' })).toBe('token_revoked');
    expect(b.isRevoked({ jti: 'x', client_id: 'c2', gen: 0 })).toBe('tokens_revoked_before');
    expect(b.isRevoked({ jti: 'x', client_id: 'c3' })).toBe('client_revoked');
    // RV11: a restart forgets nothing
    const restarted = new RevocationState({ maxTokenTtl: 600, now });
    await new StoreRevocationFeed({ state: restarted, store: shared.store, maxTokenTtl: 600, now }).start();
    expect(restarted.snapshot()).toEqual(a.snapshot());
    await Promise.all([feedA.close(), feedB.close()]);
  });

  it('clockTolerance: an entry past its exp but within the tolerance is loaded by a starting instance; past it, not; the store keeps it for the largest tolerance (300 s)', async () => {
    const shared = memoryRevocationStore();
    const exp = Math.floor(clock / 1000) + 60;
    await shared.store.revokeToken({ jti: 'j1', clientId: 'c1', exp: new Date(exp * 1000) });
    const start = (at: number) => {
      const state = new RevocationState({ maxTokenTtl: 600, clockTolerance: 30, now: () => at });
      const feed = new StoreRevocationFeed({ state, store: shared.store, maxTokenTtl: 600, clockTolerance: 30, now: () => at, purgeEveryMs: 0 });
      return { state, feed };
    };
    // 20 s past exp: verifiers with a 30 s tolerance still accept the token, so the entry counts
    const late = start((exp + 20) * 1000);
    await late.feed.start();
    expect(late.state.isRevoked({ jti: 'j1', client_id: 'c1' })).toBe('token_revoked');
    expect((await shared.store.listRevocations(new Date(0), new Date(0))).tokens).toHaveLength(1);
    await late.feed.close();
    // 31 s past exp: not loaded here, but kept in the store for an instance with a larger tolerance
    const later = start((exp + 31) * 1000);
    await later.feed.start();
    expect(later.state.size().tokens).toBe(0);
    expect((await shared.store.listRevocations(new Date(0), new Date(0))).tokens).toHaveLength(1);
    await later.feed.close();
    // 301 s past exp: no instance accepts the token any more; purged from the store
    const last = start((exp + 301) * 1000);
    await last.feed.start();
    expect((await shared.store.listRevocations(new Date(0), new Date(0))).tokens).toEqual([]);
    await last.feed.close();
  });

  it('a ring that fails after the write is reported, and the revocation stands: stored, in force here, the call resolves', async () => {
    const shared = memoryRevocationStore();
    const state = new RevocationState({ maxTokenTtl: 600, now });
    const failures: unknown[] = [];
    const feed = new StoreRevocationFeed({
      state,
      store: shared.store,
      maxTokenTtl: 600,
      now,
      notify: () => Promise.reject(new Error('NOTIFY failed')),
      onNotifyError: (err) => failures.push(err),
    });
    await feed.start();
    const revoker = new Revoker(shared.store, feed);
    await expect(revoker.clientTokens('c1', new Date(clock))).resolves.toBe(1);
    await expect(revoker.token('j1', 'c1', Math.floor(clock / 1000) + 600)).resolves.toBeUndefined();
    expect(failures.map((e) => (e as Error).message)).toEqual(['NOTIFY failed', 'NOTIFY failed']);
    expect(state.isRevoked({ jti: 'j1', client_id: 'c1', gen: 1 })).toBe('token_revoked');
    expect(state.generation('c1')).toBe(1);
    const other = new RevocationState({ maxTokenTtl: 600, now });
    await new StoreRevocationFeed({ state: other, store: shared.store, maxTokenTtl: 600, now }).start();
    expect(other.snapshot()).toEqual(state.snapshot());
    await feed.close();
  });

  it('the timer resyncs every resyncMs and purges expired entries from the store', async () => {
    const shared = memoryRevocationStore();
    const b = new RevocationState({ maxTokenTtl: 600 });
    const feed = new StoreRevocationFeed({ state: b, store: shared.store, maxTokenTtl: 600, resyncMs: 50, purgeEveryMs: 0 });
    await feed.start();
    try {
      await shared.store.revokeToken({ jti: 'late', clientId: 'c1', exp: new Date(Date.now() + 60_000) });
      // expired longer ago than any instance's clock tolerance (300 s at most)
      await shared.store.revokeToken({ jti: 'dead', clientId: 'c1', exp: new Date(Date.now() - 301_000) });
      for (let i = 0; i < 200 && b.isRevoked({ jti: 'late', client_id: 'c1' }) === false; i++) await new Promise((r) => setTimeout(r, 10));
      expect(b.isRevoked({ jti: 'late', client_id: 'c1' })).toBe('token_revoked');
      expect(await shared.store.purgeExpiredRevocations(new Date())).toBe(0); // the feed purged 'dead' already
    } finally {
      await feed.close();
    }
  });

  it('notify (e.g. NOTIFY) tells the others at once', async () => {
    const shared = memoryRevocationStore();
    const a = new RevocationState({ maxTokenTtl: 600, now });
    const b = new RevocationState({ maxTokenTtl: 600, now });
    const feedB = new StoreRevocationFeed({ state: b, store: shared.store, maxTokenTtl: 600, now });
    const feedA = new StoreRevocationFeed({ state: a, store: shared.store, maxTokenTtl: 600, now, notify: () => feedB.resync() });
    await feedB.start();
    await new Revoker(shared.store, feedA).clientTokens('c1', new Date(clock));
    expect(b.generation('c1')).toBe(1);
    await feedB.close();
  });

  it('Revoker works over any feed (one of the test\'s own, applying to two states in one process)', async () => {
    const shared = memoryRevocationStore();
    const a = new RevocationState({ maxTokenTtl: 600, now });
    const b = new RevocationState({ maxTokenTtl: 600, now });
    const fa: RevocationFeed = {
      publish: async (events) => {
        a.apply(events);
        b.apply(events);
      },
      start: async () => undefined,
      close: async () => undefined,
    };
    await new Revoker(shared.store, fa).token('j', 'c', Math.floor(clock / 1000) + 60);
    expect(b.isRevoked({ jti: 'j', client_id: 'c' })).toBe('token_revoked');
    expect((await shared.store.listRevocations(new Date(clock), new Date(clock - 600_000))).tokens).toHaveLength(1);
  });

  it('a store that tells its revocations version: reloads are skipped while it stays, done when it moves, and after each purge', async () => {
    const shared = memoryRevocationStore();
    let version = 1;
    let lists = 0;
    const store = {
      ...shared.store,
      revocationsVersion: async () => version,
      listRevocations: (n: Date, since: Date) => {
        lists++;
        return shared.store.listRevocations(n, since);
      },
    };
    const state = new RevocationState({ maxTokenTtl: 600, now });
    const feed = new StoreRevocationFeed({ state, store, maxTokenTtl: 600, now, purgeEveryMs: 60_000 });
    await feed.start();
    expect(lists).toBe(1);
    await feed.resync();
    await feed.resync();
    expect(lists).toBe(1); // nothing moved: no reload
    // another writer: the version moves, the next resync reloads and sees it
    await shared.store.revokeToken({ jti: 'other', clientId: 'c9', exp: new Date(clock + 60_000) });
    version = 2;
    await feed.resync();
    expect(lists).toBe(2);
    expect(state.isRevoked({ jti: 'other', client_id: 'c9' })).toBe('token_revoked');
    // a write the version missed is still picked up by the full reload that follows each purge
    await shared.store.revokeToken({ jti: 'missed', clientId: 'c9', exp: new Date(clock + 120_000) });
    await feed.resync();
    expect(state.isRevoked({ jti: 'missed', client_id: 'c9' })).toBe(false);
    clock += 60_000;
    await feed.resync();
    expect(lists).toBe(3);
    expect(state.isRevoked({ jti: 'missed', client_id: 'c9' })).toBe('token_revoked');
    await feed.close();
  });
});
