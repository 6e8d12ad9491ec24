/**
 * What every RevocationStore must do, as a suite the stores can run
 * (embedded, PostgreSQL) once they implement it: call
 * revocationStoreContract(name, open) from their own test file. `open`
 * gives a fresh, empty store and a way to revoke a client the way the
 * ClientStore does (listRevocations reports revoked clients).
 */
import type { RevocationSnapshot, RevocationStore } from '../../lib/stores/types';

export interface RevocationStoreUnderTest {
  store: RevocationStore;
  /** Marks a client revoked at `at`, as ClientStore.revokeClient does. */
  revokeClient(clientId: string, at: Date): Promise<void>;
  close(): Promise<void>;
}

const T0 = Date.parse('2030-01-01T00:00:00Z');
const at = (s: number) => new Date(T0 + s * 1000);

const byJti = (s: RevocationSnapshot) => [...s.tokens].sort((a, b) => a.jti.localeCompare(b.jti));

export function revocationStoreContract(name: string, open: () => Promise<RevocationStoreUnderTest>, options: { manyTokens?: number } = {}): void {
  describe(`RevocationStore contract: ${name}`, () => {
    let t: RevocationStoreUnderTest;
    beforeEach(async () => {
      t = await open();
    });
    afterEach(async () => {
      await t.close();
    });

    it('keeps a denylisted jti until its exp; adding it twice keeps one entry', async () => {
      await t.store.revokeToken({ jti: 'j1', clientId: 'c1', exp: at(600) });
      await t.store.revokeToken({ jti: 'j1', clientId: 'c1', exp: at(600) });
      await t.store.revokeToken({ jti: 'j2', clientId: 'c2', exp: at(60) });
      expect(byJti(await t.store.listRevocations(at(0), at(-600)))).toEqual([
        { jti: 'j1', client_id: 'c1', exp: T0 / 1000 + 600 },
        { jti: 'j2', client_id: 'c2', exp: T0 / 1000 + 60 },
      ]);
      // at 61 s, j2's token has expired: no longer listed even before a purge
      expect(byJti(await t.store.listRevocations(at(61), at(-539)))).toEqual([{ jti: 'j1', client_id: 'c1', exp: T0 / 1000 + 600 }]);
    });

    it('raises a generation atomically: concurrent bumps get distinct numbers, the last one is listed', async () => {
      const results = await Promise.all(Array.from({ length: 20 }, () => t.store.bumpTokenGeneration('c1', at(0))));
      expect([...results].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
      expect(await t.store.bumpTokenGeneration('c2', at(0))).toBe(1);
      const { clients } = await t.store.listRevocations(at(0), at(-600));
      expect(clients.filter((c) => c.generation > 0).sort((a, b) => a.client_id.localeCompare(b.client_id))).toEqual([
        { client_id: 'c1', generation: 20, revoked_at: null },
        { client_id: 'c2', generation: 1, revoked_at: null },
      ]);
    });

    it("a raised generation deletes the client's denylisted tokens (it refuses them all), not another client's", async () => {
      await t.store.revokeToken({ jti: 'a1', clientId: 'c1', exp: at(600) });
      await t.store.revokeToken({ jti: 'a2', clientId: 'c1', exp: at(600) });
      await t.store.revokeToken({ jti: 'b1', clientId: 'c2', exp: at(600) });
      expect(await t.store.bumpTokenGeneration('c1', at(0))).toBe(1);
      expect(byJti(await t.store.listRevocations(at(0), at(-600)))).toEqual([{ jti: 'b1', client_id: 'c2', exp: T0 / 1000 + 600 }]);
      // one revoked after the raise stays
      await t.store.revokeToken({ jti: 'a3', clientId: 'c1', exp: at(600) });
      expect(byJti(await t.store.listRevocations(at(0), at(-600))).map((e) => e.jti)).toEqual(['a3', 'b1']);
    });

    it('lists clients revoked since `revokedSince`, with their generation', async () => {
      await t.store.bumpTokenGeneration('old', at(-1000));
      await t.revokeClient('old', at(-1000));
      await t.revokeClient('recent', at(-10));
      const { clients } = await t.store.listRevocations(at(0), at(-600));
      expect(clients.sort((a, b) => a.client_id.localeCompare(b.client_id))).toEqual([
        { client_id: 'old', generation: 1, revoked_at: null },
        { client_id: 'recent', generation: 0, revoked_at: T0 - 10_000 },
      ]);
    });

    it(`purges expired entries: ${options.manyTokens ?? 10_000} revoked tokens, none left after they expired`, async () => {
      const n = options.manyTokens ?? 10_000;
      for (let i = 0; i < n; i += 500) {
        await Promise.all(
          Array.from({ length: Math.min(500, n - i) }, (_, k) => t.store.revokeToken({ jti: `jti-${i + k}`, clientId: 'c1', exp: at(600 - ((i + k) % 2) * 300) })),
        );
      }
      expect((await t.store.listRevocations(at(0), at(-600))).tokens).toHaveLength(n);
      expect(await t.store.purgeExpiredRevocations(at(301))).toBe(Math.floor(n / 2));
      expect((await t.store.listRevocations(at(301), at(-299))).tokens).toHaveLength(n - Math.floor(n / 2));
      expect(await t.store.purgeExpiredRevocations(at(601))).toBe(n - Math.floor(n / 2));
      expect((await t.store.listRevocations(at(0), at(-600))).tokens).toEqual([]);
    }, 30_000); // 10,000 writes: 2-11 s on PostgreSQL on a busy 2-core machine

    it('revocationsVersion (when offered) moves with every revocation write, and reading does not move it', async () => {
      if (!t.store.revocationsVersion) return; // optional: without it the feed reloads every time
      const v0 = await t.store.revocationsVersion();
      expect(await t.store.revocationsVersion()).toBe(v0);
      await t.store.revokeToken({ jti: 'v1', clientId: 'c1', exp: at(600) });
      const v1 = await t.store.revocationsVersion();
      expect(v1).not.toBe(v0);
      await t.store.bumpTokenGeneration('c1', at(0));
      const v2 = await t.store.revocationsVersion();
      expect(v2).not.toBe(v1);
      await t.revokeClient('c2', at(0));
      const v3 = await t.store.revocationsVersion();
      expect(v3).not.toBe(v2);
      // purging expired entries changes no answer: the version may move or stand
      await t.store.purgeExpiredRevocations(at(0));
      const v4 = await t.store.revocationsVersion();
      await t.store.listRevocations(at(0), at(-600));
      expect(await t.store.revocationsVersion()).toBe(v4); // reading moves nothing
      await t.store.revokeToken({ jti: 'v1', clientId: 'c1', exp: at(900) }); // the same jti again, a later exp
      expect(await t.store.revocationsVersion()).not.toBe(v4);
    });
  });
}

/** The reference implementation the contract runs against here; also documents the intended semantics. */
export function memoryRevocationStore(): RevocationStoreUnderTest {
  const tokens = new Map<string, { clientId: string; exp: number }>();
  const generations = new Map<string, number>();
  const revoked = new Map<string, number>();
  const store: RevocationStore = {
    async revokeToken({ jti, clientId, exp }) {
      if (!tokens.has(jti)) tokens.set(jti, { clientId, exp: Math.floor(exp.getTime() / 1000) });
    },
    async bumpTokenGeneration(clientId) {
      await Promise.resolve();
      const g = (generations.get(clientId) ?? 0) + 1;
      generations.set(clientId, g);
      for (const [jti, e] of tokens) if (e.clientId === clientId) tokens.delete(jti);
      return g;
    },
    async listRevocations(now, revokedSince) {
      const nowS = now.getTime() / 1000;
      const snapshot: RevocationSnapshot = { tokens: [], clients: [] };
      for (const [jti, e] of tokens) if (e.exp > nowS) snapshot.tokens.push({ jti, client_id: e.clientId, exp: e.exp });
      const ids = new Set([...generations.keys(), ...revoked.keys()]);
      for (const id of ids) {
        const r = revoked.get(id);
        const revokedAt = r !== undefined && r >= revokedSince.getTime() ? r : null;
        const generation = generations.get(id) ?? 0;
        if (generation > 0 || revokedAt !== null) snapshot.clients.push({ client_id: id, generation, revoked_at: revokedAt });
      }
      return snapshot;
    },
    async purgeExpiredRevocations(now) {
      let n = 0;
      for (const [jti, e] of tokens) if (e.exp * 1000 <= now.getTime()) n += Number(tokens.delete(jti));
      return n;
    },
  };
  return {
    store,
    revokeClient: async (clientId, when) => {
      if (!revoked.has(clientId)) revoked.set(clientId, when.getTime());
    },
    close: async () => undefined,
  };
}
