/**
 * Revocation at the issuer (RFC 7009 /oauth/revoke, `issuer.clients.revoke`,
 * `revokeTokens`) as the issuer-bound requireBearer() sees it, and RFC 7662
 * introspection. The research note's RV1–RV11 and IN1–IN6, on the wire.
 */
import express from 'express';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createIssuer, openEmbeddedStore, StoreUnavailableError, type Issuer } from '../../lib';
import { main } from '../../lib/cli/main';
import { ISSUER, AUDIENCE, setup, tempDir, type TestSetup } from '../helpers/app';
import { newDpopKey } from '../helpers/dpop';
import { freshKey, mint } from '../helpers/tokens';

type Client = { clientId: string; clientSecret: string };

/** The issuer's routes and one protected route on one app. */
function withApi(t: TestSetup | { issuer: Issuer }): express.Express {
  const app = express();
  app.use(t.issuer.router());
  app.get('/api/orders', t.issuer.requireBearer({ scope: 'orders:read' }), (req, res) => res.json({ client: req.auth!.clientId }));
  return app;
}

async function token(app: express.Express, client: Client): Promise<string> {
  const res = await request(app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
  expect(res.status).toBe(200);
  return res.body.access_token as string;
}

const callApi = (app: express.Express, accessToken: string) => request(app).get('/api/orders').set('Authorization', `Bearer ${accessToken}`);

function revoke(app: express.Express, client: Client | undefined, fields: Record<string, string>) {
  const req = request(app).post('/oauth/revoke').type('form');
  if (client) req.auth(client.clientId, client.clientSecret);
  return req.send(fields);
}

function introspect(app: express.Express, client: Client | undefined, accessToken: string) {
  const req = request(app).post('/oauth/introspect').type('form');
  if (client) req.auth(client.clientId, client.clientSecret);
  return req.send({ token: accessToken });
}

function expectRevoked(res: request.Response): void {
  expect(res.status).toBe(401);
  expect(res.body).toEqual({ error: 'invalid_token', error_description: 'the access token was revoked' });
  expect(res.headers['www-authenticate']).toMatch(/^Bearer realm="api", error="invalid_token"/);
}

describe('RFC 7009 revocation at the issuer', () => {
  let t: TestSetup;
  let app: express.Express;
  let c1: Client;
  let c2: Client;
  beforeAll(async () => {
    t = await setup();
    app = withApi(t);
    c1 = await t.issuer.clients.create({ name: 'c1', scopes: 'orders:read' });
    c2 = await t.issuer.clients.create({ name: 'c2', scopes: 'orders:read' });
  });
  afterAll(() => t.close());

  it('metadata names the revocation and introspection endpoints and their client authentication', async () => {
    const res = await request(app).get('/.well-known/oauth-authorization-server');
    expect(res.body).toMatchObject({
      revocation_endpoint: `${ISSUER}/oauth/revoke`,
      revocation_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
      introspection_endpoint: `${ISSUER}/oauth/introspect`,
      introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    });
  });

  it('RV1 + RV10: a client revokes its own token: 200, empty, no-store; the API refuses it at once, though it was cached', async () => {
    const at = await token(app, c1);
    expect((await callApi(app, at)).status).toBe(200);
    expect((await callApi(app, at)).status).toBe(200); // now a verified-token cache hit
    const res = await revoke(app, c1, { token: at });
    expect(res.status).toBe(200);
    expect(res.text).toBe('');
    expect(res.headers['cache-control']).toBe('no-store');
    expectRevoked(await callApi(app, at));
    // revoking it again changes nothing and still answers 200
    expect((await revoke(app, c1, { token: at })).status).toBe(200);
  });

  it('client_secret_post works as at the token endpoint', async () => {
    const at = await token(app, c1);
    const res = await request(app).post('/oauth/revoke').type('form').send({ token: at, client_id: c1.clientId, client_secret: c1.clientSecret });
    expect(res.status).toBe(200);
    expectRevoked(await callApi(app, at));
  });

  it('RV2: garbage, a malformed value, a token signed by an unknown key → 200 and nothing changes (an expired one: next case)', async () => {
    const live = await token(app, c1);
    const foreign = mint(freshKey(), { claims: { iss: ISSUER, aud: AUDIENCE, client_id: c1.clientId, sub: c1.clientId } });
    for (const value of ['garbage', 'a.b.c', foreign, 'x'.repeat(8000)]) {
      const res = await revoke(app, c1, { token: value });
      expect({ value: value.slice(0, 20), status: res.status }).toEqual({ value: value.slice(0, 20), status: 200 });
    }
    // a body over the 8 KiB form limit is refused as at the token endpoint
    const huge = await revoke(app, c1, { token: 'x'.repeat(9000) });
    expect({ status: huge.status, error: huge.body.error }).toEqual({ status: 413, error: 'invalid_request' });
    expect((await callApi(app, live)).status).toBe(200);
  });

  it('RV2: one of its own tokens, expired past the clock tolerance → 200, and no denylist entry is made for it', async () => {
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
    // the issuer reads this clock
    const own = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir: tempDir(), logger: false });
    try {
      await own.ready();
      const ownApp = withApi({ issuer: own });
      const client = await own.clients.create({ name: 'c', scopes: 'orders:read' });
      const expired = await token(ownApp, client);
      jest.setSystemTime(Date.now() + 3606_000);
      expect((await callApi(ownApp, expired)).status).toBe(401);
      const res = await revoke(ownApp, client, { token: expired });
      expect(res.status).toBe(200);
      expect(res.headers['cache-control']).toBe('no-store');
      const list = (await request(ownApp).get('/oauth/revocation-list')).text;
      expect(JSON.parse(Buffer.from(list.split('.')[1], 'base64url').toString()).tokens).toEqual([]);
    } finally {
      await own.close();
      jest.useRealTimers();
    }
  });

  it('RV3: another client cannot revoke c1 token: 400 invalid_request, and the token keeps working', async () => {
    const at = await token(app, c1);
    const res = await revoke(app, c2, { token: at });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'invalid_request', error_description: 'the token was not issued to this client' });
    expect((await callApi(app, at)).status).toBe(200);
  });

  it('RV4: no client authentication or a wrong secret → 401 invalid_client with a Basic challenge', async () => {
    const at = await token(app, c1);
    const none = await revoke(app, undefined, { token: at });
    expect(none.status).toBe(401);
    expect(none.body.error).toBe('invalid_client');
    expect(none.headers['www-authenticate']).toBe(`Basic realm="${ISSUER}", error="invalid_client"`);
    const wrong = await revoke(app, { clientId: c1.clientId, clientSecret: 'wrong' }, { token: at });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toBe('invalid_client');
    expect((await callApi(app, at)).status).toBe(200);
  });

  it('RV5: token_type_hint is only a hint: refresh_token or an unknown value still revokes the access token', async () => {
    for (const hint of ['refresh_token', 'foo', 'access_token']) {
      const at = await token(app, c1);
      expect((await revoke(app, c1, { token: at, token_type_hint: hint })).status).toBe(200);
      expectRevoked(await callApi(app, at));
    }
  });

  it('RFC 7009 §2.1, RFC 7662 §2.1: the credentials first; wrong ones are 401 invalid_client with a Basic challenge whatever else the form holds', async () => {
    for (const path of ['/oauth/revoke', '/oauth/introspect']) {
      for (const body of ['', 'foo=1', 'token=', 'token=a&token=b', 'token=a&token_type_hint=x&token_type_hint=y']) {
        const res = await request(app).post(path).type('form').auth(c1.clientId, 'wrong').send(body);
        expect({ path, body, status: res.status, error: res.body.error }).toEqual({ path, body, status: 401, error: 'invalid_client' });
        expect(res.headers['www-authenticate']).toMatch(/^Basic /);
      }
      // right credentials: the form's own fault
      const missing = await request(app).post(path).type('form').auth(c1.clientId, c1.clientSecret).send('foo=1');
      expect({ status: missing.status, body: missing.body }).toEqual({ status: 400, body: { error: 'invalid_request', error_description: 'missing token' } });
    }
    // credentials that cannot be read stay a 400 at once
    const twoIds = await request(app).post('/oauth/introspect').type('form').send(`client_id=${c1.clientId}&client_id=${c2.clientId}&client_secret=x&token=a`);
    expect({ status: twoIds.status, body: twoIds.body }).toEqual({ status: 400, body: { error: 'invalid_request', error_description: 'parameter client_id is repeated' } });
  });

  it('RV6: other methods → 405 with Allow: POST; a missing or repeated token → 400 invalid_request', async () => {
    const get = await request(app).get('/oauth/revoke');
    expect(get.status).toBe(405);
    expect(get.headers.allow).toBe('POST');
    const missing = await revoke(app, c1, {});
    expect({ status: missing.status, body: missing.body }).toEqual({ status: 400, body: { error: 'invalid_request', error_description: 'missing token' } });
    const repeated = await request(app).post('/oauth/revoke').type('form').auth(c1.clientId, c1.clientSecret).send('token=a&token=b');
    expect({ status: repeated.status, error: repeated.body.error }).toEqual({ status: 400, error: 'invalid_request' });
    // an empty value is an omitted one (RFC 6749 §3.2): it is no second token
    const at = await token(app, c1);
    expect((await request(app).post('/oauth/revoke').type('form').auth(c1.clientId, c1.clientSecret).send(`token=&token=${at}`)).status).toBe(200);
    expectRevoked(await callApi(app, at));
    const inUrl = await request(app).post('/oauth/revoke?token=abc').type('form').auth(c1.clientId, c1.clientSecret).send('token=abc');
    expect(inUrl.status).toBe(400);
    // client credentials in the URL are refused as at the token endpoint, client_id included
    for (const path of [`/oauth/revoke?client_id=${c1.clientId}`, `/oauth/introspect?client_assertion=x`]) {
      const refused = await request(app).post(path).type('form').auth(c1.clientId, c1.clientSecret).send('token=abc');
      expect({ status: refused.status, body: refused.body }).toEqual({
        status: 400,
        body: { error: 'invalid_request', error_description: 'credentials and tokens must be sent in the request body, never in the URL' },
      });
    }
  });

  it('RV7: revoking the client refuses its tokens at once on this instance; other clients are untouched', async () => {
    const victim = await t.issuer.clients.create({ name: 'leaked', scopes: 'orders:read' });
    const at = await token(app, victim);
    const other = await token(app, c2);
    expect((await callApi(app, at)).status).toBe(200);
    expect(await t.issuer.clients.revoke(victim.clientId)).toBe(true);
    expectRevoked(await callApi(app, at));
    expect((await callApi(app, other)).status).toBe(200);
  });

  it('RV8: revokeTokens refuses every token issued so far, including in the same second; new tokens work; the client stays active', async () => {
    const client = await t.issuer.clients.create({ name: 'rotated', scopes: 'orders:read' });
    const before = await Promise.all([token(app, client), token(app, client)]);
    expect(await t.issuer.clients.revokeTokens(client.clientId)).toEqual({ generation: 1 });
    const after = await token(app, client);
    // the same second as the cut-off, most likely: the generation decides, not iat
    expect((jwt.decode(after) as { gen?: number }).gen).toBe(1);
    for (const at of before) expectRevoked(await callApi(app, at));
    expect((await callApi(app, after)).status).toBe(200);
    expect((await t.issuer.clients.get(client.clientId))?.revokedAt).toBeNull();
    // twice: generation 2, the generation-1 token is refused in turn
    expect(await t.issuer.clients.revokeTokens(client.clientId)).toEqual({ generation: 2 });
    expectRevoked(await callApi(app, after));
    expect((await callApi(app, await token(app, client))).status).toBe(200);
    expect(await t.issuer.clients.revokeTokens('unknown-client-id-000000')).toBeNull();
  });

  it('tokens never carry gen for a client that never used revoke-tokens', async () => {
    expect((jwt.decode(await token(app, c1)) as Record<string, unknown>).gen).toBeUndefined();
  });
});

