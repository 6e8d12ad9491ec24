/**
 * A store that reads but cannot write (a full disk): the embedded store with
 * its writes refused as a full disk refuses them (StoreUnavailableError, as
 * the store contract says). One outage, not a pair of lines per request;
 * readiness and ecc_store_up say so while it lasts; it ends when writes work
 * again, without traffic too (the issuer probes writes while they fail).
 */
import express from 'express';
import { Registry } from 'prom-client';
import request from 'supertest';
import { createIssuer, StoreUnavailableError, type Issuer } from '../../lib';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a store that can read but not write', () => {
  it('is one outage: 503 with Retry-After to what writes, one store.unavailable, readiness read_only and ecc_store_up 0, until writes work', async () => {
    const events: Record<string, unknown>[] = [];
    const log = (level: string) => (obj: Record<string, unknown>) => void events.push({ level, ...obj });
    const logger = { info: log('info'), warn: log('warn'), error: log('error') };
    const store = await openEmbeddedStore({ dataDir: tempDir() });
    let full = false;
    const diskFull = () => Promise.reject(new StoreUnavailableError('the embedded store is unavailable: database or disk is full (SQLITE_FULL)'));
    const unwritable = Object.create(store) as typeof store;
    unwritable.revokeToken = (entry) => (full ? diskFull() : store.revokeToken(entry));
    unwritable.consumeJti = (...args) => (full ? diskFull() : store.consumeJti(...args));
    const registry = new Registry();
    const issuer: Issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store: unwritable, logger, metrics: { registry } });
    const app = express().use(issuer.router());
    const storeUp = async () => (await registry.metrics()).match(/^ecc_store_up (\d)$/m)?.[1];
    try {
      await issuer.ready();
      const client = await issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
      const tokenRequest = () => request(app).post('/oauth/token').auth(client.clientId, client.clientSecret).type('form').send({ grant_type: 'client_credentials' });
      const token = (await tokenRequest()).body.access_token as string;
      expect(await storeUp()).toBe('1');

      full = true;
      for (let i = 0; i < 10; i++) {
        const res = await request(app).post('/oauth/revoke').auth(client.clientId, client.clientSecret).type('form').send({ token });
        expect(res.status).toBe(503);
        expect(res.headers['retry-after']).toBe('5');
        expect(res.body.error).toBe('temporarily_unavailable');
        // reads work: token requests are served between the refused writes, and do not end the outage
        expect((await tokenRequest()).status).toBe(200);
      }
      expect(events.filter((e) => String(e.event).startsWith('store.'))).toEqual([
        { level: 'error', event: 'store.unavailable', access: 'write', reason: expect.stringContaining('SQLITE_FULL') },
      ]);
      await sleep(1_100); // past health()'s one-second cache
      expect(await issuer.health()).toEqual({ ok: false, store: 'read_only', signingKid: expect.any(String) });
      expect(await storeUp()).toBe('0');

      // writes work again; no request comes (a load balancer took the instance out): the write probe ends it
      full = false;
      const until = Date.now() + 8_000;
      while (events.every((e) => e.event !== 'store.recovered') && Date.now() < until) await sleep(100);
      expect(events.filter((e) => String(e.event).startsWith('store.')).map((e) => e.event)).toEqual(['store.unavailable', 'store.recovered']);
      await sleep(1_100);
      expect(await issuer.health()).toEqual({ ok: true, store: 'up', signingKid: expect.any(String) });
      expect(await storeUp()).toBe('1');
      expect((await request(app).post('/oauth/revoke').auth(client.clientId, client.clientSecret).type('form').send({ token })).status).toBe(200);
    } finally {
      await issuer.close();
    }
  }, 30_000);

  it('a shared store (PostgreSQL) that cannot be written is read_only on every instance, and readiness stays ok: taking them all out would refuse what still works', async () => {
    const store = await openEmbeddedStore({ dataDir: tempDir() });
    const shared = Object.create(store) as typeof store;
    Object.defineProperty(shared, 'kind', { value: 'postgres' });
    let readOnly = false;
    const refuse = () => Promise.reject(new StoreUnavailableError('PostgreSQL is unavailable: cannot execute INSERT in a read-only transaction'));
    shared.revokeToken = (entry) => (readOnly ? refuse() : store.revokeToken(entry));
    shared.consumeJti = (...args) => (readOnly ? refuse() : store.consumeJti(...args));
    const issuer: Issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store: shared, logger: false });
    const app = express().use(issuer.router());
    try {
      await issuer.ready();
      const client = await issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
      const tokenRequest = () => request(app).post('/oauth/token').auth(client.clientId, client.clientSecret).type('form').send({ grant_type: 'client_credentials' });
      const token = (await tokenRequest()).body.access_token as string;
      readOnly = true;
      expect((await request(app).post('/oauth/revoke').auth(client.clientId, client.clientSecret).type('form').send({ token })).status).toBe(503);
      expect((await tokenRequest()).status).toBe(200);
      await sleep(1_100);
      expect(await issuer.health()).toEqual({ ok: true, store: 'read_only', signingKid: expect.any(String) });
    } finally {
      readOnly = false;
      await issuer.close();
    }
  }, 30_000);
});
