/**
 * Why a token was refused: both forms of requireBearer() log `token.rejected`
 * with a reason, at info the first time a reason appears in a minute and at
 * debug otherwise, never the token or its signature; the answer on the wire
 * does not change.
 */
import { rmSync } from 'node:fs';
import express, { type Express, type Request, type Response } from 'express';
import pino from 'pino';
import request from 'supertest';
import { Registry } from 'prom-client';
import { createIssuer, requireBearer, type Issuer, type Logger } from '../../lib';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { AUDIENCE, tempDir } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

/** A pino logger (at `level`, pino's default being info) writing JSON lines into an array. */
function pinoCapture(level = 'info') {
  const lines: string[] = [];
  const logger = pino({ level }, { write: (line: string) => void lines.push(line) });
  const events = (event: string) => lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.event === event);
  return { logger, lines, events };
}

const sendAuth = (req: Request, res: Response): void => {
  res.json(req.auth);
};

function expectRefused(res: request.Response): void {
  expect(res.status).toBe(401);
  expect(res.body).toEqual({ error: 'invalid_token', error_description: 'the access token is invalid' });
  expect(res.headers['www-authenticate']).toBe('Bearer realm="api", error="invalid_token", error_description="the access token is invalid", DPoP algs="ES256 ES384 PS256 RS256"');
}

const PINO_INFO = 30;
const PINO_DEBUG = 20;

