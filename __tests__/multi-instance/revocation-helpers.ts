/**
 * Revocation across issuers in one test process: a token of a client, the
 * status of a protected request, and how long until every app refuses a token.
 */
import type express from 'express';
import request from 'supertest';

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
