/**
 * What the standalone requireBearer()s of one process share, and what each of
 * them must still get as asked: the in-memory DPoP replay store (at least its
 * own `dpopProofs.replayMax`), a revocation-list poller (verifying the list
 * with its own keys and clock tolerance, its lines in its own logger), and a
 * Redis replay store's outage lines (in its own logger).
 */
import express from 'express';
import request from 'supertest';
import { requireBearer } from '../../lib';
import { loopbackServer, setup, ISSUER, AUDIENCE, type LoopbackServer } from '../helpers/app';
import { newDpopKey, rawProof } from '../helpers/dpop';
import { callOrders, revoke, startIssuer, token, untilStatus, type Running } from '../helpers/running-issuer';

type Line = { level: string; event?: string; [k: string]: unknown };

/** A logger recording every line; `debug: false` leaves debug out (so requireBearer() wraps it in an object of its own). */
function recordingLogger(lines: Line[], debug = true) {
  const at = (level: string) => (obj: Record<string, unknown>) => void lines.push({ level, ...obj });
  return { info: at('info'), warn: at('warn'), error: at('error'), ...(debug ? { debug: at('debug') } : {}) };
}

const events = (lines: Line[], prefix: string) => lines.filter((l) => l.event?.startsWith(prefix)).map((l) => l.event);

const now = () => Math.floor(Date.now() / 1000);
const PUBLIC = 'https://api.example.com';

/** A DPoP-bound token of an issuer that is not listening (its keys are given to requireBearer() as `keys`). */
async function dpopTokenSetup() {
  const t = await setup();
  const key = newDpopKey();
  const client = await t.issuer.clients.create({ name: 'dpop-shared', scopes: 'orders:read' });
  const res = await request(t.app)
    .post('/oauth/token')
    .set('DPoP', key.proof({ htm: 'POST', htu: `${ISSUER}/oauth/token` }))
    .type('form')
    .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
  expect(res.status).toBe(200);
  return { t, key, token: res.body.access_token as string, keys: await t.issuer.keys.jwks() };
}

/**
 * The standalone requireBearer() module loaded afresh, as in a process of its own: its shared state
 * (the in-memory DPoP replay store, pollers) starts empty, whatever other tests made.
 */
function freshRequireBearerModule(): typeof import('../../lib/require-bearer') {
  let isolated!: typeof import('../../lib/require-bearer');
  jest.isolateModules(() => {
    isolated = require('../../lib/require-bearer');
  });
  return isolated;
}

describe('the in-memory DPoP replay store of the standalone requireBearer()s (dpopProofs.replayMax)', () => {
  it('remembers at least as many proofs as each requireBearer() asked for, whichever was created first', async () => {
    // a process of its own: the first standalone requireBearer() with DPoP in it is the one below
    const isolated = freshRequireBearerModule();
    const { t, key, token, keys } = await dpopTokenSetup();
    try {
      const options = { issuer: ISSUER, audience: AUDIENCE, keys, publicUrl: PUBLIC, logger: false as const };
      // an API that expects little DPoP traffic, set up first
      const small = express();
      small.get('/status', isolated.requireBearer({ ...options, dpopProofs: { replayMax: 1 } }), (_req, res) => void res.end('ok'));
      // and the busy one, asking for room for 5 proofs at once
      const busy = express();
      busy.get('/orders', isolated.requireBearer({ ...options, dpopProofs: { replayMax: 5 } }), (_req, res) => void res.end('ok'));

      const iat = now();
      const proof = () => rawProof(key, { htm: 'GET', htu: `${PUBLIC}/orders`, iat, accessToken: token });
      const get = (p: string) => request(busy).get('/orders').set('Authorization', `DPoP ${token}`).set('DPoP', p);
      // three requests within one second, each with its own fresh proof: all fit in 5
      const proofs = [proof(), proof(), proof()];
      const statuses = [];
      for (const p of proofs) {
        const res = await get(p);
        statuses.push([res.status, res.body.error_description]);
      }
      expect(statuses).toEqual([[200, undefined], [200, undefined], [200, undefined]]);
      // and every one is still remembered: a replay is refused
      const replay = await get(proofs[0]);
      expect([replay.status, replay.body.error]).toEqual([401, 'invalid_dpop_proof']);
    } finally {
      await t.close();
    }
  });

  it('one store for the layers of one API: a proof passes both layers once, and its replay is refused', async () => {
    const isolated = freshRequireBearerModule();
    const { t, key, token, keys } = await dpopTokenSetup();
    try {
      const options = { issuer: ISSUER, audience: AUDIENCE, keys, publicUrl: PUBLIC, logger: false as const };
      const app = express();
      app.use('/api', isolated.requireBearer({ ...options, dpopProofs: { replayMax: 2 } }));
      app.get('/api/orders', isolated.requireBearer({ ...options, scope: 'orders:read', dpopProofs: { replayMax: 10 } }), (_req, res) => void res.end('ok'));
      const get = (p: string) => request(app).get('/api/orders').set('Authorization', `DPoP ${token}`).set('DPoP', p);
      const proof = key.proof({ htm: 'GET', htu: `${PUBLIC}/api/orders`, accessToken: token });
      expect((await get(proof)).status).toBe(200);
      const replay = await get(proof);
      expect([replay.status, replay.body.error]).toEqual([401, 'invalid_dpop_proof']);
      expect((await get(key.proof({ htm: 'GET', htu: `${PUBLIC}/api/orders`, accessToken: token }))).status).toBe(200);
    } finally {
      await t.close();
    }
  });
});

