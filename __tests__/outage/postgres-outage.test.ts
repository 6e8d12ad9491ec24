/**
 * PostgreSQL going away under a running issuer, through a TCP proxy this
 * test owns (the machine's PostgreSQL is never stopped): the token endpoint
 * answers 503 + Retry-After, the outage is logged once, protected routes go
 * on from the loaded keys, and everything recovers without a restart.
 */
import express from 'express';
import { Pool } from 'pg';
import request from 'supertest';
import { createIssuer, type IssuedCredentials, type Issuer } from '../../lib';
import { createPostgresStore } from '../../lib/stores/postgres';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';
import { recorder } from '../helpers/log-recorder';

const ISSUER = 'http://issuer.test';
const AUDIENCE = 'http://api.test';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeIfPostgres('PostgreSQL outage under a running issuer', () => {
  const schema = uniqueSchemaName();
  const { events, logger } = recorder();
  let admin: Pool;
  let proxy: FaultProxy;
  let issuer: Issuer;
  let app: express.Express;
  let client: IssuedCredentials;
  let token: string;

  const count = (event: string) => events.filter((e) => e.event === event).length;
  const tokenRequest = (clientId: string, clientSecret: string) =>
    request(app).post('/oauth/token').auth(clientId, clientSecret).type('form').send({ grant_type: 'client_credentials' });

  function expectUnavailable(res: request.Response): void {
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('5');
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.headers.pragma).toBe('no-cache');
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body).toEqual({ error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' });
    expect(res.text).not.toMatch(/ECONN|PostgreSQL|at .*\.(js|ts):\d+/);
  }

  beforeAll(async () => {
    admin = new Pool({ connectionString: postgresUrl(), max: 1 });
    const target = new URL(postgresUrl());
    proxy = await startFaultProxy(Number(target.port || 5432), target.hostname);
    const viaProxy = new URL(postgresUrl());
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    const store = await createPostgresStore({ connectionString: viaProxy.toString(), schema, max: 4, connectionTimeoutMillis: 1000, queryTimeoutMillis: 1500 });
    // clientCacheTtl 0: every token request asks the store (otherwise a known client is served from memory for 2 s)
    // keyRefreshInterval 1 s: background key reloads fail during the outage, and must not break anything
    issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store, logger, clientCacheTtl: 0, bruteForce: false, keyRefreshInterval: 1 });
    await issuer.ready();
    client = await issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
    app = express();
    app.use(issuer.router());
    app.get('/api/me', issuer.requireBearer(), (req, res) => {
      res.json({ client_id: req.auth!.clientId });
    });
    const issued = await tokenRequest(client.clientId, client.clientSecret);
    expect(issued.status).toBe(200);
    token = issued.body.access_token;
  });

  afterAll(async () => {
    await issuer?.close();
    await proxy?.close();
    await dropSchema(admin, schema);
    await admin.end();
  });

  it('answers 503 while PostgreSQL is cut, logs it once, keeps protected routes up, and recovers', async () => {
    expect((await issuer.health()).ok).toBe(true);
    proxy.cut();

    for (let i = 0; i < 10; i++) {
      expectUnavailable(await tokenRequest(client.clientId, client.clientSecret));
      expectUnavailable(await tokenRequest('unknown-client', 'whatever'));
    }
    expect(count('store.unavailable')).toBe(1);
    expect(events.find((e) => e.event === 'store.unavailable')).toMatchObject({ level: 'error', reason: expect.stringMatching(/^PostgreSQL is unavailable: /) });
    // no per-request error lines, no client.auth_failed for a request the store could not answer
    expect(events.filter((e) => e.event === 'error' || e.event === 'client.auth_failed')).toEqual([]);

    // a token issued before the outage still opens the protected route
    const me = await request(app).get('/api/me').set('Authorization', `Bearer ${token}`);
    expect(me.status).toBe(200);
    expect(me.body).toEqual({ client_id: client.clientId });

    await sleep(1100); // past the one-second health cache and the key refresh interval
    const down = await issuer.health(); // also starts a background key reload, which fails
    expect(down).toEqual({ ok: false, store: 'down', signingKid: expect.any(String) });
    await sleep(300);
    // the keys in memory still verify, and the token endpoint still answers 503, not 500
    expect((await request(app).get('/api/me').set('Authorization', `Bearer ${token}`)).status).toBe(200);
    expectUnavailable(await tokenRequest(client.clientId, client.clientSecret));
    expect(count('store.unavailable')).toBe(1);

    proxy.restore();
    const back = await tokenRequest(client.clientId, client.clientSecret);
    expect(back.status).toBe(200);
    expect(count('store.recovered')).toBe(1);
    expect(count('store.unavailable')).toBe(1);
    const unknown = await tokenRequest('unknown-client', 'whatever');
    expect(unknown.status).toBe(401);
    await sleep(1100);
    expect(await issuer.health()).toEqual({ ok: true, store: 'up', signingKid: down.signingKid });
  });

  it('answers 503 within seconds when PostgreSQL stops answering (black hole), and recovers', async () => {
    const before = count('store.unavailable');
    proxy.blackHole();
    const started = Date.now();
    expectUnavailable(await tokenRequest(client.clientId, client.clientSecret));
    // query timeout 1.5 s, connection timeout 1 s in this test; a loaded machine gets a wide margin
    expect(Date.now() - started).toBeLessThan(8000);
    expectUnavailable(await tokenRequest('unknown-client', 'whatever'));
    expect(count('store.unavailable')).toBe(before + 1);
    expect((await request(app).get('/api/me').set('Authorization', `Bearer ${token}`)).status).toBe(200);

    proxy.restore();
    expect((await tokenRequest(client.clientId, client.clientSecret)).status).toBe(200);
    expect(count('store.unavailable')).toBe(before + 1);
    expect(count('store.recovered')).toBe(2);
  }, 30_000);

  it('a connection cut in the middle of a transaction fails that call alone, changes nothing, and the process lives on', async () => {
    const c = await issuer.clients.create({ name: 'mid-tx', scopes: 'a b' });
    // another session holds the client's row: the update waits on it inside its transaction
    const hold = new Pool({ connectionString: postgresUrl(), max: 1 });
    const holder = await hold.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${schema}".clients WHERE client_id = $1 FOR UPDATE`, [c.clientId]);
      const pending = issuer.clients.update(c.clientId, { scopes: 'a' });
      pending.catch(() => undefined);
      await sleep(300);
      proxy.cut();
      await expect(pending).rejects.toThrow(/PostgreSQL is unavailable/);
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
      await hold.end();
    }
    proxy.restore();
    // nothing half done: the scopes and the token generation are as before, and the update works now
    expect((await issuer.clients.get(c.clientId))!.scopes).toEqual(['a', 'b']);
    expect(await issuer.clients.update(c.clientId, { scopes: 'a' })).toMatchObject({ changed: ['scopes'], tokensRevoked: true });
    const back = await tokenRequest(client.clientId, client.clientSecret);
    expect(back.status).toBe(200);
  });

  it('an instance with no traffic logs the outage and its end by itself (its revocation reload every 2 s)', async () => {
    const waitFor = async (event: string, n: number): Promise<number> => {
      const started = Date.now();
      while (count(event) < n && Date.now() - started < 8000) await sleep(50);
      expect(count(event)).toBe(n);
      return Date.now() - started;
    };
    const unavailable = count('store.unavailable');
    const recovered = count('store.recovered');
    proxy.cut();
    expect(await waitFor('store.unavailable', unavailable + 1)).toBeLessThan(5000);
    proxy.restore();
    expect(await waitFor('store.recovered', recovered + 1)).toBeLessThan(5000);
    // two waits of up to 5 s each (a reload every 2 s finds each change): jest's default 5 s was the sum's bound
  }, 20_000);
});
