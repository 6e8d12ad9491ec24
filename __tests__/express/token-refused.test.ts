/**
 * Why the token, revocation and introspection endpoints refused a request:
 * one log line per reason and client (or address, before the client is
 * known) in a minute at info or warn, the rest at debug, with the client_id
 * only once the client is authenticated, and never a secret or a token.
 */
import pino from 'pino';
import request from 'supertest';
import * as visibleText from '../../lib/shared/visible-text';
import { setup, type TestSetup } from '../helpers/app';
import { fetchToken } from '../helpers/tokens';

type Line = { level: string; obj: Record<string, unknown>; msg?: string };

describe('refusals at the issuer endpoints are logged with their reason, throttled', () => {
  let s: TestSetup;
  const lines: Line[] = [];
  const at = (level: string) => (obj: Record<string, unknown>, msg?: string) => void lines.push({ level, obj, msg });
  const events = (event: string) => lines.filter((l) => l.obj.event === event);
  const from = (ip: string) => ({ 'X-Forwarded-For': ip });

  beforeEach(async () => {
    lines.length = 0;
    s = await setup({
      resources: ['http://other.test/api'],
      bruteForce: { maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 50, window: 600 },
      logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
    });
    s.app.set('trust proxy', true);
  });
  afterEach(() => s.close());

  const token = (fields: Record<string, string>, ip = '198.51.100.1') => request(s.app).post('/oauth/token').set(from(ip)).type('form').send(fields);

  it('token.refused: scope, resource, grant type, credentials in the URL, a client that must use DPoP; client_id once authenticated; info once per reason and client a minute', async () => {
    const c = await s.issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const d = await s.issuer.clients.create({ name: 'dpop-only', scopes: ['orders:read'], requireDpop: true });
    const good = { grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret };

    expect((await token({ ...good, scope: 'orders:write' })).body.error).toBe('invalid_scope');
    expect((await token({ ...good, scope: 'orders:write' })).body.error).toBe('invalid_scope');
    expect((await token({ ...good, resource: 'http://elsewhere.test/' })).body.error).toBe('invalid_target');
    expect((await token({ ...good, grant_type: 'password' })).body.error).toBe('unsupported_grant_type');
    const inUrl = await request(s.app).post(`/oauth/token?client_secret=${c.clientSecret}`).set(from('198.51.100.2')).type('form').send(good);
    expect(inUrl.status).toBe(400);
    expect((await token({ grant_type: 'client_credentials', client_id: d.clientId, client_secret: d.clientSecret })).status).toBe(400);

    const refused = events('token.refused').map((l) => [l.level, l.obj.reason, l.obj.client_id, l.obj.ip]);
    expect(refused).toEqual([
      ['info', 'invalid_scope', c.clientId, '198.51.100.1'],
      ['debug', 'invalid_scope', c.clientId, '198.51.100.1'],
      ['info', 'invalid_target', c.clientId, '198.51.100.1'],
      // refused before the client is known: no client_id
      ['info', 'unsupported_grant_type', undefined, '198.51.100.1'],
      ['info', 'credentials_in_url', undefined, '198.51.100.2'],
      ['info', 'dpop_required', d.clientId, '198.51.100.1'],
    ]);
    expect(events('token.refused')[0].obj).toMatchObject({ error: 'invalid_scope', status: 400, detail: expect.stringContaining('orders:write') });
    expect(JSON.stringify(lines)).not.toContain(c.clientSecret);
    expect(JSON.stringify(lines)).not.toContain(d.clientSecret);
  });

  it('token.refused before the client is known: one window per address, an IPv6 address by its /64 as for every refusal line', async () => {
    const send = (ip: string) => token({ grant_type: 'password' }, ip);
    for (const ip of ['2001:db8:7:1::1', '2001:db8:7:1::2', '2001:db8:7:1:ffff:ffff:ffff:ffff', '2001:db8:7:2::1', '::ffff:198.51.100.40', '198.51.100.40']) {
      expect((await send(ip)).body.error).toBe('unsupported_grant_type');
    }
    expect(events('token.refused').map((l) => [l.level, l.obj.ip])).toEqual([
      ['info', '2001:db8:7:1::1'],
      ['debug', '2001:db8:7:1::2'],
      ['debug', '2001:db8:7:1:ffff:ffff:ffff:ffff'],
      ['info', '2001:db8:7:2::1'],
      ['info', '::ffff:198.51.100.40'],
      ['debug', '198.51.100.40'],
    ]);
  });

  it('token.refused: each cause of an invalid_request has its own reason and window (the wire still says invalid_request); two methods name the Basic client', async () => {
    const c = await s.issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const good = { grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret };
    const ip = '198.51.100.30';
    const post = () => request(s.app).post('/oauth/token').set(from(ip));
    const answers = [
      await post().auth(c.clientId, c.clientSecret).type('form').send({ grant_type: 'client_credentials', client_secret: c.clientSecret }),
      await post().type('form').send({ client_id: c.clientId, client_secret: c.clientSecret }),
      await post().type('form').send(`grant_type=client_credentials&grant_type=client_credentials&client_id=${c.clientId}&client_secret=${c.clientSecret}`),
      await post().set('Authorization', 'Basic !!!').type('form').send({ grant_type: 'client_credentials' }),
      await post().type('json').send(good),
      await request(s.app).get('/oauth/token').set(from(ip)),
      await post().type('form').send(`grant_type=client_credentials&pad=${'x'.repeat(9000)}`),
      await post().set('Content-Type', 'application/x-www-form-urlencoded').set('Content-Encoding', 'gzip').send('xx'),
    ];
    expect(answers.map((r) => [r.status, r.body.error])).toEqual([
      [400, 'invalid_request'],
      [400, 'invalid_request'],
      [400, 'invalid_request'],
      [400, 'invalid_request'],
      [400, 'invalid_request'],
      [405, 'invalid_request'],
      [413, 'invalid_request'],
      [415, 'invalid_request'],
    ]);
    const refused = events('token.refused').map((l) => [l.level, l.obj.reason, l.obj.error, l.obj.status]);
    expect(refused).toEqual([
      ['info', 'two_auth_methods', 'invalid_request', 400],
      ['info', 'missing_grant_type', 'invalid_request', 400],
      ['info', 'repeated_parameter', 'invalid_request', 400],
      ['info', 'malformed_basic', 'invalid_request', 400],
      ['info', 'unsupported_content_type', 'invalid_request', 400],
      ['info', 'method_not_allowed', 'invalid_request', 405],
      ['info', 'body_too_large', 'invalid_request', 413],
      ['info', 'compressed_body', 'invalid_request', 415],
    ]);
    // not authenticated, so not client_id: the client the Basic header named
    expect(events('token.refused')[0].obj).toMatchObject({ claimed_client_id: c.clientId, ip, detail: expect.stringContaining('one method only') });
    expect(events('token.refused')[0].obj.client_id).toBeUndefined();
    expect(events('token.refused')[2].obj.detail).toBe('parameter grant_type is repeated');
    expect(JSON.stringify(lines)).not.toContain(c.clientSecret);
  });

  it('token.refused for invalid_target names the resource asked for, shortened and escaped', async () => {
    const c = await s.issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const good = { grant_type: 'client_credentials', client_id: c.clientId, client_secret: c.clientSecret };
    expect((await token({ ...good, resource: 'http://elsewhere.test/\u202egnp' })).body.error).toBe('invalid_target');
    expect((await token({ ...good, resource: `http://elsewhere.test/${'a'.repeat(300)}` }, '198.51.100.31')).body.error).toBe('invalid_target');
    const [bidi, long] = events('token.refused').map((l) => l.obj);
    expect(bidi).toMatchObject({ reason: 'invalid_target', client_id: c.clientId, resource: 'http://elsewhere.test/\\u202egnp' });
    expect(long.resource).toBe(`http://elsewhere.test/${'a'.repeat(178)}…`);
  });

  it('client.auth_failed names the endpoint, and each endpoint has its own window; no_credentials names the client_id the body sent', async () => {
    const c = await s.issuer.clients.create({ name: 'svc' });
    const ip = '198.51.100.40';
    const unknown = (path: string, id: string) => request(s.app).post(path).set(from(ip)).type('form').send({ grant_type: 'client_credentials', client_id: id, client_secret: 'x', token: 't' });
    expect((await unknown('/oauth/token', 'nobody-1')).status).toBe(401);
    expect((await unknown('/oauth/token', 'nobody-2')).status).toBe(401);
    expect((await unknown('/oauth/introspect', 'nobody-3')).status).toBe(401);
    expect((await unknown('/oauth/revoke', 'nobody-4')).status).toBe(401);
    expect((await token({ grant_type: 'client_credentials', client_id: c.clientId }, ip)).status).toBe(401);
    const failed = events('client.auth_failed').map((l) => [l.level, l.obj.endpoint, l.obj.reason, l.obj.client_id]);
    expect(failed).toEqual([
      ['warn', 'token', 'unknown_client', 'nobody-1'],
      ['debug', 'token', 'unknown_client', 'nobody-2'],
      ['warn', 'introspection', 'unknown_client', 'nobody-3'],
      ['warn', 'revocation', 'unknown_client', 'nobody-4'],
      ['warn', 'token', 'no_credentials', c.clientId],
    ]);
    expect(events('client.auth_failed')[2].msg).toMatch(/^client authentication failed at \/oauth\/introspect /);
  });

  // Any ended secret was logged as expired_secret, "a caller that missed a rotation", the one ended at once by
  // rotate-secret without --keep-old (the response to a leak) too: an attacker still using a leaked secret looked harmless.
  it('client.auth_failed tells a secret ended at once (revoked_secret) from one ended after its overlap (expired_secret) and from a wrong one, with how long ago it ended; the answer is the same 401', async () => {
    // only Date is faked, before the issuer starts (it keeps the Date.now it was given)
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
    const clocked = await setup({ logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } });
    clocked.app.set('trust proxy', true);
    try {
      const c = await clocked.issuer.clients.create({ name: 'svc' });
      // the first secret ends an hour after this rotation, its overlap over
      const overlapped = await clocked.issuer.clients.rotateSecret(c.clientId, { keepOldFor: 3600 });
      jest.setSystemTime(Date.now() + 3600_000 + 90_000);
      // the second ends at once: rotate-secret without --keep-old, as after a leak
      const rotated = await clocked.issuer.clients.rotateSecret(c.clientId, { keepOldFor: 0 });
      jest.setSystemTime(Date.now() + 125_000);
      const send = (secret: string, ip: string) =>
        request(clocked.app).post('/oauth/token').set(from(ip)).type('form').send({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: secret });
      const expired = await send(c.clientSecret, '198.51.100.70');
      const revoked = await send(overlapped!.clientSecret, '198.51.100.73');
      const wrong = await send('not-a-secret-of-this-client', '198.51.100.71');
      expect(wrong.status).toBe(401);
      for (const res of [expired, revoked]) expect([res.status, res.body, res.headers['www-authenticate']]).toEqual([wrong.status, wrong.body, wrong.headers['www-authenticate']]);
      expect((await send(rotated!.clientSecret, '198.51.100.72')).status).toBe(200);
      expect(events('client.auth_failed').map((l) => [l.level, l.obj.reason, l.obj.client_id, l.obj.ip, l.obj.ended_ago_s])).toEqual([
        ['warn', 'expired_secret', c.clientId, '198.51.100.70', 215],
        ['warn', 'revoked_secret', c.clientId, '198.51.100.73', 125],
        ['warn', 'wrong_secret', c.clientId, '198.51.100.71', undefined],
      ]);
      expect(JSON.stringify(lines)).not.toContain(c.clientSecret);
      expect(JSON.stringify(lines)).not.toContain(overlapped!.clientSecret);
    } finally {
      jest.useRealTimers();
      await clocked.close();
    }
  });

  it('revocation.refused and introspection.refused: another client\'s token, no token; with the client_id and what was tried', async () => {
    const a = await s.issuer.clients.create({ name: 'a', scopes: ['orders:read'] });
    const b = await s.issuer.clients.create({ name: 'b', scopes: ['orders:read'] });
    const bToken = await fetchToken(s.app, b);
    const revoke = await request(s.app).post('/oauth/revoke').set(from('198.51.100.3')).auth(a.clientId, a.clientSecret).type('form').send({ token: bToken });
    expect(revoke.status).toBe(400);
    expect((await request(s.app).post('/oauth/revoke').auth(a.clientId, a.clientSecret).type('form').send({})).status).toBe(400);
    expect((await request(s.app).post('/oauth/introspect').auth(a.clientId, a.clientSecret).type('form').send({})).status).toBe(400);

    // another client's token and a missing token are two causes: each its own reason, each at info
    expect(events('revocation.refused').map((l) => [l.level, l.obj.reason, l.obj.client_id])).toEqual([
      ['info', 'invalid_request', a.clientId],
      ['info', 'missing_token', a.clientId],
    ]);
    expect(events('revocation.refused')[0].obj).toMatchObject({ ip: '198.51.100.3', detail: `client ${a.clientId} tried to revoke a token of ${b.clientId}` });
    expect(events('introspection.refused').map((l) => [l.level, l.obj.reason, l.obj.client_id, l.obj.detail])).toEqual([['info', 'missing_token', a.clientId, 'missing token']]);
    expect(JSON.stringify(lines)).not.toContain(bToken);
  });

  it('introspection.inactive at debug: why a token was answered {"active":false}, with the caller and the token\'s client once verified, never the token', async () => {
    const rs = await s.issuer.clients.create({ name: 'rs', permissions: ['introspect'] });
    const svc = await s.issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const other = await s.issuer.clients.create({ name: 'other-api-client', scopes: ['orders:read'], resources: ['http://other.test/api'] });
    const revoked = await fetchToken(s.app, svc);
    expect((await request(s.app).post('/oauth/revoke').auth(svc.clientId, svc.clientSecret).type('form').send({ token: revoked })).status).toBe(200);
    const foreign = (await token({ grant_type: 'client_credentials', client_id: other.clientId, client_secret: other.clientSecret, resource: 'http://other.test/api' })).body.access_token as string;
    const forged = `${revoked.split('.').slice(0, 2).join('.')}.AAAA`;
    const introspect = (t: string) => request(s.app).post('/oauth/introspect').set(from('198.51.100.80')).auth(rs.clientId, rs.clientSecret).type('form').send({ token: t });
    for (const t of ['not-a-token', revoked, foreign, forged]) expect((await introspect(t)).body).toEqual({ active: false });
    expect(events('introspection.inactive').map((l) => [l.level, l.obj.reason, l.obj.client_id, l.obj.token_client_id, l.obj.ip])).toEqual([
      ['debug', 'malformed', rs.clientId, undefined, '198.51.100.80'],
      ['debug', 'revoked', rs.clientId, svc.clientId, '198.51.100.80'],
      ['debug', 'other_audience', rs.clientId, other.clientId, '198.51.100.80'],
      ['debug', 'bad_signature', rs.clientId, undefined, '198.51.100.80'],
    ]);
    const text = JSON.stringify(lines);
    for (const t of [revoked, foreign]) {
      expect(text).not.toContain(t);
      expect(text).not.toContain(t.split('.')[2]);
    }
  });

  it('introspection without the permission: warn once a minute per client, the rest at debug', async () => {
    const a = await s.issuer.clients.create({ name: 'a' });
    for (let i = 0; i < 4; i++) {
      const res = await request(s.app).post('/oauth/introspect').auth(a.clientId, a.clientSecret).type('form').send({ token: 'x' });
      expect(res.body).toEqual({ active: false });
    }
    // logged as introspection.refused (warn), not once more as introspection.inactive
    expect(events('introspection.inactive')).toEqual([]);
    expect(events('introspection.refused').map((l) => [l.level, l.obj.reason, l.obj.ip])).toEqual([
      ['warn', 'no_permission', '127.0.0.1'],
      ['debug', 'no_permission', '127.0.0.1'],
      ['debug', 'no_permission', '127.0.0.1'],
      ['debug', 'no_permission', '127.0.0.1'],
    ]);
  });

  it('client.auth_failed: requests without credentials or with unknown ids from one address give one warn line a minute; each address, and each registered client, its own', async () => {
    const c = await s.issuer.clients.create({ name: 'svc' });
    for (let i = 0; i < 20; i++) expect((await token({ grant_type: 'client_credentials' }, '198.51.100.5')).status).toBe(401);
    for (let i = 0; i < 5; i++) await token({ grant_type: 'client_credentials', client_id: `nobody-${i}`, client_secret: 'x' }, '198.51.100.5');
    expect((await token({ grant_type: 'client_credentials' }, '198.51.100.6')).status).toBe(401);
    await token({ grant_type: 'client_credentials', client_id: c.clientId, client_secret: 'wrong' }, '198.51.100.5');
    const warned = events('client.auth_failed').filter((l) => l.level === 'warn').map((l) => [l.obj.reason, l.obj.ip, l.obj.client_id]);
    expect(warned).toEqual([
      ['no_credentials', '198.51.100.5', ''],
      ['unknown_client', '198.51.100.5', 'nobody-0'],
      ['no_credentials', '198.51.100.6', ''],
      ['wrong_secret', '198.51.100.5', c.clientId],
    ]);
    expect(events('client.auth_failed').filter((l) => l.level === 'debug')).toHaveLength(23);
  });

  it('one address sending made-up client_ids and malformed assertions: one warn line a minute for each kind, the rest at debug (a flood does not set the log\'s rate)', async () => {
    const ip = '198.51.100.20';
    for (let i = 0; i < 80; i++) await token({ grant_type: 'client_credentials', client_id: `made-up-${i}`, client_secret: 'x' }, ip);
    for (let i = 0; i < 10; i++) {
      await token({ grant_type: 'client_credentials', client_id: `made-up-a${i}`, client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer', client_assertion: `x${i}` }, ip);
    }
    const warnings = lines.filter((l) => l.level === 'warn' && l.obj.ip === ip).map((l) => [l.obj.event, l.obj.reason ?? '']);
    expect(warnings).toEqual([
      ['client.auth_failed', 'unknown_client'],
      ['client.rate_limited', ''],
    ]);
    expect(lines.filter((l) => l.level === 'debug' && l.obj.ip === ip).length).toBeGreaterThanOrEqual(80);
  });

  it('client.rate_limited: a lockout at each address shows at warn, whatever other lockouts came first', async () => {
    const one = await s.issuer.clients.create({ name: 'one' });
    const two = await s.issuer.clients.create({ name: 'two' });
    for (let i = 0; i < 4; i++) await token({ grant_type: 'client_credentials', client_id: one.clientId, client_secret: 'wrong' }, '198.51.100.10');
    for (let i = 0; i < 4; i++) await token({ grant_type: 'client_credentials', client_id: two.clientId, client_secret: 'wrong' }, '198.51.100.11');
    const limited = events('client.rate_limited').map((l) => [l.level, l.obj.client_id, l.obj.ip]);
    expect(limited).toEqual([
      ['warn', one.clientId, '198.51.100.10'],
      ['debug', one.clientId, '198.51.100.10'],
      ['warn', two.clientId, '198.51.100.11'],
      ['debug', two.clientId, '198.51.100.11'],
    ]);
  });
});

describe('client.rate_limited says which limit refused the request, with the counts', () => {
  let s: TestSetup;
  const lines: Line[] = [];
  const at = (level: string) => (obj: Record<string, unknown>, msg?: string) => void lines.push({ level, obj, msg });
  const events = (event: string) => lines.filter((l) => l.obj.event === event);
  const token = (fields: Record<string, string>, ip: string) => request(s.app).post('/oauth/token').set('X-Forwarded-For', ip).type('form').send(fields);

  beforeEach(async () => {
    lines.length = 0;
    s = await setup({
      bruteForce: { maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 4, window: 600 },
      logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') },
    });
    s.app.set('trust proxy', true);
  });
  afterEach(() => s.close());

  it('client_address: this client_id failed too often from this address', async () => {
    const one = await s.issuer.clients.create({ name: 'one' });
    for (let i = 0; i < 2; i++) expect((await token({ grant_type: 'client_credentials', client_id: one.clientId, client_secret: 'wrong' }, '198.51.100.50')).status).toBe(401);
    expect((await token({ grant_type: 'client_credentials', client_id: one.clientId, client_secret: one.clientSecret }, '198.51.100.50')).status).toBe(429);
    const [line] = events('client.rate_limited');
    expect(line.level).toBe('warn');
    expect(line.obj).toMatchObject({ limit: 'client_address', endpoint: 'token', client_id: one.clientId, ip: '198.51.100.50', client_address_failures: 2, address_failures: 2, max_failures: 2 });
    expect(line.msg).toMatch(/^too many failed client authentications for this client_id from this address/);
  });

  it('address: a guesser used up the address, and the next client from it is named as this request\'s client_id, not as the culprit', async () => {
    const innocent = await s.issuer.clients.create({ name: 'innocent' });
    for (let i = 0; i < 4; i++) expect((await token({ grant_type: 'client_credentials', client_id: `guess-${i}`, client_secret: 'x' }, '198.51.100.60')).status).toBe(401);
    expect((await token({ grant_type: 'client_credentials', client_id: innocent.clientId, client_secret: innocent.clientSecret }, '198.51.100.60')).status).toBe(429);
    const [line] = events('client.rate_limited');
    expect(line.obj).toMatchObject({ limit: 'address', client_id: innocent.clientId, address_failures: 4, client_address_failures: 0, max_failures: 4 });
    expect(line.msg).toMatch(/from this address: every request from it is refused/);
    expect(line.msg).toMatch(/not necessarily one that failed/);
  });
});

describe('introspection.inactive is built only for a logger that writes debug lines', () => {
  it('a pino logger at info: no line and nothing escaped for it; set to debug while running: the line, escaped', async () => {
    const out: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void out.push(JSON.parse(line) as Record<string, unknown>) });
    const s = await setup({ logger });
    const escape = jest.spyOn(visibleText, 'visibleFields');
    try {
      const rs = await s.issuer.clients.create({ name: 'rs', permissions: ['introspect'] });
      const introspect = (t: string) => request(s.app).post('/oauth/introspect').auth(rs.clientId, rs.clientSecret).type('form').send({ token: t });
      const escapedFor = () => escape.mock.calls.filter(([line]) => line.event === 'introspection.inactive').length;
      for (let i = 0; i < 3; i++) expect((await introspect('not-a-token')).body).toEqual({ active: false });
      expect(out.filter((l) => l.event === 'introspection.inactive')).toEqual([]);
      expect(escapedFor()).toBe(0);

      logger.level = 'debug';
      expect((await introspect('not-a-token')).body).toEqual({ active: false });
      expect(out.filter((l) => l.event === 'introspection.inactive')).toEqual([expect.objectContaining({ level: 20, reason: 'malformed', client_id: rs.clientId })]);
      expect(escapedFor()).toBe(1);
    } finally {
      escape.mockRestore();
      await s.close();
    }
  });
});
