import { createHash, createPublicKey, type JsonWebKey } from 'node:crypto';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { createIssuer, openEmbeddedStore, type Issuer, type Logger } from '../../lib';
import { hashSecret } from '../../lib/core/secrets';
import { AUDIENCE, ISSUER, setup, tempDir, type TestSetup } from '../helpers/app';

const RFC6749_DESCRIPTION = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

let t: TestSetup;
let client: { clientId: string; clientSecret: string };

beforeAll(async () => {
  t = await setup();
  client = await t.issuer.clients.create({ name: 'billing', scopes: 'orders:read orders:write' });
});
afterAll(() => t.close());

function tokenRequest(body: Record<string, string> | string) {
  return request(t.app).post('/oauth/token').type('form').send(body);
}

function bodyCredentials(extra: Record<string, string> = {}) {
  return { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret, ...extra };
}

function basic(id: string, secret: string): string {
  return `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`;
}

/** Every error: RFC 6749 §5.2 JSON shape, allowed characters, no-store. */
function expectOAuthError(res: request.Response, status: number, error: string): void {
  expect({ status: res.status, error: res.body.error }).toEqual({ status, error });
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(typeof res.body.error_description).toBe('string');
  expect(res.body.error_description).toMatch(RFC6749_DESCRIPTION);
  expect(Object.keys(res.body).sort()).toEqual(['error', 'error_description']);
  expect(res.headers['cache-control']).toBe('no-store');
  expect(res.headers['pragma']).toBe('no-cache');
  if (status === 401) expect(res.headers['www-authenticate']).toBe(`Basic realm="${ISSUER}", error="invalid_client"`);
}

/**
 * A successful token response (RFC 6749 §5.1) whose access token is signed by a key of `app`'s JWKS and
 * issued to `clientId` with `scope`: proves which client authenticated, not only that one did.
 */
async function expectIssuedTo(app: express.Express, res: request.Response, clientId: string, scope: string): Promise<void> {
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 200, error: undefined });
  expect(res.headers['cache-control']).toBe('no-store');
  expect(res.body).toEqual({ access_token: expect.any(String), token_type: 'Bearer', expires_in: 3600, scope });
  const { header } = jwt.decode(res.body.access_token, { complete: true })!;
  const jwk = ((await request(app).get('/.well-known/jwks.json')).body.keys as { kid: string }[]).find((k) => k.kid === header.kid);
  expect(jwk).toBeDefined();
  const claims = jwt.verify(res.body.access_token, createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' }), { issuer: ISSUER, audience: AUDIENCE });
  expect(claims).toMatchObject({ sub: clientId, client_id: clientId, scope });
}