describe('what one client can add to the revocation list is bounded (maxRevokedTokensPerClient)', () => {
  it('past the cap, a revocation takes all the client\'s tokens issued until then: one entry, not one more per token', async () => {
    const warnings: Record<string, unknown>[] = [];
    const t = await setup({ maxRevokedTokensPerClient: 3, logger: { info: () => undefined, warn: (o: Record<string, unknown>) => void warnings.push(o), error: () => undefined } });
    const app = withApi(t);
    try {
      const c1 = await t.issuer.clients.create({ name: 'c1', scopes: 'orders:read' });
      const c2 = await t.issuer.clients.create({ name: 'c2', scopes: 'orders:read' });
      const tokens = [];
      for (let i = 0; i < 5; i++) tokens.push(await token(app, c1));
      const other = await token(app, c2);
      for (const at of tokens.slice(0, 3)) expect((await revoke(app, c1, { token: at })).status).toBe(200);
      for (const at of tokens.slice(0, 3)) expectRevoked(await callApi(app, at));
      expect((await callApi(app, tokens[4])).status).toBe(200);
      const listed = async () => (jwt.decode((await request(app).get('/oauth/revocation-list')).text) as { tokens: unknown[]; clients: { client_id: string; generation: number }[] });
      expect((await listed()).tokens).toHaveLength(3);

      // the fourth: every token of c1 issued until now goes, tokens[4] too; the list grows by no jti
      expect((await revoke(app, c1, { token: tokens[3] })).status).toBe(200);
      expect((await callApi(app, tokens[3])).status).toBe(401);
      expect((await callApi(app, tokens[4])).status).toBe(401);
      // the generation refuses the three denylisted tokens: their entries go, in memory and in the store
      const after = await listed();
      expect(after.tokens).toEqual([]);
      expect(after.clients).toEqual([expect.objectContaining({ client_id: c1.clientId, generation: 1 })]);
      const store = await openEmbeddedStore({ dataDir: t.dataDir });
      expect((await store.listRevocations(new Date(), new Date(0))).tokens).toEqual([]);
      await store.close();
      for (const at of tokens) expect((await callApi(app, at)).status).toBe(401);
      expect(warnings.filter((w) => w.event === 'client.tokens_revoked')).toEqual([
        expect.objectContaining({ client_id: c1.clientId, reason: 'revoked_tokens_cap', cap: 3 }),
      ]);
      // c1 asks again and goes on; c2 never noticed
      const x = await token(app, c1);
      const y = await token(app, c1);
      expect((await callApi(app, x)).status).toBe(200);
      expect((await callApi(app, other)).status).toBe(200);
      // the count started again: revoking x takes x alone (it took every token of c1 until they expired)
      expect((await revoke(app, c1, { token: x })).status).toBe(200);
      expectRevoked(await callApi(app, x));
      expect((await callApi(app, y)).status).toBe(200);
      expect((await listed()).tokens).toEqual([expect.objectContaining({ client_id: c1.clientId })]);
      expect(warnings.filter((w) => w.event === 'client.tokens_revoked')).toHaveLength(1);
    } finally {
      await t.close();
    }
  });

  it('refuses a bad maxRevokedTokensPerClient at start-up', () => {
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir: tempDir(), logger: false, maxRevokedTokensPerClient: 0 })).toThrow(TypeError);
  });
});

