/**
 * Prometheus metrics: opt-in on the app's own prom-client registry, scraped
 * as text after real requests.
 */
import { rmSync } from 'node:fs';
import express, { type Express, type Request, type Response } from 'express';
import { Registry } from 'prom-client';
import request from 'supertest';
import { createIssuer, openEmbeddedStore, requireBearer, StoreUnavailableError, TemporarilyUnavailableError, ServerError, TooManyRequestsError, InvalidScopeError, InvalidClientError, type Issuer, type IssuerOptions } from '../../lib';
import { managementCheck, tokenOutcome } from '../../lib/metrics/counts';
import { InvalidDpopProofError, InvalidTargetError, UseDpopNonceError } from '../../lib/errors';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { fetchToken, freshKey, mint } from '../helpers/tokens';

const sendAuth = (req: Request, res: Response): void => {
  res.json(req.auth);
};

/** The value of one series in the exposition text (undefined when absent). */
function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

const dirs: string[] = [];
const issuers: Issuer[] = [];

async function start(options: Partial<IssuerOptions>): Promise<{ issuer: Issuer; app: Express }> {
  const dataDir = tempDir();
  dirs.push(dataDir);
  const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, ...options });
  issuers.push(issuer);
  await issuer.ready();
  const app = express();
  app.use(issuer.router());
  app.get('/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
  app.get('/write', issuer.requireBearer({ scope: 'orders:write' }), sendAuth);
  return { issuer, app };
}