describe('two layers of one API with different DPoP replay stores', () => {
  it('the proof is spent in each layer\'s store: a layer asking Redis refuses a proof replayed to another instance, after an in-memory layer', async () => {
    const { t, key, token, keys } = await dpopTokenSetup();
    try {
      // a Redis both instances share: SET NX
      const held = new Set<string>();
      const redis = {
        async set(k: string): Promise<'OK' | null> {
          if (held.has(k)) return null;
          held.add(k);
          return 'OK';
        },
      };
      const options = { issuer: ISSUER, audience: AUDIENCE, keys, publicUrl: PUBLIC, logger: false as const };
      /** One instance (a process of its own): the mount checks with its memory, the payment route asks Redis too. */
      const instance = () => {
        const isolated = freshRequireBearerModule();
        const app = express();
        app.use('/api', isolated.requireBearer(options));
        app.post('/api/pay', isolated.requireBearer({ ...options, dpopProofs: { redis } }), (_req, res) => void res.end('paid'));
        return app;
      };
      const [a, b] = [instance(), instance()];
      const pay = (app: express.Express, p: string) => request(app).post('/api/pay').set('Authorization', `DPoP ${token}`).set('DPoP', p);
      const proof = key.proof({ htm: 'POST', htu: `${PUBLIC}/api/pay`, accessToken: token });
      expect((await pay(a, proof)).status).toBe(200);
      const replayed = await pay(b, proof);
      expect([replayed.status, replayed.body.error]).toEqual([401, 'invalid_dpop_proof']);
      // a fresh proof passes both layers of either instance (each store sees its jti once)
      expect((await pay(b, key.proof({ htm: 'POST', htu: `${PUBLIC}/api/pay`, accessToken: token }))).status).toBe(200);
    } finally {
      await t.close();
    }
  });
});






function api(verify: express.RequestHandler): express.Express {
  const app = express();
  app.get('/api/orders', verify, (req, res) => void res.json({ client: req.auth!.clientId }));
  return app;
}

const call = callOrders;

const until = untilStatus;

