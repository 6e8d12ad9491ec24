import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gunzipSync, gzipSync } from 'node:zlib';
import jwt from 'jsonwebtoken';
import { TemporarilyUnavailableError } from '../../lib/errors';
import { loadJwks } from '../../lib/core/jwks';
import { generateStoredKey, loadStoredKey, type KeyResolver, type LoadedKey } from '../../lib/core/keys';
import { RevocationState } from '../../lib/core/revocation';
import {
  PublishedRevocationList,
  RevocationListPoller,
  signRevocationList,
  verifyRevocationList,
  GZIP_MIN_BYTES,
  REVOCATION_LIST_MEDIA_TYPE,
} from '../../lib/core/revocation-list';

const ISSUER = 'https://issuer.test';
const T0 = Date.parse('2030-01-01T00:00:00Z');

function signingKey(alg: 'ES256' | 'RS256' = 'ES256'): LoadedKey {
  return loadStoredKey(generateStoredKey(alg, new Date(T0)));
}

/** What a standalone verifier has: the public JWKS only. */
function publicResolver(...keys: LoadedKey[]): KeyResolver {
  const loaded = loadJwks({ keys: keys.map((k) => k.jwk) });
  return { peek: (kid) => loaded.get(kid), resolve: (kid) => loaded.get(kid) };
}

describe('signRevocationList / verifyRevocationList', () => {
  const key = signingKey();
  const state = new RevocationState({ maxTokenTtl: 600, now: () => T0 });
  state.apply([
    { type: 'token', jti: 'j1', clientId: 'c1', exp: T0 / 1000 + 300 },
    { type: 'tokens', clientId: 'c2', generation: 2, at: T0 },
    { type: 'client', clientId: 'c3', at: T0 },
  ]);

  it('round-trips: typ, iss, iat, short exp and the entries', async () => {
    const jws = signRevocationList(state, key, { issuer: ISSUER, now: T0, ttl: 120 });
    expect(jwt.decode(jws, { complete: true })!.header).toMatchObject({ typ: 'revocation-list+jwt', kid: key.kid, alg: 'ES256' });
    const list = await verifyRevocationList(jws, publicResolver(key), { issuer: ISSUER, now: T0 + 1000 });
    expect(list).toEqual({ iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 120, ...state.snapshot() });
  });

  it('works with RS256 too', async () => {
    const rsa = signingKey('RS256');
    const list = await verifyRevocationList(signRevocationList(state, rsa, { issuer: ISSUER, now: T0 }), publicResolver(rsa), { issuer: ISSUER, now: T0 });
    expect(list.tokens).toHaveLength(1);
  });

  it('refuses a list signed by a key outside the JWKS, a tampered one, another issuer, an expired one, an access token', async () => {
    const keys = publicResolver(key);
    const opts = { issuer: ISSUER, now: T0 };
    const other = signingKey();
    await expect(verifyRevocationList(signRevocationList(state, other, opts), keys, opts)).rejects.toThrow(/unknown kid/);
    const good = signRevocationList(state, key, opts);
    const [h, , s] = good.split('.');
    const emptied = Buffer.from(JSON.stringify({ iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 300, tokens: [], clients: [] })).toString('base64url');
    await expect(verifyRevocationList(`${h}.${emptied}.${s}`, keys, opts)).rejects.toThrow(/signature/);
    await expect(verifyRevocationList(good, keys, { ...opts, issuer: 'https://evil.test' })).rejects.toThrow(/issuer/);
    await expect(verifyRevocationList(good, keys, { ...opts, now: T0 + 301_000 })).rejects.toThrow(/expired/);
    const at = jwt.sign({ iss: ISSUER, tokens: [], clients: [] }, key.privateKey!, { algorithm: 'ES256', header: { alg: 'ES256', typ: 'at+jwt', kid: key.kid } });
    await expect(verifyRevocationList(at, keys, opts)).rejects.toThrow(/typ/);
    await expect(verifyRevocationList('garbage', keys, opts)).rejects.toThrow(/not a JWS/);
  });

  it('names the published kids when given them; refuses kids that are not an array of strings', async () => {
    const named = await verifyRevocationList(signRevocationList(state, key, { issuer: ISSUER, now: T0, kids: [key.kid, 'next'] }), publicResolver(key), { issuer: ISSUER, now: T0 });
    expect(named.kids).toEqual([key.kid, 'next']);
    const none = await verifyRevocationList(signRevocationList(state, key, { issuer: ISSUER, now: T0 }), publicResolver(key), { issuer: ISSUER, now: T0 });
    expect(none).not.toHaveProperty('kids');
    for (const kids of ['k1', [1], [null], {}]) {
      const bad = jwt.sign({ iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 60, tokens: [], clients: [], kids }, key.privateKey!, {
        algorithm: 'ES256',
        header: { alg: 'ES256', typ: 'revocation-list+jwt', kid: key.kid },
      });
      await expect(verifyRevocationList(bad, publicResolver(key), { issuer: ISSUER, now: T0 })).rejects.toThrow(/kids must be an array of strings/);
    }
  });

  it('refuses a well-signed list with malformed entries', async () => {
    const bad = jwt.sign({ iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 60, tokens: [{ jti: 1 }], clients: [] }, key.privateKey!, {
      algorithm: 'ES256',
      header: { alg: 'ES256', typ: 'revocation-list+jwt', kid: key.kid },
    });
    await expect(verifyRevocationList(bad, publicResolver(key), { issuer: ISSUER, now: T0 })).rejects.toThrow(/malformed/);
  });
});

