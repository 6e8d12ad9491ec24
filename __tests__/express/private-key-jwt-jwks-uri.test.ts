/**
 * private_key_jwt clients that publish their keys at a jwks_uri: fetched,
 * cached, refetched once per cooldown for an unknown kid, bounded in time and size.
 */
import { generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import request from 'supertest';
import { CLIENT_ASSERTION_TYPE, signClientAssertion } from '../../lib/jwt/client-assertion';
import { ISSUER, setup, type TestSetup } from '../helpers/app';

function ecPair(kid: string): { pub: JsonWebKey; priv: JsonWebKey } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { pub: { ...publicKey.export({ format: 'jwk' }), kid }, priv: { ...privateKey.export({ format: 'jwk' }), kid } };
}

/** A token request of `clientId` authenticated by a fresh assertion signed with `priv`. */
function assertionRequest(s: TestSetup, clientId: string, priv: JsonWebKey, kid?: string) {
  return request(s.app)
    .post('/oauth/token')
    .type('form')
    .send({
      grant_type: 'client_credentials',
      client_assertion_type: CLIENT_ASSERTION_TYPE,
      client_assertion: signClientAssertion({ clientId, audience: ISSUER, privateKey: priv, kid }),
    });
}

type LogLine = { level: string; obj: Record<string, unknown> };

