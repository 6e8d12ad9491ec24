/**
 * Key changes that meet a key reload already under way. A reload that read
 * the store before the change must not be taken for one after it: an
 * instance rung for a revoked key while it reloads drops the key all the
 * same, and a rotation rung about mid-way answers the key it made. Two
 * issuers on one embedded file, seen through a store that rings like
 * PostgreSQL (NOTIFY) and tells no key version, whose listKeys() can be
 * slowed (its answer is what the store held when it was called).
 */
import { EventEmitter } from 'node:events';
import type { Express } from 'express';
import request from 'supertest';
import { createIssuer, openEmbeddedStore, type Issuer, type Store } from '../../lib';
import { apiApp, AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { fetchToken, freshKey, headerOf, mint } from '../helpers/tokens';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Delays {
  listKeys: number;
  rotateKey: number;
  /** Called as a rotation starts writing. */
  onRotate?: () => void;
}

/** The embedded store on `dataDir`, ringing through `bell` as PostgreSQL would, with the delays given. */
async function ringingStore(dataDir: string, bell: EventEmitter, delays: Delays): Promise<Store> {
  const store = await openEmbeddedStore({ dataDir });
  const { keysVersion: _none, ...rest } = store;
  return {
    ...rest,
    async listKeys() {
      const held = await store.listKeys();
      await sleep(delays.listKeys);
      return held;
    },
    async rotateKey(key, expected) {
      delays.onRotate?.();
      await sleep(delays.rotateKey);
      return store.rotateKey(key, expected);
    },
    async notifyRevocations() {
      bell.emit('ring');
    },
    async listenRevocations(onNotify) {
      bell.on('ring', onNotify);
      return async () => void bell.off('ring', onNotify);
    },
  };
}

describe('key changes during a key reload', () => {
  let bell: EventEmitter;
  let issuers: Issuer[];
  const slowA: Delays = { listKeys: 0, rotateKey: 0 };
  const slowB: Delays = { listKeys: 0, rotateKey: 0 };

  async function start(dataDir: string, delays: Delays, keyRefreshInterval = 3600): Promise<{ issuer: Issuer; app: Express }> {
    // a key refresh of an hour by default: only the ring can explain what B learns
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, logger: false, keyRefreshInterval, store: await ringingStore(dataDir, bell, delays) });
    await issuer.ready();
    issuers.push(issuer);
    return { issuer, app: apiApp(issuer) };
  }

  beforeEach(() => {
    bell = new EventEmitter();
    issuers = [];
    Object.assign(slowA, { listKeys: 0, rotateKey: 0, onRotate: undefined });
    Object.assign(slowB, { listKeys: 0, rotateKey: 0, onRotate: undefined });
  });
  afterEach(async () => {
    Object.assign(slowA, { listKeys: 0, rotateKey: 0, onRotate: undefined });
    Object.assign(slowB, { listKeys: 0, rotateKey: 0, onRotate: undefined });
    for (const issuer of issuers) await issuer.close();
  });

  it('B rung for a revoked key while it reloads its keys (a made-up kid started it) drops the key: refuses its tokens and signs with the new one', async () => {
    const dataDir = tempDir();
    const a = await start(dataDir, slowA);
    const b = await start(dataDir, slowB);
    const client = await a.issuer.clients.create({ name: 'svc' });
    const old = await fetchToken(a.app, client);
    const kid = headerOf(old).kid as string;
    const call = (app: Express, token: string) => request(app).get('/api').set('Authorization', `Bearer ${token}`);
    expect((await call(b.app, old)).status).toBe(200); // in B's verified-token cache

    // anyone can start a reload at B: a token with a kid nobody made (once per 5 s); this one reads the store slowly
    slowB.listKeys = 400;
    const madeUp = call(b.app, mint(freshKey('ES256', 'made-up-kid'))).then((res) => res); // sent now
    await sleep(50);
    const { replacement } = await a.issuer.keys.revoke(kid);
    expect((await madeUp).status).toBe(401);
    slowB.listKeys = 0;

    const started = Date.now();
    while ((await call(b.app, old)).status !== 401 && Date.now() - started < 1500) await sleep(25);
    const refused = await call(b.app, old);
    expect(refused.status).toBe(401);
    expect(refused.body.error).toBe('invalid_token');
    const published = ((await request(b.app).get('/.well-known/jwks.json')).body.keys as { kid: string }[]).map((k) => k.kid);
    expect(published).toEqual([replacement!.kid]);
    const fresh = await fetchToken(b.app, client);
    expect(headerOf(fresh).kid).toBe(replacement!.kid);
    expect((await call(a.app, fresh)).status).toBe(200);
  });

  it('issuer.keys.rotate() rung while it writes (another instance revoked something) answers the key it made', async () => {
    // the default key refresh (30 s), under the default lead time (5 min): the rotation reloads its keys once after writing
    const a = await start(tempDir(), slowA, 30);
    const before = (await a.issuer.keys.list()).map((k) => k.kid);
    Object.assign(slowA, { listKeys: 300, rotateKey: 100, onRotate: () => bell.emit('ring') });
    const key = await a.issuer.keys.rotate();
    Object.assign(slowA, { listKeys: 0, rotateKey: 0, onRotate: undefined });
    expect(key.kid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(key.status).toBe('pending');
    expect((await a.issuer.keys.list()).map((k) => k.kid)).toEqual([...before, key.kid]);
  });
});