describe('PublishedRevocationList', () => {
  it('keeps one body and ETag until the state changes, the key changes or half the lifetime passed', () => {
    let clock = T0;
    const state = new RevocationState({ maxTokenTtl: 600, now: () => clock });
    let key = signingKey();
    const pub = new PublishedRevocationList({ state, issuer: ISSUER, signingKey: () => key, ttl: 120, now: () => clock });
    const a = pub.current();
    clock += 59_000;
    expect(pub.current()).toEqual(a);
    state.apply({ type: 'client', clientId: 'c1', at: clock });
    const b = pub.current();
    expect(b.etag).not.toBe(a.etag);
    clock += 60_000;
    expect(pub.current().etag).not.toBe(b.etag);
    const c = pub.current();
    key = signingKey();
    expect(pub.current().etag).not.toBe(c.etag);
  });

  it('re-signs when the published kids change, and names them', async () => {
    const clock = T0;
    const state = new RevocationState({ maxTokenTtl: 600, now: () => clock });
    const key = signingKey();
    let kids = [key.kid, 'retired'];
    const pub = new PublishedRevocationList({ state, issuer: ISSUER, signingKey: () => key, publishedKids: () => kids, ttl: 120, now: () => clock });
    const a = pub.current();
    expect(pub.current()).toBe(a);
    expect((await verifyRevocationList(a.body, publicResolver(key), { issuer: ISSUER, now: clock })).kids).toEqual([key.kid, 'retired']);
    kids = [key.kid];
    const b = pub.current();
    expect(b.etag).not.toBe(a.etag);
    expect((await verifyRevocationList(b.body, publicResolver(key), { issuer: ISSUER, now: clock })).kids).toEqual([key.kid]);
  });

  it('gzips a long list once per signed list, with an ETag of its own; a short list not at all', () => {
    let clock = T0;
    const state = new RevocationState({ maxTokenTtl: 600, now: () => clock });
    const key = signingKey();
    const pub = new PublishedRevocationList({ state, issuer: ISSUER, signingKey: () => key, now: () => clock });
    expect(Buffer.byteLength(pub.current().body)).toBeLessThan(GZIP_MIN_BYTES);
    expect(pub.gzipped()).toBeUndefined();
    for (let i = 0; i < 200; i++) state.apply({ type: 'token', jti: randomUUID(), clientId: `client-${i % 7}`, exp: Math.floor(clock / 1000) + 300 });
    const plain = pub.current();
    const gz = pub.gzipped()!;
    expect(gunzipSync(gz.body).toString('utf8')).toBe(plain.body);
    expect(gz.body.length).toBeLessThan(Buffer.byteLength(plain.body) * 0.75);
    expect(gz.etag).toBe(`${plain.etag.slice(0, -1)}-gz"`);
    expect(pub.gzipped()!.body).toBe(gz.body); // the same buffer: compressed once
    clock += 1_000;
    state.apply({ type: 'client', clientId: 'c1', at: clock });
    expect(pub.gzipped()!.etag).not.toBe(gz.etag);
    expect(gunzipSync(pub.gzipped()!.body).toString('utf8')).toBe(pub.current().body);
  });
});

