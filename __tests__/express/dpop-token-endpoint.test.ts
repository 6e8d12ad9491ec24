import jwt from 'jsonwebtoken';
import Redis from 'ioredis';
import request from 'supertest';
import { jwkThumbprint } from '../../lib/jwt/thumbprint';
import { ISSUER, setup, type TestSetup } from '../helpers/app';
import { newDpopKey, rawProof } from '../helpers/dpop';
import { startFaultProxy } from '../helpers/fault-proxy';
import { describeIfRedis, redisUrl } from '../helpers/redis';

const TOKEN_URL = `${ISSUER}/oauth/token`;
const now = () => Math.floor(Date.now() / 1000);

type Client = { clientId: string; clientSecret: string };

function tokenRequest(t: TestSetup, client: Client, proofs?: string | string[]) {
  let req = request(t.app).post('/oauth/token').type('form');
  // an array is sent as repeated DPoP header lines
  if (proofs !== undefined) req = req.set('DPoP', proofs as string);
  return req.send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
}

function expectProofError(res: request.Response, error = 'invalid_dpop_proof'): void {
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 400, error });
  expect(res.body.error_description).toMatch(/^[\x20\x21\x23-\x5b\x5d-\x7e]+$/);
  expect(res.headers['cache-control']).toBe('no-store');
  expect(res.headers['www-authenticate']).toBeUndefined();
}

