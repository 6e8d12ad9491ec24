/**
 * What the token client makes of token endpoint answers that are not a plain
 * good token (malformed, odd lifetimes and types, redirects, bodies without a
 * code, huge or slow bodies, metadata naming a bad endpoint), and a few
 * guards around them: DPoP nonces sent with successes, the LRU bound and
 * single flight, signals carried by Request objects, the closed error.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTokenClient, TokenClientClosedError } from '../../lib/client';
import { endpointFailure, fakeServer, gate, until, useClientFixture } from './fakes';

const fx = useClientFixture({ clientId: 'svc', clientSecret: 's3cret-value' });
const { client, tokenRequests } = fx;

const answer = (body: unknown, status = 200, headers: Record<string, string> = {}) => {
  fx.endpoint.reply = () => ({ status, headers, body });
};
const failure = endpointFailure;

describe('a token the client cannot send', () => {
  it.each([
    ['a line break', 'SECRET-TOKEN-abc\r\nX-Injected: 1'],
    ['a space', 'SECRET-TOKEN abc'],
    ['a non-ASCII character', 'SECRET-TOKEN-€'],
  ])('with %s is refused as invalid_response, without the token in the error, and never sent', async (_what, token) => {
    answer({ access_token: token, token_type: 'Bearer', expires_in: 3600 });
    const c = client();
    const err = await failure(c.fetch(`${fx.api.url}/x`));
    expect(err).toMatchObject({ status: 200, error: 'invalid_response' });
    expect(err.message).toContain('characters an Authorization header cannot carry');
    expect(`${err.message} ${err.stack} ${JSON.stringify(err)}`).not.toContain('SECRET-TOKEN');
    expect(fx.api.requests).toHaveLength(0);
    // not cached: once the endpoint answers well, the next call (after the backoff) gets a good token
    answer({ access_token: 'good', token_type: 'Bearer', expires_in: 3600 });
    fx.time.advance(31);
    expect((await c.fetch(`${fx.api.url}/x`)).status).toBe(200);
    expect(fx.api.requests[0].headers.authorization).toBe('Bearer good');
  });
});

describe('token_type', () => {
  it.each([[undefined], [''], [42]])('missing or not a string (%p) is refused as invalid_response (RFC 6749 §5.1: REQUIRED), and nothing is sent', async (tokenType) => {
    answer({ access_token: 'tok', ...(tokenType !== undefined && { token_type: tokenType }), expires_in: 3600 });
    const c = client();
    const err = await failure(c.fetch(`${fx.api.url}/x`));
    expect(err).toMatchObject({ status: 200, error: 'invalid_response', error_description: 'the answer has no token_type (RFC 6749 §5.1)' });
    expect(fx.api.requests).toHaveLength(0);
  });

  it.each([['bearer'], ['BEARER']])('%s is Bearer (RFC 6749 §5.1: case-insensitive)', async (tokenType) => {
    answer({ access_token: 'tok', token_type: tokenType, expires_in: 3600 });
    expect((await client().fetch(`${fx.api.url}/x`)).status).toBe(200);
    expect(fx.api.requests[0].headers.authorization).toBe('Bearer tok');
  });
});

describe('expires_in', () => {
  it.each([0, -5, '0'])('%p (expired already) is refused as invalid_response', async (expiresIn) => {
    answer({ access_token: 'tok', token_type: 'Bearer', expires_in: expiresIn });
    const err = await failure(client().getToken());
    expect(err).toMatchObject({ error: 'invalid_response' });
    expect(err.message).toContain('expired already');
  });

  it.each([1e-9, 0.5, 0.999, '0.5', '1e-9'])('%p (under 1 s: every call would ask again) is refused as invalid_response', async (expiresIn) => {
    answer({ access_token: 'tok', token_type: 'Bearer', expires_in: expiresIn });
    const c = client();
    const err = await failure(c.getToken());
    expect(err).toMatchObject({ status: 200, error: 'invalid_response' });
    expect(err.message).toContain('under 1 s');
    // refused, it is backed off from like any other failure: not one token request per call
    for (let i = 0; i < 5; i++) await failure(c.getToken());
    expect(tokenRequests()).toBe(1);
  });

  it.each([
    [90.5, 90_500],
    ['90.5', 90_500],
    ['120', 120_000],
    [' 120 ', 120_000],
    ['1.2e2', 120_000],
    [1, 1_000],
  ])('%p is a lifetime of %p ms: a string holding a number counts as that number', async (expiresIn, ms) => {
    answer({ access_token: 'tok', token_type: 'Bearer', expires_in: expiresIn });
    const t0 = fx.time.t;
    expect((await client().getToken()).expiresAt.getTime()).toBe(t0 + ms);
  });

  it.each([['soon'], ['90 s'], ['0x5a'], [true], [null]])('%p is not a number: the default lifetime (300 s) applies', async (expiresIn) => {
    answer({ access_token: 'tok', token_type: 'Bearer', expires_in: expiresIn });
    const t0 = fx.time.t;
    expect((await client().getToken()).expiresAt.getTime()).toBe(t0 + 300_000);
  });

  it.each([1e12, 1e13, Infinity])('%p is counted as 24 h: a real expiry, renewed after it', async (expiresIn) => {
    fx.endpoint.reply = (_req, n) => ({ body: `{"access_token":"tok-${n}","token_type":"Bearer","expires_in":${expiresIn === Infinity ? '1e400' : expiresIn}}` });
    const c = client();
    const t0 = fx.time.t;
    const token = await c.getToken();
    expect(token.expiresAt.getTime()).toBe(t0 + 86_400_000);
    fx.time.advance(86_400);
    expect((await c.getToken()).accessToken).toBe('tok-2');
  });
});

describe('a token that expired on its way', () => {
  // its lifetime counts from when the request was sent: an endpoint slower than expires_in handed out an expired token
  it('an answer that arrives after its expires_in has run out is refused (invalid_response) and backed off; one that arrives in time is used', async () => {
    let delay = 3;
    fx.endpoint.reply = (_req, n) => {
      fx.time.advance(delay);
      return { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 2 } };
    };
    const c = client();
    const err = await failure(c.getToken());
    expect(err).toMatchObject({ error: 'invalid_response' });
    expect(err.message).toContain('the token expired before the answer arrived (expires_in 2 s, the answer took 3.0 s)');
    expect(err.message).not.toContain('tok-1');
    // a transient failure: backed off (1 s to 30 s), then asked again
    fx.time.advance(31);
    delay = 1;
    const t0 = fx.time.t;
    const token = await c.getToken();
    expect(token.accessToken).toBe('tok-2');
    expect(token.expiresAt.getTime()).toBe(t0 + 2000);
  });
});

describe('server text in error messages', () => {
  it('a 500 KB error_description: the message carries its first 200 characters and an ellipsis, the error_description property all of it', async () => {
    const description = `d${'x'.repeat(499_999)}`;
    answer({ error: 'invalid_request', error_description: description }, 400);
    const c = client();
    const err = await failure(c.getToken());
    expect(err).toMatchObject({ status: 400, error: 'invalid_request' });
    expect(err.error_description).toBe(description);
    expect(err.message).toBe(`token request failed (HTTP 400): invalid_request: ${description.slice(0, 200)}…`);
    // and so does the error every caller gets while the backoff runs
    const again = await failure(c.getToken());
    expect(again.error_description).toBe(description);
    expect(again.message).toBe(err.message);
    expect(tokenRequests()).toBe(1);
  });

  it('a 100 KB error code: cut in the message, whole in the error property', async () => {
    const code = 'e'.repeat(100_000);
    answer({ error: code }, 400);
    const err = await failure(client().getToken());
    expect(err.error).toBe(code);
    expect(err.message.length).toBeLessThan(300);
  });

  it('a 400 KB expires_in is not echoed whole', async () => {
    answer({ access_token: 'tok', token_type: 'Bearer', expires_in: `-${'9'.repeat(400_000)}` });
    const err = await failure(client().getToken());
    expect(err).toMatchObject({ status: 200, error: 'invalid_response' });
    expect(err.message.length).toBeLessThan(300);
    expect(err.error_description!.length).toBeLessThan(300);
  });

  it('bidirectional overrides and isolates are escaped too: a log viewer cannot be made to show the text reordered', async () => {
    answer({ error: 'invalid_client', error_description: 'ok \u202egnp.exe\u202c \u2066x\u2069 \u200f \u061c' }, 401);
    const err = await failure(client().getToken());
    expect(err.message).toBe('token request failed (HTTP 401): invalid_client: ok \\u202egnp.exe\\u202c \\u2066x\\u2069 \\u200f \\u061c');
    expect(err.error_description).toBe('ok \\u202egnp.exe\\u202c \\u2066x\\u2069 \\u200f \\u061c');
  });

  it('text whose escapes run past 200 characters: the message carries the first 200 characters of the text, escaped, for every caller', async () => {
    answer({ error: 'invalid_request', error_description: `${'\n'.repeat(150)}${'x'.repeat(100)}` }, 400);
    const c = client();
    const err = await failure(c.getToken());
    expect(err.message).toBe(`token request failed (HTTP 400): invalid_request: ${'\\n'.repeat(150)}${'x'.repeat(50)}…`);
    const again = await failure(c.getToken());
    expect(again.message).toBe(err.message);
    expect(tokenRequests()).toBe(1);
  });

  it('a metadata document whose issuer is an array nested 20,000 deep: a TokenEndpointError (invalid_metadata), not a RangeError', async () => {
    const deep = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
    fx.endpoint.reply = (req) => (req.path.startsWith('/.well-known/') ? { body: `{"issuer":${deep},"token_endpoint":"${fx.endpoint.url}/token"}` } : { body: {} });
    const err = await failure(client({ tokenEndpoint: undefined, issuer: fx.endpoint.url }).getToken());
    expect(err).toMatchObject({ error: 'invalid_metadata' });
    expect(err.message).toContain('names issuer (a value nested too deep to show)');
  });

  it('text of our own is not cut: a long issuer is named whole when the metadata names another', async () => {
    const issuer = `${fx.endpoint.url}/${'tenant-'.repeat(30)}`;
    fx.endpoint.reply = (req) => (req.path.startsWith('/.well-known/') ? { body: { issuer: `${issuer}/`, token_endpoint: `${fx.endpoint.url}/token` } } : { body: {} });
    const err = await failure(client({ tokenEndpoint: undefined, issuer }).getToken());
    expect(err.error).toBe('invalid_metadata');
    expect(err.message).toContain(`not ${JSON.stringify(issuer)}: the issuer option must be exactly the issuer the server announces (RFC 8414 §3.3)`);
  });

  /** C0, DEL, C1 and the Unicode line and paragraph separators: any of them can start a new line in a log. */
  const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;
  const noControls = (err: Error & { error: string; error_description?: string }) => {
    for (const text of [err.message, err.error, err.error_description ?? '']) expect(text).not.toMatch(CONTROL);
  };

  it('control characters of an error answer are escaped in the message, the properties and the event: the text shows, on one line', async () => {
    const forged = 'bad\nFAKE LOG LINE\r\n\u2028x\u2029y\u0085z\u001b[31m\u0000\t.';
    answer({ error: 'invalid_client\nFAKE', error_description: forged }, 401);
    const c = client();
    const err = await failure(c.getToken());
    noControls(err);
    expect(err.message).toBe('token request failed (HTTP 401): invalid_client\\nFAKE: bad\\nFAKE LOG LINE\\r\\n\\u2028x\\u2029y\\u0085z\\u001b[31m\\u0000\\t.');
    expect(err).toMatchObject({ error: 'invalid_client\\nFAKE', error_description: 'bad\\nFAKE LOG LINE\\r\\n\\u2028x\\u2029y\\u0085z\\u001b[31m\\u0000\\t.' });
    expect(fx.events.find((e) => e.type === 'token.refresh_failed')).toMatchObject({ error: 'invalid_client\\nFAKE' });
    // the error later callers get during the backoff: the same text, not escaped twice
    const again = await failure(c.getToken());
    expect(again.message).toBe(err.message);
    expect(again.error_description).toBe(err.error_description);
    expect(tokenRequests()).toBe(1);
  });

  it.each([
    [200, 'invalid_response: the answer has no access_token'],
    [400, 'invalid_response'],
    [401, 'invalid_client'],
    [500, 'server_error'],
  ])('a non-JSON %p answer with control characters: its body is not echoed, the message ends %p', async (status, said) => {
    answer('oops\r\nFAKE LOG LINE\u2028\u0085', status, { 'content-type': 'text/plain' });
    const err = await failure(client().getToken());
    noControls(err);
    expect(err.message).toBe(`token request failed (HTTP ${status}): ${said}`);
  });

  it('a token_type with a line separator (which JSON.stringify keeps) is escaped in the message', async () => {
    answer({ access_token: 'tok', token_type: 'mac\u2028FAKE\u0085', expires_in: 3600 });
    const err = await failure(client().getToken());
    noControls(err);
    expect(err.message).toContain('token_type "mac\\u2028FAKE\\u0085" is not one this client can use');
  });

  it('discovery: an issuer named with line separators and C1 controls (which JSON.stringify keeps) is escaped in the message', async () => {
    const issuer = fx.endpoint.url;
    fx.endpoint.reply = (req) => (req.path.startsWith('/.well-known/') ? { body: { issuer: `${issuer}\u2028FAKE LOG LINE\u2029\u0085\n`, token_endpoint: `${issuer}/token` } } : { body: {} });
    const err = await failure(client({ tokenEndpoint: undefined, issuer }).getToken());
    expect(err.error).toBe('invalid_metadata');
    noControls(err);
    expect(err.message).toContain(`names issuer "${issuer}\\u2028FAKE LOG LINE\\u2029\\u0085\\n", not`);
  });
});