describe('RevocationListPoller against an HTTP issuer', () => {
  let server: Server;
  let url: string;
  let issuerClock: number;
  let issuerState: RevocationState;
  let key: LoadedKey;
  let pub: PublishedRevocationList;
  let served: { status: number; ifNoneMatch: string | undefined }[];
  /** Overrides what the server sends (e.g. an old list). */
  let override: string | undefined;

  beforeEach(async () => {
    issuerClock = Date.now();
    issuerState = new RevocationState({ maxTokenTtl: 600, now: () => issuerClock });
    key = signingKey();
    pub = new PublishedRevocationList({ state: issuerState, issuer: ISSUER, signingKey: () => key, now: () => issuerClock });
    served = [];
    override = undefined;
    server = createServer((req, res) => {
      const { body, etag } = override ? { body: override, etag: '"override"' } : pub.current();
      const inm = req.headers['if-none-match'];
      const status = inm === etag ? 304 : 200;
      served.push({ status, ifNoneMatch: inm });
      res.writeHead(status, { etag, 'content-type': REVOCATION_LIST_MEDIA_TYPE, 'cache-control': 'no-cache' });
      res.end(status === 200 ? body : undefined);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/oauth/revocation-list`;
  });
  afterEach(async () => {
    await new Promise((r) => server.close(r));
  });

  const verifierState = (now: () => number = Date.now) => new RevocationState({ maxTokenTtl: 600, now });

  it('polls with If-None-Match: 200 then 304 while nothing changed, 200 again after a revocation', async () => {
    const state = verifierState();
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state });
    expect(await poller.poll()).toBe('updated');
    expect(await poller.poll()).toBe('unchanged');
    expect(served.map((s) => s.status)).toEqual([200, 304]);
    expect(served[0].ifNoneMatch).toBeUndefined();
    expect(served[1].ifNoneMatch).toBe(pub.current().etag);
    issuerState.apply({ type: 'token', jti: 'leaked', clientId: 'c1', exp: Math.floor(issuerClock / 1000) + 600 });
    expect(poller.isRevoked({ jti: 'leaked', client_id: 'c1' })).toBe(false);
    expect(await poller.poll()).toBe('updated');
    expect(poller.isRevoked({ jti: 'leaked', client_id: 'c1' })).toBe('token_revoked');
  });

  it('a revoked token is refused within one poll interval plus one fetch (measured)', async () => {
    const state = verifierState();
    const intervalMs = 300;
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state, intervalMs });
    expect(await poller.start()).toBe('updated');
    expect((poller as unknown as { timer: NodeJS.Timeout }).timer.hasRef()).toBe(false);
    try {
      const claims = { jti: 'measured', client_id: 'c1' };
      expect(poller.isRevoked(claims)).toBe(false);
      const revokedAt = Date.now();
      issuerState.apply({ type: 'token', jti: 'measured', clientId: 'c1', exp: Math.floor(Date.now() / 1000) + 600 });
      let elapsed = -1;
      for (let i = 0; i < 400 && elapsed < 0; i++) {
        await new Promise((r) => setTimeout(r, 5));
        if (poller.isRevoked(claims) === 'token_revoked') elapsed = Date.now() - revokedAt;
      }
      // generous margin for a loaded machine: interval + fetch well under 1 s here
      expect(elapsed).toBeGreaterThanOrEqual(0);
      expect(elapsed).toBeLessThan(intervalMs + 1_500);
      process.stdout.write(`revocation-list bound: refused ${elapsed} ms after the revocation (interval ${intervalMs} ms)\n`);
    } finally {
      poller.stop();
    }
  });

  it('refuses a list signed by a key outside its JWKS and a list older than the one it holds', async () => {
    const state = verifierState();
    const errors: unknown[] = [];
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state, onError: (e) => errors.push(e) });
    override = signRevocationList({ tokens: [], clients: [{ client_id: 'c1', generation: 0, revoked_at: issuerClock }] }, signingKey(), { issuer: ISSUER, now: issuerClock });
    expect(await poller.poll()).toBe('failed');
    expect(state.size()).toEqual({ tokens: 0, clients: 0 });
    expect(poller.fresh()).toBe(false);
    override = undefined;
    expect(await poller.poll()).toBe('updated');
    const held = poller.status();
    override = signRevocationList({ tokens: [], clients: [] }, key, { issuer: ISSUER, now: issuerClock - 60_000 });
    expect(await poller.poll()).toBe('failed');
    expect(String(errors.at(-1))).toMatch(/older than the one held/);
    expect(poller.status()).toEqual(held);
  });

  it('refuses a body larger than maxBytes while reading it, gzipped or not, and keeps the list it holds', async () => {
    const state = verifierState();
    const errors: unknown[] = [];
    issuerState.apply({ type: 'client', clientId: 'held', at: issuerClock });
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state, onError: (e) => errors.push(e), maxBytes: 64 * 1024 });
    expect(await poller.poll()).toBe('updated');
    const held = poller.status();
    // 1 MiB of text, and the same as a gzip of about 1 KiB (what a hostile or broken server could send)
    const huge = 'a'.repeat(1024 * 1024);
    const gzipped = gzipSync(huge);
    expect(gzipped.length).toBeLessThan(4096);
    const hostile = createServer((req, res) => {
      const gzip = req.url === '/gzip';
      res.writeHead(200, { 'content-type': REVOCATION_LIST_MEDIA_TYPE, ...(gzip ? { 'content-encoding': 'gzip' } : {}) });
      res.end(gzip ? gzipped : huge);
    });
    await new Promise<void>((r) => hostile.listen(0, '127.0.0.1', r));
    try {
      for (const path of ['/plain', '/gzip']) {
        const big = new RevocationListPoller({ url: `http://127.0.0.1:${(hostile.address() as AddressInfo).port}${path}`, issuer: ISSUER, keys: publicResolver(key), state, onError: (e) => errors.push(e), maxBytes: 64 * 1024 });
        expect(await big.poll()).toBe('failed');
        expect(String(errors.at(-1))).toMatch(/larger than 65536 bytes/);
      }
    } finally {
      hostile.closeAllConnections();
      await new Promise((r) => hostile.close(r));
    }
    expect(state.generation('held')).toBe(0);
    expect(state.isRevoked({ jti: 'x', client_id: 'held' })).toBe('client_revoked');
    expect(poller.status()).toEqual(held);
  });

  it('issuer unreachable: trusts the last list for maxStaleMs, then fails closed with 503; back once the issuer answers', async () => {
    let clock = Date.now();
    const state = verifierState(() => clock);
    let down = false;
    const flaky: typeof fetch = (input, init) => (down ? Promise.reject(new TypeError('fetch failed: ECONNREFUSED')) : fetch(input, init));
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state, fetch: flaky, now: () => clock, maxStaleMs: 300_000 });
    // before any list: fail closed
    expect(() => poller.isRevoked({ jti: 'x', client_id: 'c1' })).toThrow(TemporarilyUnavailableError);
    issuerState.apply({ type: 'client', clientId: 'bad', at: issuerClock });
    expect(await poller.poll()).toBe('updated');
    down = true;
    clock += 299_000;
    expect(await poller.poll()).toBe('failed');
    expect(poller.isRevoked({ jti: 'x', client_id: 'c1' })).toBe(false);
    expect(poller.isRevoked({ jti: 'y', client_id: 'bad' })).toBe('client_revoked');
    clock += 2_000; // 301 s since the last successful poll
    let err: unknown;
    try {
      poller.isRevoked({ jti: 'x', client_id: 'c1' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TemporarilyUnavailableError);
    expect((err as TemporarilyUnavailableError).status).toBe(503);
    expect((err as TemporarilyUnavailableError).headers['Retry-After']).toBe('10');
    down = false;
    // the issuer's clock went on too: its list of 301 s ago has been re-signed (a new ETag)
    issuerClock = clock;
    expect(await poller.poll()).toBe('updated');
    expect(poller.isRevoked({ jti: 'x', client_id: 'c1' })).toBe(false);
  });

  it('a 304 for a held list past its exp is no contact with the issuer (a cache or a man in the middle answering 304 for ever)', async () => {
    let clock = Date.now();
    const state = verifierState(() => clock);
    let frozen = false;
    const seen: (string | undefined)[] = [];
    const stuck: typeof fetch = async (input, init) => {
      seen.push((init?.headers as Record<string, string>)['if-none-match']);
      return frozen ? new Response(null, { status: 304 }) : fetch(input, init);
    };
    const errors: unknown[] = [];
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state, fetch: stuck, now: () => clock, maxStaleMs: 300_000, onError: (e) => errors.push(e) });
    expect(await poller.poll()).toBe('updated');
    frozen = true;
    clock += 290_000; // the list (valid 300 s) has not expired: a 304 confirms it
    expect(await poller.poll()).toBe('unchanged');
    issuerState.apply({ type: 'client', clientId: 'revoked-meanwhile', at: issuerClock });
    clock += 20_000; // past the list's exp
    expect(await poller.poll()).toBe('failed');
    expect(String(errors[0])).toMatch(/304 for the held revocation list, which expired/);
    // the next poll asks without If-None-Match
    await poller.poll();
    expect(seen.at(-1)).toBeUndefined();
    clock += 290_000; // more than maxStaleMs since the last 304 that counted
    expect(() => poller.isRevoked({ jti: 'x', client_id: 'revoked-meanwhile' })).toThrow(TemporarilyUnavailableError);
  });

  it('failOpen: past maxStaleMs it keeps answering from the last list', async () => {
    let clock = Date.now();
    const state = verifierState(() => clock);
    let down = false;
    const flaky: typeof fetch = (input, init) => (down ? Promise.reject(new TypeError('fetch failed')) : fetch(input, init));
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state, fetch: flaky, now: () => clock, failOpen: true });
    issuerState.apply({ type: 'client', clientId: 'bad', at: issuerClock });
    await poller.poll();
    down = true;
    clock += 3_600_000;
    expect(await poller.poll()).toBe('failed');
    expect(poller.fresh()).toBe(false);
    expect(poller.isRevoked({ jti: 'x', client_id: 'c1' })).toBe(false);
    expect(poller.isRevoked({ jti: 'x', client_id: 'bad' })).toBe('client_revoked');
  });

  it('a non-200 answer or an unreachable port counts as a failed poll, never a throw', async () => {
    const state = verifierState();
    const closed = new RevocationListPoller({ url: 'http://127.0.0.1:1/list', issuer: ISSUER, keys: publicResolver(key), state, timeoutMs: 2_000 });
    expect(await closed.poll()).toBe('failed');
    override = 'not a jws';
    const poller = new RevocationListPoller({ url, issuer: ISSUER, keys: publicResolver(key), state });
    expect(await poller.poll()).toBe('failed');
  });
});