afterAll(async () => {
  for (const i of issuers) await i.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const form = (fields: Record<string, string>) => fields;

describe('an issuer with metrics on', () => {
  it('counts token requests by outcome and times them', async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry } });
    const client = await issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const post = (fields: Record<string, string>) => request(app).post('/oauth/token').type('form').send(fields);
    const good = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret };

    expect((await post(good)).status).toBe(200);
    expect((await post(good)).status).toBe(200);
    expect((await post({ ...good, client_secret: 'wrong' })).status).toBe(401);
    expect((await post(form({ client_id: client.clientId, client_secret: client.clientSecret }))).status).toBe(400); // no grant_type
    expect((await post({ ...good, grant_type: 'password' })).status).toBe(400);
    expect((await post({ ...good, scope: 'orders:write' })).status).toBe(400);
    expect((await request(app).get('/oauth/token')).status).toBe(405);

    const text = await registry.metrics();
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(2);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="wrong_secret"}')).toBe(1);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_request"}')).toBe(2);
    expect(value(text, 'ecc_token_requests_total{outcome="unsupported_grant_type"}')).toBe(1);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_scope"}')).toBe(1);
    // every outcome is there from the start, at 0
    for (const outcome of ['unavailable', 'server_error', 'unauthorized_client']) {
      expect(value(text, `ecc_token_requests_total{outcome="${outcome}"}`)).toBe(0);
    }
    for (const series of [
      'rate_limited",reason="address',
      'rate_limited",reason="client_address',
      'unavailable",reason="store',
      'unavailable",reason="dpop_replay_store',
      'invalid_dpop_proof",reason="dpop_htu',
      'invalid_dpop_proof",reason="dpop_replayed',
      'invalid_client",reason="expired_secret',
      'invalid_client",reason="revoked_secret',
    ]) {
      expect(value(text, `ecc_token_requests_total{outcome="${series}"}`)).toBe(0);
    }
    // a series per label set, never one without its reason
    expect(value(text, 'ecc_token_requests_total{outcome="rate_limited"}')).toBeUndefined();
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_dpop_proof"}')).toBeUndefined();
    expect(value(text, 'ecc_token_request_duration_seconds_count')).toBe(7);
    const sum = value(text, 'ecc_token_request_duration_seconds_sum')!;
    expect(sum).toBeGreaterThan(0);
    expect(sum).toBeLessThan(60);
    expect(value(text, 'ecc_token_request_duration_seconds_bucket{le="+Inf"}')).toBe(7);
    // the JWKS and metadata routes are not token requests
    await request(app).get('/.well-known/jwks.json');
    await request(app).post('/.well-known/jwks.json');
    expect(value(await registry.metrics(), 'ecc_token_request_duration_seconds_count')).toBe(7);
    expect(text).not.toContain(client.clientId);
  });

  it('counts invalid_client by a bounded reason (never a client_id), and invalid_target as its own outcome', async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry }, resources: ['http://other.test/api'] });
    const client = await issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const post = (fields: Record<string, string>) => request(app).post('/oauth/token').type('form').send(fields);
    const good = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret };

    expect((await post({ ...good, client_secret: 'wrong' })).status).toBe(401);
    expect((await post({ ...good, client_id: 'nobody-here' })).status).toBe(401);
    expect((await post({ ...good, client_id: 'nobody-else' })).status).toBe(401);
    expect((await post({ grant_type: 'client_credentials' })).status).toBe(401);
    const target = await post({ ...good, resource: 'http://other.test/api' });
    expect(target.body.error).toBe('invalid_target');

    const text = await registry.metrics();
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="wrong_secret"}')).toBe(1);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="unknown_client"}')).toBe(2);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="no_credentials"}')).toBe(1);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_target"}')).toBe(1);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_request"}')).toBe(0);
    // every reason is there from the start, at 0; no series names a client
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="assertion_expired"}')).toBe(0);
    expect(value(text, 'ecc_token_requests_total{outcome="unavailable",reason="client_jwks_uri"}')).toBe(0);
    expect(text).not.toContain('nobody');
    expect(text).not.toContain(client.clientId);
  });

  it('counts revocation and introspection requests by endpoint and outcome', async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry } });
    const svc = await issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const rs = await issuer.clients.create({ name: 'rs', scopes: [], permissions: ['introspect'] });
    const token = await fetchToken(app, svc);
    const call = (path: string, who: { clientId: string; clientSecret: string }, fields: Record<string, string>) =>
      request(app).post(path).type('form').send({ client_id: who.clientId, client_secret: who.clientSecret, ...fields });

    expect((await call('/oauth/introspect', rs, { token })).body.active).toBe(true);
    expect((await call('/oauth/introspect', rs, { token: 'not-a-token' })).body).toEqual({ active: false });
    expect((await call('/oauth/introspect', { ...rs, clientSecret: 'wrong' }, { token })).status).toBe(401);
    expect((await call('/oauth/introspect', rs, {})).status).toBe(400);
    expect((await call('/oauth/revoke', svc, { token })).status).toBe(200);
    expect((await call('/oauth/revoke', svc, { token: 'not-a-token' })).status).toBe(200);
    expect((await call('/oauth/revoke', { ...svc, clientSecret: 'wrong' }, { token })).status).toBe(401);
    expect((await call('/oauth/introspect', rs, { token })).body).toEqual({ active: false }); // revoked now
    expect((await call('/oauth/introspect', svc, { token })).body).toEqual({ active: false }); // no introspect permission

    const text = await registry.metrics();
    const series = (endpoint: string, outcome: string, reason?: string) =>
      value(text, `ecc_token_management_requests_total{endpoint="${endpoint}",outcome="${outcome}"${reason === undefined ? '' : `,reason="${reason}"`}}`);
    expect(series('introspection', 'active')).toBe(1);
    // an inactive answer by why: a caller without the permission is not a token problem
    expect(series('introspection', 'inactive', 'invalid_token')).toBe(1);
    expect(series('introspection', 'inactive', 'revoked')).toBe(1);
    expect(series('introspection', 'inactive', 'no_permission')).toBe(1);
    expect(series('introspection', 'inactive', 'expired')).toBe(0);
    expect(series('introspection', 'inactive', 'other_audience')).toBe(0);
    expect(series('introspection', 'inactive')).toBeUndefined();
    expect(series('introspection', 'invalid_client', 'wrong_secret')).toBe(1);
    expect(series('introspection', 'invalid_client', 'unknown_client')).toBe(0);
    expect(series('introspection', 'invalid_request')).toBe(1);
    expect(series('revocation', 'ok')).toBe(2);
    expect(series('revocation', 'invalid_client', 'wrong_secret')).toBe(1);
    expect(series('revocation', 'rate_limited', 'address')).toBe(0);
    expect(series('revocation', 'unavailable')).toBe(0);
    // token requests are counted apart: the one token asked for, nothing more
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(1);
  });

  it('says what a revocation or introspection 503 could not reach: reason store for a revocation the store cannot write', async () => {
    const registry = new Registry();
    const dataDir = tempDir();
    dirs.push(dataDir);
    const store = await openEmbeddedStore({ dataDir });
    const revokeToken = store.revokeToken.bind(store);
    let full = true;
    store.revokeToken = async (entry) => {
      if (full) throw new StoreUnavailableError('SQLite store unavailable: SQLITE_FULL: database or disk is full');
      return revokeToken(entry);
    };
    const { issuer, app } = await start({ metrics: { registry }, store });
    const svc = await issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const token = await fetchToken(app, svc);
    const revoke = () => request(app).post('/oauth/revoke').auth(svc.clientId, svc.clientSecret).type('form').send({ token });
    expect((await revoke()).status).toBe(503);
    full = false;
    expect((await revoke()).status).toBe(200);

    const text = await registry.metrics();
    const series = (endpoint: string, reason?: string) =>
      value(text, `ecc_token_management_requests_total{endpoint="${endpoint}",outcome="unavailable"${reason === undefined ? '' : `,reason="${reason}"`}}`);
    expect(series('revocation', 'store')).toBe(1);
    expect(series('revocation')).toBe(0);
    for (const reason of ['client_jwks_uri', 'revocations']) expect(series('revocation', reason)).toBe(0);
    for (const reason of [undefined, 'store', 'client_jwks_uri', 'revocations']) expect(series('introspection', reason)).toBe(0);
  });

  it('counts rate-limited token requests', async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry }, bruteForce: { maxFailuresPerAddress: 2 } });
    const client = await issuer.clients.create({ name: 'svc', scopes: [] });
    const bad = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: 'wrong' };
    for (let i = 0; i < 4; i++) await request(app).post('/oauth/token').type('form').send(bad);
    const text = await registry.metrics();
    // the address's limit (2) came before the pair's (10): counted as such
    expect(value(text, 'ecc_token_requests_total{outcome="rate_limited",reason="address"}')).toBeGreaterThanOrEqual(1);
    expect(value(text, 'ecc_token_requests_total{outcome="rate_limited",reason="client_address"}')).toBe(0);
    expect((value(text, 'ecc_token_requests_total{outcome="rate_limited",reason="address"}') ?? 0) + (value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="wrong_secret"}') ?? 0)).toBe(4);
  });

  it('counts a lockout of one client_id at an address apart from one of the address, and a secret ended at once (revoked_secret) apart from an expired and a wrong one', async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry }, bruteForce: { maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 50 } });
    const client = await issuer.clients.create({ name: 'svc', scopes: [] });
    await issuer.clients.rotateSecret(client.clientId, { keepOldFor: 0 });
    const old = { grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret };
    for (let i = 0; i < 3; i++) await request(app).post('/oauth/token').type('form').send(old);
    const text = await registry.metrics();
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="revoked_secret"}')).toBe(2);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="expired_secret"}')).toBe(0);
    expect(value(text, 'ecc_token_requests_total{outcome="invalid_client",reason="wrong_secret"}')).toBe(0);
    expect(value(text, 'ecc_token_requests_total{outcome="rate_limited",reason="client_address"}')).toBe(1);
    expect(value(text, 'ecc_token_requests_total{outcome="rate_limited",reason="address"}')).toBe(0);
  });

  it('counts bearer checks by outcome and reason, and verified-token cache hits and misses', async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry } });
    const client = await issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const token = await fetchToken(app, client);
    const get = (path: string, auth?: string) => (auth === undefined ? request(app).get(path) : request(app).get(path).set('Authorization', auth));

    for (let i = 0; i < 3; i++) expect((await get('/orders', `Bearer ${token}`)).status).toBe(200);
    expect((await get('/write', `Bearer ${token}`)).status).toBe(403);
    expect((await get('/orders', `Bearer ${mint(freshKey())}`)).status).toBe(401); // an unknown kid
    expect((await get('/orders', 'Bearer abc.def.ghi')).status).toBe(401);
    expect((await get('/orders')).status).toBe(401);
    expect((await get('/orders', 'Bearer a$b')).status).toBe(400);

    const text = await registry.metrics();
    expect(value(text, 'ecc_bearer_checks_total{outcome="accepted",reason=""}')).toBe(3);
    expect(value(text, 'ecc_bearer_checks_total{outcome="insufficient_scope",reason="insufficient_scope"}')).toBe(1);
    expect(value(text, 'ecc_bearer_checks_total{outcome="invalid_token",reason="unknown_kid"}')).toBe(1);
    expect(value(text, 'ecc_bearer_checks_total{outcome="invalid_token",reason="malformed"}')).toBe(1);
    expect(value(text, 'ecc_bearer_checks_total{outcome="invalid_token",reason="wrong_issuer"}')).toBe(0);
    expect(value(text, 'ecc_bearer_checks_total{outcome="missing_token",reason=""}')).toBe(1);
    expect(value(text, 'ecc_bearer_checks_total{outcome="invalid_request",reason="malformed_header"}')).toBe(1);
    expect(value(text, 'ecc_bearer_checks_total{outcome="invalid_request",reason="invalid_request"}')).toBe(0);
    // the token: checked once, then found 3 times (the 403 route included); the two bad ones were misses
    expect(value(text, 'ecc_verified_token_cache_misses_total')).toBe(3);
    expect(value(text, 'ecc_verified_token_cache_hits_total')).toBe(3);
    expect(text).not.toContain(client.clientId);
    expect(text).not.toContain(token.split('.')[2]);
  });

  it('reports how long the current key has been signing, computed when scraped', async () => {
    const registry = new Registry();
    const { issuer } = await start({ metrics: { registry } });
    const [current] = (await issuer.keys.list()).filter((k) => k.status === 'current');
    const text = await registry.metrics();
    const age = value(text, `ecc_signing_key_age_seconds{kid="${current.kid}"}`)!;
    const expected = (Date.now() - current.activatesAt.getTime()) / 1000;
    expect(age).toBeGreaterThanOrEqual(0);
    expect(Math.abs(age - expected)).toBeLessThan(5);
    await new Promise((r) => setTimeout(r, 1100));
    expect(value(await registry.metrics(), `ecc_signing_key_age_seconds{kid="${current.kid}"}`)!).toBeGreaterThanOrEqual(age + 1);
  });

  it('two issuers on one registry: no "already registered", counts add up, both keys shown, nothing lost on close', async () => {
    const registry = new Registry();
    const one = await start({ metrics: { registry } });
    const two = await start({ metrics: { registry } });
    for (const { issuer, app } of [one, two]) await fetchToken(app, await issuer.clients.create({ name: 'svc', scopes: [] }));
    let text = await registry.metrics();
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(2);
    expect(text.match(/^ecc_signing_key_age_seconds\{kid="[^"]+"\} /gm)).toHaveLength(2);
    await two.issuer.close();
    text = await registry.metrics();
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(2);
    expect(text.match(/^ecc_signing_key_age_seconds\{kid="[^"]+"\} /gm)).toHaveLength(1);
  });

  it("summed over a cluster's workers (prom-client's AggregatorRegistry.aggregate): counters add up, ecc_store_up and the key age do not", async () => {
    const registry = new Registry();
    const { issuer, app } = await start({ metrics: { registry } });
    await fetchToken(app, await issuer.clients.create({ name: 'svc', scopes: [] }));
    const [current] = (await issuer.keys.list()).filter((k) => k.status === 'current');
    const { AggregatorRegistry } = await import('prom-client');
    // two workers that saw the same: what each reports, as a worker answers the primary
    const worker = await registry.getMetricsAsJSON();
    const text = await AggregatorRegistry.aggregate([worker, worker]).metrics();
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(2);
    expect(value(text, 'ecc_token_request_duration_seconds_count')).toBe(2);
    expect(value(text, 'ecc_store_up')).toBe(1);
    // each worker's age of the same key, not twice it
    const age = worker.find((m) => m.name === 'ecc_signing_key_age_seconds')!.values[0].value;
    expect(age).toBeGreaterThan(0);
    expect(value(text, `ecc_signing_key_age_seconds{kid="${current.kid}"}`)).toBe(age);
    // a worker that finds the store down: 0 for the group
    const down = worker.map((m) => (m.name === 'ecc_store_up' ? { ...m, values: [{ value: 0, labels: {} }] } : m));
    expect(value(await AggregatorRegistry.aggregate([worker, down]).metrics(), 'ecc_store_up')).toBe(0);
  });

  it('leaves other metrics on the registry alone', async () => {
    const registry = new Registry();
    registry.setDefaultLabels({});
    const { Counter } = await import('prom-client');
    new Counter({ name: 'app_requests_total', help: 'the app', registers: [registry] }).inc(5);
    await start({ metrics: { registry } });
    const text = await registry.metrics();
    expect(value(text, 'app_requests_total')).toBe(5);
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(0);
  });
});

describe('a request through two requireBearer() layers (the mount and the route)', () => {
  it('counts accepted once per request, for issuer-bound and standalone layers alike', async () => {
    const registry = new Registry();
    const { issuer } = await start({ metrics: { registry } });
    const client = await issuer.clients.create({ name: 'layers', scopes: ['orders:read'] });
    const app = express();
    app.use(issuer.router());
    app.use('/api', issuer.requireBearer());
    app.get('/api/orders', issuer.requireBearer({ scope: 'orders:read' }), sendAuth);
    app.get('/api/write', issuer.requireBearer({ scope: 'orders:write' }), sendAuth);
    const keys = await issuer.keys.jwks();
    const standalone = (scope?: string) => requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys, scope, logger: false, metrics: { registry } });
    app.use('/rs', standalone());
    app.get('/rs/orders', standalone('orders:read'), sendAuth);
    const token = await fetchToken(app, client);
    for (const path of ['/api/orders', '/api/orders', '/rs/orders']) expect((await request(app).get(path).set('Authorization', `Bearer ${token}`)).status).toBe(200);
    expect((await request(app).get('/api/write').set('Authorization', `Bearer ${token}`)).status).toBe(403);
    const text = await registry.metrics();
    // three requests accepted (the 403 was accepted by the mount's layer, and is counted there once, and once refused)
    expect(value(text, 'ecc_bearer_checks_total{outcome="accepted",reason=""}')).toBe(4);
    expect(value(text, 'ecc_bearer_checks_total{outcome="insufficient_scope",reason="insufficient_scope"}')).toBe(1);
  });
});

