/** Behaviours 1-5, 7 and 10 of the token client against a counting fake token endpoint. */
import { TokenEndpointError } from '../../lib/client';
import { bearerOf, gate, until, useClientFixture } from './fakes';

const fx = useClientFixture({ clientId: 'svc', clientSecret: 's3cret-value' });
const { client, count, tokenRequests } = fx;

describe('1. cold start', () => {
  it('100 concurrent calls make exactly 1 token request and all 100 API requests carry the same token', async () => {
    const c = client();
    const responses = await Promise.all(Array.from({ length: 100 }, () => c.fetch(`${fx.api.url}/orders`)));
    expect(responses.every((r) => r.status === 200)).toBe(true);
    expect(tokenRequests()).toBe(1);
    expect(fx.api.requests).toHaveLength(100);
    expect(new Set(fx.api.requests.map((r) => r.headers.authorization))).toEqual(new Set(['Bearer tok-1']));
    expect(count('token.requested')).toBe(1);
  });

  it('then reuses it: 1,000 sequential calls over 50 simulated minutes make no other token request', async () => {
    const c = client();
    for (let i = 0; i < 1000; i++) {
      expect((await c.getToken()).accessToken).toBe('tok-1');
      fx.time.advance(3);
    }
    expect(tokenRequests()).toBe(1);
    expect(count('token.cache_hit')).toBe(999);
  });
});

describe('2. cache key', () => {
  it('concurrent calls for two scopes make exactly 2 token requests; each call gets the token of its scope; "b a" is "a b"', async () => {
    const c = client();
    const calls = Array.from({ length: 60 }, (_, i) => {
      const scope = i % 3 === 0 ? 'a b' : i % 3 === 1 ? 'b a' : ['c'];
      return c.getToken({ scope }).then((t) => ({ asked: i % 3 === 2 ? 'c' : 'a b', got: t }));
    });
    const results = await Promise.all(calls);
    expect(tokenRequests()).toBe(2);
    expect(fx.endpoint.requests.map((r) => r.form.get('scope')).sort()).toEqual(['a b', 'c']);
    for (const { asked, got } of results) expect(got.scope).toBe(asked);
    const byScope = new Map(fx.endpoint.requests.map((r, i) => [r.form.get('scope'), `tok-${i + 1}`]));
    for (const { asked, got } of results) expect(got.accessToken).toBe(byScope.get(asked));
  });

  it('API calls get the token of the scope they ask for', async () => {
    const c = client({ scope: 'orders:read' });
    await Promise.all([c.fetch(`${fx.api.url}/r`), c.fetch(`${fx.api.url}/w`, undefined, { scope: 'orders:write' })]);
    const scopeOf = new Map(fx.endpoint.requests.map((r, i) => [`Bearer tok-${i + 1}`, r.form.get('scope')]));
    for (const r of fx.api.requests) expect(scopeOf.get(r.headers.authorization!)).toBe(r.path === '/r' ? 'orders:read' : 'orders:write');
  });

  it('a resource holding a space is one resource, not the two it spells', async () => {
    const c = client();
    const one = await c.getToken({ resource: 'https://a.example/ https://b.example/' });
    const two = await c.getToken({ resource: ['https://a.example/', 'https://b.example/'] });
    expect(one.accessToken).not.toBe(two.accessToken);
    expect(fx.endpoint.requests.map((r) => r.form.getAll('resource'))).toEqual([['https://a.example/ https://b.example/'], ['https://a.example/', 'https://b.example/']]);
  });

  it('a different resource is a different key, sent as resource', async () => {
    const c = client();
    await c.getToken({ resource: 'https://a.example/' });
    await c.getToken({ resource: ['https://a.example/'] });
    await c.getToken({ resource: 'https://b.example/' });
    expect(tokenRequests()).toBe(2);
    expect(fx.endpoint.requests.map((r) => r.form.getAll('resource'))).toEqual([['https://a.example/'], ['https://b.example/']]);
  });

  it('is bounded: 1,000 keys by default, least recently used dropped first', async () => {
    const c = client();
    for (let i = 0; i <= 1000; i++) await c.getToken({ scope: `s${i}` }); // 1,001 keys
    expect(tokenRequests()).toBe(1001);
    await c.getToken({ scope: 's1000' }); // still cached
    expect(tokenRequests()).toBe(1001);
    await c.getToken({ scope: 's0' }); // dropped
    expect(tokenRequests()).toBe(1002);
  });

  it('maxEntries sets the bound', async () => {
    const c = client({ maxEntries: 2 });
    await c.getToken({ scope: 'x' });
    await c.getToken({ scope: 'y' });
    await c.getToken({ scope: 'x' }); // x most recent
    await c.getToken({ scope: 'z' }); // drops y
    await c.getToken({ scope: 'x' });
    expect(tokenRequests()).toBe(3);
    await c.getToken({ scope: 'y' });
    expect(tokenRequests()).toBe(4);
  });
});

