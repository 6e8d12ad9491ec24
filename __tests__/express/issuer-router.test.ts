import request from 'supertest';
import type { Request, Response } from 'express';
import { setup, type TestSetup } from '../helpers/app';

let t: TestSetup;
beforeAll(async () => {
  t = await setup();
  t.app.get('/api/ping', (_req, res) => {
    res.json({ ok: true });
  });
});
afterAll(() => t.close());

describe('issuer.router() and the app routes around it', () => {
  it('hands a request for another path to the next handler at once, not after an event-loop turn', () => {
    const handler = t.issuer.router();
    let passed = false;
    handler({ path: '/api/orders', url: '/api/orders', method: 'GET', headers: {} } as Request, {} as Response, () => {
      passed = true;
    });
    expect(passed).toBe(true);
  });

  it('still routes its own paths as Express matches them: any case, one trailing slash', async () => {
    const token = await request(t.app).post('/OAuth/Token/').type('form').send({ grant_type: 'client_credentials' });
    expect(token.status).toBe(401);
    expect(token.body.error).toBe('invalid_client');
    const jwks = await request(t.app).get('/.well-known/JWKS.json');
    expect(jwks.status).toBe(200);
    expect(jwks.headers['content-type']).toMatch(/^application\/jwk-set\+json/);
  });

  it('leaves every other path to the app', async () => {
    expect((await request(t.app).get('/api/ping')).body).toEqual({ ok: true });
    expect((await request(t.app).get('/oauth/token/extra')).status).toBe(404);
  });
});
