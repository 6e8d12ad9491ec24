/**
 * `client-credentials update`: a client's name, scopes, resources,
 * introspect permission and DPoP requirement change in place. End to end
 * against an issuer running on the same data dir, as a server would: what is
 * taken away holds at once (the tokens issued before are revoked), what is
 * added revokes nothing.
 */
import express from 'express';
import request from 'supertest';
import { createIssuer, type Issuer } from '../../lib';
import { cliPerTest, type Run } from '../helpers/cli';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import Redis from 'ioredis';
import { LazyStore } from '../../lib/cli/context';
import { ClientService } from '../../lib/core/clients';
import { openEmbeddedStore } from '../../lib/stores/embedded';

const ISSUER = 'http://issuer.test';
const AUDIENCE = 'http://api.test';
const API_B = 'https://b.api.test';

const dirs = cliPerTest('ecc-cli-update-');
const { cli } = dirs;

async function created(scope: string, ...more: string[]): Promise<{ client_id: string; client_secret: string }> {
  const r = await cli(['create', '--name', 'svc', '--scope', scope, ...more, '--json']);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

function expectUsage(r: Run, problem: string): void {
  expect(r.code).toBe(2);
  expect(r.stdout).toBe('');
  expect(r.stderr).toBe(`error: ${problem} (run 'client-credentials update --help' for usage)\n`);
}

async function listed(clientId: string): Promise<Record<string, unknown>> {
  const all = JSON.parse((await cli(['list', '--json'])).stdout) as Record<string, unknown>[];
  return all.find((c) => c.client_id === clientId)!;
}

describe('update', () => {
  it('replaces what is given, keeps the rest, and says what changed', async () => {
    const c = await created('orders:read');
    const r = await cli(['update', c.client_id, '--scope', 'orders:read reports:read', '--name', 'billing']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('Client updated.');
    expect(r.stdout).toContain('  scope:        orders:read reports:read\n');
    expect(r.stdout).toContain('  changed:      name, scope\n');
    expect(r.stdout).toContain('Nothing was taken away: its tokens keep working.');
    expect(r.stdout).not.toContain(c.client_secret);
    expect(await listed(c.client_id)).toMatchObject({ name: 'billing', scope: 'orders:read reports:read', status: 'active', active_secrets: 1 });
  });

  it('--json: the client as it is now, what changed and whether its tokens were revoked', async () => {
    const c = await created('a b');
    const r = await cli(['update', c.client_id, '--scope', 'a', '--introspect', '--resource', API_B, '--require-dpop', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      client_id: c.client_id,
      name: 'svc',
      scope: 'a',
      auth: 'client_secret',
      resources: [API_B],
      permissions: ['introspect'],
      dpop_bound_access_tokens: true,
      changed: ['scope', 'resources', 'permissions', 'dpop_bound_access_tokens'],
      tokens_revoked: true,
    });
    const back = await cli(['update', c.client_id, '--no-resources', '--no-introspect', '--no-require-dpop', '--json']);
    expect(JSON.parse(back.stdout)).toEqual({ client_id: c.client_id, name: 'svc', scope: 'a', auth: 'client_secret', changed: ['resources', 'permissions', 'dpop_bound_access_tokens'], tokens_revoked: true });
    const row = await listed(c.client_id);
    expect(row).not.toHaveProperty('resources');
    expect(row).not.toHaveProperty('permissions');
    expect(row).not.toHaveProperty('dpop_bound_access_tokens');
  });

  it('the same settings again: nothing written, nothing revoked', async () => {
    const c = await created('a b');
    const r = await cli(['update', c.client_id, '--scope', 'b a']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`Client ${c.client_id} has these settings already; nothing changed.\n`);
    const json = JSON.parse((await cli(['update', c.client_id, '--scope', 'a b', '--json'])).stdout);
    expect(json).toMatchObject({ changed: [], tokens_revoked: false });
    const store = await openEmbeddedStore({ dataDir: dirs.dataDir });
    try {
      const { clients } = await store.listRevocations(new Date(), new Date(Date.now() - 3_600_000));
      expect(clients.find((x) => x.client_id === c.client_id)).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it.each([
    [[], 'nothing to change: give --name, --scope, --resource, --no-resources, --[no-]introspect or --[no-]require-dpop'],
    [['--introspect', '--no-introspect'], 'give --introspect or --no-introspect, not both'],
    [['--require-dpop', '--no-require-dpop'], 'give --require-dpop or --no-require-dpop, not both'],
    [['--resource', API_B, '--no-resources'], 'give --resource or --no-resources, not both'],
    [['--scope', 'a  b'], '--scope takes scope tokens separated by single spaces (RFC 6749 §3.3), got "a  b"'],
    [['--resource', 'https://b.api.test/#x'], 'resource "https://b.api.test/#x": resource must not contain a fragment'],
    [['--resource', '/relative'], 'resource "/relative": resource must be an absolute URI'],
    [['--name', ' '], 'a client needs a name of 1 to 200 printable characters (no control, invisible or bidi characters)'],
    [['--name', 'evil\u202etxt'], 'a client needs a name of 1 to 200 printable characters (no control, invisible or bidi characters)'],
    [['--scope', Array.from({ length: 101 }, (_, i) => `s${i}`).join(' ')], 'at most 100 scopes per client, got 101'],
  ])('refuses %j with one line and exit 2, changing nothing', async (flags, problem) => {
    const c = await created('a');
    const before = await listed(c.client_id);
    expectUsage(await cli(['update', c.client_id, ...flags]), problem);
    expect(await listed(c.client_id)).toEqual(before);
  });

  it('an unknown or revoked client: exit 1 with a clear message', async () => {
    const c = await created('a');
    const unknown = await cli(['update', 'AAAAAAAAAAAAAAAAAAAAAA', '--scope', 'a']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe("error: no client with id 'AAAAAAAAAAAAAAAAAAAAAA'\n");
    expect((await cli(['revoke', c.client_id])).code).toBe(0);
    const revoked = await cli(['update', c.client_id, '--scope', 'a b']);
    expect(revoked.code).toBe(1);
    expect(revoked.stderr).toMatch(new RegExp(`^error: client '${c.client_id}' is revoked \\(since .+\\); a revoked client cannot be changed\\n$`));
    expect(await listed(c.client_id)).toMatchObject({ scope: 'a', status: 'revoked' });
  });

  it('has help, listed at the top level', async () => {
    const help = await cli(['update', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: client-credentials update CLIENT_ID');
    expect(help.stdout).toContain('is revoked with it,\nin the same store transaction');
    expect((await cli(['--help'])).stdout).toContain('  update CLIENT_ID [--name NAME]');
  });
});

describe('update under a running issuer on the same data dir', () => {
  let issuer: Issuer;
  let app: express.Express;
  /** How many reloads of the revocations the issuer has begun (each asks the store for its revocations' version first). */
  let reloads = 0;

  beforeEach(async () => {
    // the embedded store on the data dir, as the issuer would open it, counting the issuer's reloads; reloaded
    // every 0.1 s (the default is 2 s) so that waiting for a reload costs little
    const store = await openEmbeddedStore({ dataDir: dirs.dataDir });
    reloads = 0;
    const counted = Object.assign(Object.create(store) as typeof store, {
      revocationsVersion: () => {
        reloads++;
        return store.revocationsVersion!();
      },
    });
    issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store: counted, revocationResync: 0.1, logger: false, resources: [API_B] });
    await issuer.ready();
    app = express();
    app.use(issuer.router());
    app.get('/api/reports', issuer.requireBearer({ scope: 'reports:read' }), (_req, res) => res.json({ ok: true }));
    app.get('/b/reports', issuer.requireBearer({ scope: 'reports:read', audience: API_B }), (_req, res) => res.json({ ok: true }));
    app.get('/api/whoami', issuer.requireBearer(), (req, res) => res.json({ client_id: req.auth!.clientId }));
  });
  afterEach(() => issuer.close());

  const tokenRequest = (c: { client_id: string; client_secret: string }, form: Record<string, string> = {}) =>
    request(app).post('/oauth/token').type('form').auth(c.client_id, c.client_secret).send({ grant_type: 'client_credentials', ...form });
  const reports = async (token: string): Promise<number> => (await request(app).get('/api/reports').set('Authorization', `Bearer ${token}`)).status;
  const whoami = async (token: string): Promise<number> => (await request(app).get('/api/whoami').set('Authorization', `Bearer ${token}`)).status;

  /** Milliseconds until `check` holds, polled every 20 ms for at most 4 s (the CLI's revocations reach a running issuer within its resync, 0.1 s here); -1 if never. */
  async function within(check: () => Promise<boolean>): Promise<number> {
    const started = Date.now();
    while (Date.now() - started < 4000) {
      if (await check()) return Date.now() - started;
      await new Promise((r) => setTimeout(r, 20));
    }
    return -1;
  }

  /** Waits until the issuer has begun two more reloads of the revocations (so one whole reload ran after this call), for at most 5 s. */
  async function afterNextReload(): Promise<void> {
    const target = reloads + 2;
    const started = Date.now();
    while (reloads < target) {
      if (Date.now() - started > 5000) throw new Error(`the issuer began ${reloads - target + 2} of 2 revocation reloads in 5 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it('a scope taken away: the token that has it is refused, and so is a token request for it; the kept scope still works', async () => {
    const c = await created('orders:read reports:read');
    const old = (await tokenRequest(c, { scope: 'orders:read reports:read' }).expect(200)).body.access_token as string;
    expect(await reports(old)).toBe(200);

    const r = await cli(['update', c.client_id, '--scope', 'orders:read', '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({ scope: 'orders:read', changed: ['scope'], tokens_revoked: true });
    // at once, before the issuer has reloaded the revocations: the removed scope is refused, the kept one granted
    const refused = await tokenRequest(c, { scope: 'reports:read' });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_scope');
    const kept = await tokenRequest(c);
    expect(kept.status).toBe(200);
    expect(kept.body.scope).toBe('orders:read');
    expect(await reports(kept.body.access_token)).toBe(403);

    expect(await within(async () => (await reports(old)) === 401)).toBeGreaterThanOrEqual(0);
    // the token asked for right after the update stays valid once the revocation is in force (and after the next reload)
    expect(await whoami(kept.body.access_token)).toBe(200);
    await afterNextReload();
    expect(await whoami(kept.body.access_token)).toBe(200);
    expect(await whoami(old)).toBe(401);
  });

  it('revoke-tokens from the CLI: a token asked for right after it stays valid once the issuer has reloaded', async () => {
    const c = await created('orders:read');
    const old = (await tokenRequest(c).expect(200)).body.access_token as string;
    expect((await cli(['revoke-tokens', c.client_id])).code).toBe(0);
    const fresh = (await tokenRequest(c).expect(200)).body.access_token as string;
    // the issuer has reloaded once the old token is refused: the fresh one is not, then or after the next reload
    expect(await within(async () => (await whoami(old)) === 401)).toBeGreaterThanOrEqual(0);
    expect(await whoami(fresh)).toBe(200);
    await afterNextReload();
    expect(await whoami(old)).toBe(401);
    expect(await whoami(fresh)).toBe(200);
  });

  it('a scope added: nothing is revoked, and the new scope is granted', async () => {
    const c = await created('orders:read');
    const old = (await tokenRequest(c).expect(200)).body.access_token as string;
    const r = await cli(['update', c.client_id, '--scope', 'orders:read reports:read', '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({ tokens_revoked: false });
    const wider = await tokenRequest(c, { scope: 'reports:read' });
    expect(wider.status).toBe(200);
    expect(await reports(wider.body.access_token)).toBe(200);
    // the old token (orders:read only) is still valid, with what it was issued with
    expect(await reports(old)).toBe(403);
    await afterNextReload(); // past a revocation reload: still nothing revoked
    expect(await reports(wider.body.access_token)).toBe(200);
    expect(await reports(old)).toBe(403);
    expect(await whoami(old)).toBe(200);
  });

  it('a resource taken away: tokens for it are revoked and it can be asked for no more', async () => {
    const c = await created('reports:read', '--resource', API_B);
    const forB = await tokenRequest(c, { resource: API_B }).expect(200);
    expect((await request(app).get('/b/reports').set('Authorization', `Bearer ${forB.body.access_token}`)).status).toBe(200);
    const r = await cli(['update', c.client_id, '--no-resources', '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({ changed: ['resources'], tokens_revoked: true });
    const atB = async (): Promise<number> => (await request(app).get('/b/reports').set('Authorization', `Bearer ${forB.body.access_token}`)).status;
    expect(await within(async () => (await atB()) === 401)).toBeGreaterThanOrEqual(0);
    const refused = await tokenRequest(c, { resource: API_B });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('invalid_target');
    expect((await tokenRequest(c)).status).toBe(200);
  });

  it('a first resource list takes the default audience away: its tokens are revoked; the same resource spelt otherwise is no change', async () => {
    const c = await created('reports:read');
    const forDefault = (await tokenRequest(c).expect(200)).body.access_token as string;
    const r = await cli(['update', c.client_id, '--resource', API_B, '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({ resources: [API_B], changed: ['resources'], tokens_revoked: true });
    expect(await within(async () => (await whoami(forDefault)) === 401)).toBeGreaterThanOrEqual(0);
    const now = await tokenRequest(c).expect(200); // its one resource is its audience now
    expect((await request(app).get('/b/reports').set('Authorization', `Bearer ${now.body.access_token}`)).status).toBe(200);
    const same = await cli(['update', c.client_id, '--resource', 'https://B.API.test/']);
    expect(same.stdout).toBe(`Client ${c.client_id} has these settings already; nothing changed.\n`);
    // and says what it has, as stored
    expect(JSON.parse((await cli(['update', c.client_id, '--resource', 'https://B.API.test/', '--json'])).stdout)).toMatchObject({ resources: [API_B], changed: [] });
  });

  it('--introspect and --no-introspect take effect at the next introspection request', async () => {
    const rs = await created('');
    const c = await created('reports:read');
    const token = (await tokenRequest(c).expect(200)).body.access_token as string;
    const introspect = async () => (await request(app).post('/oauth/introspect').type('form').auth(rs.client_id, rs.client_secret).send({ token }).expect(200)).body;
    expect(await introspect()).toEqual({ active: false });
    expect((await cli(['update', rs.client_id, '--introspect'])).code).toBe(0);
    expect(await introspect()).toMatchObject({ active: true, client_id: c.client_id });
    const off = JSON.parse((await cli(['update', rs.client_id, '--no-introspect', '--json'])).stdout);
    expect(off).toMatchObject({ changed: ['permissions'], tokens_revoked: false });
    expect(await introspect()).toEqual({ active: false });
  });

  it('--require-dpop: the Bearer tokens issued before are refused, and a token request without a proof too', async () => {
    const c = await created('reports:read');
    const old = (await tokenRequest(c).expect(200)).body.access_token as string;
    const r = await cli(['update', c.client_id, '--require-dpop', '--json']);
    expect(JSON.parse(r.stdout)).toMatchObject({ dpop_bound_access_tokens: true, changed: ['dpop_bound_access_tokens'], tokens_revoked: true });
    expect(await within(async () => (await reports(old)) === 401)).toBeGreaterThanOrEqual(0);
    const refused = await tokenRequest(c);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: 'invalid_request', error_description: 'this client must send a DPoP proof with every token request' });
  });

  it('issuer.clients.update() counts at that issuer from its next request, even with a long client cache, and logs client.updated', async () => {
    const logged: Record<string, unknown>[] = [];
    const keep = (obj: Record<string, unknown>): void => void logged.push(obj);
    const cached = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir: dirs.dataDir, logger: { info: keep, warn: keep, error: keep }, clientCacheTtl: 60 });
    try {
      const own = express();
      own.use(cached.router());
      const c = await cached.clients.create({ name: 'svc', scopes: 'orders:read' });
      const ask = (scope: string) => request(own).post('/oauth/token').type('form').auth(c.clientId, c.clientSecret).send({ grant_type: 'client_credentials', scope });
      await ask('orders:read').expect(200); // the record is cached now
      const done = await cached.clients.update(c.clientId, { scopes: ['orders:read', 'reports:read'] });
      expect(done).toMatchObject({ changed: ['scopes'], tokensRevoked: false, settings: { scopes: ['orders:read', 'reports:read'] } });
      const wider = await ask('reports:read');
      expect(wider.status).toBe(200);
      expect(wider.body.scope).toBe('reports:read');
      expect(logged.filter((l) => l.event === 'client.updated')).toEqual([{ event: 'client.updated', client_id: c.clientId, changed: ['scopes'], tokens_revoked: false }]);
      expect(JSON.stringify(logged)).not.toContain(c.clientSecret);
    } finally {
      await cached.close();
    }
  });

  it('issuer.clients.update() refuses a member it does not know (scope for scopes) and changes nothing', async () => {
    const c = await issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
    await expect(issuer.clients.update(c.clientId, { scope: 'x' } as never)).rejects.toThrow(
      'update() takes name, scopes, resources, permissions, requireDpop; not "scope"',
    );
    expect((await issuer.clients.get(c.clientId))!.scopes).toEqual(['orders:read']);
  });
});

describe('update when the running instances cannot be told', () => {
  it('the change and the revocation are stored and answered as done, and a warning says the others learn of it at their reload', async () => {
    const store = await openEmbeddedStore({ dataDir: dirs.dataDir });
    const logged: Record<string, unknown>[] = [];
    const keep = (obj: Record<string, unknown>): void => void logged.push(obj);
    try {
      // the store's ring (PostgreSQL NOTIFY, say) fails after the transaction committed
      const ringFails = Object.assign(Object.create(store) as typeof store, { notifyRevocations: () => Promise.reject(new Error('NOTIFY failed')) });
      const service = new ClientService(async () => ringFails, { info: keep, warn: keep, error: keep });
      const c = await service.create({ name: 'svc', scopes: 'a b' });
      const done = await service.update(c.clientId, { scopes: 'a' });
      expect(done).toMatchObject({ changed: ['scopes'], tokensRevoked: true, settings: { scopes: ['a'] } });
      expect((await store.findClient(c.clientId))!).toMatchObject({ scopes: ['a'], tokenGeneration: 1 });
      expect(logged.find((l) => l.event === 'revocation.not_announced')).toEqual({ event: 'revocation.not_announced', reason: 'NOTIFY failed' });
      // revoke-tokens and revoke: the same
      expect(await service.revokeTokens(c.clientId)).toEqual({ generation: 2 });
      expect(await service.revoke(c.clientId)).toBe(true);
      expect(logged.filter((l) => l.event === 'revocation.not_announced')).toHaveLength(3);
      expect((await store.findClient(c.clientId))!.revokedAt).toBeInstanceOf(Date);
    } finally {
      await store.close();
    }
  });
});

describeIfRedis('the CLI when the store cannot ring the running instances', () => {
  it('writes a warning line, rings Redis all the same, and does not fail the command', async () => {
    const channel = `ecc-test-ring:${process.pid}:${Date.now()}`;
    const subscriber = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
    await subscriber.connect();
    const rung: string[] = [];
    subscriber.on('message', (ch: string) => rung.push(ch));
    await subscriber.subscribe(channel);
    const warnings: string[] = [];
    const stores = new LazyStore({ DATA_DIR: dirs.dataDir, REDIS_URL: redisUrl(), REVOCATION_CHANNEL: channel }, (line) => warnings.push(line));
    try {
      const store = await stores.get();
      // as a PostgreSQL store whose NOTIFY fails after the revocation committed
      Object.assign(store, { notifyRevocations: () => Promise.reject(new Error('NOTIFY failed')) });
      await expect(stores.notifyRevocations()).resolves.toBeUndefined();
      expect(warnings).toEqual([
        `note: there was no store in ${dirs.dataDir}; an empty one was created. Is DATA_DIR the server's?`,
        'warning: could not notify running instances through the store (NOTIFY failed); they pick the revocation up within their revocationResync',
      ]);
      for (let i = 0; i < 100 && rung.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(rung).toEqual([channel]);
    } finally {
      await stores.close();
      await subscriber.quit();
    }
  });
});