describe('DPoP at the token endpoint', () => {
  let t: TestSetup;
  let client: Client;
  const key = newDpopKey();
  beforeAll(async () => {
    t = await setup();
    client = await t.issuer.clients.create({ name: 'dpop', scopes: 'orders:read' });
  });
  afterAll(() => t.close());

  it('DT1: a valid proof gets token_type DPoP and a token bound to the proof key (cnf.jkt)', async () => {
    const res = await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL }));
    expect(res.status).toBe(200);
    expect(res.body.token_type).toBe('DPoP');
    expect(res.headers['cache-control']).toBe('no-store');
    const claims = jwt.decode(res.body.access_token) as Record<string, unknown>;
    expect(claims.cnf).toEqual({ jkt: jwkThumbprint(key.publicJwk) });
    expect(key.jkt).toBe(jwkThumbprint(key.publicJwk));
  });

  it('DT2: without a proof, a Bearer token without cnf', async () => {
    const res = await tokenRequest(t, client);
    expect(res.status).toBe(200);
    expect(res.body.token_type).toBe('Bearer');
    expect((jwt.decode(res.body.access_token) as Record<string, unknown>).cnf).toBeUndefined();
  });

  it('DT4: two DPoP headers, or a list in one, are refused', async () => {
    const a = key.proof({ htm: 'POST', htu: TOKEN_URL });
    const b = key.proof({ htm: 'POST', htu: TOKEN_URL });
    expectProofError(await tokenRequest(t, client, [a, b]));
    expectProofError(await tokenRequest(t, client, `${a}, ${b}`));
  });

  it('DT5: typ JWT, alg none, alg HS256, a private jwk, no jwk are refused', async () => {
    const d = { htm: 'POST', htu: TOKEN_URL, iat: now() };
    const privateJwk = { ...key.publicJwk, d: 'AAAA' };
    for (const proof of [
      rawProof(key, d, { header: { typ: 'JWT' } }),
      rawProof(key, d, { header: { alg: 'none' } }).replace(/\.[^.]+$/, '.'),
      rawProof(key, d, { header: { alg: 'none' } }),
      rawProof(key, d, { header: { alg: 'HS256' }, hmacSecret: 'secret' }),
      rawProof(key, d, { header: { jwk: privateJwk } }),
      rawProof(key, d, { header: { jwk: undefined } }),
    ]) {
      expectProofError(await tokenRequest(t, client, proof));
    }
  });

  it('typ is a media type (RFC 7515 §4.1.9): DPOP+JWT and application/dpop+jwt are dpop+jwt', async () => {
    for (const typ of ['DPOP+JWT', 'application/dpop+jwt', 'Application/DPoP+JWT']) {
      const res = await tokenRequest(t, client, rawProof(key, { htm: 'POST', htu: TOKEN_URL, iat: now() }, { header: { typ } }));
      expect({ typ, status: res.status, token_type: res.body.token_type }).toEqual({ typ, status: 200, token_type: 'DPoP' });
    }
    for (const typ of ['dpop+jwt2', 'application/dpop', 'text/dpop+jwt']) {
      expectProofError(await tokenRequest(t, client, rawProof(key, { htm: 'POST', htu: TOKEN_URL, iat: now() }, { header: { typ } })));
    }
  });

  it('an htu with userinfo is refused (no request URI carries it; RFC 9110 §4.2.4)', async () => {
    for (const htu of ['http://attacker:pw@issuer.test/oauth/token', 'http://u@issuer.test/oauth/token', 'http://@issuer.test/oauth/token']) {
      expectProofError(await tokenRequest(t, client, rawProof(key, { htm: 'POST', htu, iat: now() })));
    }
  });

  it('a bad signature is refused and issues nothing', async () => {
    const other = newDpopKey();
    const proof = rawProof(key, { htm: 'POST', htu: TOKEN_URL, iat: now() }, { signWith: (other as unknown as { privateKey: import('node:crypto').KeyObject }).privateKey });
    expectProofError(await tokenRequest(t, client, proof));
  });

  it('DT6/DT7: htu of another path is refused; query and fragment are ignored; case and default port normalised', async () => {
    expectProofError(await tokenRequest(t, client, key.proof({ htm: 'POST', htu: `${ISSUER}/other` })));
    const withQuery = rawProof(key, { htm: 'POST', htu: `${TOKEN_URL}?x=1#f`, iat: now() });
    expect((await tokenRequest(t, client, withQuery)).status).toBe(200);
    const shouting = rawProof(key, { htm: 'POST', htu: 'HTTP://ISSUER.TEST:80/oauth/token', iat: now() });
    expect((await tokenRequest(t, client, shouting)).status).toBe(200);
  });

  it('DT8: htu follows the configured issuer, never Host or X-Forwarded-*', async () => {
    const forged = key.proof({ htm: 'POST', htu: 'http://evil.test/oauth/token' });
    const res = await request(t.app)
      .post('/oauth/token')
      .set('Host', 'evil.test')
      .set('X-Forwarded-Host', 'evil.test')
      .set('DPoP', forged)
      .type('form')
      .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
    expectProofError(res);
  });

  it('DT9: htm must be exactly POST', async () => {
    expectProofError(await tokenRequest(t, client, rawProof(key, { htm: 'post', htu: TOKEN_URL, iat: now() })));
    expectProofError(await tokenRequest(t, client, rawProof(key, { htm: 'GET', htu: TOKEN_URL, iat: now() })));
  });

  it('DT10: a proof issued 600 s ago or 600 s ahead is refused', async () => {
    expectProofError(await tokenRequest(t, client, rawProof(key, { htm: 'POST', htu: TOKEN_URL, iat: now() - 600 })));
    expectProofError(await tokenRequest(t, client, rawProof(key, { htm: 'POST', htu: TOKEN_URL, iat: now() + 600 })));
  });

  it('DT11: a proof is single use', async () => {
    const proof = key.proof({ htm: 'POST', htu: TOKEN_URL });
    expect((await tokenRequest(t, client, proof)).status).toBe(200);
    expectProofError(await tokenRequest(t, client, proof));
  });

  it('the proof is checked only after client authentication: bad credentials get 401 invalid_client and do not use up the proof', async () => {
    const proof = key.proof({ htm: 'POST', htu: TOKEN_URL });
    const bad = await tokenRequest(t, { clientId: client.clientId, clientSecret: 'wrong' }, proof);
    expect(bad.status).toBe(401);
    expect(bad.body.error).toBe('invalid_client');
    expect((await tokenRequest(t, client, proof)).status).toBe(200);
  });

  it('DT15: metadata advertises dpop_signing_alg_values_supported', async () => {
    const res = await request(t.app).get('/.well-known/oauth-authorization-server');
    expect(res.body.dpop_signing_alg_values_supported).toEqual(['ES256', 'ES384', 'PS256', 'RS256']);
  });
});

