/** The token client with DPoP against this package's own issuer and requireBearer(), in one process. */
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rmSync } from 'node:fs';
import express from 'express';
import jwt from 'jsonwebtoken';
import { createIssuer, type Issuer } from '../../lib';
import { createTokenClient, type TokenClientEvent } from '../../lib/client';
import { jwkThumbprint } from '../../lib/jwt/thumbprint';
import { tempDir } from '../helpers/app';

interface Running {
  url: string;
  issuer: Issuer;
  client: { clientId: string; clientSecret: string };
  counts: { token: number; api: number };
  /** What POST /api/pay received: the token and the proof's nonce of each request. */
  payments: { token: string; nonce: string | null }[];
  close(): Promise<void>;
}

async function start(nonce: boolean): Promise<Running> {
  const dataDir = tempDir();
  let handler: express.Express | undefined;
  const server: Server = createServer((req, res) => handler!(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const issuer = createIssuer({ issuer: url, audience: `${url}/api`, dataDir, logger: false, dpop: { nonce } });
  await issuer.ready();
  const client = await issuer.clients.create({ name: 'dpop-caller', scopes: 'orders:read' });
  const counts = { token: 0, api: 0 };
  const app = express();
  app.use((req, _res, next) => {
    if (req.path === '/oauth/token') counts.token++;
    if (req.path.startsWith('/api/')) counts.api++;
    next();
  });
  app.use(issuer.router());
  app.get('/api/orders', issuer.requireBearer({ scope: 'orders:read', dpop: 'required' }), (req, res) => void res.json({ client_id: req.auth!.clientId }));
  // the issuer-bound requireBearer() asking for server nonces in proofs (DR14)
  app.get('/api/nonced', issuer.requireBearer({ scope: 'orders:read', dpop: 'required', dpopNonce: true }), (req, res) => void res.json({ client_id: req.auth!.clientId }));
  // an API that wants a nonce of its own in proofs: answers 401 use_dpop_nonce until the proof carries it
  const seen: unknown[] = [];
  app.get('/api/nonce', issuer.requireBearer({ dpop: 'required' }), (req, res) => {
    const proof = String(req.headers.dpop);
    const nonce = (JSON.parse(Buffer.from(proof.split('.')[1], 'base64url').toString()) as { nonce?: string }).nonce;
    seen.push(nonce ?? null);
    if (nonce !== 'api-nonce-1') {
      res.status(401).set('DPoP-Nonce', 'api-nonce-1').set('WWW-Authenticate', 'DPoP error="use_dpop_nonce", algs="ES256"').json({ error: 'use_dpop_nonce' });
      return;
    }
    res.json({ seen });
  });
  // an API whose nonce changes at every request: the retry is refused too, with the nonce the next proof must carry
  const rotating: unknown[] = [];
  app.get('/api/nonce-rotating', issuer.requireBearer({ dpop: 'required' }), (req, res) => {
    const proof = String(req.headers.dpop);
    rotating.push((JSON.parse(Buffer.from(proof.split('.')[1], 'base64url').toString()) as { nonce?: string }).nonce ?? null);
    const expected = `rotating-${rotating.length - 1}`;
    if (rotating[rotating.length - 1] !== expected || rotating.length < 3) {
      res.status(401).set('DPoP-Nonce', `rotating-${rotating.length}`).set('WWW-Authenticate', 'DPoP error="use_dpop_nonce", algs="ES256"').json({ error: 'use_dpop_nonce' });
      return;
    }
    res.json({ seen: rotating });
  });
  // an API that wants its nonce, then refuses the first token it sees (revoked, say): a POST that must not be sent three times
  const payments: Running['payments'] = [];
  app.post('/api/pay', issuer.requireBearer({ dpop: 'required' }), (req, res) => {
    const proof = String(req.headers.dpop);
    const nonce = (JSON.parse(Buffer.from(proof.split('.')[1], 'base64url').toString()) as { nonce?: string }).nonce ?? null;
    payments.push({ token: req.auth!.token, nonce });
    if (nonce !== 'pay-nonce') {
      res.status(401).set('DPoP-Nonce', 'pay-nonce').set('WWW-Authenticate', 'DPoP error="use_dpop_nonce", algs="ES256"').json({ error: 'use_dpop_nonce' });
      return;
    }
    if (req.auth!.token === payments[0].token) {
      res.status(401).set('WWW-Authenticate', 'DPoP error="invalid_token", algs="ES256"').json({ error: 'invalid_token' });
      return;
    }
    res.json({ paid: true });
  });
  handler = app;
  return {
    url,
    issuer,
    client,
    counts,
    payments,
    async close() {
      await issuer.close();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const jkt = jwkThumbprint(privateKey.export({ format: 'jwk' }));

describe('token client with dpop, issuer without nonces', () => {
  let r: Running;
  beforeAll(async () => {
    r = await start(false);
  });
  afterAll(() => r.close());

  it('gets a DPoP-bound token and uses it with proofs; the copied token sent as Bearer is refused', async () => {
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey } });
    try {
      const token = await c.getToken();
      expect(token.tokenType).toBe('DPoP');
      expect((jwt.decode(token.accessToken) as { cnf?: unknown }).cnf).toEqual({ jkt });
      for (let i = 0; i < 3; i++) {
        const res = await c.fetch(`${r.url}/api/orders?i=${i}`);
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({ client_id: r.client.clientId });
      }
      expect(r.counts.token).toBe(1);
      const copied = await fetch(`${r.url}/api/orders`, { headers: { authorization: `Bearer ${token.accessToken}` } });
      expect(copied.status).toBe(401);
      // the token with the DPoP scheme but without a proof by the key is refused too
      const noProof = await fetch(`${r.url}/api/orders`, { headers: { authorization: `DPoP ${token.accessToken}` } });
      expect(noProof.status).toBe(401);
      expect(noProof.headers.get('www-authenticate')).toContain('error="invalid_dpop_proof"');
    } finally {
      await c.close();
    }
  });

  // it was sent a third time, with a renewed token, after the nonce retry was refused for its token
  it('one retry in all: a POST retried for a nonce and then refused for its token goes back to the caller as 401; the next call has a new token', async () => {
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey }, onEvent: (e) => events.push(e) });
    try {
      const refused = await c.fetch(`${r.url}/api/pay`, { method: 'POST', body: 'charge=100' });
      expect(refused.status).toBe(401);
      expect(refused.headers.get('www-authenticate')).toContain('error="invalid_token"');
      expect(r.payments.map((p) => p.nonce)).toEqual([null, 'pay-nonce']);
      expect(r.payments[1].token).toBe(r.payments[0].token);
      expect(events.map((e) => e.type)).not.toContain('api.retry_401');
      // the refused token was dropped: the next call sends a new one, once
      const paid = await c.fetch(`${r.url}/api/pay`, { method: 'POST', body: 'charge=100' });
      expect(paid.status).toBe(200);
      expect(r.payments).toHaveLength(3);
      expect(r.payments[2].nonce).toBe('pay-nonce');
      expect(r.payments[2].token).not.toBe(r.payments[0].token);
    } finally {
      await c.close();
    }
  });

  it('retries an API call once on 401 use_dpop_nonce with the API nonce, then keeps sending it', async () => {
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey }, onEvent: (e) => events.push(e) });
    try {
      const first = await c.fetch(`${r.url}/api/nonce`);
      expect(first.status).toBe(200);
      expect(await first.json()).toEqual({ seen: [null, 'api-nonce-1'] });
      const second = await c.fetch(`${r.url}/api/nonce`);
      expect(await second.json()).toEqual({ seen: [null, 'api-nonce-1', 'api-nonce-1'] });
      expect(events.filter((e) => e.type === 'dpop.nonce_retry')).toEqual([{ type: 'dpop.nonce_retry', kind: 'api' }]);
    } finally {
      await c.close();
    }
  });

  it('DR14: requireBearer({ dpopNonce: true }) answers a proof without a nonce 401 use_dpop_nonce + DPoP-Nonce; the client retries once and succeeds', async () => {
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey } });
    try {
      const token = await c.getToken();
      // by hand first: a valid proof without a nonce
      const { DpopKey } = await import('../../lib/jwt/dpop-proof');
      const key = new DpopKey({ privateKey, alg: 'ES256' });
      const bare = await fetch(`${r.url}/api/nonced`, {
        headers: { authorization: `DPoP ${token.accessToken}`, dpop: key.proof({ htm: 'GET', htu: `${r.url}/api/nonced`, accessToken: token.accessToken }) },
      });
      expect(bare.status).toBe(401);
      const nonce = bare.headers.get('dpop-nonce');
      expect(nonce).toMatch(/^[A-Za-z0-9_-]{16,}$/);
      expect(bare.headers.get('cache-control')).toBe('no-store');
      expect(bare.headers.get('www-authenticate')).toMatch(/^DPoP algs="[^"]+", error="use_dpop_nonce", error_description="[^"]+"$/);
      expect(await bare.json()).toMatchObject({ error: 'use_dpop_nonce' });
      // with the nonce: accepted
      const withNonce = await fetch(`${r.url}/api/nonced`, {
        headers: { authorization: `DPoP ${token.accessToken}`, dpop: key.proof({ htm: 'GET', htu: `${r.url}/api/nonced`, accessToken: token.accessToken, nonce: nonce! }) },
      });
      expect(withNonce.status).toBe(200);
      // the token client: one retry, then 200
      const before = r.counts.api;
      const res = await c.fetch(`${r.url}/api/nonced`);
      expect(res.status).toBe(200);
      expect(r.counts.api - before).toBe(2);
    } finally {
      await c.close();
    }
  });

  it('a burst of first calls all refused use_dpop_nonce: each one is retried once with the nonce, none handed back as 401 (only the first was before)', async () => {
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey }, onEvent: (e) => events.push(e) });
    try {
      await c.getToken();
      for (const path of ['/api/nonce', '/api/nonced']) {
        const before = r.counts.api;
        const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => c.fetch(`${r.url}${path}?i=${i}`)));
        expect({ path, statuses: answers.map((a) => a.status) }).toEqual({ path, statuses: Array(10).fill(200) });
        // ten refused, ten retried; the next call carries the nonce at once
        expect({ path, requests: r.counts.api - before }).toEqual({ path, requests: 20 });
        const next = await c.fetch(`${r.url}${path}`);
        expect(next.status).toBe(200);
        expect({ path, requests: r.counts.api - before }).toEqual({ path, requests: 21 });
      }
      expect(events.filter((e) => e.type === 'dpop.nonce_retry')).toHaveLength(20);
    } finally {
      await c.close();
    }
  });

  it('a retry refused again with another nonce: the 401 goes back (one retry only), and the next call carries that newer nonce', async () => {
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey } });
    try {
      const first = await c.fetch(`${r.url}/api/nonce-rotating`);
      expect(first.status).toBe(401);
      await first.body?.cancel();
      // the next call's proof carries rotating-2, the nonce the refused retry brought (it carried rotating-1 before)
      const next = await c.fetch(`${r.url}/api/nonce-rotating`);
      expect(next.status).toBe(200);
      expect(await next.json()).toEqual({ seen: [null, 'rotating-1', 'rotating-2'] });
    } finally {
      await c.close();
    }
  });

  it('refuses a bad dpop option and dpop together with proofOfPossession', () => {
    const base = { tokenEndpoint: `${r.url}/oauth/token`, clientId: 'x', clientSecret: 'y' };
    expect(() => createTokenClient({ ...base, dpop: {} as never })).toThrow(TypeError);
    expect(() => createTokenClient({ ...base, dpop: { privateKey }, proofOfPossession: { scheme: 'DPoP', tokenRequest() {}, apiRequest() {}, retry: () => false } })).toThrow(TypeError);
  });
});

