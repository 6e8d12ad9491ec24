/**
 * private_key_jwt client authentication (RFC 7523) at the token endpoint,
 * against a real issuer: what a client sees (status, error, challenge) and
 * what the audit log records.
 */
import { createHmac, createPublicKey, generateKeyPairSync, randomBytes, type JsonWebKey, type KeyObject } from 'node:crypto';
import express from 'express';
import { Pool } from 'pg';
import request from 'supertest';
import { createIssuer, type Issuer } from '../../lib';
import { CLIENT_ASSERTION_TYPE, signClientAssertion } from '../../lib/jwt/client-assertion';
import { signJws } from '../../lib/jwt/algorithms';
import { createPostgresStore } from '../../lib/stores/postgres';
import type { Logger } from '../../lib/logger';
import { AUDIENCE, ISSUER, setup, tempDir, type TestSetup } from '../helpers/app';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { StoreUnavailableError } from '../../lib/errors';
import { rmSync } from 'node:fs';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';

const TOKEN_ENDPOINT = `${ISSUER}/oauth/token`;

function ecKey(kid: string): { privateJwk: JsonWebKey; publicJwk: JsonWebKey; privateKey: KeyObject } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return {
    privateKey,
    privateJwk: { ...privateKey.export({ format: 'jwk' }), kid, alg: 'ES256' },
    publicJwk: { ...publicKey.export({ format: 'jwk' }), kid, alg: 'ES256' },
  };
}

const b64 = (v: object): string => Buffer.from(JSON.stringify(v)).toString('base64url');

/** An ES256 JWS with any header and payload, signed by `key`. */
function forge(key: KeyObject, header: Record<string, unknown>, payload: Record<string, unknown>): string {
  const input = `${b64(header)}.${b64(payload)}`;
  return `${input}.${signJws('ES256', key, input).toString('base64url')}`;
}

function claims(clientId: string, over: Record<string, unknown> = {}): Record<string, unknown> {
  const now = Math.floor(Date.now() / 1000);
  return { iss: clientId, sub: clientId, aud: ISSUER, iat: now, exp: now + 60, jti: randomBytes(12).toString('base64url'), ...over };
}

function tokenRequest(app: express.Express, assertion: string, extra: Record<string, string> = {}) {
  return request(app)
    .post('/oauth/token')
    .type('form')
    .send({ grant_type: 'client_credentials', client_assertion_type: CLIENT_ASSERTION_TYPE, client_assertion: assertion, ...extra });
}

interface Logged {
  lines: Record<string, unknown>[];
  logger: Logger;
}
function captureLogs(): Logged {
  const lines: Record<string, unknown>[] = [];
  const capture = (obj: Record<string, unknown>) => void lines.push(obj);
  return { lines, logger: { info: capture, warn: capture, error: capture } };
}
const failures = (logged: Logged) => logged.lines.filter((l) => l.event === 'client.auth_failed');

