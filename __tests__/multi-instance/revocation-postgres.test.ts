/**
 * Revocation across instances on one PostgreSQL database: LISTEN/NOTIFY
 * makes every instance reload at once, so the bound is a notification's
 * latency, not `revocationResync` (set to 30 s here so that only the push
 * can explain a fast refusal). The CLI, in its own connection, reaches them
 * the same way.
 */
import express from 'express';
import { Pool } from 'pg';
import request from 'supertest';
import { createIssuer, type Issuer } from '../../lib';
import { createPostgresStore } from '../../lib/stores/postgres';
import { main } from '../../lib/cli/main';
import { cliRevocationsReachBoth, expectRefusedWithin1s, revokedAtAReachesB, status, token } from './revocation-helpers';
import { AUDIENCE, ISSUER } from '../helpers/app';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';

interface Instance {
  issuer: Issuer;
  app: express.Express;
}

async function instance(schema: string): Promise<Instance> {
  const store = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 4 });
  const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store, logger: false, revocationResync: 30 });
  await issuer.ready();
  const app = express();
  app.use(issuer.router());
  app.get('/api/orders', issuer.requireBearer(), (req, res) => res.json({ client: req.auth!.clientId }));
  return { issuer, app };
}

describeIfPostgres('revocation across instances on PostgreSQL (LISTEN/NOTIFY)', () => {
  let admin: Pool;
  let schema: string;
  let a: Instance;
  let b: Instance;
  beforeAll(async () => {
    admin = new Pool({ connectionString: postgresUrl(), max: 2 });
    schema = uniqueSchemaName();
    a = await instance(schema);
    b = await instance(schema);
  });
  afterAll(async () => {
    await a?.issuer.close();
    await b?.issuer.close();
    await dropSchema(admin, schema);
    await admin.end();
  });

  it('RV1 on two instances: a token revoked at A is refused by B within 1 s (resync is 30 s: the push did it)', async () => {
    await revokedAtAReachesB(a, b, 'pg-c1');
  });

  it('RV7/RV8 from the CLI: revoke-tokens and revoke reach both instances within 1 s; revoke-tokens keeps the client working', async () => {
    await cliRevocationsReachBoth(a, b, 'pg-c2', { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema });
  });

  it('update from the CLI taking a scope away: both instances refuse the old token within 1 s and the scope at once after (their cached client records go with it)', async () => {
    const client = await a.issuer.clients.create({ name: 'pg-c4', scopes: 'orders:read orders:write' });
    const ask = (app: express.Express, scope: string) =>
      request(app).post('/oauth/token').type('form').auth(client.clientId, client.clientSecret).send({ grant_type: 'client_credentials', scope });
    // both instances hold the client's record in their client cache (2 s) now
    const old = (await ask(a.app, 'orders:read orders:write').expect(200)).body.access_token as string;
    await ask(b.app, 'orders:write').expect(200);
    const env = { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema };
    expect(await main(['update', client.clientId, '--scope', 'orders:read'], { stdout: () => undefined, stderr: () => undefined, env })).toBe(0);
    await expectRefusedWithin1s([a.app, b.app], old);
    for (const app of [a.app, b.app]) {
      const refused = await ask(app, 'orders:write');
      expect(refused.status).toBe(400);
      expect(refused.body.error).toBe('invalid_scope');
      const kept = await ask(app, 'orders:read').expect(200);
      expect(await status(app, kept.body.access_token)).toBe(200);
    }
  });

  it('a client revoked at A gets no more tokens at B as soon as its old token is refused there (not after B\'s 2 s client cache)', async () => {
    const client = await a.issuer.clients.create({ name: 'pg-c5', scopes: 'orders:read' });
    const old = await token(b.app, client); // B caches the client's record
    await a.issuer.clients.revoke(client.clientId);
    await expectRefusedWithin1s([b.app], old);
    const res = await request(b.app).post('/oauth/token').type('form').auth(client.clientId, client.clientSecret).send({ grant_type: 'client_credentials' });
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_client');
  });

  it('rotate-secret without --keep-old (CLI, or issuer.clients at A): the old secret stops at both instances within 1 s, not after their 2 s client cache', async () => {
    const env = { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema };
    const ask = (app: express.Express, secret: string, clientId: string) =>
      request(app).post('/oauth/token').type('form').auth(clientId, secret).send({ grant_type: 'client_credentials' });
    const oldSecretStopsWithin1s = async (clientId: string, old: string, rotate: () => Promise<unknown>) => {
      for (const app of [a.app, b.app]) await ask(app, old, clientId).expect(200); // both cache the record now
      await rotate();
      const started = Date.now();
      let statuses = [200, 200];
      while (statuses.some((x) => x !== 401) && Date.now() - started < 3000) {
        statuses = await Promise.all([a.app, b.app].map(async (app) => (await ask(app, old, clientId)).status));
        if (statuses.some((x) => x !== 401)) await new Promise((r) => setTimeout(r, 10));
      }
      expect(statuses).toEqual([401, 401]);
      expect(Date.now() - started).toBeLessThan(1000);
    };
    const viaCli = await a.issuer.clients.create({ name: 'pg-c7', scopes: 'orders:read' });
    let printed = '';
    await oldSecretStopsWithin1s(viaCli.clientId, viaCli.clientSecret, async () => {
      expect(await main(['rotate-secret', viaCli.clientId, '--json'], { stdout: (t) => void (printed += t), stderr: () => undefined, env })).toBe(0);
    });
    await ask(b.app, (JSON.parse(printed) as { client_secret: string }).client_secret, viaCli.clientId).expect(200);
    const viaApi = await a.issuer.clients.create({ name: 'pg-c8', scopes: 'orders:read' });
    await oldSecretStopsWithin1s(viaApi.clientId, viaApi.clientSecret, () => a.issuer.clients.rotateSecret(viaApi.clientId));
  });

  it('an update is decided on what the client has when it writes: a scope another session added meanwhile and this update drops revokes the tokens', async () => {
    const client = await a.issuer.clients.create({ name: 'pg-c6', scopes: 'orders:read' });
    const holder = await admin.connect();
    let pending: ReturnType<Issuer['clients']['update']> | undefined;
    try {
      await holder.query('BEGIN');
      await holder.query(`UPDATE "${schema}".clients SET scopes = '{orders:read,orders:write}' WHERE client_id = $1`, [client.clientId]);
      // this update reads the client while the other session's change is not committed: it only adds, as far as it can see
      pending = a.issuer.clients.update(client.clientId, { scopes: 'orders:read reports:read' });
      await new Promise((r) => setTimeout(r, 200));
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    const done = await pending;
    expect(done!.tokensRevoked).toBe(true);
    expect(done).toMatchObject({ changed: ['scopes'], settings: { scopes: ['orders:read', 'reports:read'] } });
  });

  it('a signing key revoked at A, then from the CLI: B refuses its tokens, publishes and signs with the new key within 1 s (its key refresh is 30 s: the push did it)', async () => {
    const client = await a.issuer.clients.create({ name: 'pg-k1', scopes: 'orders:read' });
    const kids = async (app: express.Express): Promise<string[]> => ((await request(app).get('/.well-known/jwks.json')).body.keys as { kid: string }[]).map((k) => k.kid);
    const kidOf = (jwt: string): string => JSON.parse(Buffer.from(jwt.split('.')[0], 'base64url').toString()).kid as string;
    const env = { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema };
    for (const revokeAtA of [true, false]) {
      const old = await token(b.app, client);
      expect(await status(b.app, old)).toBe(200); // in B's verified-token cache
      let replacement: string;
      if (revokeAtA) {
        replacement = (await a.issuer.keys.revoke(kidOf(old))).replacement!.kid;
      } else {
        const out: string[] = [];
        expect(await main(['keys', 'revoke', kidOf(old), '--json'], { stdout: (s) => out.push(s), stderr: () => undefined, env })).toBe(0);
        replacement = (JSON.parse(out.join('')) as { replaced_by: string }).replaced_by;
      }
      await expectRefusedWithin1s([a.app, b.app], old);
      for (const app of [a.app, b.app]) {
        expect(await kids(app)).toEqual([replacement]);
        const fresh = await token(app, client);
        expect(kidOf(fresh)).toBe(replacement);
        expect(await status(a.app, fresh)).toBe(200);
        expect(await status(b.app, fresh)).toBe(200);
      }
    }
  });

  it('an instance started after the revocations loads them (shared and persisted)', async () => {
    const client = await a.issuer.clients.create({ name: 'pg-c3', scopes: 'orders:read' });
    const at = await token(a.app, client);
    await a.issuer.clients.revokeTokens(client.clientId);
    const c = await instance(schema);
    try {
      expect(await status(c.app, at)).toBe(401);
      expect(await status(c.app, await token(c.app, client))).toBe(200);
    } finally {
      await c.issuer.close();
    }
  });
});
