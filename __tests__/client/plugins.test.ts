/** Client authentication, the shared store, the proof-of-possession hook, option checks and event hygiene (behaviours 8 and 9). */
import { generateKeyPairSync } from 'node:crypto';
import { inspect } from 'node:util';
import {
  clientSecretBasic,
  clientSecretPost,
  createTokenClient,
  type ClientAuthentication,
  type ProofOfPossession,
  type StoredToken,
  type TokenClientOptions,
  type TokenStore,
} from '../../lib/client';
import { MemoryStore, fakeServer, nonceKeepingPlugin, useClientFixture } from './fakes';

const SECRET = 'a:b+c%d e/é';
const fx = useClientFixture({ clientId: 'svc id', clientSecret: SECRET });
const { client, count } = fx;

describe('client authentication', () => {
  it('client_secret_basic (the default) form-encodes id and secret before Base64 (RFC 6749 §2.3.1)', async () => {
    await client().getToken();
    const [req] = fx.endpoint.requests;
    const decoded = Buffer.from(req.headers.authorization!.replace(/^Basic /, ''), 'base64').toString('utf8');
    expect(decoded).toBe('svc+id:a%3Ab%2Bc%25d+e%2F%C3%A9');
    expect(req.form.get('client_secret')).toBeNull();
    expect(req.form.get('grant_type')).toBe('client_credentials');
    expect(req.headers['content-type']).toBe('application/x-www-form-urlencoded');
  });

  it('client_secret_post sends id and secret as form fields, no Authorization header', async () => {
    await client({ authMethod: 'client_secret_post' }).getToken();
    const [req] = fx.endpoint.requests;
    expect(req.headers.authorization).toBeUndefined();
    expect([req.form.get('client_id'), req.form.get('client_secret')]).toEqual(['svc id', SECRET]);
  });

  it('a ClientAuthentication plug-in runs for every token request, retries included, with the endpoint as context', async () => {
    const seen: Array<{ aud: string; n: number }> = [];
    let n = 0;
    const assertion: ClientAuthentication = {
      method: 'private_key_jwt',
      apply(request, context) {
        n++;
        seen.push({ aud: context.tokenEndpoint, n });
        request.body.set('client_assertion_type', 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer');
        request.body.set('client_assertion', `assertion-${n}`);
      },
    };
    fx.endpoint.reply = (req, i) =>
      i === 1
        ? { status: 400, headers: { 'dpop-nonce': 'n-1' }, body: { error: 'use_dpop_nonce' } }
        : { body: { access_token: `tok-${i}`, token_type: 'DPoP', expires_in: 3600 } };
    const proofs: string[] = [];
    let nonce: string | undefined;
    const pop: ProofOfPossession = {
      scheme: 'DPoP',
      tokenRequest(r) {
        r.headers.dpop = `proof-token-${nonce ?? 'none'}`;
      },
      apiRequest(r) {
        proofs.push(`${r.method} ${r.url} ${r.accessToken}`);
        r.headers.set('dpop', `proof-api-${nonce ?? 'none'}`);
      },
      retry(answer) {
        if (answer.error !== 'use_dpop_nonce') return false;
        nonce = answer.headers.get('dpop-nonce') ?? undefined;
        return true;
      },
    };
    const c = client({ authMethod: assertion, clientSecret: undefined, proofOfPossession: pop });
    const res = await c.fetch(`${fx.api.url}/orders`);
    expect(res.status).toBe(200);
    expect(fx.endpoint.requests.map((r) => [r.form.get('client_assertion'), r.headers.dpop])).toEqual([
      ['assertion-1', 'proof-token-none'],
      ['assertion-2', 'proof-token-n-1'],
    ]);
    expect(seen.every((s) => s.aud === fx.endpoint.tokenUrl)).toBe(true);
    expect(fx.api.requests[0].headers.authorization).toBe('DPoP tok-2');
    expect(fx.api.requests[0].headers.dpop).toBe('proof-api-n-1');
    expect(proofs).toEqual([`GET ${fx.api.url}/orders tok-2`]);
    expect(count('dpop.nonce_retry')).toBe(1);
    expect(count('token.requested')).toBe(2);
  });

  it('the proof-of-possession hook can ask for one API retry on a nonce challenge', async () => {
    fx.endpoint.reply = (req, i) => ({ body: { access_token: `tok-${i}`, token_type: 'DPoP', expires_in: 3600 } });
    fx.api.reply = (req, n) => (n === 1 ? { status: 401, headers: { 'www-authenticate': 'DPoP error="use_dpop_nonce"', 'dpop-nonce': 'api-n' } } : { body: {} });
    const c = client({ proofOfPossession: nonceKeepingPlugin() });
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(200);
    expect(fx.api.requests.map((r) => r.headers.dpop)).toEqual(['p-none', 'p-api-n']);
    expect(fx.endpoint.requests).toHaveLength(1); // a nonce retry is not a token renewal
    expect(count('dpop.nonce_retry')).toBe(1);
  });

  it.each([
    ['a stream body', () => ({ method: 'POST', body: new ReadableStream({ start: (ctl) => (ctl.enqueue(new TextEncoder().encode('abc')), ctl.close()) }), duplex: 'half' }), undefined],
    ['retry401: false on the call', () => ({ method: 'POST', body: 'abc' }), { retry401: false }],
  ])('a nonce challenge to a request that is not sent again (%s): the 401 goes back, and the plug-in still keeps its nonce for the next call', async (_what, init, params) => {
    fx.endpoint.reply = (req, i) => ({ body: { access_token: `tok-${i}`, token_type: 'DPoP', expires_in: 3600 } });
    fx.api.reply = (req) => (req.headers.dpop === 'p-none' ? { status: 401, headers: { 'www-authenticate': 'DPoP error="use_dpop_nonce"', 'dpop-nonce': 'api-n' } } : { body: {} });
    const c = client({ proofOfPossession: nonceKeepingPlugin() });
    const res = await c.fetch(`${fx.api.url}/upload`, init() as RequestInit, params);
    expect(res.status).toBe(401);
    expect(count('dpop.nonce_retry')).toBe(0);
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(200);
    expect(fx.api.requests.map((r) => [r.path, r.headers.dpop])).toEqual([
      ['/upload', 'p-none'],
      ['/x', 'p-api-n'],
    ]);
    expect(fx.endpoint.requests).toHaveLength(1);
  });

  it('a DPoP token without a proof-of-possession plug-in is refused, never sent as Bearer', async () => {
    fx.endpoint.reply = () => ({ body: { access_token: 'x', token_type: 'DPoP', expires_in: 60 } });
    await expect(client().fetch(`${fx.api.url}/x`)).rejects.toMatchObject({ error: 'invalid_response' });
    expect(fx.api.requests).toHaveLength(0);
  });

  it('the secret methods are exported as plug-ins too', async () => {
    await client({ authMethod: clientSecretPost('p1'), clientSecret: undefined }).getToken({ scope: 'x' });
    await client({ authMethod: clientSecretBasic('p2'), clientSecret: undefined }).getToken({ scope: 'y' });
    expect(fx.endpoint.requests[0].form.get('client_secret')).toBe('p1');
    expect(fx.endpoint.requests[1].headers.authorization).toBe(`Basic ${Buffer.from('svc+id:p2').toString('base64')}`);
  });
});


describe('8. shared store', () => {
  it("a second client reuses the first one's token: 100 calls, 0 token requests; entries live until the token expires", async () => {
    const store = new MemoryStore();
    await client({ store }).getToken();
    await new Promise((r) => setTimeout(r, 10));
    const [entry] = [...store.data.values()];
    expect(entry.ttl).toBeLessThanOrEqual(3600_000);
    expect(entry.ttl).toBeGreaterThan(3590_000);
    const second = client({ store });
    for (let i = 0; i < 100; i++) expect((await second.getToken()).accessToken).toBe('tok-1');
    expect(fx.endpoint.requests).toHaveLength(1);
    expect(fx.events.filter((e) => e.type === 'token.cache_hit' && e.source === 'store')).toHaveLength(1);
  });

  it('keys differ by scope, resource, client and endpoint', async () => {
    const store = new MemoryStore();
    await client({ store }).getToken({ scope: 'a' });
    await client({ store }).getToken({ scope: 'b' });
    await client({ store, clientId: 'other' }).getToken({ scope: 'a' });
    await client({ store }).getToken({ scope: 'a', resource: 'https://r.example/' });
    expect(fx.endpoint.requests).toHaveLength(4);
    expect(store.data.size).toBe(4);
  });

  it('a failing store falls back to the token endpoint with a store.error event', async () => {
    const broken: TokenStore = {
      get: async () => Promise.reject(new Error('connection refused')),
      set: async () => Promise.reject(new Error('connection refused')),
      delete: async () => Promise.reject(new Error('connection refused')),
    };
    const c = client({ store: broken });
    expect((await c.getToken()).accessToken).toBe('tok-1');
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 10));
    expect(fx.events.filter((e) => e.type === 'store.error').map((e) => (e as { operation: string }).operation).sort()).toEqual(['get', 'set']);
  });

  it('a store error message is one line in the event: newlines, bidi overrides and U+2028 escaped, long text clipped', async () => {
    // a store that names the value it could not read (a Redis value anyone who reaches Redis could write)
    const forged = 'bad entry\n{"level":"info","msg":"token issued"}\u202egnp.exe\u2028x';
    const store: TokenStore = {
      get: async () => Promise.reject(new Error(forged)),
      set: async () => Promise.reject(`${'x'.repeat(300)}\r\nmore`), // a thrown string, longer than 200
      delete: async () => undefined,
    };
    expect((await client({ store }).getToken()).accessToken).toBe('tok-1');
    await new Promise((r) => setTimeout(r, 10));
    const errors = fx.events.filter((e) => e.type === 'store.error') as { operation: string; message: string }[];
    expect(errors).toEqual([
      { type: 'store.error', operation: 'get', message: 'bad entry\\n{"level":"info","msg":"token issued"}\\u202egnp.exe\\u2028x' },
      { type: 'store.error', operation: 'set', message: `${'x'.repeat(200)}…` },
    ]);
  });

  it('a store that rejects with a value String() cannot print gets a store.error at once, not a wait for the timeout', async () => {
    const store: TokenStore = { get: async () => Promise.reject(Object.create(null)), set: async () => undefined, delete: async () => undefined };
    const started = Date.now();
    expect((await client({ store, timeout: 2 }).getToken()).accessToken).toBe('tok-1');
    expect(Date.now() - started).toBeLessThan(1000);
    expect(fx.events.filter((e) => e.type === 'store.error')).toEqual([{ type: 'store.error', operation: 'get', message: 'a value that is neither an Error nor printable' }]);
  });

  // storeSays() passed an Error's message to echoed() as it was: a message that is not a string threw a TypeError
  // in the handler, so the call waited its whole timeout (and the store was skipped for 30 s) instead of a store.error.
  it('a store that rejects with an Error whose message is not a string (undefined, a number, an object) gets a store.error at once', async () => {
    const odd = (message: unknown): Error => Object.assign(new Error('replaced'), { message });
    const cases: Array<[unknown, string]> = [[undefined, 'Error'], [42, '42'], [{ code: 'E' }, '[object Object]'], [Object.create(null), 'a value that is neither an Error nor printable']];
    for (const [message, said] of cases) {
      fx.events.length = 0;
      const store: TokenStore = { get: async () => Promise.reject(odd(message)), set: async () => undefined, delete: async () => undefined };
      const started = Date.now();
      expect((await client({ store, timeout: 2 }).getToken()).accessToken).toMatch(/^tok-/);
      expect(Date.now() - started).toBeLessThan(1000);
      expect(fx.events.filter((e) => e.type === 'store.error')).toEqual([{ type: 'store.error', operation: 'get', message: said }]);
    }
  });

  it('instances with different DPoP keys never take each other\'s tokens; the same key shares them', async () => {
    const store = new MemoryStore();
    fx.endpoint.reply = (req, n) => ({ body: { access_token: `tok-${n}`, token_type: req.headers.dpop ? 'DPoP' : 'Bearer', expires_in: 3600 } });
    const keyA = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    const keyB = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    expect((await client({ store, dpop: { privateKey: keyA } }).getToken()).accessToken).toBe('tok-1');
    await new Promise((r) => setTimeout(r, 10));
    expect((await client({ store, dpop: { privateKey: keyB } }).getToken()).accessToken).toBe('tok-2');
    expect((await client({ store }).getToken()).tokenType).toBe('Bearer');
    expect(fx.endpoint.requests).toHaveLength(3);
    await new Promise((r) => setTimeout(r, 10));
    expect((await client({ store, dpop: { privateKey: keyA } }).getToken()).accessToken).toBe('tok-1');
    expect((await client({ store, dpop: { privateKey: keyB } }).getToken()).accessToken).toBe('tok-2');
    expect(fx.endpoint.requests).toHaveLength(3);
  });

  it('a store written in plain JavaScript whose set() returns nothing still stores the token, with no store.error', async () => {
    const data = new Map<string, StoredToken>();
    const store = {
      get: async (key: string) => data.get(key),
      set: (key: string, token: StoredToken) => void data.set(key, token),
      delete: async (key: string) => void data.delete(key),
    } as unknown as TokenStore;
    await client({ store }).getToken();
    await new Promise((r) => setTimeout(r, 10));
    expect([...data.values()].map((t) => t.accessToken)).toEqual(['tok-1']);
    expect(fx.count('store.error')).toBe(0);
  });

  it('a store that does not answer is skipped after the request timeout, with a store.error event, and left alone for 30 s', async () => {
    const calls: string[] = [];
    const hang = (op: string) => () => {
      calls.push(op);
      return new Promise<never>(() => undefined);
    };
    const hanging: TokenStore = { get: hang('get'), set: hang('set'), delete: hang('delete') };
    const c = client({ store: hanging, timeout: 0.2 });
    const started = Date.now();
    expect((await c.getToken()).accessToken).toBe('tok-1');
    expect(Date.now() - started).toBeLessThan(2000);
    await new Promise((r) => setTimeout(r, 300));
    const errors = fx.events.filter((e) => e.type === 'store.error') as { operation: string; message: string }[];
    expect(errors.map((e) => e.operation)).toEqual(['get']);
    expect(errors[0].message).toBe('no answer within 200 ms (the store is skipped for the next 30 s)');
    // another scope, then a renewal: straight to the token endpoint, no wait on the store
    const other = Date.now();
    expect((await c.getToken({ scope: 'b' })).accessToken).toBe('tok-2');
    expect(Date.now() - other).toBeLessThan(150);
    expect(calls).toEqual(['get']);
    // 30 s later the store is asked again
    fx.time.advance(30);
    await c.getToken({ scope: 'c' });
    expect(calls).toEqual(['get', 'get']);
  });

  it('a token the API refused is not read back from the store', async () => {
    const store = new MemoryStore();
    fx.api.reply = (req) => (req.headers.authorization === 'Bearer tok-1' ? { status: 401, headers: { 'www-authenticate': 'Bearer error="invalid_token"' } } : { body: {} });
    const c = client({ store });
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(200);
    expect(fx.endpoint.requests).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 10));
    expect([...store.data.values()][0].token.accessToken).toBe('tok-2');
  });

  it('a stored token within its skew is not used', async () => {
    const store = new MemoryStore();
    await client({ store, refreshWindow: 0 }).getToken();
    fx.time.advance(3541);
    expect((await client({ store, refreshWindow: 0 }).getToken()).accessToken).toBe('tok-2');
  });
});