describe('the revocation-list poller the standalone requireBearer()s of one list share', () => {
  let r: Running;
  let proxy: LoopbackServer;
  let down = false;
  /** Requests for each list path. */
  const hits = new Map<string, number>();
  beforeAll(async () => {
    r = await startIssuer();
    proxy = await loopbackServer();
    const app = express();
    // the issuer's list, or 503 while `down`; a path per test, so each gets pollers of its own
    app.get('/:name', async (req, res) => {
      hits.set(req.params.name, (hits.get(req.params.name) ?? 0) + 1);
      if (down) return void res.status(503).end();
      const upstream = await fetch(`${r.url}/oauth/revocation-list`);
      res.status(upstream.status).type('application/revocation-list+jwt').send(await upstream.text());
    });
    proxy.serve(app);
  });
  afterAll(async () => {
    await proxy.close();
    await r.close();
  });

  it('verifies the list with the keys of the requireBearer() asking: one with jwksUri is not held to another one\'s `keys` from before a key rotation', async () => {
    down = false;
    const list = { uri: `${proxy.url}/rotation`, interval: 0.2 };
    // one API of the process still has the issuer's keys of yesterday, given up front
    const pinned = requireBearer({ issuer: r.url, audience: `${r.url}/api`, keys: await r.issuer.keys.jwks(), revocationList: list, logger: false });
    await r.issuer.keys.rotate(0);
    // another follows the JWKS: tokens and the list are signed with the new key now
    const following = api(requireBearer({ issuer: r.url, audience: `${r.url}/api`, jwksUri: `${r.url}/.well-known/jwks.json`, revocationList: list, logger: false }));
    const res = await call(following, await token(r));
    expect([res.status, res.body]).toEqual([200, { client: r.client.clientId }]);
    // the pinned one knows neither the new tokens' key nor the new list's
    expect((await call(api(pinned), await token(r))).status).toBe(401);
    expect(await pinned.health()).toEqual({ ok: false, revocationList: 'stale' });
  });

  it('one poller for the same key source: the same keys given twice (as two objects), or one jwksUri for two audiences', async () => {
    down = false;
    const keys = await r.issuer.keys.jwks();
    const list = (name: string) => ({ uri: `${proxy.url}/${name}`, interval: 60 });
    const at = await token(r);
    for (const k of [keys, JSON.parse(JSON.stringify(keys))]) {
      expect((await call(api(requireBearer({ issuer: r.url, audience: `${r.url}/api`, keys: k, revocationList: list('same-keys'), logger: false })), at)).status).toBe(200);
    }
    const jwksUri = `${r.url}/.well-known/jwks.json`;
    for (const audience of [`${r.url}/api`, `${r.url}/admin`]) {
      // the second audience refuses the token (401), after the list was asked for
      await call(api(requireBearer({ issuer: r.url, audience, jwksUri, revocationList: list('same-jwks'), logger: false })), at);
    }
    expect({ keys: hits.get('same-keys'), jwks: hits.get('same-jwks') }).toEqual({ keys: 1, jwks: 1 });
  });

  it('every logger of the requireBearer()s sharing a poller gets its unavailable and recovered lines, once each', async () => {
    down = true;
    const list = { uri: `${proxy.url}/loggers`, interval: 0.2, maxStale: 0.5 };
    const [a, b, c]: Line[][] = [[], [], []];
    // a logger without debug(): requireBearer() wraps it, and still counts it once
    const loggerA = recordingLogger(a, false);
    const jwksUri = `${r.url}/.well-known/jwks.json`;
    const orders = api(requireBearer({ issuer: r.url, audience: `${r.url}/api`, jwksUri, revocationList: list, logger: loggerA }));
    // another API of the process, on the same JWKS and list: one poller for both
    requireBearer({ issuer: r.url, audience: `${r.url}/admin`, jwksUri, revocationList: list, logger: recordingLogger(b) });
    // a second layer of the first API (its verifier is the first one's), with a logger of its own
    requireBearer({ issuer: r.url, audience: `${r.url}/api`, jwksUri, revocationList: list, logger: recordingLogger(c), scope: 'orders:read' });
    // and the first logger again
    requireBearer({ issuer: r.url, audience: `${r.url}/admin`, jwksUri, revocationList: list, logger: loggerA });

    const at = await token(r);
    expect((await call(orders, at)).status).toBe(503);
    down = false;
    expect(await until(orders, at, 200, 3000)).toBeGreaterThanOrEqual(0);
    const expected = ['revocation_list.unavailable', 'revocation_list.recovered'];
    expect({ a: events(a, 'revocation_list.'), b: events(b, 'revocation_list.'), c: events(c, 'revocation_list.') }).toEqual({ a: expected, b: expected, c: expected });
  });
});

