/**
 * Introspection answers from the store, not from the instance's last
 * reload of the revocations: a token revoked on another instance a moment
 * ago is inactive at once, whatever revocationResync is.
 */
import express, { type Express } from 'express';
import request from 'supertest';
import { rmSync } from 'node:fs';
import { createIssuer, type Issuer } from '../../lib';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

const dataDir = tempDir();
let a: Issuer;
let b: Issuer;
let appA: Express;
let appB: Express;

function app(issuer: Issuer): Express {
  const e = express();
  e.use(issuer.router());
  e.get('/api', issuer.requireBearer(), (req, res) => res.json({ client_id: req.auth!.clientId }));
  return e;
}

beforeAll(async () => {
  // two instances on one store (two connections to one database file), reloading revocations only once a minute
  a = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store: await openEmbeddedStore({ dataDir }), revocationResync: 60, logger: false });
  b = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store: await openEmbeddedStore({ dataDir }), revocationResync: 60, logger: false });
  await a.ready();
  await b.ready();
  appA = app(a);
  appB = app(b);
});

afterAll(async () => {
  await a.close();
  await b.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test('a token revoked at instance A is inactive at instance B at once', async () => {
  const holder = await a.clients.create({ name: 'holder' });
  const rs = await a.clients.create({ name: 'orders-api', permissions: ['introspect'] });
  const token = await fetchToken(appA, holder);
  const introspectAtB = () => request(appB).post('/oauth/introspect').auth(rs.clientId, rs.clientSecret).type('form').send({ token });
  const before = await introspectAtB();
  expect(before.status).toBe(200);
  expect(before.body).toMatchObject({ active: true, client_id: holder.clientId });

  const revoked = await request(appA).post('/oauth/revoke').auth(holder.clientId, holder.clientSecret).type('form').send({ token });
  expect(revoked.status).toBe(200);

  const after = await introspectAtB();
  expect(after.status).toBe(200);
  expect(after.body).toEqual({ active: false });
  // and B's protected routes, which asked the store on the way, refuse it too
  const api = await request(appB).get('/api').set('Authorization', `Bearer ${token}`);
  expect(api.status).toBe(401);
  expect(api.body.error).toBe('invalid_token');
});