describe('a revocation the store cannot write (a full disk: reads work, writes fail)', () => {
  it('answers 503 with Retry-After, logs store.unavailable once; reads do not end it, the store.recovered line follows the next write that works', async () => {
    const store = await openEmbeddedStore({ dataDir: tempDir() });
    const revokeToken = store.revokeToken.bind(store);
    let full = true;
    store.revokeToken = async (entry) => {
      if (full) throw new StoreUnavailableError('SQLite store unavailable: SQLITE_FULL: database or disk is full');
      return revokeToken(entry);
    };
    // as on a full disk, the issuer's write probe (an assertion jti) fails too
    const consumeJti = store.consumeJti.bind(store);
    store.consumeJti = async (...args) => {
      if (full) throw new StoreUnavailableError('SQLite store unavailable: SQLITE_FULL: database or disk is full');
      return consumeJti(...args);
    };
    const events: Record<string, unknown>[] = [];
    const log = (o: Record<string, unknown>) => void events.push(o);
    const t = await setup({ store, logger: { info: log, warn: log, error: log } });
    try {
      const client = await t.issuer.clients.create({ name: 'full', scopes: 'orders:read' });
      const at = await token(t.app, client);
      const res = await revoke(t.app, client, { token: at });
      expect({ status: res.status, error: res.body.error }).toEqual({ status: 503, error: 'temporarily_unavailable' });
      expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
      expect(events.filter((e) => e.event === 'store.unavailable')).toEqual([expect.objectContaining({ reason: expect.stringMatching(/SQLITE_FULL/) })]);
      // a read works, but says nothing of writes: the outage goes on (no recovered/unavailable pair per request)
      await token(t.app, client);
      expect(events.filter((e) => e.event === 'store.recovered')).toHaveLength(0);
      full = false;
      expect((await revoke(t.app, client, { token: at })).status).toBe(200);
      expect(events.filter((e) => e.event === 'store.recovered')).toHaveLength(1);
      expect(events.filter((e) => e.event === 'store.unavailable')).toHaveLength(1);
    } finally {
      await t.close();
    }
  });
});

