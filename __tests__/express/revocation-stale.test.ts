/**
 * An instance that cannot reload the revocations from its store (an
 * outage) answers from what it holds for revocationMaxStale, then refuses
 * tokens with 503 and Retry-After: a token revoked elsewhere meanwhile
 * would be accepted otherwise. revocationFailOpen keeps the last ones in
 * force instead. Logged once each way.
 */
import express from 'express';
import request from 'supertest';
import { rmSync } from 'node:fs';
import { createIssuer, type Issuer } from '../../lib';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import type { Store } from '../../lib/stores/types';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The embedded store, with its revocation reads failing while `down` (as a store that cannot be reached). */
async function cuttableStore(dataDir: string, failAfterMs = 0): Promise<{ store: Store; cut(down: boolean): void }> {
  const inner = await openEmbeddedStore({ dataDir });
  let down = false;
  // after failAfterMs: as a store that does not answer until its query timeout
  const fail = () =>
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })), failAfterMs),
    );
  const store = new Proxy(inner, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function') return value;
      if (name === 'listRevocations' || name === 'revocationsVersion' || name === 'purgeExpiredRevocations') {
        return (...args: unknown[]) => (down ? fail() : (value as (...a: unknown[]) => unknown).apply(target, args));
      }
      return (value as (...a: unknown[]) => unknown).bind(target);
    },
  }) as Store;
  return { store, cut: (d) => (down = d) };
}

async function instance(options: { revocationFailOpen?: boolean; revocationMaxStale?: number }, failAfterMs = 0) {
  const dataDir = tempDir();
  const { store, cut } = await cuttableStore(dataDir, failAfterMs);
  const lines: Record<string, unknown>[] = [];
  const log = (level: string) => (o: Record<string, unknown>, msg?: string) => void lines.push({ level, ...o, msg });
  const issuer: Issuer = createIssuer({
    issuer: ISSUER,
    audience: AUDIENCE,
    store,
    revocationResync: 0.05,
    revocationMaxStale: 0.3,
    logger: { info: log('info'), warn: log('warn'), error: log('error') },
    ...options,
  });
  await issuer.ready();
  const app = express();
  app.use(issuer.router());
  app.get('/api', issuer.requireBearer(), (req, res) => res.json({ client_id: req.auth!.clientId }));
  const client = await issuer.clients.create({ name: 'svc' });
  const token = await fetchToken(app, client);
  return {
    issuer,
    app,
    client,
    token,
    cut,
    lines,
    async close() {
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Waits (bounded) until `check` holds. */
async function until(check: () => Promise<boolean>, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(20);
  }
}

test('fail closed: within revocationMaxStale the held revocations answer; past it 503 + Retry-After; back once the store answers', async () => {
  const t = await instance({});
  try {
    const get = () => request(t.app).get('/api').set('Authorization', `Bearer ${t.token}`);
    expect((await get()).status).toBe(200);
    const cutAt = Date.now();
    t.cut(true);
    expect((await get()).status).toBe(200); // within the 0.3 s: the revocations held still answer
    await until(async () => (await get()).status === 503);
    expect(Date.now() - cutAt).toBeGreaterThanOrEqual(300 - 50); // from the last reload that reached the store, at most one resync before the cut
    const refused = await get();
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe('1');
    expect(refused.body).toEqual({ error: 'temporarily_unavailable', error_description: expect.any(String) });
    expect(refused.headers['www-authenticate']).toMatch(/error="temporarily_unavailable"/);
    expect(t.lines.filter((l) => String(l.event).startsWith('revocations.'))).toEqual([
      expect.objectContaining({ level: 'error', event: 'revocations.stale', fail_open: false, reason: expect.stringContaining('ECONNREFUSED') }),
    ]);
    // the warn line of the route says why: stale revocations, not a key source or an unknown kid
    expect(t.lines.filter((l) => l.event === 'bearer.unavailable')).toEqual([
      expect.objectContaining({ level: 'warn', dependency: 'revocations', reason: expect.stringContaining('revocations not reloaded from the store') }),
    ]);
    expect(t.lines.find((l) => l.event === 'bearer.unavailable')!.msg).toMatch(/the revocations are stale/);

    t.cut(false);
    await until(async () => (await get()).status === 200);
    expect(t.lines.filter((l) => String(l.event).startsWith('revocations.')).map((l) => [l.level, l.event])).toEqual([
      ['error', 'revocations.stale'],
      ['info', 'revocations.current'],
    ]);
  } finally {
    await t.close();
  }
});

test('revocationFailOpen: past revocationMaxStale, tokens are still checked against the revocations held (a revoked one stays refused)', async () => {
  const t = await instance({ revocationFailOpen: true });
  try {
    const other = await t.issuer.clients.create({ name: 'revoked-before' });
    const revokedToken = await fetchToken(t.app, other);
    await t.issuer.clients.revokeTokens(other.clientId);
    t.cut(true);
    await until(async () => t.lines.some((l) => l.event === 'revocations.stale'));
    expect(t.lines.find((l) => l.event === 'revocations.stale')).toMatchObject({ level: 'error', fail_open: true });
    expect((await request(t.app).get('/api').set('Authorization', `Bearer ${t.token}`)).status).toBe(200);
    const revoked = await request(t.app).get('/api').set('Authorization', `Bearer ${revokedToken}`);
    expect(revoked.status).toBe(401);
    expect(revoked.body.error).toBe('invalid_token');
  } finally {
    await t.close();
  }
});

test('revocationMaxStale shorter than two reloads is refused at start', () => {
  expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir: tempDir(), revocationResync: 2, revocationMaxStale: 3 })).toThrow(
    'option revocationMaxStale must be a number from 4 to 86400, got 3',
  );
});

test('introspection during an outage: once a reload has failed, it answers from the revocations held at once, without waiting out the store again', async () => {
  const t = await instance({ revocationMaxStale: 60 }, 400);
  try {
    const rs = await t.issuer.clients.create({ name: 'rs', permissions: ['introspect'] });
    const introspect = () => request(t.app).post('/oauth/introspect').auth(rs.clientId, rs.clientSecret).type('form').send({ token: t.token });
    expect((await introspect()).body).toMatchObject({ active: true });
    t.cut(true);
    // the reload under way (every 50 ms) or the one this asks for fails after 400 ms
    await introspect();
    const startedAt = Date.now();
    const res = await introspect();
    expect(Date.now() - startedAt).toBeLessThan(300);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ active: true, client_id: t.client.clientId });
  } finally {
    t.cut(false);
    await t.close();
  }
});