describe('9. hygiene', () => {
  it.each([['client_secret_basic'], ['client_secret_post']])('no error carries the secret (%s): message, cause chain, inspection', async (method) => {
    const authMethod = method as 'client_secret_basic' | 'client_secret_post';
    const failures: unknown[] = [];
    fx.endpoint.reply = () => ({ status: 401, body: { error: 'invalid_client', error_description: 'no such client' } });
    failures.push(await client({ authMethod }).getToken().catch((e: unknown) => e));
    failures.push(await client({ authMethod, tokenEndpoint: 'http://127.0.0.1:1/token' }).getToken().catch((e: unknown) => e));
    fx.endpoint.gate = new Promise(() => undefined);
    failures.push(await client({ authMethod, timeout: 0.2 }).getToken().catch((e: unknown) => e));
    expect(failures.map((e) => (e as { error: string }).error)).toEqual(['invalid_client', 'network_error', 'timeout']);
    // the secret as given, form-encoded, and inside the Basic header
    const formEncoded = new URLSearchParams({ s: SECRET }).toString().slice(2);
    const encoded = [SECRET, formEncoded, encodeURIComponent(SECRET), Buffer.from(`svc+id:${formEncoded}`).toString('base64')];
    for (const e of failures) {
      const seen = [String(e), inspect(e, { depth: 10 }), JSON.stringify(e)];
      for (let c = (e as Error).cause; c; c = (c as Error).cause) seen.push(String(c), inspect(c, { depth: 10 }));
      for (const text of seen) for (const secret of encoded) expect(text).not.toContain(secret);
    }
  });

  it("Retry-After as an HTTP date counts from the answer's Date header; a longer one than an hour is held for an hour", async () => {
    const c = client();
    fx.endpoint.reply = (req, n) =>
      n === 1
        ? { status: 503, headers: { date: new Date(fx.time.t).toUTCString(), 'retry-after': new Date(fx.time.t + 90_000).toUTCString() }, body: { error: 'temporarily_unavailable' } }
        : n === 2
          ? { status: 429, headers: { date: new Date(fx.time.t).toUTCString(), 'retry-after': '86400' }, body: { error: 'slow_down' } }
          : { body: { access_token: `tok-${n}`, token_type: 'Bearer' } };
    await expect(c.getToken()).rejects.toMatchObject({ status: 503, retryAfter: 90 });
    fx.time.advance(90);
    await expect(c.getToken()).rejects.toMatchObject({ status: 429, retryAfter: 3600 });
    fx.time.advance(3599);
    await expect(c.getToken()).rejects.toMatchObject({ status: 429, retryAfter: 1 });
    fx.time.advance(1);
    expect((await c.getToken()).accessToken).toBe('tok-3');
  });

  it('a token request is never redirected: a 3xx is a TokenEndpointError, and the credentials go nowhere else', async () => {
    const elsewhere = await fakeServer(() => ({ body: { access_token: 'stolen', token_type: 'Bearer' } }));
    try {
      fx.endpoint.reply = () => ({ status: 307, headers: { location: `${elsewhere.url}/token` } });
      const e = await client().getToken().catch((x: unknown) => x);
      expect(e).toMatchObject({ name: 'TokenEndpointError' });
      expect(elsewhere.requests).toHaveLength(0);
    } finally {
      await elsewhere.close();
    }
  });

  it('no event carries a token or the secret', async () => {
    const token = 'eyJ.secret-token.sig';
    fx.endpoint.reply = (req, n) =>
      n === 3 ? { status: 503, body: { error: 'temporarily_unavailable' } } : { body: { access_token: `${token}${n}`, token_type: 'Bearer', expires_in: 3600 } };
    fx.api.reply = (req, n) => (n === 1 ? { status: 401, headers: { 'www-authenticate': 'Bearer error="invalid_token"' } } : { body: {} });
    const broken: TokenStore = { get: async () => Promise.reject(new Error('down')), set: async () => undefined, delete: async () => undefined };
    const c = client({ store: broken });
    await c.getToken();
    await c.fetch(`${fx.api.url}/x?access_token=leak`).catch(() => undefined);
    await c.fetch(`${fx.api.url}/x`);
    fx.time.advance(3400);
    await c.getToken();
    await new Promise((r) => setTimeout(r, 20));
    const kinds = new Set(fx.events.map((e) => e.type));
    for (const k of ['token.requested', 'token.cache_hit', 'token.refresh_failed', 'api.retry_401', 'store.error']) expect(kinds).toContain(k);
    const text = JSON.stringify(fx.events);
    expect(text).not.toContain(token);
    expect(text).not.toContain('secret-token');
    expect(text).not.toContain('leak');
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain(encodeURIComponent(SECRET));
  });

  it('a listener that throws never breaks a call', async () => {
    const c = client({ onEvent: () => { throw new Error('listener'); } });
    expect((await c.getToken()).accessToken).toBe('tok-1');
  });

  it.each([
    [{}, /needs issuer or tokenEndpoint/],
    [{ tokenEndpoint: 'https://a/t', clientSecret: 'x' }, /clientId/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x' }, /clientSecret/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', skew: -1 }, /skew/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', scope: 'a "b' }, /scope/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', resource: 'relative' }, /resource/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', scopes: 'a' }, /unknown option scopes/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', authMethod: 'none' }, /authMethod/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', store: {} }, /store/],
    [{ tokenEndpoint: 'https://a/t', clientId: 'x', clientSecret: 'y', store: { get() {}, set() {}, delete() {}, lock: true } }, /lock.*function/],
  ])('a wrong option is a TypeError at creation: %j', (options, message) => {
    expect(() => createTokenClient(options as TokenClientOptions)).toThrow(TypeError);
    expect(() => createTokenClient(options as TokenClientOptions)).toThrow(message);
  });
});