/** A key host on loopback answering every request with `respond`; its jwks_uri. */
async function keyHost(respond: http.RequestListener): Promise<{ server: http.Server; uri: string }> {
  const server = http.createServer(respond);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, uri: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks` };
}

/**
 * An issuer with tight brute-force limits (3 failures per client_id and
 * address, 6 per address) whose log lines go to `lines`. Only the clock is
 * fake from here on: sockets and timers run as they do.
 */
function loggedSetup(lines: LogLine[]): Promise<TestSetup> {
  const at = (level: string) => (obj: Record<string, unknown>) => void lines.push({ level, obj });
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
  return setup({
    bruteForce: { maxFailuresPerClientAddress: 3, maxFailuresPerAddress: 6, window: 600 },
    logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
  });
}

/** Undoes loggedSetup() and keyHost(): the real clock again, the issuer closed, the key host stopped. */
async function tearDown(s: TestSetup, server: http.Server): Promise<void> {
  jest.useRealTimers();
  await s.close();
  server.closeAllConnections();
  server.close();
}

describe('private_key_jwt with a jwks_uri', () => {
  let s: TestSetup;
  let server: http.Server;
  let uri: string;
  let published: { keys: JsonWebKey[] };
  let body: (() => string) | undefined;
  let fetches = 0;
  const k1 = ecPair('k1');

  beforeEach(async () => {
    published = { keys: [k1.pub] };
    body = undefined;
    fetches = 0;
    ({ server, uri } = await keyHost((req, res) => {
      fetches++;
      // the set moved: the registered URL redirects to where it is now
      if (req.url === '/moved') return void res.writeHead(302, { location: '/jwks' }).end();
      res.setHeader('content-type', 'application/jwk-set+json');
      res.end(body ? body() : JSON.stringify(published));
    }));
    s = await setup({ bruteForce: false });
  });
  afterEach(async () => {
    await s.close();
    server.close();
  });

  const post = (clientId: string, priv: JsonWebKey, kid?: string) => assertionRequest(s, clientId, priv, kid);

  it('PK26: fetches once and caches; within the cooldown a flood of unknown kids costs no fetch', async () => {
    const c = await s.issuer.clients.create({ name: 'remote', authMethod: 'private_key_jwt', jwksUri: uri });
    expect((await post(c.clientId, k1.priv)).status).toBe(200);
    expect((await post(c.clientId, k1.priv)).status).toBe(200);
    expect(fetches).toBe(1);

    const k2 = ecPair('k2');
    published = { keys: [k1.pub, k2.pub] };
    // the first fetch was just now: within the cooldown an unknown kid does not refetch
    expect((await post(c.clientId, k2.priv)).status).toBe(401);
    const statuses = await Promise.all(Array.from({ length: 50 }, (_, i) => post(c.clientId, k1.priv, `made-up-${i}`).then((r) => r.status)));
    expect(statuses.every((x) => x === 401)).toBe(true);
    expect(fetches).toBe(1);
  });

  it('refuses non-https URIs (except loopback) at registration', async () => {
    await expect(s.issuer.clients.create({ name: 'x', authMethod: 'private_key_jwt', jwksUri: 'http://client.example/jwks' })).rejects.toThrow(/https/);
    await expect(s.issuer.clients.create({ name: 'x', authMethod: 'private_key_jwt', jwksUri: uri, jwks: { keys: [k1.pub] } })).rejects.toThrow(/not both/);
  });

  it('a jwks_uri that redirects is refused with 401, as a 4xx is (a registration to fix), not 503 retry-later; the redirect is not followed', async () => {
    const c = await s.issuer.clients.create({ name: 'moved', authMethod: 'private_key_jwt', jwksUri: uri.replace('/jwks', '/moved') });
    const res = await post(c.clientId, k1.priv);
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_client');
    expect(fetches).toBe(1);
  });

  it('a key set over the size cap, or not JSON, is refused with 401', async () => {
    const c = await s.issuer.clients.create({ name: 'big', authMethod: 'private_key_jwt', jwksUri: uri });
    body = () => JSON.stringify({ keys: [k1.pub], pad: 'x'.repeat(70 * 1024) });
    expect((await post(c.clientId, k1.priv)).status).toBe(401);
  });
});

describe("private_key_jwt when the client's jwks_uri cannot be fetched", () => {
  const k1 = ecPair('k1');
  let s: TestSetup;
  let server: http.Server;
  let uri: string;
  let mode: 'up' | 'reset' | '502';
  const lines: LogLine[] = [];
  const events = (event: string) => lines.filter((l) => l.obj.event === event);

  beforeEach(async () => {
    lines.length = 0;
    mode = 'up';
    ({ server, uri } = await keyHost((req, res) => {
      if (mode === 'reset') return void req.socket.destroy();
      if (mode === '502') {
        res.statusCode = 502;
        return void res.end('bad gateway');
      }
      res.setHeader('content-type', 'application/jwk-set+json');
      res.end(JSON.stringify({ keys: [k1.pub] }));
    }));
    s = await loggedSetup(lines);
  });
  afterEach(() => tearDown(s, server));

  const post = (clientId: string, priv: JsonWebKey, kid?: string) => assertionRequest(s, clientId, priv, kid);

  function expect503(res: request.Response): void {
    expect(res.status).toBe(503);
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(res.headers['retry-after'])).toBeLessThanOrEqual(30);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toEqual({ error: 'temporarily_unavailable', error_description: "the client's key set (jwks_uri) cannot be fetched; retry later" });
  }

  it('a refused connection: 503 with Retry-After on every try, logged once at warn with the reason, never counted as a failed authentication', async () => {
    const c = await s.issuer.clients.create({ name: 'remote', authMethod: 'private_key_jwt', jwksUri: uri });
    await new Promise((resolve) => server.close(resolve)); // nothing listens there now
    // more tries than the (client, address) limit of 3: none is a 401 or a 429
    for (let i = 0; i < 8; i++) expect503(await post(c.clientId, k1.priv));
    expect(events('client.auth_failed')).toEqual([]);
    expect(events('client.rate_limited')).toEqual([]);
    const outage = events('client.jwks_uri_unavailable');
    expect(outage.map((l) => l.level)).toEqual(['warn', ...Array(7).fill('debug')]);
    expect(outage[0].obj).toMatchObject({ claimed_client_id: c.clientId, jwks_uri: uri, reason: expect.stringContaining('ECONNREFUSED') });
    expect(JSON.stringify(lines)).not.toMatch(/eyJ[A-Za-z0-9_-]+\.eyJ/);
  });

  it('the fetch error is logged escaped: a TLS error quoting the names of a certificate the key host chose stays one line in its order', async () => {
    const c = await s.issuer.clients.create({ name: 'remote', authMethod: 'private_key_jwt', jwksUri: uri });
    // what undici rejects with for a certificate whose names do not match (its message lists them)
    const altnames = 'DNS:keys.example\u2028{"event":"token.issued"}, DNS:\u202etxt.exe\u0085';
    const tls = Object.assign(new Error(`Hostname/IP does not match certificate's altnames: Host: 127.0.0.1. is not in the cert's altnames: ${altnames}`), { code: 'ERR_TLS_CERT_ALTNAME_INVALID' });
    const fetchSpy = jest.spyOn(globalThis, 'fetch').mockRejectedValue(new TypeError('fetch failed', { cause: tls }));
    try {
      expect503(await post(c.clientId, k1.priv));
      expect503(await post(c.clientId, k1.priv));
    } finally {
      fetchSpy.mockRestore();
    }
    const outage = events('client.jwks_uri_unavailable');
    expect(outage.map((l) => l.level)).toEqual(['warn', 'debug']);
    for (const { obj } of outage) {
      expect(obj.reason).toBe(
        "fetch failed: Hostname/IP does not match certificate's altnames: Host: 127.0.0.1. is not in the cert's altnames: DNS:keys.example\\u2028{\"event\":\"token.issued\"}, DNS:\\u202etxt.exe\\u0085",
      );
    }
    for (const raw of ['\u2028', '\u202e', '\u0085']) expect(JSON.stringify(lines)).not.toContain(raw);
  });

  it('a failing host (reset, 502) stays a 503 past the first fetch; once it answers again (after the 30 s cooldown) the client gets its token, from the same address', async () => {
    const c = await s.issuer.clients.create({ name: 'remote', authMethod: 'private_key_jwt', jwksUri: uri });
    mode = 'reset';
    for (let i = 0; i < 5; i++) expect503(await post(c.clientId, k1.priv));
    jest.setSystemTime(Date.now() + 31_000);
    mode = '502';
    for (let i = 0; i < 5; i++) expect503(await post(c.clientId, k1.priv));
    // one outage: one warn line, whatever the failures in it
    expect(events('client.jwks_uri_unavailable').filter((l) => l.level === 'warn')).toHaveLength(1);
    expect(events('client.jwks_uri_unavailable').at(-1)!.obj).toMatchObject({ reason: 'HTTP 502' });
    jest.setSystemTime(Date.now() + 31_000);
    mode = 'up';
    expect((await post(c.clientId, k1.priv)).status).toBe(200);
    expect(events('client.jwks_uri_recovered')).toEqual([
      { level: 'info', obj: expect.objectContaining({ jwks_uri: uri, failures: 2, down_ms: expect.any(Number) }) },
    ]);
    expect(events('client.auth_failed')).toEqual([]);
    // a key the fetched set does not hold is still an authentication failure
    expect((await post(c.clientId, ecPair('k9').priv)).status).toBe(401);
    expect(events('client.auth_failed').at(-1)!.obj).toMatchObject({ reason: 'assertion_unknown_key', kid: 'k9' });
  });
});

describe('private_key_jwt: a client that publishes a new key at its jwks_uri and signs with it at once', () => {
  const k1 = ecPair('k1');
  const k2 = ecPair('k2');
  let s: TestSetup;
  let server: http.Server;
  let uri: string;
  let published: { keys: JsonWebKey[] };
  let fetches = 0;
  const lines: LogLine[] = [];
  const events = (event: string) => lines.filter((l) => l.obj.event === event).map((l) => l.obj);

  beforeEach(async () => {
    lines.length = 0;
    fetches = 0;
    published = { keys: [k1.pub] };
    ({ server, uri } = await keyHost((_req, res) => {
      fetches++;
      res.setHeader('content-type', 'application/jwk-set+json');
      res.end(JSON.stringify(published));
    }));
    s = await loggedSetup(lines);
  });
  afterEach(() => tearDown(s, server));

  const post = (clientId: string, priv: JsonWebKey) => assertionRequest(s, clientId, priv);

  // each of its retries within the 30 s cooldown was a counted failure: past 3 the client was locked out (429) of its own
  // rotation for the 600 s window
  it('is refused (401) until the set may be fetched again, without being counted toward a lockout; then gets its token', async () => {
    const c = await s.issuer.clients.create({ name: 'remote', authMethod: 'private_key_jwt', jwksUri: uri });
    expect((await post(c.clientId, k1.priv)).status).toBe(200);
    published = { keys: [k1.pub, k2.pub] };

    // more tries than the (client, address) limit, and than the address limit
    for (let i = 0; i < 8; i++) {
      const res = await post(c.clientId, k2.priv);
      expect(res.status).toBe(401);
      expect(res.body.error).toBe('invalid_client');
    }
    expect(fetches).toBe(1);
    expect(events('client.rate_limited')).toEqual([]);
    const failed = events('client.auth_failed');
    expect(failed).toHaveLength(8);
    expect(failed[0]).toMatchObject({ client_id: c.clientId, reason: 'assertion_unknown_key', kid: 'k2', jwks_uri: uri, refetch_in_s: 30 });

    jest.setSystemTime(Date.now() + 31_000);
    const res = await post(c.clientId, k2.priv);
    expect(res.status).toBe(200);
    expect(fetches).toBe(2);

    // a kid the set still lacks once it was fetched again is a failure, and counts: the limit of 3 is reached
    const k9 = ecPair('k9');
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      jest.setSystemTime(Date.now() + 31_000);
      statuses.push((await post(c.clientId, k9.priv)).status);
    }
    expect(statuses).toEqual([401, 401, 401]);
    expect(fetches).toBe(5);
    expect((await post(c.clientId, k1.priv)).status).toBe(429);
  });
});