describe('the revocation list with a clock tolerance of its own', () => {
  let r: Running;
  beforeAll(async () => {
    // one-second tokens; the issuer keeps revocations 30 s past exp, as its own verifiers tolerate
    r = await startIssuer({ accessTokenTtl: 1, clockTolerance: 30 });
  });
  afterAll(() => r.close());

  it('a revoked token, expired within this requireBearer()\'s clockTolerance, is refused as revoked, even when another requireBearer() of the list tolerates less', async () => {
    const at = await token(r);
    await revoke(r, at);
    const exp = (JSON.parse(Buffer.from(at.split('.')[1], 'base64url').toString('utf8')) as { exp: number }).exp;
    // past exp by more than a second
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, (exp + 1.5) * 1000 - Date.now())));
    const list = { uri: `${r.url}/oauth/revocation-list`, interval: 0.2 };
    const base = { issuer: r.url, audience: `${r.url}/api`, jwksUri: `${r.url}/.well-known/jwks.json`, revocationList: list, logger: false as const };
    const strict = api(requireBearer({ ...base, clockTolerance: 0 }));
    const tolerant = api(requireBearer({ ...base, clockTolerance: 30 }));
    // the strict one: expired
    expect((await call(strict, at)).body.error).toBe('invalid_token');
    // the tolerant one takes it as unexpired, so it must know it was revoked
    const res = await call(tolerant, at);
    expect([res.status, res.body]).toEqual([401, { error: 'invalid_token', error_description: 'the access token was revoked' }]);
  });
});

/** A Redis for the DPoP replay store: its one call (SET) fails while cut. */
function switchableRedis() {
  let down = false;
  const redis = {
    async set(): Promise<'OK' | null> {
      if (down) throw new Error('connect ECONNREFUSED');
      return 'OK';
    },
  };
  return { redis, cut: (now: boolean) => void (down = now) };
}

describe('a Redis DPoP replay store shared by several standalone requireBearer()s', () => {
  it('tells every one of their loggers when it stops and starts answering', async () => {
    const { t, key, token, keys } = await dpopTokenSetup();
    try {
      const { redis, cut } = switchableRedis();
      const [a, b, refused]: Line[][] = [[], [], []];
      const options = { issuer: ISSUER, audience: AUDIENCE, keys, publicUrl: PUBLIC, dpopProofs: { redis, keyPrefix: 'ecc:test:shared:' } };
      // a requireBearer() refused at start-up (a bad option checked after dpopProofs) takes no part
      expect(() => requireBearer({ ...options, logger: recordingLogger(refused), realm: 42 as never })).toThrow(TypeError);
      // two layers of one API with one logger, and another API with its own
      const loggerA = recordingLogger(a);
      requireBearer({ ...options, logger: loggerA });
      requireBearer({ ...options, logger: loggerA, scope: 'orders:read' });
      const second = express();
      second.get('/orders', requireBearer({ ...options, logger: recordingLogger(b) }), (_req, res) => void res.end('ok'));
      const get = () => request(second).get('/orders').set('Authorization', `DPoP ${token}`).set('DPoP', key.proof({ htm: 'GET', htu: `${PUBLIC}/orders`, accessToken: token }));
      cut(true);
      expect((await get()).status).toBe(503);
      cut(false);
      expect((await get()).status).toBe(200);
      const expected = ['dpop_replay_store.unavailable', 'dpop_replay_store.recovered'];
      expect({ a: events(a, 'dpop_replay_store.'), b: events(b, 'dpop_replay_store.'), refused: events(refused, 'dpop_replay_store.') }).toEqual({ a: expected, b: expected, refused: [] });
    } finally {
      await t.close();
    }
  });

  it('a logger that throws keeps neither the others from their lines nor the requests from their answers', async () => {
    const { t, key, token, keys } = await dpopTokenSetup();
    try {
      const { redis, cut } = switchableRedis();
      const options = { issuer: ISSUER, audience: AUDIENCE, keys, publicUrl: PUBLIC, dpopProofs: { redis, keyPrefix: 'ecc:test:throwing:' } };
      const broken = () => {
        throw new Error('log transport closed');
      };
      // the first requireBearer() of the store, so the first logger each line goes to
      requireBearer({ ...options, logger: { info: broken, warn: broken, error: broken, debug: broken } });
      const lines: Line[] = [];
      const app = express();
      app.get('/orders', requireBearer({ ...options, logger: recordingLogger(lines) }), (_req, res) => void res.end('ok'));
      const get = () => request(app).get('/orders').set('Authorization', `DPoP ${token}`).set('DPoP', key.proof({ htm: 'GET', htu: `${PUBLIC}/orders`, accessToken: token }));
      cut(true);
      const refused = await get();
      expect([refused.status, refused.body.error]).toEqual([503, 'temporarily_unavailable']);
      cut(false);
      expect((await get()).status).toBe(200);
      expect(events(lines, 'dpop_replay_store.')).toEqual(['dpop_replay_store.unavailable', 'dpop_replay_store.recovered']);
    } finally {
      await t.close();
    }
  });
});