describe('issuer discovery', () => {
  it("reads the token endpoint from RFC 8414 metadata once, and refuses metadata naming another issuer", async () => {
    const meta = await fakeServer((req) =>
      req.path === '/.well-known/oauth-authorization-server'
        ? { body: { issuer: meta.url, token_endpoint: fx.endpoint.tokenUrl, token_endpoint_auth_methods_supported: ['client_secret_post'] } }
        : { status: 404 },
    );
    try {
      const c = client({ tokenEndpoint: undefined, issuer: meta.url });
      await Promise.all([c.getToken({ scope: 'a' }), c.getToken({ scope: 'b' })]);
      expect(meta.requests).toHaveLength(1);
      expect(fx.endpoint.requests[0].form.get('client_secret')).toBe(SECRET); // the only method the metadata lists
      const wrong = client({ tokenEndpoint: undefined, issuer: `${meta.url}/` });
      const refused = (await wrong.getToken().catch((e: unknown) => e)) as Error;
      expect(refused).toMatchObject({ error: 'invalid_metadata', status: 200 });
      // both issuers named, so the caller sees which option to fix
      expect(refused.message).toContain(`names issuer ${JSON.stringify(meta.url)}, not ${JSON.stringify(`${meta.url}/`)}`);
      expect(refused.message).toMatch(/^token endpoint discovery failed \(HTTP 200\)/);
    } finally {
      await meta.close();
    }
  });

  it('for an issuer with a path, tries RFC 8414 §3.1, then OpenID Connect Discovery, then the well-known segment after the path', async () => {
    let issuer = '';
    const meta = await fakeServer((req) =>
      req.path === '/auth/.well-known/oauth-authorization-server' ? { body: { issuer, token_endpoint: fx.endpoint.tokenUrl } } : { status: 404 },
    );
    try {
      issuer = `${meta.url}/auth`;
      const token = await client({ tokenEndpoint: undefined, issuer }).getToken();
      expect(token.accessToken).toBe('tok-1');
      expect(meta.requests.map((r) => r.path)).toEqual([
        '/.well-known/oauth-authorization-server/auth',
        '/auth/.well-known/openid-configuration',
        '/auth/.well-known/oauth-authorization-server',
      ]);
    } finally {
      await meta.close();
    }
  });

  it('at the well-known segment after the path, still refuses metadata naming another issuer (RFC 8414 §3.3)', async () => {
    const meta = await fakeServer((req) =>
      req.path === '/auth/.well-known/oauth-authorization-server' ? { body: { issuer: meta.url, token_endpoint: fx.endpoint.tokenUrl } } : { status: 404 },
    );
    try {
      const refused = (await client({ tokenEndpoint: undefined, issuer: `${meta.url}/auth` }).getToken().catch((e: unknown) => e)) as Error;
      expect(refused).toMatchObject({ error: 'invalid_metadata', status: 200 });
      expect(refused.message).toContain(`the metadata at ${meta.url}/auth/.well-known/oauth-authorization-server names issuer ${JSON.stringify(meta.url)}`);
      expect(fx.endpoint.requests).toHaveLength(0);
    } finally {
      await meta.close();
    }
  });

  it('for an issuer without a path, asks the two standard locations only', async () => {
    const meta = await fakeServer(() => ({ status: 404 }));
    try {
      const refused = (await client({ tokenEndpoint: undefined, issuer: meta.url }).getToken().catch((e: unknown) => e)) as Error;
      expect(refused).toMatchObject({ error: 'discovery_failed', status: 404 });
      expect(meta.requests.map((r) => r.path)).toEqual(['/.well-known/oauth-authorization-server', '/.well-known/openid-configuration']);
    } finally {
      await meta.close();
    }
  });
});
