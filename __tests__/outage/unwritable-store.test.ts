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
import { Pool } from 'pg';
import { createPostgresStore } from '../../lib/stores/postgres';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';

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

  describeIfPostgres('on PostgreSQL', () => {
    it('an instance (re)started on a database it cannot write (a standby during a failover), its schema current, starts: tokens for clients with a secret, protected routes, readiness read_only', async () => {
      const schema = uniqueSchemaName();
      const admin = new Pool({ connectionString: postgresUrl(), max: 1 });
      const issuers: Issuer[] = [];
      try {
        // the database as the cluster left it: migrated, a key, a client
        const writable = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store: await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 }), logger: false });
        issuers.push(writable);
        await writable.ready();
        const client = await writable.clients.create({ name: 'svc', scopes: 'orders:read' });
        await writable.close();
        // now a standby: every transaction read-only
        const readOnlyUrl = new URL(postgresUrl());
        readOnlyUrl.searchParams.set('options', '-c default_transaction_read_only=on');
        const events: Record<string, unknown>[] = [];
        const log = (level: string) => (obj: Record<string, unknown>) => void events.push({ level, ...obj });
        // a longer lifetime than the writable one recorded on the key: recording it is a write, put off until one works
        const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, accessTokenTtl: 7200, store: await createPostgresStore({ connectionString: readOnlyUrl.toString(), schema, max: 2 }), logger: { info: log('info'), warn: log('warn'), error: log('error') } });
        issuers.push(issuer);
        await issuer.ready();
        const app = express().use(issuer.router());
        app.get('/api', issuer.requireBearer(), (req, res) => void res.json({ client_id: req.auth!.clientId }));
        const res = await request(app).post('/oauth/token').auth(client.clientId, client.clientSecret).type('form').send({ grant_type: 'client_credentials' });
        expect(res.status).toBe(200);
        expect((await request(app).get('/api').set('Authorization', `Bearer ${res.body.access_token}`)).body).toEqual({ client_id: client.clientId });
        expect((await request(app).post('/oauth/revoke').auth(client.clientId, client.clientSecret).type('form').send({ token: res.body.access_token })).status).toBe(503);
        await sleep(1_100);
        expect(await issuer.health()).toEqual({ ok: true, store: 'read_only', signingKid: expect.any(String) });
        expect(events.filter((e) => e.event === 'store.unavailable')).toHaveLength(1);
      } finally {
        for (const i of issuers) await i.close().catch(() => undefined);
        await dropSchema(admin, schema);
        await admin.end();
      }
    }, 30_000);
  });
});
