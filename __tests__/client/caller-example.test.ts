/** examples/caller.ts against an issuer and an orders API like examples/server.ts, in one process. */
import { rmSync } from 'node:fs';
import express from 'express';
import { createIssuer, type Issuer } from '../../lib';
import { main } from '../../examples/caller';
import { loopbackServer, tempDir, type LoopbackServer } from '../helpers/app';

let server: LoopbackServer;
let issuer: Issuer;
let url: string;
let dataDir: string;
let tokenPosts = 0;

beforeAll(async () => {
  dataDir = tempDir();
  server = await loopbackServer();
  url = server.url;
  issuer = createIssuer({ issuer: url, audience: `${url}/api`, dataDir, logger: false });
  await issuer.ready();
  const app = express();
  const orders: unknown[] = [];
  app.use((req, _res, next) => {
    if (req.path === '/oauth/token') tokenPosts++;
    next();
  });
  app.use(issuer.router());
  app.use('/api', issuer.requireBearer());
  app.get('/api/whoami', (req, res) => void res.json({ client_id: req.auth!.clientId }));
  app.get('/api/orders', issuer.requireBearer({ scope: 'orders:read' }), (_req, res) => void res.json({ orders }));
  app.post('/api/orders', issuer.requireBearer({ scope: 'orders:write' }), express.json(), (req, res) => {
    orders.push(req.body);
    res.status(201).json(req.body);
  });
  server.serve(app);
});
afterAll(async () => {
  await issuer.close();
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('makes four API calls with one token and prints the events', async () => {
  const { clientId, clientSecret } = await issuer.clients.create({ name: 'caller', scopes: 'orders:read orders:write' });
  const lines: string[] = [];
  expect(await main({ CLIENT_ID: clientId, CLIENT_SECRET: clientSecret, ISSUER: url }, (l) => lines.push(l))).toBe(0);
  expect(tokenPosts).toBe(1);
  expect(lines.filter((l) => / → (200|201) /.test(l))).toHaveLength(4);
  expect(lines.filter((l) => l.includes('"token.requested"'))).toHaveLength(1);
  expect(lines.filter((l) => l.includes('"token.cache_hit"')).length).toBeGreaterThanOrEqual(3);
  expect(lines.join('\n')).not.toContain(clientSecret);
});

it('says what is missing without CLIENT_ID', async () => {
  const lines: string[] = [];
  expect(await main({}, (l) => lines.push(l))).toBe(2);
  expect(lines[0]).toMatch(/CLIENT_ID/);
});
