/**
 * What the shared store hands back is checked before it is used, as a token
 * endpoint's answer is: a token an Authorization header can carry, not
 * a lifetime the endpoint path could have given it, a type this client
 * sends. Anything else is a store.error (get) that never quotes the value,
 * and the token endpoint is asked; an entry that merely expired is a plain
 * miss.
 */
import type { StoredToken, TokenClientEvent, TokenStore } from '../../lib/client';
import { MemoryStore, useClientFixture } from './fakes';

const fx = useClientFixture({ clientId: 'svc', clientSecret: 'x' });
const { client } = fx;

const HOUR = 3600_000;

/** A store that answers every get() with `entry` (as another instance, or whoever writes to Redis, left it). */
function storeHolding(entry: unknown): MemoryStore {
  const store = new MemoryStore();
  store.get = async () => entry as StoredToken;
  return store;
}

const storeErrors = (): Array<Extract<TokenClientEvent, { type: 'store.error' }>> =>
  fx.events.filter((e): e is Extract<TokenClientEvent, { type: 'store.error' }> => e.type === 'store.error');

describe('a stored entry the client cannot use is a store.error (get), never a token', () => {
  const valid = (): StoredToken => ({ accessToken: 'STORED', tokenType: 'Bearer', scope: '', expiresAt: fx.time.now() + HOUR, lifetime: HOUR });

  it('a valid entry is used (the baseline the cases below differ from)', async () => {
    expect((await client({ store: storeHolding(valid()) }).getToken()).accessToken).toBe('STORED');
    expect(fx.tokenRequests()).toBe(0);
    expect(storeErrors()).toEqual([]);
  });

  it.each([
    ['expired a minute ago, with a negative lifetime', () => ({ expiresAt: fx.time.now() - 60_000, lifetime: -10 * HOUR }), /lifetime|expired/],
    ['a lifetime of 0', () => ({ lifetime: 0 }), /lifetime/],
    ['a lifetime under 1 s', () => ({ lifetime: 999 }), /lifetime/],
    ['a negative lifetime', () => ({ lifetime: -HOUR }), /lifetime/],
    ['a lifetime over 24 h', () => ({ expiresAt: fx.time.now() + HOUR, lifetime: 48 * HOUR }), /lifetime/],
    ['an access token with CR/LF', () => ({ accessToken: 'STORED\r\nX-Evil: 1' }), /characters/],
    ['an access token with a space', () => ({ accessToken: 'STORED more' }), /characters/],
    ['an empty access token', () => ({ accessToken: '' }), /characters|not a token record/],
    ['a token type this client does not send', () => ({ tokenType: 'MAC' }), /token type/],
    ['a DPoP token for a client without DPoP', () => ({ tokenType: 'DPoP' }), /token type/],
    ['an access token that is not a string', () => ({ accessToken: 42 }), /not a token record/],
    ['no expiresAt', () => ({ expiresAt: undefined }), /not a token record/],
  ])('%s: not used, the token endpoint is asked', async (_what, change, message) => {
    const entry = { ...valid(), ...change() };
    const token = await client({ store: storeHolding(entry) }).getToken();
    expect(token.accessToken).toBe('tok-1');
    expect(fx.tokenRequests()).toBe(1);
    const errors = storeErrors();
    expect(errors).toEqual([{ type: 'store.error', operation: 'get', message: expect.stringMatching(message) }]);
    expect(errors[0].message).not.toContain('STORED');
  });

  it('a well-formed entry that expired by this instance\'s clock is a plain miss: the endpoint is asked, no store.error', async () => {
    // a store that keeps entries past their ttlMs, or another instance's clock a little behind: nothing is wrong with the store
    const token = await client({ store: storeHolding({ ...valid(), expiresAt: fx.time.now() - 60_000 }) }).getToken();
    expect(token.accessToken).toBe('tok-1');
    expect(fx.tokenRequests()).toBe(1);
    expect(storeErrors()).toEqual([]);
  });

  it('a token with CR/LF in the store: fetch() sends the API a fresh token, and no error or event carries the stored one', async () => {
    const c = client({ store: storeHolding({ ...valid(), accessToken: 'abc\r\nX-Evil: 1' }) });
    const res = await c.fetch(`${fx.api.url}/orders`);
    expect(res.status).toBe(200);
    expect(fx.api.requests.map((r) => [r.headers.authorization, r.headers['x-evil']])).toEqual([['Bearer tok-1', undefined]]);
    expect(JSON.stringify(fx.events)).not.toContain('abc');
  });

  it('a lifetime up to defaultTtl is taken when defaultTtl is over 24 h (what this instance would store itself)', async () => {
    const store = storeHolding({ ...valid(), expiresAt: fx.time.now() + HOUR, lifetime: 48 * HOUR });
    expect((await client({ store, defaultTtl: 48 * 3600 }).getToken()).accessToken).toBe('STORED');
    expect(storeErrors()).toEqual([]);
  });

  it('an entry the client refuses is left in the store (another instance may read it differently), and overwritten by the new token', async () => {
    const store = new MemoryStore();
    const writer = client({ store });
    await writer.getToken();
    await new Promise((r) => setTimeout(r, 10));
    const [key] = [...store.data.keys()];
    store.data.set(key, { token: { ...valid(), accessToken: 'bad token' }, ttl: HOUR });
    expect((await client({ store }).getToken()).accessToken).toBe('tok-2');
    await new Promise((r) => setTimeout(r, 10));
    expect(store.data.get(key)!.token.accessToken).toBe('tok-2');
  });
});
describe('a stored expiry is bounded by what the entry itself says', () => {
  it('an instance whose clock is a day ahead stores a 1-hour token: another instance uses it for at most its lifetime, not 25 hours', async () => {
    const store = new MemoryStore();
    const real = fx.time.now();
    const ahead = client({ store, now: () => real + 24 * HOUR });
    expect((await ahead.getToken()).accessToken).toBe('tok-1');
    await new Promise((r) => setTimeout(r, 10));
    const reader = client({ store, refreshWindow: 0 });
    const got = await reader.getToken();
    expect(got.accessToken).toBe('tok-1');
    expect(got.expiresAt.getTime()).toBeLessThanOrEqual(real + HOUR);
    fx.time.advance(5 * 3600);
    expect((await reader.getToken()).accessToken).toBe('tok-2');
    expect(fx.tokenRequests()).toBe(2);
  });

  it('a store that says how long it keeps the entry (ttlMs) bounds its expiry by that', async () => {
    const entry: StoredToken = { accessToken: 'STORED', tokenType: 'Bearer', scope: '', expiresAt: fx.time.now() + HOUR, lifetime: HOUR };
    // the store drops it 10 minutes from now (as Redis would with a shorter PX than the record says)
    const dropped = fx.time.now() + 10 * 60_000;
    const store = { get: async () => ({ ...entry, ttlMs: dropped - fx.time.now() }), set: async () => undefined, delete: async () => undefined } as TokenStore;
    const c = client({ store, refreshWindow: 0 });
    const got = await c.getToken();
    expect(got.accessToken).toBe('STORED');
    expect(got.expiresAt.getTime()).toBe(fx.time.now() + 10 * 60_000);
    fx.time.advance(9 * 60 + 1); // within the skew (60 s) of the bounded expiry
    expect((await c.getToken()).accessToken).toBe('tok-1');
    expect(storeErrors()).toEqual([]);
  });
});