describe('standalone requireBearer() with metrics', () => {
  it('counts its checks and its cache', async () => {
    const { issuer, app } = await start({});
    const client = await issuer.clients.create({ name: 'svc', scopes: ['orders:read'] });
    const token = await fetchToken(app, client);
    const registry = new Registry();
    const api = express();
    api.get('/orders', requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys: await issuer.keys.jwks(), scope: 'orders:read', logger: false, metrics: { registry } }), sendAuth);
    for (let i = 0; i < 2; i++) expect((await request(api).get('/orders').set('Authorization', `Bearer ${token}`)).status).toBe(200);
    expect((await request(api).get('/orders').set('Authorization', `Bearer ${mint(freshKey(), { claims: { iss: 'http://other.test' } })}`)).status).toBe(401);
    const text = await registry.metrics();
    expect(value(text, 'ecc_bearer_checks_total{outcome="accepted",reason=""}')).toBe(2);
    expect(value(text, 'ecc_bearer_checks_total{outcome="invalid_token",reason="wrong_issuer"}')).toBe(1);
    expect(value(text, 'ecc_verified_token_cache_hits_total')).toBe(1);
    expect(value(text, 'ecc_verified_token_cache_misses_total')).toBe(2);
    // no issuer on this registry: no token endpoint counts other than zeros, no key age
    expect(value(text, 'ecc_token_requests_total{outcome="issued"}')).toBe(0);
    expect(text).not.toMatch(/^ecc_signing_key_age_seconds\{/m);
  });
});