describe('POST /oauth/token: success', () => {
  it('issues a Bearer token for credentials in the body', async () => {
    const res = await tokenRequest(bodyCredentials());
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.headers['pragma']).toBe('no-cache');
    expect(Object.keys(res.body).sort()).toEqual(['access_token', 'expires_in', 'scope', 'token_type']);
    expect(res.body).toMatchObject({ token_type: 'Bearer', expires_in: 3600, scope: 'orders:read orders:write' });
    expect(res.body.refresh_token).toBeUndefined();
  });

  it('issues a token for HTTP Basic credentials', async () => {
    const res = await request(t.app)
      .post('/oauth/token')
      .set('Authorization', basic(client.clientId, client.clientSecret))
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(res.status).toBe(200);
    expect(res.body.token_type).toBe('Bearer');
  });

  it('accepts the Basic scheme name in any case and client_id repeated in the body when it matches', async () => {
    const header = basic(client.clientId, client.clientSecret).replace('Basic', 'bASIC');
    const res = await request(t.app).post('/oauth/token').set('Authorization', header).type('form')
      .send({ grant_type: 'client_credentials', client_id: client.clientId });
    await expectIssuedTo(t.app, res, client.clientId, 'orders:read orders:write');
  });

  it('signs an RFC 9068 access token: typ at+jwt, kid, ES256, and every claim', async () => {
    const before = Math.floor(Date.now() / 1000);
    const res = await tokenRequest(bodyCredentials({ scope: 'orders:read' }));
    const decoded = jwt.decode(res.body.access_token, { complete: true })!;
    const jwks = (await request(t.app).get('/.well-known/jwks.json')).body;
    expect(decoded.header).toEqual({ alg: 'ES256', typ: 'at+jwt', kid: jwks.keys[0].kid });
    const claims = decoded.payload as Record<string, unknown>;
    expect(claims).toMatchObject({ iss: ISSUER, sub: client.clientId, client_id: client.clientId, aud: AUDIENCE, scope: 'orders:read' });
    expect(Object.keys(claims).sort()).toEqual(['aud', 'client_id', 'exp', 'iat', 'iss', 'jti', 'scope', 'sub']);
    expect(claims.iat).toBeGreaterThanOrEqual(before);
    expect((claims.exp as number) - (claims.iat as number)).toBe(res.body.expires_in);
    expect(typeof claims.jti).toBe('string');
  });

  it('gives every token its own jti', async () => {
    const tokens = await Promise.all([1, 2, 3, 4, 5].map(() => tokenRequest(bodyCredentials())));
    const jtis = tokens.map((r) => (jwt.decode(r.body.access_token) as { jti: string }).jti);
    expect(new Set(jtis).size).toBe(5);
  });

  it('ignores unknown parameters and treats empty ones as omitted', async () => {
    const res = await tokenRequest({ ...bodyCredentials(), scope: '', audience: 'x', foo: 'bar', resource: '' });
    expect(res.status).toBe(200);
    expect(res.body.scope).toBe('orders:read orders:write');
  });

  it('ignores an empty client_secret in the body next to Basic credentials', async () => {
    const res = await request(t.app).post('/oauth/token').set('Authorization', basic(client.clientId, client.clientSecret))
      .type('form').send({ grant_type: 'client_credentials', client_secret: '', scope: 'orders:write' });
    await expectIssuedTo(t.app, res, client.clientId, 'orders:write');
  });

  it('accepts a charset parameter on the content type', async () => {
    const res = await request(t.app).post('/oauth/token').set('Content-Type', 'application/x-www-form-urlencoded; charset=UTF-8')
      .send(new URLSearchParams(bodyCredentials({ scope: 'orders:read' })).toString());
    await expectIssuedTo(t.app, res, client.clientId, 'orders:read');
  });
});

describe('POST /oauth/token: scope', () => {
  it('leaves scope out of the response and the token for a client granted none (RFC 6749 §3.3 has no empty scope)', async () => {
    const bare = await t.issuer.clients.create({ name: 'no-scopes' });
    const res = await tokenRequest({ grant_type: 'client_credentials', client_id: bare.clientId, client_secret: bare.clientSecret });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['access_token', 'expires_in', 'token_type']);
    const claims = jwt.decode(res.body.access_token) as Record<string, unknown>;
    expect(claims).not.toHaveProperty('scope');
    expect(claims.client_id).toBe(bare.clientId);
  });

  it('grants all the client scopes when none is requested', async () => {
    expect((await tokenRequest(bodyCredentials())).body.scope).toBe('orders:read orders:write');
  });

  it('grants a requested subset exactly', async () => {
    const res = await tokenRequest(bodyCredentials({ scope: 'orders:write' }));
    expect(res.body.scope).toBe('orders:write');
    expect((jwt.decode(res.body.access_token) as { scope: string }).scope).toBe('orders:write');
  });

  it('rejects a scope beyond the client scopes with invalid_scope', async () => {
    const res = await tokenRequest(bodyCredentials({ scope: 'orders:read admin' }));
    expectOAuthError(res, 400, 'invalid_scope');
    expect(res.body.error_description).toContain('admin');
  });

  it.each([['a  b'], [' orders:read'], ['orders:read '], ['caf\u00e9'], ['a"b'], ['a\\b']])('rejects the malformed scope %j with invalid_scope', async (scope) => {
    expectOAuthError(await tokenRequest(bodyCredentials({ scope })), 400, 'invalid_scope');
  });

  it('grants no scope to a client created without scopes, and refuses it any', async () => {
    const bare = await t.issuer.clients.create({ name: 'bare' });
    const res = await tokenRequest({ grant_type: 'client_credentials', client_id: bare.clientId, client_secret: bare.clientSecret });
    expect(res.status).toBe(200);
    expect(res.body).not.toHaveProperty('scope');
    expectOAuthError(
      await tokenRequest({ grant_type: 'client_credentials', client_id: bare.clientId, client_secret: bare.clientSecret, scope: 'orders:read' }),
      400,
      'invalid_scope',
    );
  });
});