describe('two issuers with different issuer URLs on one store', () => {
  const dataDir = tempDir();
  const logA = pinoCapture();
  const logB = pinoCapture('debug');
  let a: Issuer;
  let b: Issuer;
  let appA: Express;
  let appB: Express;

  function app(issuer: Issuer): Express {
    const e = express();
    e.use(issuer.router());
    e.get('/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
    return e;
  }

  beforeAll(async () => {
    // two processes' worth: two store connections on one database, as two instances on one PostgreSQL
    a = createIssuer({ issuer: 'http://a.test:3000', audience: AUDIENCE, store: await openEmbeddedStore({ dataDir }), logger: logA.logger });
    b = createIssuer({ issuer: 'http://b.test:3001', audience: AUDIENCE, store: await openEmbeddedStore({ dataDir }), logger: logB.logger });
    await a.ready();
    await b.ready();
    appA = app(a);
    appB = app(b);
  });

  afterAll(async () => {
    await a.close();
    await b.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it("each refuses the other's tokens; the info log shows wrong_issuer with both URLs once, not once per request", async () => {
    const client = await a.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const tokenA = await fetchToken(appA, client);
    const tokenB = await fetchToken(appB, client);
    for (let i = 0; i < 5; i++) expectRefused(await request(appB).get('/orders').set('Authorization', `Bearer ${tokenA}`));
    for (let i = 0; i < 5; i++) expectRefused(await request(appA).get('/orders').set('Authorization', `Bearer ${tokenB}`));
    // each still accepts its own
    expect((await request(appA).get('/orders').set('Authorization', `Bearer ${tokenA}`)).status).toBe(200);
    expect((await request(appB).get('/orders').set('Authorization', `Bearer ${tokenB}`)).status).toBe(200);

    // A logs at info (the default level): one line for five refusals
    const atA = logA.events('token.rejected');
    expect(atA).toHaveLength(1);
    expect(atA[0]).toMatchObject({
      level: PINO_INFO,
      reason: 'wrong_issuer',
      expected: 'http://a.test:3000',
      received: 'http://b.test:3001',
      // read before the signature is checked: the client it claims to be
      claimed_client_id: client.clientId,
    });
    expect(atA[0].msg).toMatch(/wrong_issuer/);

    // B logs at debug: the same info line, then every other refusal at debug
    const atB = logB.events('token.rejected');
    expect(atB.map((l) => l.level)).toEqual([PINO_INFO, PINO_DEBUG, PINO_DEBUG, PINO_DEBUG, PINO_DEBUG]);
    for (const line of atB) expect(line).toMatchObject({ reason: 'wrong_issuer', expected: 'http://b.test:3001', received: 'http://a.test:3000' });

    // never the token or its signature
    for (const [log, token] of [[logA, tokenB], [logB, tokenA]] as const) {
      const text = log.lines.join('');
      expect(text).not.toContain(token);
      expect(text).not.toContain(token.split('.')[2]);
    }
  });
});

describe('issuer.requireBearer(): other reasons', () => {
  const dataDir = tempDir();
  const log = pinoCapture('debug');
  let issuer: Issuer;
  let e: Express;

  beforeAll(async () => {
    issuer = createIssuer({ issuer: 'http://issuer.test', audience: AUDIENCE, dataDir, logger: log.logger });
    e = express();
    e.use(issuer.router());
    e.get('/write', issuer.requireBearer({ scope: 'orders:write' }), sendAuth);
    e.get('/me', issuer.requireBearer(), sendAuth);
    await issuer.ready();
  });

  afterAll(async () => {
    await issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  beforeEach(() => {
    log.lines.length = 0;
  });

  it('insufficient_scope with the required and granted scopes and the client', async () => {
    const client = await issuer.clients.create({ name: 'reader', scopes: ['orders:read'] });
    const token = await fetchToken(e, client);
    const res = await request(e).get('/write').set('Authorization', `Bearer ${token}`);
    expect(res.status).toBe(403);
    expect(log.events('token.rejected')).toEqual([
      expect.objectContaining({
        level: PINO_INFO,
        reason: 'insufficient_scope',
        expected: ['orders:write'],
        received: ['orders:read'],
        client_id: client.clientId,
        ip: '127.0.0.1',
        method: 'GET',
        path: '/write',
      }),
    ]);
    expect(log.lines.join('')).not.toContain(token.split('.')[2]);
  });

  it('a malformed token, and a malformed header (invalid_request, reason malformed_header), without echoing either', async () => {
    expectRefused(await request(e).get('/me').set('Authorization', 'Bearer abc.def.ghi'));
    const res = await request(e).get('/me').set('Authorization', 'Bearer secret-looking$value');
    expect(res.status).toBe(400);
    expect(log.events('token.rejected').map((l) => l.reason)).toEqual(['malformed', 'malformed_header']);
    const text = log.lines.join('');
    expect(text).not.toContain('abc.def.ghi');
    expect(text).not.toContain('secret-looking');
  });

  it('a token whose header or claims hold arrays nested thousands deep: 401 invalid_token, logged without a stack, never a 500', async () => {
    const deep = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    const b64 = (json: string) => Buffer.from(json).toString('base64url');
    const header = b64(`{"alg":"ES256","typ":"at+jwt","kid":"k"}`);
    for (const token of [`${b64(`{"alg":${deep(4500)}}`)}.e30.AAAA`, `${b64(`{"typ":${deep(4500)},"alg":"ES256"}`)}.e30.AAAA`, `${header}.${b64(`{"iss":${deep(4500)},"sub":"s","client_id":"c","aud":"a","iat":1,"exp":2,"jti":"j"}`)}.AAAA`]) {
      expectRefused(await request(e).get('/me').set('Authorization', `Bearer ${token}`));
    }
    expect(log.events('token.rejected').map((l) => l.reason)).toEqual(['wrong_alg', 'wrong_typ', 'invalid_claim']);
    expect(log.lines.join('')).not.toContain('RangeError');
  });

  it('text of an unverified token is logged with bidi overrides, line separators and controls escaped, one visible line', async () => {
    const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const now = Math.floor(Date.now() / 1000);
    const claims = { iss: 'http://evil.test/\u2028{"event":"token.issued"}', sub: 'x', client_id: 'admin\u202egnp.exe', aud: AUDIENCE, iat: now, exp: now + 60, jti: 'j' };
    const forged = `${b64({ alg: 'ES256', typ: 'at+jwt', kid: 'k\u0085\u2066' })}.${b64(claims)}.AAAA`;
    expectRefused(await request(e).get('/me').set('Authorization', `Bearer ${forged}`));
    const [line] = log.events('token.rejected');
    expect(line).toMatchObject({
      reason: 'wrong_issuer',
      received: 'http://evil.test/\\u2028{"event":"token.issued"}',
      claimed_client_id: 'admin\\u202egnp.exe',
      kid: 'k\\u0085\\u2066',
    });
    expect(line.detail).toContain('\\u2028');
    const text = log.lines.join('');
    for (const raw of ['\u2028', '\u202e', '\u0085', '\u2066']) expect(text).not.toContain(raw);
  });

  it('says where the refused request came from and went, never its query', async () => {
    expectRefused(await request(e).get('/me?note=should-not-be-logged&x=1').set('Authorization', 'Bearer abc.def.ghi'));
    expect(log.events('token.rejected')).toEqual([expect.objectContaining({ reason: 'malformed', ip: '127.0.0.1', method: 'GET', path: '/me' })]);
    expect(log.lines.join('')).not.toContain('should-not-be-logged');
  });

  it('a request without a token is not a refused token: nothing logged', async () => {
    expect((await request(e).get('/me')).status).toBe(401);
    expect(log.events('token.rejected')).toEqual([]);
  });
});

describe('each cause of a 400 invalid_request has its own reason, window and series; the wire says invalid_request', () => {
  const dataDir = tempDir();
  const log = pinoCapture();
  const registry = new Registry();
  let issuer: Issuer;
  let e: Express;

  beforeAll(async () => {
    issuer = createIssuer({ issuer: 'http://issuer.test', audience: AUDIENCE, dataDir, logger: log.logger, metrics: { registry } });
    e = express();
    e.use(issuer.router());
    e.get('/me', issuer.requireBearer(), sendAuth);
    e.post('/form', express.urlencoded({ extended: false }), issuer.requireBearer(), sendAuth);
    await issuer.ready();
  });

  afterAll(async () => {
    await issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('token in the URL, in the body, in both or beside the header, two Authorization headers, a malformed header: one info line each, from one address', async () => {
    const client = await issuer.clients.create({ name: 'svc', scopes: [] });
    const token = await fetchToken(e, client);
    const answers = [
      await request(e).get(`/me?access_token=${token}`),
      await request(e).post('/form').type('form').send({ access_token: token }),
      await request(e).get(`/me?access_token=${token}`).set('Authorization', `Bearer ${token}`),
      await request(e).post(`/form?access_token=${token}`).type('form').send({ access_token: token }),
      await request(e).get('/me').set('Authorization', [`Bearer ${token}`, `Bearer ${token}`] as unknown as string),
      await request(e).get('/me').set('Authorization', 'Bearer a,b'),
      await request(e).get('/me').set('Authorization', 'Bearer'),
    ];
    for (const res of answers) {
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_request');
    }
    expect(log.events('token.rejected').map((l) => [l.level, l.reason, l.detail])).toEqual([
      [PINO_INFO, 'token_in_url', 'send the access token in the Authorization header, not in the URL or the body'],
      [PINO_INFO, 'token_in_body', 'send the access token in the Authorization header, not in the URL or the body'],
      [PINO_INFO, 'multiple_tokens', 'send the access token in the Authorization header, not in the URL or the body'],
      [PINO_INFO, 'repeated_authorization', 'send one Authorization header'],
      [PINO_INFO, 'malformed_header', 'malformed Bearer authorization header'],
    ]);
    // the second multiple_tokens (query and body) and malformed_header ("Bearer" alone): same reason, same address, same minute, at debug
    const text = await registry.metrics();
    const series = (reason: string) => new RegExp(`^ecc_bearer_checks_total\\{outcome="invalid_request",reason="${reason}"\\} (\\d+)$`, 'm').exec(text)?.[1];
    expect(['token_in_url', 'token_in_body', 'multiple_tokens', 'repeated_authorization', 'malformed_header', 'both_schemes', 'invalid_request'].map((r) => [r, series(r)])).toEqual([
      ['token_in_url', '1'],
      ['token_in_body', '1'],
      ['multiple_tokens', '2'],
      ['repeated_authorization', '1'],
      ['malformed_header', '2'],
      ['both_schemes', '0'],
      ['invalid_request', '0'],
    ]);
    expect(log.lines.join('')).not.toContain(token.split('.')[2]);
  });
});

/**
 * For one describe block: an issuer behind a trusted proxy (X-Forwarded-For gives the caller's address) whose
 * app has GET /me behind requireBearer(), logging to `log`; made before the block's tests, closed after them.
 */
function issuerBehindProxy(log: ReturnType<typeof pinoCapture>): { readonly issuer: Issuer; readonly app: Express } {
  const dataDir = tempDir();
  let issuer: Issuer;
  let app: Express;
  beforeAll(async () => {
    issuer = createIssuer({ issuer: 'http://issuer.test', audience: AUDIENCE, dataDir, logger: log.logger });
    app = express();
    app.set('trust proxy', true);
    app.use(issuer.router());
    app.get('/me', issuer.requireBearer(), sendAuth);
    await issuer.ready();
  });
  afterAll(async () => {
    await issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return {
    get issuer() {
      return issuer;
    },
    get app() {
      return app;
    },
  };
}

describe('the once-a-minute window is per reason and client (or address, for a token not verified)', () => {
  const log = pinoCapture('debug');
  const s = issuerBehindProxy(log);

  beforeEach(() => {
    log.lines.length = 0;
  });

  const revoked = async (client: { clientId: string; clientSecret: string }) => {
    const token = await fetchToken(s.app, client);
    expect((await request(s.app).post('/oauth/revoke').auth(client.clientId, client.clientSecret).type('form').send({ token })).status).toBe(200);
    return token;
  };

  it("a client replaying its own revoked token does not push another client's revoked token down to debug", async () => {
    const noisy = await s.issuer.clients.create({ name: 'noisy', scopes: [] });
    const victim = await s.issuer.clients.create({ name: 'victim', scopes: [] });
    const noisyToken = await revoked(noisy);
    const victimToken = await revoked(victim);
    for (let i = 0; i < 5; i++) expect((await request(s.app).get('/me').set('Authorization', `Bearer ${noisyToken}`)).status).toBe(401);
    // the victim's stolen (revoked) token, used from elsewhere
    expect((await request(s.app).get('/me').set('X-Forwarded-For', '203.0.113.9').set('Authorization', `Bearer ${victimToken}`)).status).toBe(401);
    const lines = log.events('token.rejected').map((l) => [l.level, l.reason, l.client_id, l.ip]);
    expect(lines).toEqual([
      [PINO_INFO, 'revoked', noisy.clientId, '127.0.0.1'],
      [PINO_DEBUG, 'revoked', noisy.clientId, '127.0.0.1'],
      [PINO_DEBUG, 'revoked', noisy.clientId, '127.0.0.1'],
      [PINO_DEBUG, 'revoked', noisy.clientId, '127.0.0.1'],
      [PINO_DEBUG, 'revoked', noisy.clientId, '127.0.0.1'],
      [PINO_INFO, 'revoked', victim.clientId, '203.0.113.9'],
    ]);
  });

  it('tokens not verified are counted by address (an IPv6 address by its /64), whatever client they claim', async () => {
    const send = (ip: string, token = 'abc.def.ghi') => request(s.app).get('/me').set('X-Forwarded-For', ip).set('Authorization', `Bearer ${token}`);
    for (let i = 0; i < 3; i++) expectRefused(await send('198.51.100.1'));
    expectRefused(await send('198.51.100.2'));
    expectRefused(await send('2001:db8:1:2::1'));
    expectRefused(await send('2001:db8:1:2::ffff'));
    const lines = log.events('token.rejected').map((l) => [l.level, l.reason, l.ip]);
    expect(lines).toEqual([
      [PINO_INFO, 'malformed', '198.51.100.1'],
      [PINO_DEBUG, 'malformed', '198.51.100.1'],
      [PINO_DEBUG, 'malformed', '198.51.100.1'],
      [PINO_INFO, 'malformed', '198.51.100.2'],
      [PINO_INFO, 'malformed', '2001:db8:1:2::1'],
      [PINO_DEBUG, 'malformed', '2001:db8:1:2::ffff'],
    ]);
  });
});

describe('addresses past 20 a minute for one reason are counted together (an IPv6 /64 costs little)', () => {
  const log = pinoCapture();
  const s = issuerBehindProxy(log);

  it('malformed tokens from 30 /64s at the default level: 20 lines with their own address, one for the rest, not 30', async () => {
    for (let i = 1; i <= 30; i++) expectRefused(await request(s.app).get('/me').set('X-Forwarded-For', `2001:db8:${i.toString(16)}::1`).set('Authorization', 'Bearer abc.def.ghi'));
    const lines = log.events('token.rejected');
    expect(lines.map((l) => [l.level, l.reason, l.ip, l.other_addresses])).toEqual([
      ...Array.from({ length: 20 }, (_, i) => [PINO_INFO, 'malformed', `2001:db8:${(i + 1).toString(16)}::1`, undefined]),
      [PINO_INFO, 'malformed', '2001:db8:15::1', true],
    ]);
    expect(lines[20]).toMatchObject({ example_addresses: ['2001:db8:15:0::/64'], debug_only_since_last: 0 });
    expect(lines[20].msg).toBe('access token refused: malformed, from addresses past the first 20 in 60 s, counted together (more of these within 60 s are logged at debug level)');
  });
});

describe('standalone requireBearer()', () => {
  const dataDir = tempDir();
  let issuer: Issuer;
  let e: Express;

  beforeAll(async () => {
    issuer = createIssuer({ issuer: 'http://issuer.test', audience: 'http://other-api.test', dataDir, logger: false });
    e = express();
    e.use(issuer.router());
    await issuer.ready();
  });

  afterAll(async () => {
    await issuer.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('logs wrong_audience once per minute per middleware, with both values', async () => {
    const log = pinoCapture();
    const api = express();
    api.get('/orders', requireBearer({ issuer: 'http://issuer.test', audience: AUDIENCE, keys: await issuer.keys.jwks(), logger: log.logger }), sendAuth);
    const client = await issuer.clients.create({ name: 'svc', scopes: [] });
    const token = await fetchToken(e, client);
    for (let i = 0; i < 3; i++) expectRefused(await request(api).get('/orders').set('Authorization', `Bearer ${token}`));
    expect(log.events('token.rejected')).toEqual([
      expect.objectContaining({ level: PINO_INFO, reason: 'wrong_audience', expected: AUDIENCE, received: 'http://other-api.test', claimed_client_id: client.clientId }),
    ]);
    expect(log.lines.join('')).not.toContain(token.split('.')[2]);
  });

  it('takes a logger without debug(): the info line still comes, the debug ones are dropped', async () => {
    const infos: Record<string, unknown>[] = [];
    const logger: Logger = { info: (obj) => void infos.push(obj), warn: () => undefined, error: () => undefined };
    const api = express();
    api.get('/orders', requireBearer({ issuer: 'http://issuer.test', audience: AUDIENCE, keys: await issuer.keys.jwks(), logger }), sendAuth);
    for (let i = 0; i < 3; i++) expectRefused(await request(api).get('/orders').set('Authorization', 'Bearer a.b.c'));
    expect(infos).toEqual([expect.objectContaining({ event: 'token.rejected', reason: 'malformed' })]);
  });
});
