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
import { main } from '../../lib/cli/main';
import { createPostgresStore } from '../../lib/stores/postgres';
import { refusedWithin, status, token } from './revocation-helpers';
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
    const client = await a.issuer.clients.create({ name: 'pg-c1', scopes: 'orders:read' });
    const at = await token(a.app, client);
    expect(await status(b.app, at)).toBe(200);
    const res = await request(a.app).post('/oauth/revoke').type('form').auth(client.clientId, client.clientSecret).send({ token: at });
    expect(res.status).toBe(200);
    const ms = await refusedWithin([a.app, b.app], at, 3000);
    expect(ms).toBeGreaterThanOrEqual(0);
    expect(ms).toBeLessThan(1000);
  });

  it('RV7/RV8 from the CLI: revoke-tokens and revoke reach both instances within 1 s; revoke-tokens keeps the client working', async () => {
    const client = await a.issuer.clients.create({ name: 'pg-c2', scopes: 'orders:read' });
    const env = { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema };
    const run = (args: string[]) => main(args, { stdout: () => undefined, stderr: () => undefined, env });

    const old = await token(b.app, client);
    expect(await run(['revoke-tokens', client.clientId])).toBe(0);
    const ms = await refusedWithin([a.app, b.app], old, 3000);
    expect(ms).toBeGreaterThanOrEqual(0);
    expect(ms).toBeLessThan(1000);
    // new tokens work on both, once each instance has the new generation (it learned it by the push above)
    const fresh = await token(a.app, client);
    expect([await status(a.app, fresh), await status(b.app, fresh)]).toEqual([200, 200]);

    expect(await run(['revoke', client.clientId])).toBe(0);
    const ms2 = await refusedWithin([a.app, b.app], fresh, 3000);
    expect(ms2).toBeGreaterThanOrEqual(0);
    expect(ms2).toBeLessThan(1000);
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