describe('3. expiry', () => {
  it('a token is not used within skew (60 s) of its expiry: none at 3539 s, a new one at 3541 s', async () => {
    const c = client({ refreshWindow: 0 });
    await c.getToken();
    fx.time.advance(3539);
    expect((await c.getToken()).accessToken).toBe('tok-1');
    expect(tokenRequests()).toBe(1);
    fx.time.advance(2);
    expect((await c.getToken()).accessToken).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('expiry counts from when the request was sent, not when the answer came', async () => {
    fx.endpoint.reply = (req, n) => {
      fx.time.advance(5); // the answer takes 5 s
      return { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 60 } };
    };
    const c = client({ skew: 10, refreshWindow: 0 });
    const sent = fx.time.t;
    const token = await c.getToken();
    expect(token.expiresAt.getTime()).toBe(sent + 60_000);
    fx.time.t = sent + 49_999;
    await c.getToken();
    expect(tokenRequests()).toBe(1);
    fx.time.t = sent + 50_001;
    await c.getToken();
    expect(tokenRequests()).toBe(2);
  });

  it('the skew is clamped to half the lifetime: a 30-second token serves 100 calls in 10 s with 1 request', async () => {
    fx.endpoint.reply = (req, n) => ({ body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 30 } });
    const c = client();
    for (let i = 0; i < 100; i++) {
      await c.getToken();
      fx.time.advance(0.099);
    }
    expect(tokenRequests()).toBe(1);
    fx.time.t += 5100; // 15.0 s after sending: half the lifetime
    await c.getToken();
    expect(tokenRequests()).toBe(2);
  });

  it('without expires_in a token is reused for 300 s: 1 request in 299 s, a second after 300 s', async () => {
    fx.endpoint.reply = (req, n) => ({ body: { access_token: `tok-${n}`, token_type: 'Bearer' } });
    const c = client({ refreshWindow: 0, skew: 0 });
    for (let s = 0; s < 299; s++) {
      await c.getToken();
      fx.time.advance(1);
    }
    expect(tokenRequests()).toBe(1);
    fx.time.advance(1.001);
    await c.getToken();
    expect(tokenRequests()).toBe(2);
  });

  it('defaultTtl sets that lifetime; skew applies to it as to any other', async () => {
    fx.endpoint.reply = (req, n) => ({ body: { access_token: `tok-${n}`, token_type: 'Bearer' } });
    const c = client({ defaultTtl: 120, refreshWindow: 0 });
    await c.getToken();
    fx.time.advance(59);
    await c.getToken();
    expect(tokenRequests()).toBe(1);
    fx.time.advance(1.001);
    await c.getToken();
    expect(tokenRequests()).toBe(2);
  });
});