describe('options', () => {
  it('refuses a metrics option that is not { registry } with a prom-client Registry', () => {
    const base = { issuer: ISSUER, audience: AUDIENCE, logger: false as const, dataDir: tempDir() };
    dirs.push(base.dataDir);
    expect(() => createIssuer({ ...base, metrics: { registry: {} as Registry } })).toThrow(/metrics.registry must be a prom-client Registry/);
    expect(() => createIssuer({ ...base, metrics: { registry: new Registry(), prefix: 'x' } as never })).toThrow(/unknown option prefix/);
    expect(() => createIssuer({ ...base, metrics: 'yes' as never })).toThrow(/option metrics/);
    expect(() => requireBearer({ issuer: ISSUER, audience: AUDIENCE, keys: { keys: [] }, metrics: { registry: {} as Registry } })).toThrow(TypeError);
    expect(() => createIssuer({ ...base, metrics: false })).not.toThrow();
  });

  it('maps token endpoint errors to outcomes', () => {
    expect(tokenOutcome(new TemporarilyUnavailableError())).toBe('unavailable');
    expect(tokenOutcome(new TemporarilyUnavailableError(undefined, { dependency: 'store' }))).toBe('unavailable:store');
    expect(tokenOutcome(new TemporarilyUnavailableError(undefined, { dependency: 'dpop_replay_store' }))).toBe('unavailable:dpop_replay_store');
    expect(tokenOutcome(new ServerError())).toBe('server_error');
    expect(tokenOutcome(new TooManyRequestsError(3, { limit: 'address' }))).toBe('rate_limited:address');
    expect(tokenOutcome(new TooManyRequestsError(3, { limit: 'client_address' }))).toBe('rate_limited:client_address');
    expect(tokenOutcome(new InvalidDpopProofError('htu'))).toBe('invalid_dpop_proof:dpop_htu');
    expect(tokenOutcome(new UseDpopNonceError('n'))).toBe('use_dpop_nonce');
    expect(tokenOutcome(new InvalidScopeError('x'))).toBe('invalid_scope');
    expect(tokenOutcome(new InvalidClientError({ detail: 'assertion_replayed' }))).toBe('invalid_client:assertion_replayed');
    expect(tokenOutcome(new InvalidClientError({ detail: 'client 42 said so' }))).toBe('invalid_client:other');
    expect(tokenOutcome(new InvalidTargetError('x'))).toBe('invalid_target');
    expect(tokenOutcome(new TemporarilyUnavailableError('x', { detail: 'assertion_jwks_uri_unavailable' }))).toBe('unavailable:client_jwks_uri');
  });

  it('maps revocation and introspection 503s to what could not be reached, when known', () => {
    expect(managementCheck('revocation', new TemporarilyUnavailableError(undefined, { dependency: 'store' }))).toBe('revocation_unavailable:store');
    expect(managementCheck('introspection', new TemporarilyUnavailableError(undefined, { dependency: 'revocations' }))).toBe('introspection_unavailable:revocations');
    expect(managementCheck('introspection', new TemporarilyUnavailableError('x', { detail: 'assertion_jwks_uri_unavailable' }))).toBe('introspection_unavailable:client_jwks_uri');
    expect(managementCheck('revocation', new TemporarilyUnavailableError())).toBe('revocation_unavailable');
  });
});