describe('DPoP server nonces at the token endpoint (dpop: { nonce: true })', () => {
  let t: TestSetup;
  let client: Client;
  const key = newDpopKey();
  beforeAll(async () => {
    t = await setup({ dpop: { nonce: true } });
    client = await t.issuer.clients.create({ name: 'dpop-nonce', scopes: 'orders:read' });
  });
  afterAll(() => t.close());

  it('DT12: a proof without a nonce gets 400 use_dpop_nonce with one DPoP-Nonce; the retry with it is accepted', async () => {
    const first = await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL }));
    expectProofError(first, 'use_dpop_nonce');
    const nonce = first.headers['dpop-nonce'];
    expect(typeof nonce).toBe('string');
    expect(nonce).toMatch(/^[A-Za-z0-9_-]{22}$/);
    const retry = await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL, nonce }));
    expect(retry.status).toBe(200);
    expect(retry.body.token_type).toBe('DPoP');
  });

  it('DT13: a forged nonce gets use_dpop_nonce and a fresh DPoP-Nonce', async () => {
    const res = await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL, nonce: 'forged-nonce-value-xxxx' }));
    expectProofError(res, 'use_dpop_nonce');
    expect(res.headers['dpop-nonce']).toMatch(/^[A-Za-z0-9_-]{22}$/);
  });

  it('a requests without a DPoP header still gets a Bearer token', async () => {
    expect((await tokenRequest(t, client)).body.token_type).toBe('Bearer');
  });

  it('DT14: a nonce from one instance is accepted by another on the same store, also after a key rotation', async () => {
    const { createIssuer } = await import('../../lib');
    const express = (await import('express')).default;
    const other = createIssuer({ issuer: ISSUER, audience: t.issuer.config.audience, dataDir: t.dataDir, logger: false, dpop: { nonce: true } });
    await other.ready();
    const app = express();
    app.use(other.router());
    try {
      const first = await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL }));
      const nonce = first.headers['dpop-nonce'];
      const res = await request(app)
        .post('/oauth/token')
        .set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL, nonce }))
        .type('form')
        .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
      expect(res.status).toBe(200);
      // rotate on the second instance, signing at once: the nonce handed out before stays accepted on both
      await other.keys.rotate(0);
      const after = await request(app)
        .post('/oauth/token')
        .set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL, nonce }))
        .type('form')
        .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
      expect(after.status).toBe(200);
    } finally {
      await other.close();
    }
  });
});

describe('createIssuer() dpop option', () => {
  it('refuses bad values with a TypeError', async () => {
    const { createIssuer } = await import('../../lib');
    const base = { issuer: ISSUER, audience: 'a', logger: false as const };
    expect(() => createIssuer({ ...base, dpop: { nonce: 'yes' as unknown as boolean } })).toThrow(TypeError);
    expect(() => createIssuer({ ...base, dpop: { maxAge: 0 } })).toThrow(TypeError);
    expect(() => createIssuer({ ...base, dpop: { redis: {} } })).toThrow(TypeError);
    expect(() => createIssuer({ ...base, dpop: { other: 1 } as never })).toThrow(/unknown option other/);
    expect(() => createIssuer({ ...base, publicUrl: 'ftp://x' })).toThrow(TypeError);
  });
});

describeIfRedis('DPoP replay across two issuers sharing Redis', () => {
  const prefix = `ecc:test:dpop:${process.pid}:${Date.now()}:`;
  let redis: Redis;
  let a: TestSetup;
  let b: TestSetup;
  let client: Client;
  const key = newDpopKey();
  beforeAll(async () => {
    redis = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
    a = await setup({ dpop: { redis, keyPrefix: prefix } });
    // a second instance on the same store and the same Redis
    b = await setup({ dataDir: a.dataDir, dpop: { redis, keyPrefix: prefix } });
    client = await a.issuer.clients.create({ name: 'dpop-redis', scopes: 'orders:read' });
  });
  afterAll(async () => {
    await b.issuer.close();
    await a.close();
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it('a proof used at one instance is refused at the other', async () => {
    const proof = key.proof({ htm: 'POST', htu: TOKEN_URL });
    expect((await tokenRequest(a, client, proof)).status).toBe(200);
    expect(await redis.keys(`${prefix}*`)).toHaveLength(1);
    expectProofError(await tokenRequest(b, client, proof));
    expect((await tokenRequest(b, client, key.proof({ htm: 'POST', htu: TOKEN_URL }))).status).toBe(200);
  });
});

describeIfRedis('DPoP replay store outage', () => {
  it('answers 503 with Retry-After while Redis cannot be reached, issues nothing, and recovers', async () => {
    const target = new URL(redisUrl());
    const proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
    const redis = new Redis({ host: '127.0.0.1', port: proxy.port, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => 50 });
    const prefix = `ecc:test:dpopout:${process.pid}:${Date.now()}:`;
    const t = await setup({ dpop: { redis, keyPrefix: prefix } });
    const key = newDpopKey();
    try {
      const client = await t.issuer.clients.create({ name: 'outage', scopes: 'orders:read' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      proxy.cut();
      const res = await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL }));
      expect(res.status).toBe(503);
      expect(res.body.error).toBe('temporarily_unavailable');
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect(res.body.access_token).toBeUndefined();
      // Bearer requests do not need the replay store
      expect((await tokenRequest(t, client)).status).toBe(200);
      proxy.restore();
      let status = 0;
      for (let i = 0; i < 50 && status !== 200; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        status = (await tokenRequest(t, client, key.proof({ htm: 'POST', htu: TOKEN_URL }))).status;
      }
      expect(status).toBe(200);
    } finally {
      await t.close();
      const keys = await redis.keys(`${prefix}*`).catch(() => [] as string[]);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
      await proxy.close();
    }
  });
});
