/**
 * What the standalone requireBearer()s of one process share, and what each of
 * them must still get as asked: the in-memory DPoP replay store (at least its
 * own `dpopProofs.replayMax`).
 */
import express from 'express';
import request from 'supertest';
import { setup, ISSUER, AUDIENCE } from '../helpers/app';
import { newDpopKey, rawProof } from '../helpers/dpop';

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

describe('the in-memory DPoP replay store of the standalone requireBearer()s (dpopProofs.replayMax)', () => {
  it('remembers at least as many proofs as each requireBearer() asked for, whichever was created first', async () => {
    // a process of its own: the first standalone requireBearer() with DPoP in it is the one below
    let isolated!: typeof import('../../lib/require-bearer');
    jest.isolateModules(() => {
      isolated = require('../../lib/require-bearer');
    });
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
    let isolated!: typeof import('../../lib/require-bearer');
    jest.isolateModules(() => {
      isolated = require('../../lib/require-bearer');
    });
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