describe('private_key_jwt at the token endpoint', () => {
  let s: TestSetup;
  let logged: Logged;
  let key: ReturnType<typeof ecKey>;
  let clientId: string;

  beforeEach(async () => {
    logged = captureLogs();
    s = await setup({ logger: logged.logger }, (app, issuer) => {
      app.use(issuer.router());
      app.get('/api/whoami', issuer.requireBearer(), (req, res) => void res.json({ client_id: req.auth!.clientId }));
    });
    key = ecKey('k1');
    const created = await s.issuer.clients.create({ name: 'keyed', scopes: 'a', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
    clientId = created.clientId;
  });
  afterEach(() => s.close());

  const sign = (over: Partial<Parameters<typeof signClientAssertion>[0]> = {}) =>
    signClientAssertion({ clientId, audience: ISSUER, privateKey: key.privateJwk, ...over });

  async function refused(res: request.Response, reason: string, facts: Record<string, unknown> = {}): Promise<void> {
    expect(res.status).toBe(401);
    expect(res.body.error).toBe('invalid_client');
    expect(res.headers['www-authenticate']).toMatch(/^Basic realm=/);
    expect(failures(logged).at(-1)).toMatchObject({ client_id: clientId, method: 'private_key_jwt', reason, ...facts });
  }

  it('PK1: a valid assertion gets a token that requireBearer() accepts', async () => {
    const res = await tokenRequest(s.app, sign());
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ token_type: 'Bearer', scope: 'a' });
    const who = await request(s.app).get('/api/whoami').set('Authorization', `Bearer ${res.body.access_token}`);
    expect(who.status).toBe(200);
    expect(who.body).toEqual({ client_id: clientId });
  });

  it('accepts a KeyObject, a matching client_id in the body, aud as a one-element array, typ client-authentication+jwt', async () => {
    expect((await tokenRequest(s.app, sign({ privateKey: key.privateKey, kid: 'k1' }), { client_id: clientId })).status).toBe(200);
    const a = forge(key.privateKey, { alg: 'ES256', kid: 'k1', typ: 'client-authentication+jwt' }, claims(clientId, { aud: [ISSUER] }));
    expect((await tokenRequest(s.app, a)).status).toBe(200);
    // the only key, no kid header
    expect((await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256' }, claims(clientId)))).status).toBe(200);
  });

  it('PK2: the same assertion twice: the second is refused as a replay', async () => {
    const assertion = sign();
    expect((await tokenRequest(s.app, assertion)).status).toBe(200);
    await refused(await tokenRequest(s.app, assertion), 'assertion_replayed');
  });

  it('a failed assertion does not burn its jti: a valid one with the same jti still works once', async () => {
    const jti = 'shared-jti';
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId, { jti, aud: 'http://other' }))), 'assertion_wrong_audience');
    expect((await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId, { jti })))).status).toBe(200);
  });

  it('PK: HS256 made with the registered public key as the HMAC secret is refused', async () => {
    const input = `${b64({ alg: 'HS256', kid: 'k1' })}.${b64(claims(clientId))}`;
    const pem = createPublicKey({ key: key.publicJwk, format: 'jwk' }).export({ format: 'pem', type: 'spki' }).toString();
    for (const secret of [JSON.stringify(key.publicJwk), pem]) {
      const mac = createHmac('sha256', secret).update(input).digest('base64url');
      await refused(await tokenRequest(s.app, `${input}.${mac}`), 'assertion_wrong_algorithm');
    }
  });

  it('PK: alg none is refused', async () => {
    await refused(await tokenRequest(s.app, `${b64({ alg: 'none', kid: 'k1' })}.${b64(claims(clientId))}.`), 'assertion_malformed', { client_id: '' });
    await refused(await tokenRequest(s.app, `${b64({ alg: 'none', kid: 'k1' })}.${b64(claims(clientId))}.AAAA`), 'assertion_wrong_algorithm');
  });

  it('PK: the token endpoint URL as aud is refused by default, and the log says which aud arrived', async () => {
    await refused(await tokenRequest(s.app, sign({ audience: TOKEN_ENDPOINT })), 'assertion_wrong_audience');
    expect(failures(logged).at(-1)).toMatchObject({ aud: TOKEN_ENDPOINT, aud_kind: 'token_endpoint' });
  });

  it('PK: an aud array with two values (issuer and another) is refused', async () => {
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId, { aud: [ISSUER, 'https://evil.example'] }))), 'assertion_wrong_audience');
    expect(failures(logged).at(-1)).toMatchObject({ aud_kind: 'not_one_value' });
  });

  it.each([
    ['exp missing', { exp: undefined }, 'assertion_no_exp'],
    ['a lifetime of 600 s', { exp: Math.floor(Date.now() / 1000) + 600 }, 'assertion_lifetime_too_long'],
    ['exp − iat of 600 s', { iat: Math.floor(Date.now() / 1000) - 590, exp: Math.floor(Date.now() / 1000) + 10 }, 'assertion_lifetime_too_long'],
    ['an expired assertion', { iat: Math.floor(Date.now() / 1000) - 120, exp: Math.floor(Date.now() / 1000) - 60 }, 'assertion_expired'],
    ['nbf in the future', { nbf: Math.floor(Date.now() / 1000) + 120 }, 'assertion_not_yet_valid'],
    ['iat in the future', { iat: Math.floor(Date.now() / 1000) + 120 }, 'assertion_issued_in_future'],
    ['jti missing', { jti: undefined }, 'assertion_no_jti'],
    ['a jti of 257 characters', { jti: 'j'.repeat(257) }, 'assertion_jti_too_long'],
    ['iss ≠ sub', { iss: 'someone-else' }, 'assertion_wrong_issuer'],
    ['aud another server', { aud: 'https://other.example' }, 'assertion_wrong_audience'],
    ['PK9 aud = issuer + "/"', { aud: `${ISSUER}/` }, 'assertion_wrong_audience'],
    ['PK8 aud = []', { aud: [] }, 'assertion_wrong_audience'],
    ['PK8 aud = 42', { aud: 42 }, 'assertion_wrong_audience'],
    ['PK10 iss missing', { iss: undefined }, 'assertion_wrong_issuer'],
  ])('PK: %s → 401', async (_name, over, reason) => {
    const payload = claims(clientId, over);
    for (const k of Object.keys(payload)) if (payload[k] === undefined) delete payload[k];
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, payload)), reason);
  });

  it('PK10: sub naming another client (the client looked up) or missing is refused', async () => {
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId, { sub: 'c2' }))), 'unknown_client', { client_id: 'c2' });
    const noSub = claims(clientId);
    delete noSub.sub;
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, noSub), { client_id: clientId }), 'assertion_wrong_subject');
  });

  it('PK19: typ is compared as a media type: JWT, jwt, application/jwt, APPLICATION/CLIENT-AUTHENTICATION+JWT are taken (RFC 7515 §4.1.9)', async () => {
    for (const typ of ['JWT', 'jwt', 'application/jwt', 'APPLICATION/CLIENT-AUTHENTICATION+JWT']) {
      const res = await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1', typ }, claims(clientId)));
      expect([typ, res.status]).toEqual([typ, 200]);
    }
  });

  it('PK19: typ at+jwt or dpop+jwt is refused', async () => {
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1', typ: 'at+jwt' }, claims(clientId))), 'assertion_wrong_type');
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1', typ: 'dpop+jwt' }, claims(clientId))), 'assertion_wrong_type');
  });

  it('PK16: an alg that does not fit the registered key (RS256, ES384 for a P-256 key) is refused', async () => {
    for (const alg of ['RS256', 'ES384']) {
      await refused(await tokenRequest(s.app, forge(key.privateKey, { alg, kid: 'k1' }, claims(clientId))), 'assertion_wrong_algorithm');
    }
  });

  it('PK17: without kid, with two registered keys, the matching one verifies; a wrong key does not', async () => {
    const second = ecKey('k2');
    await s.issuer.clients.addKey(clientId, second.publicJwk);
    expect((await tokenRequest(s.app, forge(second.privateKey, { alg: 'ES256' }, claims(clientId)))).status).toBe(200);
    expect((await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256' }, claims(clientId)))).status).toBe(200);
    await refused(await tokenRequest(s.app, forge(ecKey('x').privateKey, { alg: 'ES256' }, claims(clientId))), 'assertion_bad_signature', { alg: 'ES256', keys_tried: 2 });
  });

  it('PK23/PK13: two JWTs in client_assertion, or a 10 kB assertion, are refused', async () => {
    await refused(await tokenRequest(s.app, `${sign()} ${sign()}`, { client_id: clientId }), 'assertion_malformed');
    const huge = await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId, { jti: 'j'.repeat(10_000) })), { client_id: clientId });
    expect(huge.status).toBe(413); // the form body cap, before anyone parses it
    await refused(await tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId, { jti: 'j'.repeat(4000) }))), 'assertion_jti_too_long');
  });

  it('PK28: an assertion that verified but whose request failed (invalid_scope) cannot be used again', async () => {
    const assertion = sign();
    const first = await tokenRequest(s.app, assertion, { scope: 'not-mine' });
    expect(first.status).toBe(400);
    expect(first.body.error).toBe('invalid_scope');
    await refused(await tokenRequest(s.app, assertion, { scope: 'a' }), 'assertion_replayed');
  });

  it('an RSA key registered with alg PS256 verifies PS256 assertions only', async () => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const rsa = await s.issuer.clients.create({
      name: 'rsa',
      scopes: 'a',
      authMethod: 'private_key_jwt',
      jwks: { keys: [{ ...publicKey.export({ format: 'jwk' }), kid: 'r1', alg: 'PS256' }] },
    });
    expect((await tokenRequest(s.app, signClientAssertion({ clientId: rsa.clientId, audience: ISSUER, privateKey, kid: 'r1', alg: 'PS256' }))).status).toBe(200);
    expect((await tokenRequest(s.app, signClientAssertion({ clientId: rsa.clientId, audience: ISSUER, privateKey, kid: 'r1', alg: 'RS256' }))).status).toBe(401);
  });

  it('PK: a jwk header carrying another key is never trusted', async () => {
    const other = ecKey('k1');
    const assertion = forge(other.privateKey, { alg: 'ES256', kid: 'k1', jwk: other.publicJwk }, claims(clientId));
    await refused(await tokenRequest(s.app, assertion), 'assertion_embedded_key');
    // and without the header, the other key's signature does not verify against the registered one
    // the kid whose key did not verify it: a client signing with a key it has not registered under that kid
    await refused(await tokenRequest(s.app, forge(other.privateKey, { alg: 'ES256', kid: 'k1' }, claims(clientId))), 'assertion_bad_signature', { kid: 'k1', alg: 'ES256' });
  });

  it('an unknown kid, and a client_id in the body naming another client, are refused', async () => {
    await refused(await tokenRequest(s.app, sign({ kid: 'nope' })), 'assertion_unknown_key');
    await refused(await tokenRequest(s.app, sign(), { client_id: 'another-client' }), 'assertion_client_id_mismatch');
  });

  it('PK: client-key add then remove rotates without a failed request', async () => {
    const next = ecKey('k2');
    const results: number[] = [];
    results.push((await tokenRequest(s.app, sign())).status);
    await s.issuer.clients.addKey(clientId, next.publicJwk);
    results.push((await tokenRequest(s.app, sign())).status); // old key still works
    results.push((await tokenRequest(s.app, sign({ privateKey: next.privateJwk }))).status); // new key works
    expect(await s.issuer.clients.removeKey(clientId, 'k1')).toBe(true);
    results.push((await tokenRequest(s.app, sign({ privateKey: next.privateJwk }))).status);
    expect(results).toEqual([200, 200, 200, 200]);
    await refused(await tokenRequest(s.app, sign()), 'assertion_unknown_key'); // the removed key no longer works
  });

  it('PK: a key-based client sending a secret is refused', async () => {
    const res = await request(s.app).post('/oauth/token').auth(clientId, 'anything').type('form').send({ grant_type: 'client_credentials' });
    await refused(res, 'wrong_auth_method', { method: 'client_secret_basic' });
  });

  it('PK: a secret-based client sending an assertion is refused', async () => {
    const secretClient = await s.issuer.clients.create({ name: 'secret', scopes: 'a' });
    const assertion = signClientAssertion({ clientId: secretClient.clientId, audience: ISSUER, privateKey: key.privateJwk });
    const res = await tokenRequest(s.app, assertion);
    expect(res.status).toBe(401);
    expect(failures(logged).at(-1)).toMatchObject({ client_id: secretClient.clientId, reason: 'wrong_auth_method' });
  });

  it('PK: Basic credentials plus an assertion → 400 invalid_request', async () => {
    const res = await request(s.app)
      .post('/oauth/token')
      .auth(clientId, 'x')
      .type('form')
      .send({ grant_type: 'client_credentials', client_assertion_type: CLIENT_ASSERTION_TYPE, client_assertion: sign() });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
    const both = await tokenRequest(s.app, sign(), { client_id: clientId, client_secret: 'x' });
    expect(both.status).toBe(400);
  });

  it('PK: a wrong client_assertion_type, or none, is invalid_client', async () => {
    await refused(await tokenRequest(s.app, sign(), { client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer', client_id: clientId }), 'assertion_type_unsupported');
    const res = await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_assertion: sign(), client_id: clientId });
    await refused(res, 'assertion_type_unsupported');
    await refused(await tokenRequest(s.app, 'not.a.jwt', { client_id: clientId }), 'assertion_malformed');
  });

  it('a revoked key-based client is refused', async () => {
    await s.issuer.clients.revoke(clientId);
    await refused(await tokenRequest(s.app, sign()), 'revoked_client');
  });

  it('metadata advertises private_key_jwt and its signing algorithms', async () => {
    const res = await request(s.app).get('/.well-known/oauth-authorization-server');
    expect(res.body.token_endpoint_auth_methods_supported).toEqual(['client_secret_basic', 'client_secret_post', 'private_key_jwt']);
    expect(res.body.token_endpoint_auth_signing_alg_values_supported).toEqual(['ES256', 'ES384', 'PS256', 'RS256']);
  });
});