describe('POST /oauth/token: client authentication', () => {
  it('answers 401 invalid_client with a Basic challenge for a wrong secret, an unknown client, a revoked client, and none at all', async () => {
    const revoked = await t.issuer.clients.create({ name: 'gone', scopes: 'orders:read' });
    await t.issuer.clients.revoke(revoked.clientId);
    const cases: Record<string, string>[] = [
      bodyCredentials({ client_secret: 'wrong' }),
      { ...bodyCredentials(), client_id: 'nobody' },
      { grant_type: 'client_credentials', client_id: revoked.clientId, client_secret: revoked.clientSecret },
      { grant_type: 'client_credentials' },
      { grant_type: 'client_credentials', client_id: client.clientId },
    ];
    const responses = [];
    for (const body of cases) {
      const res = await tokenRequest(body);
      expectOAuthError(res, 401, 'invalid_client');
      responses.push(res);
    }
    // unknown, wrong and revoked are indistinguishable on the wire
    const shape = (r: request.Response) => ({ status: r.status, body: r.body, auth: r.headers['www-authenticate'], type: r.headers['content-type'] });
    expect(shape(responses[1])).toEqual(shape(responses[0]));
    expect(shape(responses[2])).toEqual(shape(responses[0]));
  });

  it('refuses a wrong secret sent with HTTP Basic', async () => {
    const res = await request(t.app).post('/oauth/token').set('Authorization', basic(client.clientId, 'nope')).type('form')
      .send({ grant_type: 'client_credentials' });
    expectOAuthError(res, 401, 'invalid_client');
  });

  it('refuses credentials sent by both methods with invalid_request', async () => {
    const res = await request(t.app).post('/oauth/token').set('Authorization', basic(client.clientId, client.clientSecret))
      .type('form').send(bodyCredentials());
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('refuses a body client_id that differs from the Basic one', async () => {
    const res = await request(t.app).post('/oauth/token').set('Authorization', basic(client.clientId, client.clientSecret))
      .type('form').send({ grant_type: 'client_credentials', client_id: 'someone-else' });
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('never authenticates with credentials in the query string', async () => {
    const query = new URLSearchParams({ client_id: client.clientId, client_secret: client.clientSecret }).toString();
    const res = await request(t.app).post(`/oauth/token?${query}`).type('form').send({ grant_type: 'client_credentials' });
    expectOAuthError(res, 400, 'invalid_request');
    expect(res.body.access_token).toBeUndefined();
  });

  it.each([['client_assertion'], ['client_assertion_type']])('never takes %s from the query string', async (name) => {
    const res = await request(t.app).post(`/oauth/token?${name}=x`).type('form').send(bodyCredentials());
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('refuses two Authorization headers (Node keeps only the first) and issues nothing', async () => {
    const other = await t.issuer.clients.create({ name: 'other', scopes: 'orders:read' });
    for (const second of [basic(other.clientId, other.clientSecret), basic(other.clientId, 'wrong')]) {
      const res = await request(t.app).post('/oauth/token')
        .set('Authorization', [basic(client.clientId, client.clientSecret), second] as unknown as string)
        .type('form').send({ grant_type: 'client_credentials' });
      expectOAuthError(res, 400, 'invalid_request');
      expect(res.body.error_description).toBe('send one Authorization header');
    }
    // neither client was counted as failing: both still get tokens
    expect((await tokenRequest(bodyCredentials())).status).toBe(200);
    expect((await tokenRequest({ grant_type: 'client_credentials', client_id: other.clientId, client_secret: other.clientSecret })).status).toBe(200);
  });

  it('answers Basic and a tab before valid credentials (RFC 9110 §11.4: 1*SP) with invalid_request, not as credentials missing', async () => {
    const res = await request(t.app).post('/oauth/token').set('Authorization', basic(client.clientId, client.clientSecret).replace(' ', '\t')).type('form').send({ grant_type: 'client_credentials' });
    expectOAuthError(res, 400, 'invalid_request');
    expect(res.body.error_description).toBe('malformed Basic authorization header');
  });

  it.each([['Basic'], ['Basic !!!'], ['Basic ' + Buffer.from('no-colon').toString('base64')], ['Basic ' + Buffer.from('a%zz:b').toString('base64')]])(
    'answers a malformed Basic header %j with invalid_request',
    async (header) => {
      const res = await request(t.app).post('/oauth/token').set('Authorization', header).type('form').send({ grant_type: 'client_credentials' });
      expectOAuthError(res, 400, 'invalid_request');
    },
  );
});

describe('POST /oauth/token: Basic credentials are form-decoded and split at the first colon (RFC 6749 §2.3.1)', () => {
  let s: TestSetup;
  const id = 'svc:one+two';
  const secret = 'p:a ss+%/é';
  beforeAll(async () => {
    const dataDir = tempDir();
    const store = await openEmbeddedStore({ dataDir });
    const now = new Date();
    await store.createClient({ clientId: id, name: 'odd', scopes: ['x'], grantTypes: ['client_credentials'], createdAt: now, secret: { hash: hashSecret(secret), createdAt: now, expiresAt: null } });
    s = await setup({ store });
    s.dataDir = dataDir;
  });
  afterAll(() => s.close());

  const form = (v: string) => encodeURIComponent(v).replace(/%20/g, '+');

  it('decodes both parts', async () => {
    const res = await request(s.app).post('/oauth/token').set('Authorization', basic(form(id), form(secret))).type('form')
      .send({ grant_type: 'client_credentials' });
    expect(res.status).toBe(200);
    expect((jwt.decode(res.body.access_token) as { client_id: string }).client_id).toBe(id);
  });

  it('keeps every colon after the first in the secret', async () => {
    // "svc%3Aone%2Btwo:p:a+ss%2B%25%2F%C3%A9": the secret part holds a raw colon
    const header = basic(form(id), `p:a+ss${form('+%/é')}`);
    const res = await request(s.app).post('/oauth/token').set('Authorization', header).type('form').send({ grant_type: 'client_credentials' });
    await expectIssuedTo(s.app, res, id, 'x');
  });

  it('does not match an id sent without encoding', async () => {
    const res = await request(s.app).post('/oauth/token').set('Authorization', basic(id, form(secret))).type('form')
      .send({ grant_type: 'client_credentials' });
    expectOAuthError(res, 401, 'invalid_client');
  });

  it('accepts the same client by body parameters', async () => {
    const res = await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: id, client_secret: secret });
    await expectIssuedTo(s.app, res, id, 'x');
  });
});

describe('POST /oauth/token: request errors', () => {
  it('requires grant_type', async () => {
    const res = await tokenRequest({ client_id: client.clientId, client_secret: client.clientSecret });
    expectOAuthError(res, 400, 'invalid_request');
    expect(res.body.error_description).toContain('grant_type');
  });

  it('counts an empty grant_type as missing', async () => {
    expectOAuthError(await tokenRequest(bodyCredentials({ grant_type: '' })), 400, 'invalid_request');
  });

  it.each([['password'], ['authorization_code'], ['refresh_token'], ['urn:ietf:params:oauth:grant-type:jwt-bearer']])(
    'answers grant_type=%s with 400 unsupported_grant_type (never 501)',
    async (grant) => {
      expectOAuthError(await tokenRequest(bodyCredentials({ grant_type: grant })), 400, 'unsupported_grant_type');
    },
  );

  it.each([['grant_type'], ['client_id'], ['client_secret'], ['scope']])('takes an empty %s beside the real one as omitted (RFC 6749 §3.2), not as a repeat', async (name) => {
    const params = new URLSearchParams(bodyCredentials({ scope: 'orders:read' }));
    const real = params.get(name)!;
    params.delete(name);
    params.append(name, '');
    params.append(name, real);
    const res = await tokenRequest(params.toString());
    expect(res.status).toBe(200);
    expect(res.body.scope).toBe('orders:read');
  });

  it.each([['grant_type'], ['client_id'], ['client_secret'], ['scope']])('refuses a repeated %s', async (name) => {
    const params = new URLSearchParams(bodyCredentials({ scope: 'orders:read' }));
    params.append(name, params.get(name)!);
    const res = await tokenRequest(params.toString());
    expectOAuthError(res, 400, 'invalid_request');
    expect(res.body.error_description).toContain(name);
  });

  it('refuses a JSON body', async () => {
    const res = await request(t.app).post('/oauth/token').set('Content-Type', 'application/json').send(JSON.stringify(bodyCredentials()));
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('refuses a request without a body', async () => {
    expectOAuthError(await request(t.app).post('/oauth/token'), 400, 'invalid_request');
  });

  it('refuses a multipart body', async () => {
    const res = await request(t.app).post('/oauth/token').field('grant_type', 'client_credentials');
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('refuses a form in another charset', async () => {
    const res = await request(t.app).post('/oauth/token').set('Content-Type', 'application/x-www-form-urlencoded; charset=iso-8859-1')
      .send(new URLSearchParams(bodyCredentials()).toString());
    expectOAuthError(res, 400, 'invalid_request');
  });

  it('answers 413 for a body over 8 KiB', async () => {
    const res = await tokenRequest(bodyCredentials({ padding: 'x'.repeat(9 * 1024) }));
    expectOAuthError(res, 413, 'invalid_request');
  });

  it('answers 413 for a body over 8 KiB sent without Content-Length, past 1 MiB too, before the client has sent it all', async () => {
    const server = t.app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      for (const total of [100 * 1024, 3 * 1024 * 1024]) {
        const answer = await new Promise<{ status: number; headers: IncomingHttpHeaders; body: string; sent: number }>((resolve, reject) => {
          let sent = 0;
          const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: '/oauth/token', headers: { 'Content-Type': 'application/x-www-form-urlencoded', 'Transfer-Encoding': 'chunked' } });
          req.on('response', (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (c: string) => (body += c));
            res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body, sent }));
          });
          // the server may drop the connection once it has answered: only the answer counts
          req.on('error', (err) => (sent >= total ? undefined : reject(err)));
          const chunk = Buffer.alloc(16 * 1024, 'a');
          const pump = (): void => {
            while (sent < total) {
              sent += chunk.length;
              if (!req.write(chunk)) return void req.once('drain', pump);
            }
            req.end();
          };
          req.write('grant_type=client_credentials&x=');
          pump();
        });
        expect(answer.status).toBe(413);
        expect(answer.headers['cache-control']).toBe('no-store');
        expect(JSON.parse(answer.body)).toEqual({ error: 'invalid_request', error_description: 'request body larger than 8192 bytes' });
      }
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('answers 400 unauthorized_client for a client not allowed the client_credentials grant', async () => {
    const limited = await t.issuer.clients.create({ name: 'limited', scopes: 'orders:read', grantTypes: [] });
    const res = await tokenRequest({ grant_type: 'client_credentials', client_id: limited.clientId, client_secret: limited.clientSecret });
    expectOAuthError(res, 400, 'unauthorized_client');
  });

  it.each([['GET'], ['PUT'], ['DELETE'], ['PATCH']])('answers %s with 405 and Allow: POST', async (method) => {
    const res = await request(t.app)[method.toLowerCase() as 'get'](`/oauth/token`);
    expectOAuthError(res, 405, 'invalid_request');
    expect(res.headers.allow).toBe('POST');
  });

  it('answers HEAD with 405 and Allow: POST', async () => {
    const res = await request(t.app).head('/oauth/token');
    expect(res.status).toBe(405);
    expect(res.headers.allow).toBe('POST');
  });

  it('never answers odd input with a 5xx or a stack trace', async () => {
    const bodies = [
      'grant_type=client_credentials&client_id=%zz&client_secret=%',
      'grant_type[]=client_credentials&client_id[a]=b',
      '\u0000\u0001\u0002=\u00ff',
      '=&&&=&grant_type',
      'grant_type=client_credentials&client_id=' + 'a'.repeat(5000) + '&client_secret=b',
      'grant_type=client_credentials&scope=%00',
      '%',
    ];
    for (const body of bodies) {
      const res = await request(t.app).post('/oauth/token').set('Content-Type', 'application/x-www-form-urlencoded').send(body);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      expect(res.text).not.toMatch(/at .*\.(js|ts):\d+/);
      expectOAuthError(res, res.status, res.body.error);
    }
    const gz = await request(t.app).post('/oauth/token').set('Content-Type', 'application/x-www-form-urlencoded').set('Content-Encoding', 'gzip').send('xx');
    expect(gz.status).toBe(415);
  });
});

describe('POST /oauth/token inside an app that parses bodies itself', () => {
  let s: TestSetup;
  beforeAll(async () => {
    s = await setup({}, (app, issuer) => {
      app.use(express.json());
      app.use(express.urlencoded({ extended: true }));
      app.use(issuer.router());
    });
  });
  afterAll(() => s.close());

  it('still issues tokens, and still refuses repeats and JSON', async () => {
    const c = await s.issuer.clients.create({ name: 'pre', scopes: 'a' });
    const ok = await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret });
    await expectIssuedTo(s.app, ok, c.clientId, 'a');
    const repeated = await request(s.app).post('/oauth/token').type('form')
      .send(`grant_type=client_credentials&grant_type=client_credentials&client_id=${c.clientId}&client_secret=${c.clientSecret}`);
    expectOAuthError(repeated, 400, 'invalid_request');
    const nested = await request(s.app).post('/oauth/token').type('form').send(`grant_type=client_credentials&client_id[x]=1&client_secret=2`);
    expectOAuthError(nested, 400, 'invalid_request');
    const json = await request(s.app).post('/oauth/token').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret });
    expectOAuthError(json, 400, 'invalid_request');
  });
});

