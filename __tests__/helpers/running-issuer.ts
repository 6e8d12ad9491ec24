/**
 * An issuer on a loopback port with one client (scope orders:read), and the
 * calls the revocation-list suites make against it: a token, a revocation
 * (RFC 7009), and a wait until a resource server answers a given status.
 */
import express from 'express';
import request from 'supertest';
import { createIssuer, type Issuer, type IssuerOptions } from '../../lib';
import { loopbackServer, tempDir, type LoopbackServer } from './app';

export type Client = { clientId: string; clientSecret: string };

export interface Running {
  issuer: Issuer;
  url: string;
  http: LoopbackServer;
  client: Client;
  close(): Promise<void>;
}

export async function startIssuer(options: Pick<IssuerOptions, 'accessTokenTtl' | 'clockTolerance'> = {}): Promise<Running> {
  const http = await loopbackServer();
  const issuer = createIssuer({ issuer: http.url, audience: `${http.url}/api`, dataDir: tempDir(), logger: false, ...options });
  await issuer.ready();
  const app = express();
  app.use(issuer.router());
  http.serve(app);
  const client = await issuer.clients.create({ name: 'caller', scopes: 'orders:read' });
  return {
    issuer,
    url: http.url,
    http,
    client,
    async close() {
      await issuer.close();
      await http.close();
    },
  };
}

const basic = (c: Client) => `Basic ${Buffer.from(`${c.clientId}:${c.clientSecret}`).toString('base64')}`;

/** An access token for `client` (default: the issuer's own), asserting the 200. */
export async function token(r: Running, client: Client = r.client): Promise<string> {
  const res = await fetch(`${r.url}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(client) },
    body: 'grant_type=client_credentials',
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { access_token: string }).access_token;
}

/** Revokes `at` as `client` through POST /oauth/revoke, asserting the 200. */
export async function revoke(r: Running, at: string, client: Client = r.client): Promise<void> {
  const res = await fetch(`${r.url}/oauth/revoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(client) },
    body: `token=${at}`,
  });
  expect(res.status).toBe(200);
}

export const callOrders = (app: express.Express, at: string) => request(app).get('/api/orders').set('Authorization', `Bearer ${at}`);

/** ms until `app` answers `status` for GET /api/orders with `at`, polling every 20 ms up to `limitMs`; -1 if never. */
export async function untilStatus(app: express.Express, at: string, status: number, limitMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < limitMs) {
    if ((await callOrders(app, at)).status === status) return Date.now() - started;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return -1;
}
