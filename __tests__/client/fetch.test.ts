/** Behaviours 6 and 9 (transport, close) of client.fetch() against a fake API and a counting fake token endpoint. */
import { Readable } from 'node:stream';
import { createTokenClient } from '../../lib/client';
import { challengeError } from '../../lib/client/challenge';
import { bearerOf, gate, until, useClientFixture } from './fakes';

const refuse = (error?: string) => ({ status: 401, headers: { 'www-authenticate': error ? `Bearer realm="api", error="${error}", error_description="no"` : 'Bearer realm="api"' } });
const fx = useClientFixture({ clientId: 'svc', clientSecret: 's3cret-value' });
const { client, count, tokenRequests } = fx;

describe('6. a 401 from the API', () => {
  it.each([['invalid_token'], [undefined]])('error=%s: one new token, the request retried once, 200', async (error) => {
    fx.api.reply = (req, n) => (n === 1 ? refuse(error) : { body: { token: bearerOf(req) } });
    const c = client();
    const res = await c.fetch(`${fx.api.url}/orders`, { method: 'POST', body: JSON.stringify({ item: 'pears' }), headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ token: 'tok-2' });
    expect(tokenRequests()).toBe(2);
    expect(fx.api.requests).toHaveLength(2);
    expect(fx.api.requests.map((r) => [r.headers.authorization, r.body, r.headers['content-type']])).toEqual([
      ['Bearer tok-1', '{"item":"pears"}', 'application/json'],
      ['Bearer tok-2', '{"item":"pears"}', 'application/json'],
    ]);
    expect(count('api.retry_401')).toBe(1);
    expect(fx.events.find((e) => e.type === 'token.requested' && e.reason === 'renew_401')).toBeDefined();
  });

  it('retry401: false (client option): a POST refused once gets its 401 back, sent once only; the token is still renewed for the next call', async () => {
    fx.api.reply = (req) => (bearerOf(req) === 'tok-1' ? refuse('invalid_token') : { body: {} });
    const c = client({ retry401: false });
    const res = await c.fetch(`${fx.api.url}/orders`, { method: 'POST', body: '{"item":"pears"}', headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(401);
    expect(fx.api.requests.map((r) => [r.method, bearerOf(r), r.body])).toEqual([['POST', 'tok-1', '{"item":"pears"}']]);
    expect(count('api.retry_401')).toBe(0);
    await until(() => tokenRequests() === 2, 'the renewal');
    expect((await c.fetch(`${fx.api.url}/next`)).status).toBe(200);
    expect(bearerOf(fx.api.requests[1])).toBe('tok-2');
  });

  it('retry401 per call: { retry401: false } on a client that retries, { retry401: true } on one that does not', async () => {
    fx.api.reply = (req) => (bearerOf(req) === 'tok-1' ? refuse('invalid_token') : { body: {} });
    const retrying = client();
    expect((await retrying.fetch(`${fx.api.url}/a`, { method: 'POST', body: 'x' }, { retry401: false })).status).toBe(401);
    expect(fx.api.requests).toHaveLength(1);
    fx.api.reply = (req) => (bearerOf(req) === 'tok-3' ? refuse('invalid_token') : { body: {} });
    const once = client({ retry401: false, scope: 'other' });
    expect((await once.fetch(`${fx.api.url}/b`, { method: 'POST', body: 'y' }, { retry401: true })).status).toBe(200);
    expect(fx.api.requests.slice(1).map((r) => [r.path, bearerOf(r)])).toEqual([
      ['/b', 'tok-3'],
      ['/b', 'tok-4'],
    ]);
    expect(count('api.retry_401')).toBe(1);
  });

  it('retry401 must be true or false, as an option and per call', async () => {
    expect(() => createTokenClient({ tokenEndpoint: fx.endpoint.tokenUrl, clientId: 'x', clientSecret: 'y', retry401: 'no' as unknown as boolean })).toThrow(
      new TypeError('option retry401 must be true or false'),
    );
    await expect(client().fetch(`${fx.api.url}/x`, undefined, { retry401: 0 as unknown as boolean })).rejects.toThrow(new TypeError('fetch(): retry401 must be true or false'));
    expect(fx.api.requests).toHaveLength(0);
  });

  it('a 401 while a Retry-After runs asks for no token: the caller gets the 401, then the block error until it ends', async () => {
    const c = client();
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 429, headers: { 'retry-after': '120' }, body: { error: 'slow_down' } });
    fx.time.advance(3361);
    await c.getToken(); // the background refresh meets the 429
    await until(() => count('token.refresh_failed') === 1);
    fx.time.advance(10);
    fx.api.reply = () => refuse('invalid_token');
    const res = await c.fetch(`${fx.api.url}/orders`);
    expect(res.status).toBe(401);
    expect(tokenRequests()).toBe(2);
    await expect(c.getToken()).rejects.toMatchObject({ status: 429, retryAfter: 110 });
    expect(tokenRequests()).toBe(2);
  });

  it('after the clock stepped back, a 401 is renewed again: the last renewal is not taken to be in the future', async () => {
    fx.api.reply = (req) => (bearerOf(req) === 'tok-3' ? { body: {} } : refuse('invalid_token'));
    const c = client();
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(401); // tok-1 refused, tok-2 refused: back to the caller
    expect(tokenRequests()).toBe(2);
    fx.time.advance(-3600);
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(200);
    expect(tokenRequests()).toBe(3);
  });

  it('a second 401 goes back to the caller: no third attempt, no second renewal', async () => {
    fx.api.reply = () => refuse('invalid_token');
    const c = client();
    const res = await c.fetch(`${fx.api.url}/orders`);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toContain('invalid_token');
    expect(fx.api.requests).toHaveLength(2);
    expect(tokenRequests()).toBe(2);
  });

  it('50 calls refused with the same token share one renewal; all 50 retries carry the new token', async () => {
    fx.api.reply = (req) => (bearerOf(req) === 'tok-1' ? refuse('invalid_token') : { body: {} });
    const c = client();
    await c.getToken();
    const responses = await Promise.all(Array.from({ length: 50 }, () => c.fetch(`${fx.api.url}/x`)));
    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
    expect(tokenRequests()).toBe(2);
    const retries = fx.api.requests.filter((r) => bearerOf(r) !== 'tok-1');
    expect(retries).toHaveLength(50);
    expect(new Set(retries.map(bearerOf))).toEqual(new Set(['tok-2']));
  });

  it('a 401 for the old token that arrives after the new one is cached does not drop the new one', async () => {
    const late = gate();
    fx.api.reply = async (req, n) => {
      if (n === 1) {
        await late.promise; // answered last
        return refuse('invalid_token');
      }
      return bearerOf(req) === 'tok-1' ? refuse('invalid_token') : { body: {} };
    };
    const c = client();
    await c.getToken();
    const slow = c.fetch(`${fx.api.url}/slow`);
    await until(() => fx.api.requests.length === 1);
    expect((await c.fetch(`${fx.api.url}/fast`)).status).toBe(200); // renews to tok-2
    late.open();
    expect((await slow).status).toBe(200); // retried with tok-2
    expect(tokenRequests()).toBe(2);
    expect((await c.getToken()).accessToken).toBe('tok-2');
  });

  it('403 insufficient_scope goes back as is: no token request, no retry', async () => {
    fx.api.reply = () => ({ status: 403, headers: { 'www-authenticate': 'Bearer error="insufficient_scope", scope="orders:write"' }, body: { e: 1 } });
    const c = client();
    const res = await c.fetch(`${fx.api.url}/x`);
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ e: 1 });
    expect(tokenRequests()).toBe(1);
    expect(fx.api.requests).toHaveLength(1);
  });

  it('a 401 with another error (invalid_request) or another scheme goes back as is', async () => {
    let answer = refuse('invalid_request');
    fx.api.reply = () => answer;
    const c = client();
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(401);
    answer = { status: 401, headers: { 'www-authenticate': 'Basic realm="x"' } };
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(401);
    expect(tokenRequests()).toBe(1);
    expect(fx.api.requests).toHaveLength(2);
  });

  it('a body that cannot be sent again (a stream) gets its 401 back without a retry, and the next call uses a fresh token', async () => {
    fx.api.reply = (req) => (bearerOf(req) === 'tok-1' ? refuse('invalid_token') : { body: {} });
    const c = client();
    const res = await c.fetch(`${fx.api.url}/upload`, { method: 'POST', body: Readable.toWeb(Readable.from(['a', 'b'])) as ReadableStream, duplex: 'half' } as RequestInit);
    expect(res.status).toBe(401);
    expect(fx.api.requests).toHaveLength(1);
    expect(count('api.retry_401')).toBe(0);
    const next = await c.fetch(`${fx.api.url}/x`);
    expect(next.status).toBe(200);
    expect(bearerOf(fx.api.requests[1])).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('a Request object without a body is retried; its headers are kept', async () => {
    fx.api.reply = (req, n) => (n === 1 ? refuse('invalid_token') : { body: { h: req.headers['x-trace'] } });
    const c = client();
    const res = await c.fetch(new Request(`${fx.api.url}/x`, { headers: { 'x-trace': 't1' } }));
    expect(await res.json()).toEqual({ h: 't1' });
    expect(fx.api.requests.map(bearerOf)).toEqual(['tok-1', 'tok-2']);
  });

  it('a Request object with a body is sent once: its body is a stream, no copy is kept, and the 401 goes back', async () => {
    // a copy kept for a retry would hold every upload passed as a Request in memory, on every call
    fx.api.reply = () => refuse('invalid_token');
    const c = client();
    const res = await c.fetch(new Request(`${fx.api.url}/orders`, { method: 'POST', body: '{"item":"pears"}', headers: { 'content-type': 'application/json' } }));
    expect(res.status).toBe(401);
    expect(fx.api.requests.map((r) => [r.method, bearerOf(r), r.body])).toEqual([['POST', 'tok-1', '{"item":"pears"}']]);
    expect(count('api.retry_401')).toBe(0);
    // the refused token was dropped: the next call has a new one
    fx.api.reply = () => ({ body: {} });
    expect((await c.fetch(`${fx.api.url}/orders`)).status).toBe(200);
    expect(bearerOf(fx.api.requests[1])).toBe('tok-2');
  });

  it('a Request with a body and retry401: false is sent once', async () => {
    fx.api.reply = () => refuse('invalid_token');
    const c = client({ retry401: false });
    expect((await c.fetch(new Request(`${fx.api.url}/orders`, { method: 'POST', body: 'once' }))).status).toBe(401);
    expect(fx.api.requests.map((r) => r.body)).toEqual(['once']);
  });

  it('an API that answers 401 to everything: 100 calls in 10 s cause at most 3 token requests, never one per call', async () => {
    fx.api.reply = () => refuse('invalid_token');
    const c = client();
    for (let i = 0; i < 100; i++) {
      expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(401);
      fx.time.advance(0.1);
    }
    expect(tokenRequests()).toBeLessThanOrEqual(3); // the first, then one renewal per minRenewalInterval (5 s)
    expect(tokenRequests()).toBeGreaterThanOrEqual(2);
    expect(fx.api.requests.length).toBe(100 + count('api.retry_401'));
  });
});