describe('revocations survive restarts and reach other instances on the same store', () => {
  it('RV11: a revoked token, a revoked client and a token cut-off are still refused after a restart', async () => {
    const dataDir = tempDir();
    const open = async () => {
      const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
      await issuer.ready();
      return { issuer, app: withApi({ issuer }) };
    };
    const a = await open();
    const c1 = await a.issuer.clients.create({ name: 'c1', scopes: 'orders:read' });
    const c2 = await a.issuer.clients.create({ name: 'c2', scopes: 'orders:read' });
    const c3 = await a.issuer.clients.create({ name: 'c3', scopes: 'orders:read' });
    const [t1, t2, t3] = [await token(a.app, c1), await token(a.app, c2), await token(a.app, c3)];
    expect((await revoke(a.app, c1, { token: t1 })).status).toBe(200);
    await a.issuer.clients.revoke(c2.clientId);
    await a.issuer.clients.revokeTokens(c3.clientId);
    await a.issuer.close();

    const b = await open();
    try {
      for (const at of [t1, t2, t3]) expectRevoked(await callApi(b.app, at));
      expect((await callApi(b.app, await token(b.app, c3))).status).toBe(200);
    } finally {
      await b.issuer.close();
    }
  });

  // an instance started after a revoked token's exp, but while verifiers still accept it (exp + clockTolerance), did not
  // load its entry (listed while exp > now): it let the token through, and dropped it from its signed list; and one
  // with a shorter accessTokenTtl listed only the clients revoked within its own lifetime, so another instance's
  // longer-lived tokens of a revoked client passed there
  it('RV11 at the edges: after a restart, a revoked token past its exp but within clockTolerance, and a revoked client\'s token from an instance with a longer accessTokenTtl, are still refused', async () => {
    const dataDir = tempDir();
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
    const open = async (accessTokenTtl: number) => {
      const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, accessTokenTtl, clockTolerance: 30 });
      await issuer.ready();
      return { issuer, app: withApi({ issuer }) };
    };
    try {
      const a = await open(60);
      const c1 = await a.issuer.clients.create({ name: 'c1', scopes: 'orders:read' });
      const c2 = await a.issuer.clients.create({ name: 'c2', scopes: 'orders:read' });
      const [t1, t2] = [await token(a.app, c1), await token(a.app, c2)];
      expect((await revoke(a.app, c1, { token: t1 })).status).toBe(200);
      await a.issuer.clients.revoke(c2.clientId);
      // t1 is past its exp (60 s) and within the 30 s tolerance; t2 is 70 s old
      jest.setSystemTime(Date.now() + 70_000);
      expectRevoked(await callApi(a.app, t1));
      await a.issuer.close();

      // the same store, restarted with a shorter lifetime (a rolling change of ACCESS_TOKEN_TTL)
      const b = await open(5);
      try {
        expectRevoked(await callApi(b.app, t1));
        const refused = await callApi(b.app, t2);
        expect(refused.status).toBe(401);
        expect(refused.headers['www-authenticate']).toContain('error="invalid_token"');
        // what standalone verifiers poll names the token and the client too
        const list = JSON.parse(Buffer.from((await request(b.app).get('/oauth/revocation-list')).text.split('.')[1], 'base64url').toString()) as {
          tokens: { jti: string }[];
          clients: { client_id: string; revoked_at: number | null }[];
        };
        expect(list.tokens.map((t) => t.jti)).toEqual([(jwt.decode(t1) as { jti: string }).jti]);
        expect(list.clients).toEqual(expect.arrayContaining([expect.objectContaining({ client_id: c2.clientId, revoked_at: expect.any(Number) })]));
      } finally {
        await b.issuer.close();
      }
    } finally {
      jest.useRealTimers();
    }
  });

  it('two instances on one embedded store: a revocation on one is refused by the other within revocationResync; the CLI reaches both', async () => {
    const dataDir = tempDir();
    const instances = await Promise.all(
      [0, 1].map(async () => {
        const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, revocationResync: 0.2 });
        await issuer.ready();
        return { issuer, app: withApi({ issuer }) };
      }),
    );
    const [a, b] = instances;
    try {
      const client = await a.issuer.clients.create({ name: 'shared', scopes: 'orders:read' });
      const at = await token(a.app, client);
      expect((await callApi(b.app, at)).status).toBe(200);
      const started = Date.now();
      expect((await revoke(a.app, client, { token: at })).status).toBe(200);
      expectRevoked(await callApi(a.app, at));
      let elapsed = -1;
      while (Date.now() - started < 3000) {
        if ((await callApi(b.app, at)).status === 401) {
          elapsed = Date.now() - started;
          break;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(elapsed).toBeGreaterThanOrEqual(0);
      expect(elapsed).toBeLessThan(1000); // bound: resync 200 ms + a request

      // the CLI, in its own store connection: revoke-tokens reaches both running instances
      const fresh = await token(b.app, client);
      const out: string[] = [];
      const code = await main(['revoke-tokens', client.clientId, '--json'], { stdout: (s) => out.push(s), stderr: () => undefined, env: { DATA_DIR: dataDir } });
      expect(code).toBe(0);
      expect(JSON.parse(out.join(''))).toEqual({ client_id: client.clientId, tokens_revoked: true, generation: 1 });
      const cliAt = Date.now();
      const refusedBy = new Set<string>();
      while (Date.now() - cliAt < 3000 && refusedBy.size < 2) {
        for (const [name, inst] of [['a', a], ['b', b]] as const) if ((await callApi(inst.app, fresh)).status === 401) refusedBy.add(name);
        await new Promise((r) => setTimeout(r, 20));
      }
      expect([...refusedBy].sort()).toEqual(['a', 'b']);
      expect(Date.now() - cliAt).toBeLessThan(1000);
      // tokens the instances issue after they learned of the new generation work
      expect((await callApi(a.app, await token(a.app, client))).status).toBe(200);
    } finally {
      await a.issuer.close();
      await b.issuer.close();
    }
  });
});

