import { rmSync } from 'node:fs';
import { KeyRing, type KeyRingOptions } from '../../lib/core/keys';
import { openEmbeddedStore, type EmbeddedStore } from '../../lib/stores/embedded';
import { tempDir } from '../helpers/app';

const MIN = 60_000;

describe('KeyRing', () => {
  let dir: string;
  let store: EmbeddedStore;
  let clock: number;
  const ring = (overrides: Partial<KeyRingOptions> = {}) =>
    new KeyRing(store, {
      algorithm: 'ES256',
      maxTokenTtl: 3600,
      reloadCooldownMs: 5_000,
      refreshMs: 30_000,
      rotationLeadTimeMs: 5 * MIN,
      now: () => clock,
      ...overrides,
    });
  /** Two instances on one store, initialised one after the other. */
  const twoInstances = async () => {
    const a = ring();
    const b = ring();
    await a.init();
    await b.init();
    return [a, b] as const;
  };

  beforeEach(async () => {
    dir = tempDir();
    store = await openEmbeddedStore({ dataDir: dir });
    clock = Date.parse('2030-01-01T00:00:00Z');
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates one key on first start and reuses it after', async () => {
    const a = ring();
    await a.init();
    const b = ring();
    await b.init();
    expect(b.current().kid).toBe(a.current().kid);
    expect((await store.listKeys()).length).toBe(1);
  });

  it('publishes a rotated key at once and signs with it only after the lead time', async () => {
    const r = ring();
    await r.init();
    const old = r.current();
    const next = await r.rotate(5 * MIN);
    expect(r.jwks().keys.map((k) => k.kid).sort()).toEqual([old.kid, next.kid].sort());
    expect(r.current().kid).toBe(old.kid);
    clock += 5 * MIN;
    expect(r.current().kid).toBe(next.kid);
  });

  it('another instance picks up a rotation on its next background refresh', async () => {
    const [a, b] = await twoInstances();
    const next = await a.rotate(MIN);
    expect(b.peek(next.kid)).toBeUndefined();
    clock += 31_000; // past refreshMs: the next use reloads in the background
    b.jwks();
    await b.reload(); // joins the background reload
    expect(b.peek(next.kid)).toBeDefined();
    clock += MIN;
    expect(b.current().kid).toBe(next.kid);
  });

  it('reloads on an unknown kid at most once per cooldown', async () => {
    const a = ring();
    await a.init();
    const listKeys = jest.spyOn(store, 'listKeys');
    clock += 10_000;
    expect(await a.resolve('nope-1')).toBeUndefined();
    expect(await a.resolve('nope-2')).toBeUndefined();
    expect(await a.resolve('nope-3')).toBeUndefined();
    expect(listKeys).toHaveBeenCalledTimes(1);
    clock += 5_000;
    await a.resolve('nope-4');
    expect(listKeys).toHaveBeenCalledTimes(2);
  });

  it('finds a key rotated in by another instance at once, right after a reload that found a kid', async () => {
    const [a, b] = await twoInstances();
    const listKeys = jest.spyOn(store, 'listKeys');
    const first = await a.rotate(MIN);
    listKeys.mockClear();
    expect(await b.resolve(first.kid)).toBeDefined();
    const second = await a.rotate(MIN);
    listKeys.mockClear();
    expect(await b.resolve(second.kid)).toBeDefined(); // no cooldown after a reload that found its kid
    expect(listKeys).toHaveBeenCalledTimes(1);
  });

  it('concurrent unknown kids share one reload', async () => {
    const a = ring();
    await a.init();
    const listKeys = jest.spyOn(store, 'listKeys');
    clock += 10_000;
    const answers = await Promise.all([a.resolve('nope-1'), a.resolve('nope-2'), a.resolve('nope-3')]);
    expect(answers).toEqual([undefined, undefined, undefined]);
    expect(listKeys).toHaveBeenCalledTimes(1);
  });

  it('within the cooldown of a reload that found nothing, an unknown kid does not join a reload under way', async () => {
    const [a, b] = await twoInstances();
    expect(await b.resolve('nope')).toBeUndefined();
    const next = await a.rotate(MIN);
    const reloading = b.reload();
    expect(b.resolve(next.kid)).toBeUndefined();
    await reloading;
    expect(b.resolve(next.kid)).toBeDefined();
  });

  it('a store that cannot be asked: the unknown kid gets its error (not "unknown kid"), again without asking until the cooldown ends', async () => {
    const [a, b] = await twoInstances();
    const listKeys = jest.spyOn(store, 'listKeys');
    const down = new Error('the store is unavailable');
    listKeys.mockRejectedValueOnce(down);
    clock += 10_000;
    await expect(b.resolve('nope')).rejects.toBe(down);
    expect(listKeys).toHaveBeenCalledTimes(1);
    clock += 4_999;
    await expect(b.resolve('other')).rejects.toBe(down);
    expect(listKeys).toHaveBeenCalledTimes(1);
    // the store is back, with a key rotated in meanwhile: asked again once the cooldown is over
    const next = await a.rotate(MIN);
    listKeys.mockClear();
    clock += 1;
    expect(await b.resolve(next.kid)).toBeDefined();
    expect(listKeys).toHaveBeenCalledTimes(1);
    expect(await b.resolve('made-up')).toBeUndefined(); // a reload that finds nothing: unknown kid again
    expect(listKeys).toHaveBeenCalledTimes(2);
  });

  it('a pending key withdrawn by a later rotation stays published one key refresh longer than its tokens: an instance that had not reloaded may have signed with it when it was due', async () => {
    const r = ring();
    await r.init();
    const pending = await r.rotate(5 * MIN);
    await r.rotate(10 * MIN); // withdraws `pending`: it retires as it would have activated
    const due = clock + 5 * MIN;
    clock = due + 3600 * 1000 + 1_000; // past its retirement plus the token lifetime
    expect(await r.prune()).toBe(0);
    expect(r.peek(pending.kid)).toBeDefined();
    clock = due + 3600 * 1000 + 30_000 + 1_000; // plus one key refresh (30 s)
    await r.prune();
    expect(r.peek(pending.kid)).toBeUndefined();
  });

  it('a rotation with a lead time shorter than the key refresh keeps the old key published until what an instance that had not reloaded signed with it has expired', async () => {
    const r = ring();
    await r.init();
    const old = r.current();
    const rotatedAt = clock;
    await r.rotate(1_000); // 1 s lead, 30 s refresh: another instance may sign with `old` until rotatedAt + 30 s
    clock = rotatedAt + 1_000 + 3600 * 1000 + 1_000; // past its retirement plus the token lifetime
    expect(await r.prune()).toBe(0);
    expect(r.peek(old.kid)).toBeDefined();
    clock = rotatedAt + 30_000 + 3600 * 1000 + 1_000; // past the last token such an instance could have signed
    await r.prune();
    expect(r.peek(old.kid)).toBeUndefined();
  });

  it('a rotation with a lead time of at least the key refresh adds nothing: every instance switches when the new key activates', async () => {
    const r = ring();
    await r.init();
    const old = r.current();
    const rotatedAt = clock;
    await r.rotate(30_000);
    clock = rotatedAt + 30_000 + 3600 * 1000 + 1_000;
    await r.prune();
    expect(r.peek(old.kid)).toBeUndefined();
  });

  it('keeps a retired key published until its tokens expire, then prunes it', async () => {
    const r = ring();
    await r.init();
    const old = r.current();
    await r.rotate(0);
    clock += 1;
    expect(await r.prune()).toBe(0);
    expect(r.peek(old.kid)).toBeDefined();
    clock += 3600 * 1000; // its tokens' lifetime: still published, as an instance that had not reloaded may have signed for one key refresh more
    expect(await r.prune()).toBe(0);
    clock += 30_000;
    expect(await r.prune()).toBe(1);
    expect(r.peek(old.kid)).toBeUndefined();
    expect(r.jwks().keys).toHaveLength(1);
  });

  it('instances with different token lifetimes on one store: a retired key stays until the longest one runs out, whoever prunes', async () => {
    const long = ring({ maxTokenTtl: 3600 });
    await long.init();
    const old = long.current();
    const short = ring({ maxTokenTtl: 10 });
    await short.init();
    expect(short.current().kid).toBe(old.kid);
    // the CLI (or either instance) rotates; the one with 10 s tokens prunes 20 s later, on its own and by hand
    await short.rotate(0);
    await long.reload();
    clock += 20_000 + 31_000;
    short.jwks(); // its background refresh would prune
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await short.prune()).toBe(0);
    expect((await store.listKeys()).map((k) => k.kid)).toContain(old.kid);
    expect(short.peek(old.kid)).toBeDefined();
    // once the longest lifetime has run out, it goes, and key.pruned names it
    const logged: Record<string, unknown>[] = [];
    const third = ring({ maxTokenTtl: 10, logger: { info: (o) => void logged.push(o), warn: () => undefined, error: () => undefined } });
    await third.init();
    clock += 3600 * 1000;
    expect(await third.prune()).toBe(1);
    expect(logged).toEqual([expect.objectContaining({ event: 'key.pruned', count: 1, kids: [old.kid] })]);
    // a key rotated in carries its maker's lifetime; an instance with a longer one raises it when it loads the key
    await third.rotate(5 * MIN);
    const pending = async () => (await store.listKeys()).find((k) => k.retiredAt === null)!;
    expect((await pending()).tokenTtl).toBe(10);
    await long.reload();
    expect((await pending()).tokenTtl).toBe(3600);
  });

  it('a process that signs nothing (the CLI) records no lifetime: the keys it makes carry none until an issuer loads them', async () => {
    const issuer = ring({ maxTokenTtl: 600 });
    await issuer.init();
    const cli = ring({ maxTokenTtl: 3600, signs: false });
    await cli.reload();
    expect((await store.listKeys()).map((k) => k.tokenTtl)).toEqual([600]);
    await cli.rotate(5 * MIN);
    expect((await store.listKeys()).map((k) => k.tokenTtl)).toEqual([600, 0]);
    await issuer.reload();
    expect((await store.listKeys()).map((k) => k.tokenTtl)).toEqual([600, 600]);
  });

  it('prunes expired retired keys by itself on a background refresh', async () => {
    const r = ring();
    await r.init();
    const old = r.current();
    await r.rotate(0);
    clock += 3600 * 1000 + 31_000; // every token of the old key has expired, and the keys are stale
    r.jwks(); // starts the background prune + reload
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await store.listKeys()).map((k) => k.kid)).not.toContain(old.kid);
    expect(r.peek(old.kid)).toBeUndefined();
  });

  it('rotates to the configured algorithm with the lead time when it changed', async () => {
    await ring().init();
    const rs = ring({ algorithm: 'RS256' });
    await rs.init();
    expect(rs.current().alg).toBe('ES256');
    clock += 5 * MIN;
    expect(rs.current().alg).toBe('RS256');
    // a second start does not rotate again
    const again = ring({ algorithm: 'RS256' });
    await again.init();
    expect((await store.listKeys()).length).toBe(2);
  });

  it('key.pruned names the keys the store removed, also from a ring that never loaded them, as in the CLI', async () => {
    const a = ring();
    await a.init();
    const old = a.current();
    await a.rotate(0);
    clock += 2 * 3600_000; // the old key's tokens have all expired
    const lines: Record<string, unknown>[] = [];
    const logger = { info: (o: Record<string, unknown>) => void lines.push(o), warn: () => undefined, error: () => undefined };
    const cliRing = ring({ logger, signs: false });
    expect(await cliRing.prune()).toBe(1);
    expect(lines).toEqual([expect.objectContaining({ event: 'key.pruned', count: 1, kids: [old.kid] })]);
  });

  it('fresh(): keys older than refreshMs (the process did not run meanwhile) are reloaded before signing; fresh keys need no wait', async () => {
    const a = ring();
    await a.init();
    const b = ring();
    await b.init();
    expect(b.fresh()).toBeNull();
    const next = await a.rotate(0);
    clock += 31_000; // b's timers did not run: a frozen process
    const waiting = b.fresh();
    expect(waiting).not.toBeNull();
    await waiting;
    expect(b.current().kid).toBe(next.kid);
    expect(b.fresh()).toBeNull();
  });

  it('a reload whose lifetime record fails (a store that cannot be written, reads still work) still loads the keys', async () => {
    const a = ring();
    await a.init();
    const readOnly = Object.assign(Object.create(store) as typeof store, {
      raiseKeyTokenTtl: async () => {
        throw new Error('cannot execute UPDATE in a read-only transaction');
      },
    });
    const b = new KeyRing(readOnly, { algorithm: 'ES256', maxTokenTtl: 7200, reloadCooldownMs: 5_000, refreshMs: 30_000, rotationLeadTimeMs: 5 * MIN, now: () => clock });
    await b.reload();
    expect(b.current().kid).toBe(a.current().kid);
    const next = await a.rotate(0);
    await b.reload();
    expect(b.peek(next.kid)).toBeDefined();
  });

  it('an instance with no requests reloads on its own every refreshMs: its first token after a rotation is signed with the new key', async () => {
    const a = ring({ now: Date.now });
    await a.init();
    const b = ring({ now: Date.now, refreshMs: 50 });
    await b.init();
    b.startRefreshing();
    try {
      const next = await a.rotate(0);
      await new Promise((resolve) => setTimeout(resolve, 200));
      // no call to b in between: the timer reloaded it
      expect(b.current().kid).toBe(next.kid);
    } finally {
      b.stopRefreshing();
    }
  });

  it('an instance that starts while a rotation is pending records its lifetime on the key that still signs, not only on the pending one', async () => {
    const a = ring();
    await a.init();
    const signing = a.current();
    const next = await a.rotate(5 * MIN);
    // b signs with `signing` until the rotation, with tokens twice as long
    const b = ring({ maxTokenTtl: 7200 });
    await b.init();
    expect(b.current().kid).toBe(signing.kid);
    const ttl = Object.fromEntries((await store.listKeys()).map((k) => [k.kid, k.tokenTtl]));
    expect(ttl).toEqual({ [signing.kid]: 7200, [next.kid]: 7200 });
  });

  it('instances started together after the algorithm changed all start, with the one key the first rotation made', async () => {
    await ring().init();
    const rings = [ring({ algorithm: 'RS256' }), ring({ algorithm: 'RS256' }), ring({ algorithm: 'RS256' })];
    const started = await Promise.allSettled(rings.map((r) => r.init()));
    expect(started.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
    const rsa = (await store.listKeys()).filter((k) => k.alg === 'RS256');
    expect(rsa).toHaveLength(1);
    clock += 5 * MIN;
    for (const r of rings) expect(r.current().kid).toBe(rsa[0].kid);
  });

  it('a rotation right after another one (made on a stale view) reloads first and leaves one unretired key', async () => {
    const [a, b] = await twoInstances();
    await a.rotate(0);
    const rotateKey = jest.spyOn(store, 'rotateKey');
    // b reloads first inside rotate(), so it rotates on the fresh view: both succeed, one after the other
    await b.rotate(0);
    expect(rotateKey).toHaveBeenCalledTimes(1);
    const unretired = (await store.listKeys()).filter((k) => k.retiredAt === null);
    expect(unretired).toHaveLength(1);
  });
});