describe("the caller's headers", () => {
  it('an Authorization header the caller set (init.headers in any form, or on a Request) is replaced by the token; other headers are kept', async () => {
    const c = client();
    await c.fetch(`${fx.api.url}/a`, { headers: { Authorization: 'Basic Zm9vOmJhcg==', 'X-Caller': '1' } });
    await c.fetch(`${fx.api.url}/b`, { headers: new Headers([['authorization', 'Bearer mine'], ['x-caller', '2']]) });
    await c.fetch(`${fx.api.url}/c`, { headers: [['Authorization', 'Bearer mine'], ['X-Caller', '3']] });
    await c.fetch(new Request(`${fx.api.url}/d`, { headers: { authorization: 'Basic xx', 'x-caller': '4' } }));
    expect(fx.api.requests.map((r) => [r.path, r.headers.authorization, r.headers['x-caller']])).toEqual([
      ['/a', 'Bearer tok-1', '1'],
      ['/b', 'Bearer tok-1', '2'],
      ['/c', 'Bearer tok-1', '3'],
      ['/d', 'Bearer tok-1', '4'],
    ]);
  });
});

describe('9. transport and lifetime', () => {
  it('refuses to send a token over plain http: to a host that is not loopback', async () => {
    const c = client();
    await expect(c.fetch('http://api.example/orders')).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_INSECURE_HTTP' });
    expect(tokenRequests()).toBe(0);
    expect(() => createTokenClient({ tokenEndpoint: 'http://auth.example/token', clientId: 'x', clientSecret: 'y' })).toThrow(/plain HTTP/);
  });

  it('a loopback origin once allowed lets through only URLs on that host: look-alikes are still refused', async () => {
    const c = client();
    const origin = fx.api.url; // http://127.0.0.1:<port>
    expect((await c.fetch(`${origin}/a`)).status).toBe(200);
    expect((await c.fetch(`${origin}/b?c=d`)).status).toBe(200);
    await expect(c.fetch(`${origin}@api.example/orders`)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_INSECURE_HTTP' });
    await expect(c.fetch(`${origin.replace('127.0.0.1', '127.0.0.1.api.example')}/orders`)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_INSECURE_HTTP' });
    expect(fx.api.requests.map((r) => r.path)).toEqual(['/a', '/b?c=d']);
  });

  it('allowInsecureHttp lets it through; loopback needs no option', async () => {
    const seen: string[] = [];
    const c = client({
      allowInsecureHttp: true,
      fetch: async (input, init) => {
        const url = String(input instanceof Request ? input.url : input);
        if (url.startsWith('http://api.example')) {
          seen.push(new Headers(init?.headers).get('authorization')!);
          return new Response('{}', { status: 200 });
        }
        return fetch(input, init);
      },
    });
    expect((await c.fetch('http://api.example/orders')).status).toBe(200);
    expect(seen).toEqual(['Bearer tok-1']);
    expect((await client().fetch(`http://localhost:${new URL(fx.api.url).port}/x`)).status).toBe(200);
  });

  it('a *.localhost name is not loopback: no token or secret goes to it over plain http: (a resolver may answer anything for it)', async () => {
    const sent: string[] = [];
    const c = client({
      fetch: async (input, init) => {
        sent.push(String(input instanceof Request ? input.url : input));
        return fetch(input, init);
      },
    });
    for (const url of ['http://api.localhost/orders', 'http://x.localhost:8080/orders', 'http://localhost.example/orders']) {
      await expect(c.fetch(url)).rejects.toMatchObject({ name: 'TypeError', code: 'ERR_INSECURE_HTTP' });
    }
    expect(sent).toEqual([]);
    expect(tokenRequests()).toBe(0);
    for (const option of ['tokenEndpoint', 'issuer'] as const) {
      expect(() => createTokenClient({ [option]: 'http://auth.localhost/token', clientId: 'x', clientSecret: 'y' })).toThrow(/plain HTTP/);
    }
    // loopback proper: localhost, 127.0.0.0/8 and [::1] need no option
    for (const url of ['http://localhost/token', 'http://127.0.0.1/token', 'http://127.9.8.7/token', 'http://[::1]/token', 'http://LOCALHOST/token']) {
      expect(() => createTokenClient({ tokenEndpoint: url, clientId: 'x', clientSecret: 'y' })).not.toThrow();
    }
  });

  it('close() stops background refresh: the request in flight is aborted, no token request after it, later calls reject', async () => {
    const c = client();
    await c.getToken();
    fx.endpoint.gate = gate().promise; // the refresh never gets an answer
    fx.time.advance(3361);
    await c.getToken();
    await until(() => tokenRequests() === 2);
    await c.close();
    await expect(c.getToken()).rejects.toThrow('closed');
    await expect(c.fetch(`${fx.api.url}/x`)).rejects.toThrow('closed');
    fx.time.advance(10_000);
    await new Promise((r) => setTimeout(r, 50));
    expect(tokenRequests()).toBe(2);
    expect(fx.api.requests).toHaveLength(0);
  });

  it('a call waiting on a token request when close() comes rejects with "the token client is closed"', async () => {
    const c = client();
    fx.endpoint.gate = gate().promise; // no answer
    const call = c.fetch(`${fx.api.url}/x`);
    await until(() => tokenRequests() === 1);
    await c.close();
    await expect(call).rejects.toThrow('the token client is closed');
    expect(fx.api.requests).toHaveLength(0);
  });
});

describe('WWW-Authenticate', () => {
  it.each([
    ['Bearer realm="api", error="invalid_token", error_description="expired"', 'Bearer', 'invalid_token'],
    ['Bearer realm="api"', 'Bearer', undefined],
    ['Bearer', 'bearer', undefined],
    ['Basic realm="x", Bearer error=invalid_token', 'Bearer', 'invalid_token'],
    ['Bearer realm="a, b", error="insufficient_scope", Basic realm="y"', 'Bearer', 'insufficient_scope'],
    ['DPoP algs="ES256", error="use_dpop_nonce", Bearer realm="x"', 'DPoP', 'use_dpop_nonce'],
    ['DPoP algs="ES256", error="use_dpop_nonce", Bearer realm="x"', 'Bearer', undefined],
    ['Basic realm="x"', 'Bearer', null],
    ['Newauth abc123==, Bearer error="invalid_token"', 'Bearer', 'invalid_token'],
  ])('%s → %s error %s', (header, scheme, error) => {
    expect(challengeError(header, scheme)).toBe(error);
  });
});