describe('4. refresh ahead', () => {
  it('inside the window calls return the current token at once while exactly one background refresh runs', async () => {
    const c = client();
    await c.getToken();
    fx.time.advance(3300 + 61); // past any jittered start (3300-3360 s)
    const held = gate();
    fx.endpoint.gate = held.promise;
    const tokens = await Promise.all(Array.from({ length: 100 }, () => c.getToken()));
    expect(new Set(tokens.map((t) => t.accessToken))).toEqual(new Set(['tok-1']));
    await until(() => tokenRequests() === 2, 'the background request');
    expect(fx.events.filter((e) => e.type === 'token.requested').map((e) => (e as { reason: string }).reason)).toEqual(['initial', 'refresh']);
    held.open();
    fx.endpoint.gate = undefined;
    await until(() => count('token.cache_hit') > 100 || tokenRequests() === 2);
    let next = await c.getToken();
    for (let i = 0; i < 200 && next.accessToken === 'tok-1'; i++) {
      await new Promise((r) => setTimeout(r, 5));
      next = await c.getToken();
    }
    expect(next.accessToken).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('the window opens at min(5 min, half the lifetime) before expiry', async () => {
    fx.endpoint.reply = (req, n) => ({ body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 600 } });
    const c = client();
    await c.getToken();
    fx.time.advance(299); // window opens at 300 s
    await c.getToken();
    await new Promise((r) => setTimeout(r, 20));
    expect(tokenRequests()).toBe(1);
    fx.time.advance(61 + 60); // the latest jittered start: 300 + (540 - 300) / 4 = 360 s
    await c.getToken();
    await until(() => tokenRequests() === 2, 'the refresh');
  });

  it('jitter: 50 clients created at the same instant spread their refreshes over more than 10 % of the window', async () => {
    const refreshedAt: number[] = [];
    const fleet = Array.from({ length: 50 }, () =>
      client({ onEvent: (e) => e.type === 'token.requested' && e.reason === 'refresh' && refreshedAt.push(fx.time.t) }),
    );
    await Promise.all(fleet.map((c) => c.getToken()));
    const start = fx.time.t;
    fx.time.advance(3300);
    while (refreshedAt.length < 50 && fx.time.t < start + 3540_000) {
      for (const c of fleet) await c.getToken();
      fx.time.advance(1);
    }
    expect(refreshedAt).toHaveLength(50);
    const spread = Math.max(...refreshedAt) - Math.min(...refreshedAt);
    expect(spread).toBeGreaterThan(30_000);
  });
});

describe('5. outages', () => {
  it('while a valid token is held a failing endpoint fails no call, and refreshes back off', async () => {
    const c = client();
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 503, body: { error: 'temporarily_unavailable' } });
    const start = fx.time.t;
    fx.time.advance(3300);
    // 1,000 calls from the window's start to just before the token stops being used (3540 s)
    for (let i = 0; i < 1000; i++) {
      expect((await c.getToken()).accessToken).toBe('tok-1');
      fx.time.advance(0.239);
      if (i % 50 === 0) await new Promise((r) => setTimeout(r, 1)); // let background requests finish
    }
    await until(() => count('token.refresh_failed') === tokenRequests() - 1, 'the last failure');
    const failed = tokenRequests() - 1;
    // backoff 1, 2, 4, 8, 16, 30, 30… s (halved at most by jitter) over 240 s
    expect(failed).toBeGreaterThanOrEqual(3);
    expect(failed).toBeLessThanOrEqual(20);
    expect(fx.time.t - start).toBeLessThan(3540_000);
    expect(fx.events.filter((e) => e.type === 'token.refresh_failed').every((e) => (e as { tokenStillValid: boolean }).tokenStillValid)).toBe(true);
  });

  it('past the skew, while the endpoint fails, the token held serves until it expires (not a failed call): T fails from the window until 30 s after expiry', async () => {
    const c = client();
    const t0 = fx.time.t;
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 503, body: { error: 'temporarily_unavailable' } });
    fx.time.advance(3300);
    // calls every 0.33 s up to a moment before expiry (3600 s), through the skew (from 3540 s)
    for (let i = 0; i < 900; i++) {
      const response = await c.fetch(`${fx.api.url}/x`);
      expect(response.status).toBe(200);
      fx.time.advance(0.33);
      if (i % 50 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    expect(fx.time.t - t0).toBeGreaterThan(3590_000);
    expect(fx.time.t - t0).toBeLessThan(3600_000);
    expect(fx.api.requests.every((r) => r.headers.authorization === 'Bearer tok-1')).toBe(true);
    const requests = tokenRequests();
    // backoff 1, 2, 4 … 30 s (jitter halves at most) over 300 s: a bounded number, whatever the calls
    expect(requests).toBeLessThanOrEqual(30);
    // past expiry: a TokenEndpointError, and the API gets nothing
    fx.time.advance(3601 - (fx.time.t - t0) / 1000);
    const seen = fx.api.requests.length;
    for (let i = 0; i < 10; i++) {
      const err = await c.fetch(`${fx.api.url}/x`).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TokenEndpointError);
      fx.time.advance(3);
    }
    expect(fx.api.requests).toHaveLength(seen);
  });

  it('past the skew with no backoff running, a call waits for the renewal and gets the token held when it fails', async () => {
    const c = client({ refreshWindow: 0 });
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 500, body: 'oops' });
    fx.time.advance(3541);
    expect((await c.getToken()).accessToken).toBe('tok-1');
    expect(tokenRequests()).toBe(2);
    expect(count('token.refresh_failed')).toBe(1);
  });

  it('once the token has expired and the endpoint still fails, calls fail fast with a TokenEndpointError and no API request is sent', async () => {
    const c = client({ refreshWindow: 0 });
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 500, body: 'oops' });
    fx.time.advance(3601);
    const first = await c.fetch(`${fx.api.url}/x`).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(TokenEndpointError);
    expect(first).toMatchObject({ status: 500, error: 'server_error' });
    const requestsAfterFirst = tokenRequests();
    const again = await c.fetch(`${fx.api.url}/x`).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(TokenEndpointError);
    expect((again as TokenEndpointError).retryAfter).toBeGreaterThanOrEqual(1);
    expect(tokenRequests()).toBe(requestsAfterFirst); // fail fast: backed off
    expect(fx.api.requests).toHaveLength(0);
  });

  it.each([
    [429, 10],
    [503, 5],
  ])('Retry-After on %i holds for all callers: no token request for %i s, then the first one goes through', async (status, seconds) => {
    fx.endpoint.reply = (req, n) =>
      n === 1
        ? { status, headers: { 'retry-after': String(seconds) }, body: { error: status === 429 ? 'invalid_request' : 'temporarily_unavailable' } }
        : { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
    const c = client();
    const err = (await c.getToken().catch((e: unknown) => e)) as TokenEndpointError;
    expect(err).toBeInstanceOf(TokenEndpointError);
    expect(err).toMatchObject({ status, retryAfter: seconds });
    for (let i = 0; i < 100; i++) {
      fx.time.advance((seconds - 0.1) / 100);
      const e = (await Promise.all([c.getToken().catch((x: unknown) => x), c.fetch(`${fx.api.url}/x`).catch((x: unknown) => x)]))[0] as TokenEndpointError;
      expect(e).toBeInstanceOf(TokenEndpointError);
      expect(e.retryAfter).toBeLessThanOrEqual(seconds);
    }
    expect(tokenRequests()).toBe(1);
    expect(fx.api.requests).toHaveLength(0);
    fx.time.advance(0.11);
    expect((await c.getToken()).accessToken).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('Retry-After during a refresh: the held token keeps serving and no token request is made until it ends', async () => {
    const c = client();
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 429, headers: { 'retry-after': '120' }, body: { error: 'invalid_request' } });
    fx.time.advance(3361);
    await c.getToken();
    await until(() => count('token.refresh_failed') === 1);
    for (let i = 0; i < 100; i++) {
      expect((await c.getToken()).accessToken).toBe('tok-1');
      fx.time.advance(1.19);
    }
    expect(tokenRequests()).toBe(2);
  });

  it.each(['invalid_client', 'unauthorized_client', 'invalid_scope'])('%s is not retried in a loop: 100 calls in 10 s make at most 2 token requests', async (error) => {
    fx.endpoint.reply = () => ({ status: error === 'invalid_client' ? 401 : 400, body: { error, error_description: 'no' } });
    const c = client();
    for (let i = 0; i < 100; i++) {
      const e = (await c.getToken().catch((x: unknown) => x)) as TokenEndpointError;
      expect(e).toBeInstanceOf(TokenEndpointError);
      expect(e.error).toBe(error);
      expect(e.error_description).toBe('no');
      fx.time.advance(0.1);
    }
    expect(tokenRequests()).toBeLessThanOrEqual(2);
    expect(count('token.refresh_failed')).toBe(tokenRequests());
  });

  it('a Retry-After holds for every scope and resource: other keys make no token request until it ends', async () => {
    fx.endpoint.reply = (req, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '10' }, body: { error: 'slow_down' } } : { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
    const c = client();
    await expect(c.getToken({ scope: 'a' })).rejects.toMatchObject({ status: 429, retryAfter: 10 });
    fx.time.advance(2);
    for (const params of [{ scope: 'b' }, { scope: 'c', resource: 'https://r.example/' }, {}]) {
      const e = (await c.getToken(params).catch((x: unknown) => x)) as TokenEndpointError;
      expect(e).toBeInstanceOf(TokenEndpointError);
      expect(e).toMatchObject({ status: 429, error: 'slow_down', retryAfter: 8 });
    }
    expect(tokenRequests()).toBe(1);
    fx.time.advance(8.1);
    expect((await c.getToken({ scope: 'b' })).accessToken).toBe('tok-2');
    // a success lifts it for the others at once
    expect((await c.getToken({ scope: 'c' })).accessToken).toBe('tok-3');
  });

  it.each(['invalid_client', 'unauthorized_client'])('%s holds for every scope: 20 other scopes within 2 s make no token request', async (error) => {
    fx.endpoint.reply = () => ({ status: error === 'invalid_client' ? 401 : 400, body: { error } });
    const c = client();
    await expect(c.getToken({ scope: 'a' })).rejects.toMatchObject({ error });
    for (let i = 0; i < 20; i++) {
      await expect(c.getToken({ scope: `s${i}` })).rejects.toMatchObject({ error });
      fx.time.advance(0.1);
    }
    expect(tokenRequests()).toBe(1);
  });

  it('invalid_scope holds for its own scope only: another scope is asked for', async () => {
    fx.endpoint.reply = (req, n) => (req.form.get('scope') === 'bad' ? { status: 400, body: { error: 'invalid_scope' } } : { body: { access_token: `tok-${n}`, token_type: 'Bearer' } });
    const c = client();
    await expect(c.getToken({ scope: 'bad' })).rejects.toMatchObject({ error: 'invalid_scope' });
    expect((await c.getToken({ scope: 'good' })).accessToken).toBe('tok-2');
  });

  it('a clock that steps back does not stretch a backoff: an hour back, the endpoint is asked again', async () => {
    fx.endpoint.reply = (req, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '120' }, body: { error: 'slow_down' } } : { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
    const c = client();
    await expect(c.getToken()).rejects.toMatchObject({ retryAfter: 120 });
    fx.time.advance(10);
    await expect(c.getToken()).rejects.toMatchObject({ retryAfter: 110 });
    fx.time.advance(-3600);
    expect((await c.getToken()).accessToken).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('a token endpoint that does not answer fails the call with error "timeout" after `timeout` seconds', async () => {
    fx.endpoint.gate = new Promise(() => undefined);
    const c = client({ timeout: 0.3 });
    const started = Date.now();
    const e = (await c.getToken().catch((x: unknown) => x)) as TokenEndpointError;
    expect(e).toBeInstanceOf(TokenEndpointError);
    expect(e.error).toBe('timeout');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('an unreachable endpoint is a TokenEndpointError "network_error"', async () => {
    const c = client({ tokenEndpoint: 'http://127.0.0.1:1/token' });
    await expect(c.getToken()).rejects.toMatchObject({ name: 'TokenEndpointError', error: 'network_error', status: undefined });
  });
});

describe('7. abort', () => {
  it("one caller's AbortSignal never cancels the token request others wait on", async () => {
    const c = client();
    const held = gate();
    fx.endpoint.gate = held.promise;
    const controller = new AbortController();
    const first = c.fetch(`${fx.api.url}/x`, { signal: controller.signal });
    const others = Array.from({ length: 9 }, () => c.fetch(`${fx.api.url}/x`));
    await until(() => tokenRequests() === 1);
    controller.abort();
    await expect(first).rejects.toMatchObject({ name: 'AbortError' });
    held.open();
    const responses = await Promise.all(others);
    expect(responses.map((r) => r.status)).toEqual(Array(9).fill(200));
    expect(tokenRequests()).toBe(1);
    expect(fx.api.requests).toHaveLength(9);
  });

  it('an already aborted signal: the call rejects at once, no token request is sent, nothing is left unhandled', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      fx.endpoint.reply = () => ({ status: 500, body: { error: 'server_error' } });
      const c = client();
      const controller = new AbortController();
      controller.abort();
      await expect(c.getToken({ signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
      await expect(c.fetch(`${fx.api.url}/x`, { signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
      await new Promise((r) => setTimeout(r, 50));
      expect(tokenRequests()).toBe(0);
      expect(fx.api.requests).toHaveLength(0);
      // while another caller's request is under way, an aborted caller leaves it alone
      const held = gate();
      fx.endpoint.gate = held.promise;
      const other = c.getToken().catch((e: unknown) => e);
      await until(() => tokenRequests() === 1);
      await expect(c.getToken({ signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
      held.open();
      expect(await other).toMatchObject({ error: 'server_error' });
      await new Promise((r) => setTimeout(r, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('getToken() takes a signal too', async () => {
    const c = client();
    fx.endpoint.gate = gate().promise;
    const controller = new AbortController();
    const p = c.getToken({ signal: controller.signal });
    controller.abort(new Error('caller gave up'));
    await expect(p).rejects.toThrow('caller gave up');
  });
});

describe('10. events match the wire', () => {
  it('token.requested, token.cache_hit, token.refresh_failed and api.retry_401 count what the endpoint and the API saw', async () => {
    let refuse = 1;
    fx.api.reply = (req) => (refuse-- > 0 ? { status: 401, headers: { 'www-authenticate': 'Bearer error="invalid_token"' } } : { body: { ok: bearerOf(req) } });
    const c = client();
    for (let i = 0; i < 5; i++) await c.fetch(`${fx.api.url}/x`);
    fx.endpoint.reply = () => ({ status: 503, body: { error: 'temporarily_unavailable' } });
    fx.time.advance(3361);
    await c.getToken();
    await until(() => count('token.refresh_failed') === 1);
    expect(count('token.requested')).toBe(tokenRequests());
    expect(count('token.refresh_failed')).toBe(1);
    expect(count('api.retry_401')).toBe(fx.api.requests.length - 5);
    expect(count('token.cache_hit')).toBe(4 + 1); // calls 2-5, and the one in the refresh window
  });
});