describe('RFC 7662 introspection', () => {
  let t: TestSetup;
  let app: express.Express;
  let rs: Client;
  let c1: Client;
  beforeAll(async () => {
    t = await setup();
    app = withApi(t);
    rs = await t.issuer.clients.create({ name: 'orders-api', permissions: ['introspect'] });
    c1 = await t.issuer.clients.create({ name: 'c1', scopes: 'orders:read' });
  });
  afterAll(() => t.close());

  it('IN1: a live token → active with its claims, token_type Bearer, no-store', async () => {
    const at = await token(app, c1);
    const claims = jwt.decode(at) as Record<string, unknown>;
    const res = await introspect(app, rs, at);
    expect(res.status).toBe(200);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body).toEqual({
      active: true,
      client_id: c1.clientId,
      scope: 'orders:read',
      exp: claims.exp,
      iat: claims.iat,
      sub: c1.clientId,
      aud: AUDIENCE,
      iss: ISSUER,
      jti: claims.jti,
      token_type: 'Bearer',
    });
  });

  it('IN2: revoked, expired, forged, foreign or garbage → exactly {"active":false}', async () => {
    const revoked = await token(app, c1);
    await revoke(app, c1, { token: revoked });
    const forged = mint(freshKey(), { claims: { iss: ISSUER, aud: AUDIENCE } });
    const live = jwt.decode(await token(app, c1)) as Record<string, unknown>;
    const tampered = (await token(app, c1)).replace(/\.[^.]+\./, `.${Buffer.from(JSON.stringify({ ...live, scope: 'admin' })).toString('base64url')}.`);
    for (const value of [revoked, forged, tampered, 'garbage']) {
      const res = await introspect(app, rs, value);
      expect(res.status).toBe(200);
      expect(res.text).toBe('{"active":false}');
    }
  });

  it('IN2: an expired token of this issuer → inactive (on a frozen clock: active up to the last millisecond before exp, inactive at exp)', async () => {
    // only Date is fake (sockets, timers and the store run as they do); the issuer is made after, so it reads this clock
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
    jest.setSystemTime(1_900_000_000_000);
    let short: TestSetup | undefined;
    try {
      short = await setup({ accessTokenTtl: 1, clockTolerance: 0 });
      const shortApp = withApi(short);
      const client = await short.issuer.clients.create({ name: 'c', scopes: 'orders:read' });
      const server = await short.issuer.clients.create({ name: 'rs', permissions: ['introspect'] });
      const at = await token(shortApp, client);
      const { exp } = jwt.decode(at) as { exp: number };
      expect(exp).toBe(1_900_000_000 + 1);
      const live = await introspect(shortApp, server, at);
      expect(live.body).toMatchObject({ active: true, client_id: client.clientId, exp });
      jest.setSystemTime(exp * 1000 - 1);
      expect((await introspect(shortApp, server, at)).body).toMatchObject({ active: true, client_id: client.clientId });
      expect((await callApi(shortApp, at)).status).toBe(200);
      jest.setSystemTime(exp * 1000);
      const expired = await introspect(shortApp, server, at);
      expect(expired.status).toBe(200);
      expect(expired.text).toBe('{"active":false}');
      expect((await callApi(shortApp, at)).status).toBe(401);
    } finally {
      jest.useRealTimers();
      await short?.close();
    }
  });

  it('IN3: no or wrong credentials → 401 invalid_client with a Basic challenge', async () => {
    const at = await token(app, c1);
    const none = await introspect(app, undefined, at);
    expect(none.status).toBe(401);
    expect(none.body.error).toBe('invalid_client');
    expect(none.headers['www-authenticate']).toBe(`Basic realm="${ISSUER}", error="invalid_client"`);
    expect((await introspect(app, { clientId: rs.clientId, clientSecret: 'nope' }, at)).status).toBe(401);
  });

  it('IN4: a client without the introspect permission learns nothing, even about its own token', async () => {
    const own = await token(app, c1);
    const res = await introspect(app, c1, own);
    expect(res.status).toBe(200);
    expect(res.text).toBe('{"active":false}');
  });

  it('IN5: a DPoP-bound token → token_type DPoP and cnf.jkt', async () => {
    const key = newDpopKey();
    const res = await request(app)
      .post('/oauth/token')
      .type('form')
      .set('DPoP', key.proof({ htm: 'POST', htu: `${ISSUER}/oauth/token` }))
      .send({ grant_type: 'client_credentials', client_id: c1.clientId, client_secret: c1.clientSecret });
    expect(res.body.token_type).toBe('DPoP');
    const answer = await introspect(app, rs, res.body.access_token);
    expect(answer.body).toMatchObject({ active: true, token_type: 'DPoP', cnf: { jkt: key.jkt } });
  });

  it('IN6: wrong credentials are rate-limited as at the token endpoint (10 per client and address, then 429)', async () => {
    const fresh = await setup();
    try {
      const freshApp = withApi(fresh);
      const server = await fresh.issuer.clients.create({ name: 'rs', permissions: ['introspect'] });
      const statuses: number[] = [];
      for (let i = 0; i < 12; i++) statuses.push((await introspect(freshApp, { clientId: server.clientId, clientSecret: `wrong-${i}` }, 'x')).status);
      expect(statuses.slice(0, 10)).toEqual(Array(10).fill(401));
      expect(statuses.slice(10)).toEqual([429, 429]);
      const limited = await introspect(freshApp, { clientId: server.clientId, clientSecret: 'wrong' }, 'x');
      expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    } finally {
      await fresh.close();
    }
  });

  it('GET /oauth/introspect → 405 with Allow: POST', async () => {
    const res = await request(app).get('/oauth/introspect');
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe('POST');
  });
});

