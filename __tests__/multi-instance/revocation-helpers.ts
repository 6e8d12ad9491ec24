/**
 * Revocation across issuers in one test process: a token of a client, the
 * status of a protected request, and how long until every app refuses a token.
 */
import type express from 'express';
import request from 'supertest';
import type { Issuer } from '../../lib';
import { main } from '../../lib/cli/main';

export type Client = { clientId: string; clientSecret: string };

export async function token(app: express.Express, client: Client): Promise<string> {
  const res = await request(app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
  expect(res.status).toBe(200);
  return res.body.access_token as string;
}

export const status = async (app: express.Express, at: string): Promise<number> => (await request(app).get('/api/orders').set('Authorization', `Bearer ${at}`)).status;

/** Milliseconds until every app refuses `at`, polled every 10 ms for at most `limitMs`; -1 if not. */
export async function refusedWithin(apps: express.Express[], at: string, limitMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < limitMs) {
    const statuses = await Promise.all(apps.map((a) => status(a, at)));
    if (statuses.every((s) => s === 401)) return Date.now() - started;
    await new Promise((r) => setTimeout(r, 10));
  }
  return -1;
}

/** Expects every app to refuse `at` within 1 s (polled for up to 3 s). */
export async function expectRefusedWithin1s(apps: express.Express[], at: string): Promise<void> {
  const ms = await refusedWithin(apps, at, 3000);
  expect(ms).toBeGreaterThanOrEqual(0);
  expect(ms).toBeLessThan(1000);
}

export interface RevocationInstance {
  issuer: Issuer;
  app: express.Express;
}

/** RV1 on two instances: a token revoked at A with POST /oauth/revoke is refused by both within 1 s. */
export async function revokedAtAReachesB(a: RevocationInstance, b: RevocationInstance, name: string): Promise<void> {
  const client = await a.issuer.clients.create({ name, scopes: 'orders:read' });
  const at = await token(a.app, client);
  expect(await status(b.app, at)).toBe(200);
  const res = await request(a.app).post('/oauth/revoke').type('form').auth(client.clientId, client.clientSecret).send({ token: at });
  expect(res.status).toBe(200);
  await expectRefusedWithin1s([a.app, b.app], at);
}

/** RV7/RV8 from the CLI (run with `env`): revoke-tokens, then revoke, each refused by both within 1 s; new tokens work between the two. */
export async function cliRevocationsReachBoth(a: RevocationInstance, b: RevocationInstance, name: string, env: NodeJS.ProcessEnv): Promise<void> {
  const client = await a.issuer.clients.create({ name, scopes: 'orders:read' });
  const run = (args: string[]) => main(args, { stdout: () => undefined, stderr: () => undefined, env });
  const old = await token(b.app, client);
  expect(await run(['revoke-tokens', client.clientId])).toBe(0);
  await expectRefusedWithin1s([a.app, b.app], old);
  // new tokens work on both, once each instance has the new generation (it learned it by the push above)
  const fresh = await token(a.app, client);
  expect([await status(a.app, fresh), await status(b.app, fresh)]).toEqual([200, 200]);
  expect(await run(['revoke', client.clientId])).toBe(0);
  await expectRefusedWithin1s([a.app, b.app], fresh);
}
