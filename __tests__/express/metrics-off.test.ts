/**
 * With metrics off, prom-client is never loaded: here any require of it throws.
 */
import { rmSync } from 'node:fs';
import express from 'express';
import request from 'supertest';
import { createIssuer, requireBearer } from '../../lib';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

jest.mock('prom-client', () => {
  throw new Error('prom-client was loaded');
});

it('an issuer and requireBearer() work without loading prom-client; asking for metrics loads it', async () => {
  const dataDir = tempDir();
  const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
  try {
    const app = express();
    app.use(issuer.router());
    app.get('/orders', issuer.requireBearer(), (_req, res) => void res.json({ ok: true }));
    const standalone = express();
    standalone.get('/orders', requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys: await issuer.keys.jwks(), logger: false }), (_req, res) => void res.json({ ok: true }));
    const token = await fetchToken(app, await issuer.clients.create({ name: 'svc', scopes: [] }));
    expect((await request(app).get('/orders').set('Authorization', `Bearer ${token}`)).status).toBe(200);
    expect((await request(standalone).get('/orders').set('Authorization', `Bearer ${token}`)).status).toBe(200);

    // the mock does bite: metrics on require prom-client
    const registry = { registerMetric() {}, getSingleMetric() {}, metrics() {} } as never;
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, metrics: { registry } })).toThrow('prom-client was loaded');
  } finally {
    await issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