describe('DPoP-only clients (RFC 9449 dpop_bound_access_tokens)', () => {
  let t: TestSetup;
  beforeAll(async () => {
    t = await setup();
  });
  afterAll(() => t.close());

  it('a token request without a proof → 400 invalid_request; with one → a DPoP token', async () => {
    const client = await t.issuer.clients.create({ name: 'bound', scopes: 'orders:read', requireDpop: true });
    const form = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret };
    const without = await request(t.app).post('/oauth/token').type('form').send(form);
    expect(without.status).toBe(400);
    expect(without.body).toEqual({ error: 'invalid_request', error_description: 'this client must send a DPoP proof with every token request' });
    const key = newDpopKey();
    const withProof = await request(t.app).post('/oauth/token').type('form').set('DPoP', key.proof({ htm: 'POST', htu: `${ISSUER}/oauth/token` })).send(form);
    expect(withProof.status).toBe(200);
    expect(withProof.body.token_type).toBe('DPoP');
    expect((await t.issuer.clients.get(client.clientId))?.requireDpop).toBe(true);
  });

  it('a wrong secret is still invalid_client (the proof requirement is checked after authentication)', async () => {
    const client = await t.issuer.clients.create({ name: 'bound2', requireDpop: true });
    const res = await request(t.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: 'wrong' });
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_client');
  });
});
