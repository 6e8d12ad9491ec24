/**
 * Interop: our DPoP-bound tokens and DpopKey proofs are accepted by
 * express-oauth2-jwt-bearer's DPoP mode (a dev dependency), next to our own
 * requireBearer() on the same server.
 */
import { generateKeyPairSync } from 'node:crypto';
import { rmSync } from 'node:fs';
import express from 'express';
import { auth } from 'express-oauth2-jwt-bearer';
import { createIssuer, type Issuer } from '../../lib';
import { DpopKey } from '../../lib/jwt/dpop-proof';
import { loopbackServer, tempDir, type LoopbackServer } from '../helpers/app';

let server: LoopbackServer;
let url: string;
let issuer: Issuer;
let dataDir: string;
let client: { clientId: string; clientSecret: string };
const key = new DpopKey({ privateKey: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey });

beforeAll(async () => {
  dataDir = tempDir();
  server = await loopbackServer();
  url = server.url;
  issuer = createIssuer({ issuer: url, audience: `${url}/api`, dataDir, logger: false });
  await issuer.ready();
  client = await issuer.clients.create({ name: 'interop', scopes: 'orders:read' });
  const app = express();
  app.use(issuer.router());
  app.get(
    '/ext/orders',
    auth({ issuer: url, audience: `${url}/api`, jwksUri: `${url}/.well-known/jwks.json`, tokenSigningAlg: 'ES256', dpop: { enabled: true, required: true } }),
    (req, res) => void res.json({ sub: (req.auth as unknown as { payload: { sub: string } }).payload.sub }),
  );
  app.get('/ours/orders', issuer.requireBearer({ dpop: 'required' }), (req, res) => void res.json({ sub: req.auth?.clientId }));
  server.serve(app);
});

afterAll(async () => {
  await issuer.close();
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function dpopToken(): Promise<string> {
  const res = await fetch(`${url}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', dpop: key.proof({ htm: 'POST', htu: `${url}/oauth/token` }) },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret }),
  });
  const body = (await res.json()) as { access_token: string; token_type: string };
  expect(body.token_type).toBe('DPoP');
  return body.access_token;
}

describe('express-oauth2-jwt-bearer DPoP mode', () => {
  it('accepts our DPoP-bound token with our proof, as our requireBearer() does', async () => {
    const token = await dpopToken();
    for (const path of ['/ext/orders', '/ours/orders']) {
      const res = await fetch(`${url}${path}`, { headers: { authorization: `DPoP ${token}`, dpop: key.proof({ htm: 'GET', htu: `${url}${path}`, accessToken: token }) } });
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
      expect(await res.json()).toEqual({ sub: client.clientId });
    }
  });

  it('refuses the same token with a proof by another key, as our requireBearer() does', async () => {
    const token = await dpopToken();
    const other = new DpopKey({ privateKey: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey });
    for (const path of ['/ext/orders', '/ours/orders']) {
      const res = await fetch(`${url}${path}`, { headers: { authorization: `DPoP ${token}`, dpop: other.proof({ htm: 'GET', htu: `${url}${path}`, accessToken: token }) } });
      expect({ path, status: res.status }).toEqual({ path, status: 401 });
    }
  });
});
