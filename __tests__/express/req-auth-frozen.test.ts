/**
 * req.auth is shared by every request that carries the same token (the
 * verified-token cache answers with the object it kept): a route that could
 * change it would change what the next request with that token is granted.
 */
import type { Request, Response } from 'express';
import request from 'supertest';
import { setup, type TestSetup } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

let t: TestSetup;
let token: string;
/** What the careless route could do to req.auth, one message per attempt that threw. */
let attempts: string[];

beforeAll(async () => {
  t = await setup({}, (app, issuer) => {
    app.use(issuer.router());
    // a route that tries to widen or rewrite what the token granted, for this request only as its author believes
    app.get('/careless', issuer.requireBearer(), (req: Request, res: Response) => {
      attempts = [];
      const auth = req.auth as unknown as { scope: string[]; clientId: string; claims: Record<string, unknown> };
      const tries: [string, () => void][] = [
        ['scope.push', () => auth.scope.push('orders:admin')],
        ['scope[0] =', () => (auth.scope[0] = 'orders:admin')],
        ['clientId =', () => (auth.clientId = 'someone-else')],
        ['claims.scope =', () => (auth.claims.scope = 'orders:read orders:admin')],
        ['claims.client_id =', () => (auth.claims.client_id = 'someone-else')],
        ['add a property', () => ((auth as unknown as Record<string, unknown>).user = { name: 'x' })],
      ];
      for (const [name, attempt] of tries) {
        try {
          attempt();
        } catch (err) {
          attempts.push(`${name}: ${(err as Error).constructor.name}`);
        }
      }
      res.json(req.auth);
    });
    app.get('/admin', issuer.requireBearer({ scope: 'orders:admin' }), (req: Request, res: Response) => {
      res.json(req.auth);
    });
    app.get('/me', issuer.requireBearer(), (req: Request, res: Response) => {
      res.json(req.auth);
    });
  });
  const client = await t.issuer.clients.create({ name: 'reader', scopes: 'orders:read' });
  token = await fetchToken(t.app, client, 'orders:read');
});

afterAll(async () => {
  await t.close();
});

test('a route cannot change req.auth: every change throws, and the next request with the same token is granted what the token says', async () => {
  const auth = { authorization: `Bearer ${token}` };
  const before = await request(t.app).get('/me').set(auth);
  expect(before.status).toBe(200);
  expect(before.body.scope).toEqual(['orders:read']);

  const careless = await request(t.app).get('/careless').set(auth);
  expect(careless.status).toBe(200);
  expect(attempts).toEqual([
    'scope.push: TypeError',
    'scope[0] =: TypeError',
    'clientId =: TypeError',
    'claims.scope =: TypeError',
    'claims.client_id =: TypeError',
    'add a property: TypeError',
  ]);
  expect(careless.body).toEqual(before.body);

  // the same token, from the cache: still only orders:read
  const admin = await request(t.app).get('/admin').set(auth);
  expect(admin.status).toBe(403);
  expect(admin.body.error).toBe('insufficient_scope');
  const after = await request(t.app).get('/me').set(auth);
  expect(after.status).toBe(200);
  expect(after.body).toEqual(before.body);
  expect(after.body.claims.scope).toBe('orders:read');
});