describe('token_type', () => {
  it('a type the client does not know (RFC 6749 §7.1) is refused; bearer in any case is taken', async () => {
    answer({ access_token: 'tok', token_type: 'mac', expires_in: 3600 });
    const err = await failure(client().fetch(`${fx.api.url}/x`));
    expect(err).toMatchObject({ error: 'invalid_response' });
    expect(err.message).toContain('token_type "mac" is not one this client can use');
    expect(fx.api.requests).toHaveLength(0);
    answer({ access_token: 'tok', token_type: 'bEaReR', expires_in: 3600 });
    expect((await client().getToken()).accessToken).toBe('tok');
  });
});

describe('answers without a code', () => {
  it('401 without a body is invalid_client and holds for every scope', async () => {
    answer('', 401);
    const c = client();
    const err = await failure(c.getToken());
    expect(err).toMatchObject({ status: 401, error: 'invalid_client' });
    const other = await failure(c.getToken({ scope: 'other' }));
    expect(other.error).toBe('invalid_client');
    expect(tokenRequests()).toBe(1);
  });

  it('429 without a body is temporarily_unavailable with its Retry-After', async () => {
    answer('', 429, { 'retry-after': '7' });
    const err = await failure(client().getToken());
    expect(err).toMatchObject({ status: 429, error: 'temporarily_unavailable', retryAfter: 7 });
  });

  it('a redirect is not followed and is said to be one', async () => {
    answer('', 307, { location: 'https://elsewhere.example/token' });
    const err = await failure(client().getToken());
    expect(err).toMatchObject({ status: 307, error: 'invalid_response' });
    expect(err.message).toContain('redirect');
    expect(tokenRequests()).toBe(1);
  });
});

