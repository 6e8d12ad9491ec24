/**
 * The shared store's lock (research criterion 22): instances that miss the
 * same token at once make one token request between them; a holder that
 * fails lets the next one ask; a lock never let go, or a failing one, holds
 * nobody up for longer than the request timeout.
 */
import { generateKeyPairSync } from 'node:crypto';
import { TokenEndpointError, type TokenStore } from '../../lib/client';
import { LockingStore, MemoryStore, gate, until, useClientFixture } from './fakes';

const fx = useClientFixture({ clientId: 'svc', clientSecret: 'x' });
const { client } = fx;

/** Starts `n` instances on `store` at once with the token endpoint held, lets it answer after `holdMs`; their results. */
async function coldStart(store: TokenStore, n: number, holdMs = 150): Promise<PromiseSettledResult<string>[]> {
  const held = gate();
  fx.endpoint.gate = held.promise;
  const calls = Array.from({ length: n }, () => client({ store }).getToken().then((t) => t.accessToken));
  await until(() => fx.endpoint.requests.length >= 1, 'a token request');
  await new Promise((r) => setTimeout(r, holdMs));
  held.open();
  return Promise.allSettled(calls);
}

describe('shared store with a lock', () => {
  it('5 instances starting at once make 1 token request and all use its token; the lock is let go', async () => {
    const store = new LockingStore();
    const results = await coldStart(store, 5);
    expect(results).toEqual(Array.from({ length: 5 }, () => ({ status: 'fulfilled', value: 'tok-1' })));
    expect(fx.tokenRequests()).toBe(1);
    expect(store.taken).toBe(1);
    expect(store.locks.size).toBe(0);
    expect(fx.events.filter((e) => e.type === 'token.cache_hit' && e.source === 'store')).toHaveLength(4);
    expect(fx.events.filter((e) => e.type === 'store.error')).toEqual([]);
  });

  it('without a lock each of them asks (what the lock saves)', async () => {
    const results = await coldStart(new MemoryStore(), 5);
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    expect(fx.tokenRequests()).toBe(5);
  });

  it.each([
    ['says so (the waiter asks on its own)', true, 1],
    ['cannot say so (the waiter takes the lock and lets it go)', false, 2],
  ])('a holder whose request fails lets go, and a store that %s: the other instance asks and gets a token', async (_how, marksFailures, taken) => {
    fx.endpoint.reply = (_req, n) => (n === 1 ? { status: 500, body: { error: 'server_error' } } : { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } });
    const store = new LockingStore();
    store.marksFailures = marksFailures;
    const results = await coldStart(store, 2);
    const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(failed).toHaveLength(1);
    expect(failed[0].reason).toBeInstanceOf(TokenEndpointError);
    expect(failed[0].reason).toMatchObject({ status: 500 });
    expect(results.filter((r) => r.status === 'fulfilled')).toEqual([{ status: 'fulfilled', value: 'tok-2' }]);
    expect(fx.tokenRequests()).toBe(2);
    expect(store.taken).toBe(taken);
    expect([...store.locks.values()].every((l) => l.failed === true)).toBe(true);
  });

  it("a lock never let go (its holder died) holds an instance up for the lock's life (twice the timeout), then it asks itself", async () => {
    const store = new LockingStore();
    store.lock = async () => null; // held by another, for good
    const started = Date.now();
    const token = await client({ store, timeout: 0.3 }).getToken();
    const waited = Date.now() - started;
    expect(token.accessToken).toBe('tok-1');
    expect(waited).toBeGreaterThanOrEqual(600);
    expect(waited).toBeLessThan(2500);
    expect(fx.tokenRequests()).toBe(1);
  });

  it('a holder slower than the timeout (a DPoP nonce retry: two attempts) is waited for: the fleet makes its 2 requests once', async () => {
    // each answer takes 0.6 s and the first asks for a nonce: the holder needs 1.2 s, more than the 1 s timeout
    fx.endpoint.reply = async (req) => {
      await new Promise((r) => setTimeout(r, 600));
      return req.headers.dpop && !/"nonce"/.test(Buffer.from(String(req.headers.dpop).split('.')[1], 'base64url').toString())
        ? { status: 400, headers: { 'dpop-nonce': 'n-1' }, body: { error: 'use_dpop_nonce' } }
        : { body: { access_token: 'tok-dpop', token_type: 'DPoP', expires_in: 3600 } };
    };
    const store = new LockingStore();
    const privateKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    const tokens = await Promise.all([1, 2, 3].map(() => client({ store, timeout: 1, dpop: { privateKey } }).getToken()));
    expect(tokens.map((t) => t.accessToken)).toEqual(['tok-dpop', 'tok-dpop', 'tok-dpop']);
    expect(fx.tokenRequests()).toBe(2);
  });

  it('after a holder fails the others ask side by side, not one after another', async () => {
    fx.endpoint.reply = async () => {
      await new Promise((r) => setTimeout(r, 600));
      return { status: 503, body: { error: 'temporarily_unavailable' } };
    };
    const store = new LockingStore();
    const started = Date.now();
    const finished: number[] = [];
    const settled = await Promise.allSettled(
      Array.from({ length: 8 }, () => client({ store }).getToken().finally(() => finished.push(Date.now() - started))),
    );
    expect(settled.every((r) => r.status === 'rejected' && (r.reason as TokenEndpointError).status === 503)).toBe(true);
    expect(fx.tokenRequests()).toBe(8);
    finished.sort((a, b) => a - b);
    // the holder at about 600 ms, the 7 others together one request later (taking the lock in turn: 250 ms apart, 1.5 s from first to last)
    expect(finished[7] - finished[1]).toBeLessThan(500);
    expect(finished[7]).toBeLessThan(2000);
  });

  it('a slow store takes at most the timeout in all before the token request (get and lock share it), with store.error saying which', async () => {
    const store = new LockingStore();
    const slow = <T>(run: () => Promise<T>): Promise<T> => new Promise((r) => setTimeout(() => r(run()), 300));
    const get = store.get.bind(store);
    const lock = store.lock.bind(store);
    store.get = (key) => slow(() => get(key));
    store.lock = (key, ttl) => slow(() => lock(key, ttl));
    const started = Date.now();
    expect((await client({ store, timeout: 0.4 }).getToken()).accessToken).toBe('tok-1');
    // get 300 ms, the lock gets the 100 ms left, then the request (one store call after another: 900 ms and more)
    expect(Date.now() - started).toBeLessThan(700);
    expect(fx.events.filter((e) => e.type === 'store.error')).toEqual([{ type: 'store.error', operation: 'lock', message: expect.stringMatching(/^no answer within \d+ ms$/) }]);
    // the lock that came late is let go at once
    await until(() => store.locks.size === 0, 'the late lock let go');
  });

  it('a store that does not answer at all: the token request starts after the timeout once, not once per store call', async () => {
    const store = new LockingStore();
    store.get = () => new Promise(() => undefined);
    store.lock = () => new Promise(() => undefined);
    const started = Date.now();
    expect((await client({ store, timeout: 0.4 }).getToken()).accessToken).toBe('tok-1');
    // once the timeout (400 ms), not once for the get and again for the lock (800 ms)
    expect(Date.now() - started).toBeLessThan(700);
    expect(fx.events.filter((e) => e.type === 'store.error').map((e) => (e as { operation: string }).operation)).toEqual(['get']);
  });

  it('closing the client while it holds the lock lets the lock go', async () => {
    const store = new LockingStore();
    fx.endpoint.gate = new Promise(() => undefined);
    const c = client({ store });
    const call = c.getToken();
    await until(() => fx.endpoint.requests.length === 1, 'the token request');
    expect(store.locks.size).toBe(1);
    await c.close();
    await expect(call).rejects.toBeDefined();
    await until(() => store.locks.size === 0, 'the lock let go');
  });

  it.each([
    ['a store that does not answer', (store: LockingStore) => (store.get = () => new Promise(() => undefined))],
    ['a lock another instance holds', (store: LockingStore) => (store.lock = async () => null)],
  ])('closing the client ends a call waiting on %s at once, and no token request follows', async (_what, stall) => {
    const store = new LockingStore();
    stall(store);
    const c = client({ store, timeout: 5 });
    const call = c.getToken();
    await new Promise((r) => setTimeout(r, 60));
    const started = Date.now();
    await c.close();
    await expect(call).rejects.toThrow('the token client is closed');
    expect(Date.now() - started).toBeLessThan(500);
    await new Promise((r) => setTimeout(r, 100));
    expect(fx.tokenRequests()).toBe(0);
  });

  it('a call that took the lock after waiting and is closed while it looks in the store again sends nothing', async () => {
    const store = new LockingStore();
    store.marksFailures = false;
    const lock = store.lock.bind(store);
    const get = store.get.bind(store);
    let locks = 0;
    let gets = 0;
    store.lock = async (key, ttl) => (++locks === 1 ? null : lock(key, ttl));
    store.get = (key) => (++gets >= 3 ? new Promise(() => undefined) : get(key));
    const c = client({ store, timeout: 5 });
    const call = c.getToken();
    await until(() => gets === 3, 'the look after taking the lock');
    await c.close();
    await expect(call).rejects.toThrow('the token client is closed');
    expect(fx.count('token.requested')).toBe(0);
    expect(fx.tokenRequests()).toBe(0);
  });

  it('a lock that fails is skipped (store.error "lock"): the instance asks at once', async () => {
    const store = new MemoryStore() as MemoryStore & TokenStore;
    store.lock = async () => Promise.reject(new Error('READONLY replica'));
    expect((await client({ store }).getToken()).accessToken).toBe('tok-1');
    expect(fx.tokenRequests()).toBe(1);
    expect(fx.events.filter((e) => e.type === 'store.error')).toEqual([{ type: 'store.error', operation: 'lock', message: 'READONLY replica' }]);
  });

  it('two instances refused with the same token at once renew it with one token request', async () => {
    fx.api.reply = (req) => (req.headers.authorization === 'Bearer tok-1' ? { status: 401, headers: { 'www-authenticate': 'Bearer error="invalid_token"' } } : { body: {} });
    const store = new LockingStore();
    const [a, b] = [client({ store }), client({ store })];
    expect((await a.getToken()).accessToken).toBe('tok-1');
    expect((await b.getToken()).accessToken).toBe('tok-1');
    const held = gate();
    fx.endpoint.gate = held.promise;
    const calls = [a, b].map((c) => c.fetch(`${fx.api.url}/x`));
    await until(() => fx.endpoint.requests.length >= 2, 'the renewal');
    await new Promise((r) => setTimeout(r, 150));
    held.open();
    expect((await Promise.all(calls)).map((r) => r.status)).toEqual([200, 200]);
    expect(fx.tokenRequests()).toBe(2);
    expect(fx.api.requests.filter((r) => r.headers.authorization === 'Bearer tok-2')).toHaveLength(2);
  });
});