describe('private_key_jwt failures count for brute-force protection', () => {
  it('refuses with 429 after maxFailuresPerClientAddress bad assertions, like bad secrets', async () => {
    const s = await setup({ bruteForce: { maxFailuresPerClientAddress: 3, maxFailuresPerAddress: 100 } });
    try {
      const key = ecKey('k1');
      const c = await s.issuer.clients.create({ name: 'bf', authMethod: 'private_key_jwt', jwks: key.publicJwk });
      const wrong = ecKey('k1');
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        statuses.push((await tokenRequest(s.app, signClientAssertion({ clientId: c.clientId, audience: ISSUER, privateKey: wrong.privateJwk }))).status);
      }
      expect(statuses).toEqual([401, 401, 401, 429]);
    } finally {
      await s.close();
    }
  });
});

describe('private_key_jwt when the store cannot record the jti', () => {
  it('answers 503 with Retry-After, never a token and never a 500', async () => {
    const dataDir = tempDir();
    const inner = await openEmbeddedStore({ dataDir });
    let down = false;
    const store = Object.create(inner) as typeof inner;
    store.consumeJti = (...args) => (down ? Promise.reject(new StoreUnavailableError('store down')) : inner.consumeJti(...args));
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store, logger: false });
    const app = express();
    app.use(issuer.router());
    try {
      const key = ecKey('k1');
      const c = await issuer.clients.create({ name: 'o', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
      down = true;
      const res = await tokenRequest(app, signClientAssertion({ clientId: c.clientId, audience: ISSUER, privateKey: key.privateJwk }));
      expect(res.status).toBe(503);
      expect(res.headers['retry-after']).toBeDefined();
      expect(res.body.access_token).toBeUndefined();
      down = false;
      expect((await tokenRequest(app, signClientAssertion({ clientId: c.clientId, audience: ISSUER, privateKey: key.privateJwk }))).status).toBe(200);
    } finally {
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('clientAssertionAudience option', () => {
  it("'issuer-or-token-endpoint' accepts the token endpoint URL as aud; other values are refused at createIssuer()", async () => {
    const s = await setup({ clientAssertionAudience: 'issuer-or-token-endpoint' });
    try {
      const key = ecKey('k1');
      const c = await s.issuer.clients.create({ name: 'old', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
      const sign = (audience: string) => signClientAssertion({ clientId: c.clientId, audience, privateKey: key.privateJwk });
      expect((await tokenRequest(s.app, sign(TOKEN_ENDPOINT))).status).toBe(200);
      expect((await tokenRequest(s.app, sign(ISSUER))).status).toBe(200);
      expect((await tokenRequest(s.app, sign('https://other.example'))).status).toBe(401);
    } finally {
      await s.close();
    }
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, clientAssertionAudience: 'any' as never, logger: false })).toThrow(
      /clientAssertionAudience must be 'issuer' or 'issuer-or-token-endpoint'/,
    );
  });

  it("'issuer-or-token-endpoint' also takes the URLs of the endpoints that take client authentication (revocation, introspection) and an array of these only; the default takes neither", async () => {
    for (const mode of ['issuer-or-token-endpoint', 'issuer'] as const) {
      const s = await setup({ clientAssertionAudience: mode });
      try {
        const key = ecKey('k1');
        const c = await s.issuer.clients.create({ name: 'old', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] }, permissions: ['introspect'] });
        const assertion = (aud: unknown) => forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(c.clientId, { aud }));
        const post = (path: string, aud: unknown) =>
          request(s.app).post(path).type('form').send({ client_assertion_type: CLIENT_ASSERTION_TYPE, client_assertion: assertion(aud), token: 'not-a-token' });
        const expected = mode === 'issuer' ? 401 : 200;
        expect((await post('/oauth/introspect', `${ISSUER}/oauth/introspect`)).status).toBe(expected);
        expect((await post('/oauth/revoke', `${ISSUER}/oauth/revoke`)).status).toBe(expected);
        const both = await tokenRequest(s.app, assertion([ISSUER, TOKEN_ENDPOINT]));
        expect(both.status).toBe(expected);
        // never another server's URL, in either mode, alone or beside ours
        expect((await tokenRequest(s.app, assertion(['https://other.example']))).status).toBe(401);
        expect((await tokenRequest(s.app, assertion([ISSUER, 'https://other.example/token']))).status).toBe(401);
      } finally {
        await s.close();
      }
    }
  });
});

describe('clientAssertionMaxLifetime option', () => {
  it('takes assertions living up to it (an hour, as authlib signs them), refuses longer ones, and is checked at createIssuer()', async () => {
    const s = await setup({ clientAssertionMaxLifetime: 3600 });
    try {
      const key = ecKey('k1');
      const c = await s.issuer.clients.create({ name: 'hour', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
      const now = Math.floor(Date.now() / 1000);
      const at = (lifetime: number) => tokenRequest(s.app, forge(key.privateKey, { alg: 'ES256', kid: 'k1' }, claims(c.clientId, { iat: now, exp: now + lifetime })));
      expect((await at(3600)).status).toBe(200);
      expect((await at(3700)).status).toBe(401);
    } finally {
      await s.close();
    }
    for (const bad of [0, 3601, 1.5, '300']) {
      expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, clientAssertionMaxLifetime: bad as never, logger: false })).toThrow(/clientAssertionMaxLifetime/);
    }
  });
});

