/**
 * An issuer with a path, mounted as the README says (router at the path,
 * wellKnown() at the root), discovered over HTTP by this package's token
 * client and by openid-client (algorithm 'oauth2', RFC 8414 §3.1 location).
 */
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import express from 'express';
import { createIssuer, type Issuer } from '../../lib';
import { createTokenClient } from '../../lib/client';
import { tempDir } from '../helpers/app';

let server: Server;
let origin: string;
const issuers: Issuer[] = [];
let handler: express.Express = express();

beforeAll(async () => {
  // the issuer must name the port clients reach: listen first, mount each test's app on it
  server = createServer((req, res) => handler(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await Promise.all(issuers.map((i) => i.close()));
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

async function pathIssuer(mount: (app: express.Express, issuer: Issuer) => void): Promise<{ issuer: Issuer; id: string; secret: string }> {
  const issuer = createIssuer({ issuer: `${origin}/auth`, audience: `${origin}/api`, dataDir: tempDir(), logger: false });
  issuers.push(issuer);
  await issuer.ready();
  const app = express();
  mount(app, issuer);
  app.get('/api/whoami', issuer.requireBearer(), (req, res) => {
    res.json({ client_id: req.auth!.clientId });
  });
  handler = app;
  const client = await issuer.clients.create({ name: 'caller', scopes: 'orders:read' });
  return { issuer, id: client.clientId, secret: client.clientSecret! };
}

const asReadme = (app: express.Express, issuer: Issuer): void => {
  app.use(issuer.wellKnown());
  app.use('/auth', issuer.router());
};

it('the token client given issuer <origin>/auth gets a token through discovery that the API accepts', async () => {
  const { id, secret } = await pathIssuer(asReadme);
  const client = createTokenClient({ issuer: `${origin}/auth`, clientId: id, clientSecret: secret });
  try {
    const token = await client.getToken();
    expect(token.tokenType).toBe('Bearer');
    const who = await fetch(`${origin}/api/whoami`, { headers: { authorization: `Bearer ${token.accessToken}` } });
    expect(await who.json()).toEqual({ client_id: id });
  } finally {
    await client.close();
  }
});

it('the token client also finds the metadata of a router mounted at /auth alone (without wellKnown())', async () => {
  const { id, secret } = await pathIssuer((app, issuer) => app.use('/auth', issuer.router()));
  const client = createTokenClient({ issuer: `${origin}/auth`, clientId: id, clientSecret: secret });
  try {
    expect((await client.getToken()).tokenType).toBe('Bearer');
  } finally {
    await client.close();
  }
});

it.each([['basic'], ['post']])("openid-client (client_secret_%s, algorithm 'oauth2') discovers <origin>/auth and gets a token the API accepts", async (method) => {
  const { id, secret } = await pathIssuer(asReadme);
  const { stdout } = await promisify(execFile)(process.execPath, [join(__dirname, 'openid-client.mjs'), `${origin}/auth`, id, secret, method, 'orders:read'], { timeout: 20_000 });
  const token = JSON.parse(stdout);
  expect(token).toMatchObject({ token_type: 'bearer', scope: 'orders:read' });
  const who = await fetch(`${origin}/api/whoami`, { headers: { authorization: `Bearer ${token.access_token}` } });
  expect(who.status).toBe(200);
});