describe('issuer options', () => {
  it('signs with RS256 when asked, and expires_in follows accessTokenTtl', async () => {
    const s = await setup({ algorithm: 'RS256', accessTokenTtl: 120 });
    try {
      const c = await s.issuer.clients.create({ name: 'rs', scopes: 'a' });
      const res = await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret });
      expect(res.body.expires_in).toBe(120);
      const decoded = jwt.decode(res.body.access_token, { complete: true })!;
      expect(decoded.header.alg).toBe('RS256');
      const claims = decoded.payload as { iat: number; exp: number };
      expect(claims.exp - claims.iat).toBe(120);
    } finally {
      await s.close();
    }
  });
});

describe('logging', () => {
  it('records issuance and failures with client_id, never a secret, hash or token', async () => {
    const lines: string[] = [];
    const capture = (level: string) => (obj: Record<string, unknown>, msg?: string) => lines.push(JSON.stringify({ level, ...obj, msg }));
    const logger: Logger = { info: capture('info'), warn: capture('warn'), error: capture('error') };
    const s = await setup({ logger });
    try {
      const c = await s.issuer.clients.create({ name: 'logged', scopes: 'a' });
      const ok = await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret });
      await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: 'guess-' + c.clientSecret });
      const all = lines.join('\n');
      expect(all).toContain('"event":"token.issued"');
      expect(all).toContain('"event":"client.auth_failed"');
      expect(all).toContain('"reason":"wrong_secret"');
      expect(all).toContain(c.clientId);
      expect(all).not.toContain(c.clientSecret);
      expect(all).not.toContain(ok.body.access_token);
      expect(all).not.toContain('hmac-sha256$');
    } finally {
      await s.close();
    }
  });

  it('shows a client_id that is no client id as a hash: a secret sent in its place, a long one, control characters (401, counted, never a 500)', async () => {
    const lines: Record<string, unknown>[] = [];
    const capture = (obj: Record<string, unknown>) => void lines.push(obj);
    const s = await setup({ logger: { debug: capture, info: capture, warn: capture, error: capture }, bruteForce: { maxFailuresPerAddress: 3, window: 60 } });
    try {
      const c = await s.issuer.clients.create({ name: 'swapped', scopes: 'a' });
      const basic = (id: string, secret: string) =>
        request(s.app).post('/oauth/token').type('form').auth(encodeURIComponent(id), encodeURIComponent(secret)).send({ grant_type: 'client_credentials' });
      const swapped = await basic(c.clientSecret, c.clientId);
      const long = await basic('x'.repeat(7000), 'y');
      const nul = await basic('ab\u0000cd', 'y');
      expect([swapped.status, long.status, nul.status]).toEqual([401, 401, 401]);
      expect(nul.body.error).toBe('invalid_client');
      const failed = lines.filter((l) => l.event === 'client.auth_failed');
      expect(failed.map((l) => [l.reason, l.client_id])).toEqual([
        ['unknown_client', expect.stringMatching(/^h\.[A-Za-z0-9_-]{22}$/)],
        ['unknown_client', expect.stringMatching(/^h\.[A-Za-z0-9_-]{22}$/)],
        ['unknown_client', expect.stringMatching(/^h\.[A-Za-z0-9_-]{22}$/)],
      ]);
      expect(JSON.stringify(lines)).not.toContain(c.clientSecret);
      // not the secret's plain SHA-256 (anyone holding a candidate secret could check it against the log): keyed per process
      const sha256 = `h.${createHash('sha256').update(c.clientSecret).digest('base64url').slice(0, 22)}`;
      expect(failed[0].client_id).not.toBe(sha256);
      expect(JSON.stringify(lines)).not.toContain(sha256.slice(2));
      // the same value reads the same within this process's log
      await basic(c.clientSecret, 'again');
      expect(lines.filter((l) => l.event === 'client.rate_limited').map((l) => l.client_id)).toEqual([failed[0].client_id]);
      expect(lines.filter((l) => l.event === 'error')).toEqual([]);
      lines.length = 0;
      // each was counted against the address (limit 3)
      expect((await basic(c.clientId, c.clientSecret)).status).toBe(429);
      // a mistyped id of the usual shape stays readable
      await request(s.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: 'typo-id', client_secret: 'x' });
      expect(lines.filter((l) => l.event === 'client.rate_limited').map((l) => l.client_id)).toEqual([c.clientId, 'typo-id']);
    } finally {
      await s.close();
    }
  });
});

describe('persistence', () => {
  it('keeps clients and keys across a restart on the same data dir: old tokens verify, clients still authenticate', async () => {
    const dataDir = tempDir();
    const make = () => {
      const issuer: Issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
      const app = express();
      app.use(issuer.router());
      app.get('/api/whoami', issuer.requireBearer(), (req, res) => {
        res.json({ client_id: req.auth!.clientId });
      });
      return { issuer, app };
    };
    const first = make();
    await first.issuer.ready();
    const c = await first.issuer.clients.create({ name: 'persist', scopes: 'a' });
    const token = (await request(first.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret })).body.access_token;
    const jwksBefore = (await request(first.app).get('/.well-known/jwks.json')).body;
    await first.issuer.close();

    const second = make();
    const who = await request(second.app).get('/api/whoami').set('Authorization', `Bearer ${token}`);
    expect(who.status).toBe(200);
    expect(who.body).toEqual({ client_id: c.clientId });
    expect((await request(second.app).get('/.well-known/jwks.json')).body).toEqual(jwksBefore);
    const again = await request(second.app).post('/oauth/token').type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret });
    expect(again.status).toBe(200);
    await second.issuer.close();
  });
});