describeIfPostgres('private_key_jwt on PostgreSQL, two issuers', () => {
  it('one assertion sent 20 times at once, split over two instances, gets exactly one 200', async () => {
    const schema = uniqueSchemaName();
    const admin = new Pool({ connectionString: postgresUrl(), max: 2 });
    const issuers: Issuer[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        const store = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 10 });
        issuers.push(createIssuer({ issuer: ISSUER, audience: AUDIENCE, logger: false, store }));
      }
      await Promise.all(issuers.map((i) => i.ready()));
      const key = ecKey('k1');
      const c = await issuers[0].clients.create({ name: 'race', authMethod: 'private_key_jwt', jwks: { keys: [key.publicJwk] } });
      const servers = issuers.map((issuer) => {
        const app = express();
        app.use(issuer.router());
        return app;
      });
      const assertion = signClientAssertion({ clientId: c.clientId, audience: ISSUER, privateKey: key.privateJwk });
      const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => tokenRequest(servers[i % 2], assertion).then((r) => r.status)));
      expect(statuses.filter((x) => x === 200)).toHaveLength(1);
      expect(statuses.filter((x) => x === 401)).toHaveLength(19);
    } finally {
      await Promise.all(issuers.map((i) => i.close()));
      await dropSchema(admin, schema);
      await admin.end();
    }
  });

  it('a client_id, or an assertion sub, with a NUL in it is 401 invalid_client, never a 500 (PostgreSQL refuses NUL in text)', async () => {
    const schema = uniqueSchemaName();
    const admin = new Pool({ connectionString: postgresUrl(), max: 2 });
    const store = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 4 });
    const errors: unknown[] = [];
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store, logger: { info: () => undefined, warn: () => undefined, error: (o: unknown) => void errors.push(o) } });
    try {
      await issuer.ready();
      const app = express();
      app.use(issuer.router());
      const key = ecKey('k-nul');
      const posted = await request(app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: 'ab\u0000cd', client_secret: 'x' });
      const basic = await request(app).post('/oauth/token').type('form').auth('ab%00cd', 'x').send({ grant_type: 'client_credentials' });
      const assertion = signClientAssertion({ clientId: 'ab\u0000cd', audience: ISSUER, privateKey: key.privateJwk });
      const asserted = await tokenRequest(app, assertion);
      for (const res of [posted, basic, asserted]) expect({ status: res.status, error: res.body.error }).toEqual({ status: 401, error: 'invalid_client' });
      expect(errors).toEqual([]);
    } finally {
      await issuer.close();
      await dropSchema(admin, schema);
      await admin.end();
    }
  });
});
