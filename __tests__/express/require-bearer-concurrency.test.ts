/**
 * requireBearer() runs the passport-http-bearer strategy through one shared
 * object per middleware: each request must still get its own answer, when the
 * check answers later (keys still loading) and when the same middleware runs
 * twice in one request.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import request from 'supertest';
import { requireBearer } from '../../lib';
import { AUDIENCE, ISSUER, setup, type TestSetup } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

let t: TestSetup;
let server: Server;
let jwksUri: string;
const tokens: { clientId: string; token: string }[] = [];

beforeAll(async () => {
  t = await setup();
  server = t.app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  jwksUri = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`;
  for (const name of ['a', 'b', 'c', 'd']) {
    const client = await t.issuer.clients.create({ name, scopes: 'orders:read' });
    tokens.push({ clientId: client.clientId, token: await fetchToken(t.app, client) });
  }
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  await t.close();
});

it('concurrent requests whose check answers later (the JWKS is fetched on first use) each get their own client', async () => {
  const app = express();
  app.get('/whoami', requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri, logger: false }), (req, res) => {
    res.json({ client_id: req.auth!.clientId });
  });
  const answers = await Promise.all(tokens.flatMap(({ token }) => [0, 1, 2].map(() => request(app).get('/whoami').set('Authorization', `Bearer ${token}`))));
  expect(answers.map((r) => [r.status, r.body.client_id])).toEqual(tokens.flatMap(({ clientId }) => [0, 1, 2].map(() => [200, clientId])));
});

it('the same middleware twice in one request, and a refused request between accepted ones', async () => {
  const app = express();
  const auth = t.issuer.requireBearer();
  app.use('/api', auth);
  app.get('/api/twice', auth, (req, res) => {
    res.json({ client_id: req.auth!.clientId });
  });
  for (const { clientId, token } of tokens) {
    const ok = await request(app).get('/api/twice').set('Authorization', `Bearer ${token}`);
    expect([ok.status, ok.body.client_id]).toEqual([200, clientId]);
    const refused = await request(app).get('/api/twice').set('Authorization', `Bearer ${token}x`);
    expect(refused.status).toBe(401);
    expect(refused.headers['www-authenticate']).toContain('error="invalid_token"');
  }
});