describe('token client with dpop, issuer with nonces', () => {
  let r: Running;
  beforeAll(async () => {
    r = await start(true);
  });
  afterAll(() => r.close());

  it('retries the token request once with the DPoP-Nonce, then reuses the nonce', async () => {
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({
      tokenEndpoint: `${r.url}/oauth/token`,
      clientId: r.client.clientId,
      clientSecret: r.client.clientSecret,
      dpop: { privateKey },
      onEvent: (e) => events.push(e),
    });
    try {
      const res = await c.fetch(`${r.url}/api/orders`);
      expect(res.status).toBe(200);
      expect(r.counts.token).toBe(2); // use_dpop_nonce, then the retry with the nonce
      expect(events.filter((e) => e.type === 'dpop.nonce_retry')).toEqual([{ type: 'dpop.nonce_retry', kind: 'token' }]);
      expect(r.counts.api).toBe(1); // the resource asks for no nonce
    } finally {
      await c.close();
    }
  });

  it('two token requests at once (two scopes), both refused use_dpop_nonce: each is retried once and both get a token (one failed with a 10 s backoff before)', async () => {
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({ tokenEndpoint: `${r.url}/oauth/token`, clientId: r.client.clientId, clientSecret: r.client.clientSecret, dpop: { privateKey }, onEvent: (e) => events.push(e) });
    try {
      const before = r.counts.token;
      const [a, b] = await Promise.all([c.getToken(), c.getToken({ scope: 'orders:read' })]);
      expect([a.tokenType, b.tokenType]).toEqual(['DPoP', 'DPoP']);
      expect(r.counts.token - before).toBe(4);
      expect(events.filter((e) => e.type === 'dpop.nonce_retry')).toEqual([{ type: 'dpop.nonce_retry', kind: 'token' }, { type: 'dpop.nonce_retry', kind: 'token' }]);
      expect(events.filter((e) => e.type === 'token.refresh_failed')).toEqual([]);
    } finally {
      await c.close();
    }
  });
});