describe('bodies', () => {
  it('a body that is still coming when the timeout ends is a timeout', async () => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"access_token":'); // and nothing more
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const c = createTokenClient({ tokenEndpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`, clientId: 'svc', clientSecret: 's', timeout: 0.3 });
      const started = Date.now();
      const err = await failure(c.getToken());
      expect(err).toMatchObject({ error: 'timeout' });
      expect(err.message).toContain('no answer within 300 ms');
      expect(Date.now() - started).toBeLessThan(2000);
      await c.close();
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it.each([
    [200, 'network_error'],
    [503, 'server_error'],
  ])('a connection reset in the middle of a %i body: %s, not a refused answer', async (status, code) => {
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': '500' });
        res.write(status === 200 ? '{"access_token":"abc' : '{"error":"temporarily_unavailable"');
        setTimeout(() => req.socket.destroy(), 20);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const c = createTokenClient({ tokenEndpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}/token`, clientId: 'svc', clientSecret: 's' });
      const err = await failure(c.getToken());
      expect(err).toMatchObject({ status, error: code });
      // a 200 that broke off says so; an error answer that broke off still says what its status says
      if (status === 200) expect(err.message).toMatch(/^token request failed \(HTTP 200\): network_error: the answer broke off/);
      await c.close();
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it('an answer over 1 MiB is refused while it is read', async () => {
    answer({ access_token: 'tok', token_type: 'Bearer', expires_in: 3600, padding: 'x'.repeat(1024 * 1024) });
    const err = await failure(client().getToken());
    expect(err).toMatchObject({ status: 200, error: 'invalid_response' });
    expect(err.message).toContain('larger than 1024 KiB');
  });
});

describe('discovery', () => {
  it.each([
    ['http://auth.example.com/token', 'over plain HTTP'],
    ['/token', 'not a URL'],
    ['not a url', 'not a URL'],
  ])('metadata naming token_endpoint %p is invalid_metadata, saying why, and no token request is sent', async (endpoint, why) => {
    fx.endpoint.reply = (req) =>
      req.path.startsWith('/.well-known/') ? { body: { issuer: fx.endpoint.url, token_endpoint: endpoint } } : { body: { access_token: 'tok', token_type: 'Bearer' } };
    const c = client({ tokenEndpoint: undefined, issuer: fx.endpoint.url });
    const err = await failure(c.getToken());
    expect(err.error).toBe('invalid_metadata');
    expect(err.message).toContain(why);
    expect(err.message).toContain('token_endpoint');
    expect(fx.endpoint.requests.filter((r) => r.method === 'POST')).toHaveLength(0);
  });
});

describe('discovery, a body that breaks off', () => {
  it('is a failed metadata request (saying why), not a location without a document', async () => {
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
      res.write('{"issuer":');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const c = createTokenClient({ issuer, clientId: 'svc', clientSecret: 's' });
      const err = await failure(c.getToken());
      expect(err.error).toBe('discovery_failed');
      expect(err.message).toContain(`metadata request to ${issuer}/.well-known/oauth-authorization-server failed: UND_ERR_SOCKET`);
      await c.close();
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('discovery locations', () => {
  it('a redirect from the metadata location is not followed: nothing is asked of the other host, and the error says so', async () => {
    const elsewhere = await fakeServer((req) =>
      req.path.startsWith('/.well-known/') ? { body: { issuer: fx.endpoint.url, token_endpoint: `http://127.0.0.1:1/token` } } : { body: {} },
    );
    try {
      fx.endpoint.reply = (req) => ({ status: 302, headers: { location: `${elsewhere.url}${req.path}` }, body: '' });
      const err = await failure(client({ tokenEndpoint: undefined, issuer: fx.endpoint.url }).getToken());
      expect(err).toMatchObject({ error: 'discovery_failed', status: 302 });
      expect(err.message).toContain('a redirect, not followed');
      expect(elsewhere.requests).toHaveLength(0);
      expect(fx.endpoint.requests.filter((r) => r.method === 'POST')).toHaveLength(0);
    } finally {
      await elsewhere.close();
    }
  });

  it('for an issuer with a path, a web app answering HTML (or 401) at the root locations does not stop discovery: the document after the path is found', async () => {
    const issuer = `${fx.endpoint.url}/auth`;
    fx.endpoint.reply = (req) => {
      if (req.path === '/auth/.well-known/oauth-authorization-server') return { body: { issuer, token_endpoint: `${issuer}/token` } };
      if (req.path.startsWith('/auth/.well-known/')) return { status: 401, body: '' };
      if (req.path.startsWith('/.well-known/')) return { headers: { 'content-type': 'text/html' }, body: '<!doctype html><title>app</title>' };
      return { body: { access_token: 'tok', token_type: 'Bearer', expires_in: 60 } };
    };
    expect((await client({ tokenEndpoint: undefined, issuer }).getToken()).accessToken).toBe('tok');
  });
});

describe('DPoP nonces', () => {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const nonceOf = (proof: string | undefined): unknown => (proof ? JSON.parse(Buffer.from(proof.split('.')[1], 'base64url').toString()).nonce : undefined);

  it('a DPoP-Nonce sent with a success is put in the next proofs to that origin (API and token endpoint)', async () => {
    fx.endpoint.reply = (_req, n) => ({ headers: { 'dpop-nonce': `as-${n}` }, body: { access_token: `tok-${n}`, token_type: 'DPoP', expires_in: 3600 } });
    fx.api.reply = (_req, n) => ({ headers: { 'dpop-nonce': `api-${n}` }, body: {} });
    const c = client({ dpop: { privateKey } });
    await c.fetch(`${fx.api.url}/x`);
    await c.fetch(`${fx.api.url}/x`);
    await c.fetch(`${fx.api.url}/x`);
    expect(fx.api.requests.map((r) => nonceOf(r.headers.dpop as string))).toEqual([undefined, 'api-1', 'api-2']);
    await c.getToken({ scope: 'other' });
    expect(fx.endpoint.requests.map((r) => nonceOf(r.headers.dpop as string))).toEqual([undefined, 'as-1']);
  });
});

describe('the bound on entries', () => {
  it('never drops an entry whose token request runs: scopes a, b, c, a at once with maxEntries 2 make 3 requests', async () => {
    const held = gate();
    fx.endpoint.gate = held.promise;
    const c = client({ maxEntries: 2 });
    const calls = ['a', 'b', 'c', 'a'].map((scope) => c.getToken({ scope }));
    await until(() => tokenRequests() === 3, '3 token requests');
    held.open();
    const tokens = await Promise.all(calls);
    expect(tokens[0]).toBe(tokens[3]);
    expect(tokenRequests()).toBe(3);
    // once they are done the bound holds again: the least recently used goes
    await c.getToken({ scope: 'd' });
    await c.getToken({ scope: 'a' });
    expect(tokenRequests()).toBe(4);
  });
});

describe('the bound on entries, some of them backing off', () => {
  // it was dropped like any idle entry: the next call for its key was a new entry that asked at once, and with more
  // failing keys than the bound every call went to the endpoint (the audit saw 215 requests in 2 s with maxEntries 1)
  it('never drops an entry backing off after a failure: maxEntries 1, a failing scope asked between others is refused from its backoff, not asked again', async () => {
    fx.endpoint.reply = (req, n) => (req.form.get('scope') === 'bad' ? { status: 400, body: { error: 'invalid_scope' } } : { body: { access_token: `tok-${n}`, token_type: 'Bearer' } });
    const c = client({ maxEntries: 1 });
    const first = await endpointFailure(c.getToken({ scope: 'bad' }));
    expect(first.error).toBe('invalid_scope');
    for (let i = 0; i < 5; i++) {
      await c.getToken({ scope: `ok${i}` });
      const again = await endpointFailure(c.getToken({ scope: 'bad' }));
      expect(again.error).toBe('invalid_scope');
      expect(again.retryAfter).toBeGreaterThanOrEqual(1);
    }
    const asked = fx.endpoint.requests.map((r) => r.form.get('scope'));
    expect(asked.filter((scope) => scope === 'bad')).toHaveLength(1);
    expect(asked.filter((scope) => scope !== 'bad')).toEqual(['ok0', 'ok1', 'ok2', 'ok3', 'ok4']);
    // the idle entries beyond the bound went: ok0, asked again, makes a second request
    await c.getToken({ scope: 'ok0' });
    expect(fx.endpoint.requests.filter((r) => r.form.get('scope') === 'ok0')).toHaveLength(2);
  });
});

describe('the bound on entries, all of them busy', () => {
  it('a new key shares one token request among its callers (it is not the entry dropped): maxEntries 2, a and b held, 5 calls for c make 1 request for c', async () => {
    const held = gate();
    fx.endpoint.gate = held.promise;
    const c = client({ maxEntries: 2 });
    const waiting = [c.getToken({ scope: 'a' }), c.getToken({ scope: 'b' }), ...Array.from({ length: 5 }, () => c.getToken({ scope: 'c' }))];
    await until(() => tokenRequests() === 3, '3 token requests');
    await new Promise((r) => setTimeout(r, 50));
    expect(fx.endpoint.requests.map((r) => r.form.get('scope'))).toEqual(['a', 'b', 'c']);
    held.open();
    const tokens = await Promise.all(waiting);
    expect(new Set(tokens.slice(2).map((t) => t.accessToken)).size).toBe(1);
  });
});

describe('signals and close()', () => {
  it("an aborted Request's own signal: the call rejects at once and no token request is sent", async () => {
    const controller = new AbortController();
    controller.abort();
    const c = client();
    const started = Date.now();
    const err = await c.fetch(new Request(`${fx.api.url}/x`, { signal: controller.signal })).catch((e: unknown) => e);
    expect((err as Error).name).toBe('AbortError');
    expect(Date.now() - started).toBeLessThan(100);
    await new Promise((r) => setTimeout(r, 50));
    expect(tokenRequests()).toBe(0);
    expect(fx.api.requests).toHaveLength(0);
  });

  it('after close() calls reject with a TokenClientClosedError (code ERR_TOKEN_CLIENT_CLOSED)', async () => {
    const c = client();
    await c.close();
    const err = await c.getToken().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TokenClientClosedError);
    expect(err).toMatchObject({ code: 'ERR_TOKEN_CLIENT_CLOSED', message: 'the token client is closed' });
  });
});
