/** The token client against this package's own issuer and requireBearer(), in one process. */
import { rmSync } from 'node:fs';
import express from 'express';
import { createIssuer, type Issuer } from '../../lib';
import { createTokenClient, TokenEndpointError, type StoredToken, type TokenClientEvent, type TokenClientOptions, type TokenStore } from '../../lib/client';
import { hashSecret } from '../../lib/core/secrets';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { loopbackServer, tempDir, type LoopbackServer } from '../helpers/app';

const SPECIAL_ID = 'svc:1 +%';
const SPECIAL_SECRET = 'a:b+c%d e/é=';

let server: LoopbackServer;
let url: string;
let issuer: Issuer;
let dataDir: string;
let client: { clientId: string; clientSecret: string };
let tokenPosts = 0;
let apiRequests: Array<{ path: string; authorization: string | undefined }> = [];
let events: TokenClientEvent[] = [];
const clients: Array<{ close(): Promise<void> }> = [];

function tokenClient(options: Partial<TokenClientOptions> = {}) {
  const c = createTokenClient({ tokenEndpoint: `${url}/oauth/token`, clientId: client.clientId, clientSecret: client.clientSecret, onEvent: (e) => events.push(e), ...options });
  clients.push(c);
  return c;
}

beforeAll(async () => {
  dataDir = tempDir();
  server = await loopbackServer();
  url = server.url;
  const store = await openEmbeddedStore({ dataDir });
  const createdAt = new Date();
  await store.createClient({ clientId: SPECIAL_ID, name: 'special', scopes: ['orders:read'], grantTypes: ['client_credentials'], createdAt, secret: { hash: hashSecret(SPECIAL_SECRET), createdAt, expiresAt: null } });
  issuer = createIssuer({ issuer: url, audience: `${url}/api`, store, logger: false, bruteForce: { maxFailuresPerClientAddress: 2 } });
  await issuer.ready();
  client = await issuer.clients.create({ name: 'caller', scopes: 'orders:read orders:write' });

  const app = express();
  app.use((req, _res, next) => {
    if (req.method === 'POST' && req.path === '/oauth/token') tokenPosts++;
    if (req.path.startsWith('/api/')) apiRequests.push({ path: req.path, authorization: req.headers.authorization });
    next();
  });
  app.use(issuer.router());
  app.use('/api', issuer.requireBearer());
  app.get('/api/whoami', (req, res) => void res.json({ client_id: req.auth!.clientId, scope: req.auth!.scope.join(' ') }));
  app.get('/api/orders', issuer.requireBearer({ scope: 'orders:read' }), (_req, res) => void res.json({ orders: [] }));
  app.post('/api/orders', issuer.requireBearer({ scope: 'orders:write' }), express.json(), (req, res) => void res.status(201).json(req.body));
  server.serve(app);
});

afterAll(async () => {
  await issuer.close();
  await server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

beforeEach(() => {
  tokenPosts = 0;
  apiRequests = [];
  events = [];
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

it('1. 100 concurrent calls at a cold start: 1 token request, the same token on all 100 API requests, all accepted', async () => {
  const c = tokenClient();
  const responses = await Promise.all(Array.from({ length: 100 }, () => c.fetch(`${url}/api/whoami`)));
  expect(responses.map((r) => r.status)).toEqual(Array(100).fill(200));
  expect(await responses[0].json()).toEqual({ client_id: client.clientId, scope: 'orders:read orders:write' });
  expect(tokenPosts).toBe(1);
  expect(new Set(apiRequests.map((r) => r.authorization)).size).toBe(1);
  expect(events.filter((e) => e.type === 'token.requested')).toHaveLength(1);
});

it('2. concurrent calls for two scopes: 2 token requests, each call carries a token of its own scope', async () => {
  const c = tokenClient();
  const calls = Array.from({ length: 20 }, (_, i) =>
    i % 2 ? c.fetch(`${url}/api/whoami`, undefined, { scope: 'orders:read' }) : c.fetch(`${url}/api/whoami`, undefined, { scope: 'orders:write orders:read' }),
  );
  const bodies = (await Promise.all((await Promise.all(calls)).map((r) => r.json()))) as Array<{ scope: string }>;
  expect(tokenPosts).toBe(2);
  bodies.forEach((b, i) => expect(b.scope).toBe(i % 2 ? 'orders:read' : 'orders:read orders:write'));
});

it('finds the token endpoint through the issuer metadata (RFC 8414) and checks its issuer', async () => {
  const c = tokenClient({ tokenEndpoint: undefined, issuer: url, scope: 'orders:read' });
  const res = await c.fetch(`${url}/api/orders`);
  expect(res.status).toBe(200);
  await expect(tokenClient({ tokenEndpoint: undefined, issuer: `${url}/other` }).getToken()).rejects.toBeInstanceOf(TokenEndpointError);
});

it.each([['client_secret_basic'], ['client_secret_post']] as const)('%s with an id and secret full of reserved characters is accepted', async (authMethod) => {
  const c = tokenClient({ clientId: SPECIAL_ID, clientSecret: SPECIAL_SECRET, authMethod });
  const res = await c.fetch(`${url}/api/whoami`);
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({ client_id: SPECIAL_ID, scope: 'orders:read' });
});

it('6. a token requireBearer() refuses (invalid_token): one new token, the request retried once and accepted', async () => {
  const stale: StoredToken = { accessToken: 'eyJhbGciOiJFUzI1NiJ9.e30.c2ln', tokenType: 'Bearer', scope: 'orders:read orders:write', expiresAt: Date.now() + 3600_000, lifetime: 3600_000 };
  let served = false;
  const store: TokenStore = {
    async get() {
      if (served) return undefined;
      served = true;
      return stale;
    },
    async set() {},
    async delete() {},
  };
  const c = tokenClient({ store });
  const res = await c.fetch(`${url}/api/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"item":"pears","quantity":2}' });
  expect(res.status).toBe(201);
  expect(await res.json()).toEqual({ item: 'pears', quantity: 2 });
  expect(apiRequests.map((r) => r.authorization === `Bearer ${stale.accessToken}`)).toEqual([true, false]);
  expect(tokenPosts).toBe(1);
  expect(events.filter((e) => e.type === 'api.retry_401')).toHaveLength(1);
});

it('6. 403 insufficient_scope from requireBearer() goes back as is, with no new token', async () => {
  const c = tokenClient({ scope: 'orders:read' });
  const res = await c.fetch(`${url}/api/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  expect(res.status).toBe(403);
  expect(res.headers.get('www-authenticate')).toContain('insufficient_scope');
  expect(tokenPosts).toBe(1);
  expect(apiRequests).toHaveLength(1);
});

it('5. a wrong secret: invalid_client, not retried in a loop; the brute-force 429 and its Retry-After hold for all callers; the API never sees a request', async () => {
  // its own client: the limiter then refuses this client_id for a while
  const { clientId } = await issuer.clients.create({ name: 'victim', scopes: 'orders:read' });
  const c = tokenClient({ clientId, clientSecret: 'wrong', scope: 'orders:read' });
  const first = (await c.fetch(`${url}/api/orders`).catch((e: unknown) => e)) as TokenEndpointError;
  expect(first).toMatchObject({ name: 'TokenEndpointError', status: 401, error: 'invalid_client' });
  for (let i = 0; i < 50; i++) await expect(c.fetch(`${url}/api/orders`)).rejects.toMatchObject({ error: 'invalid_client' });
  expect(tokenPosts).toBe(1);

  // a second instance with the same wrong secret runs into the limiter (2 failures per client)
  const other = tokenClient({ clientId, clientSecret: 'wrong', scope: 'orders:read' });
  await other.getToken().catch(() => undefined);
  const limited = tokenClient({ clientId, clientSecret: 'wrong', scope: 'orders:read' });
  const err = (await limited.getToken().catch((e: unknown) => e)) as TokenEndpointError;
  expect(err).toMatchObject({ status: 429 });
  expect(err.retryAfter).toBeGreaterThan(0);
  const posts = tokenPosts;
  for (let i = 0; i < 50; i++) await expect(limited.getToken()).rejects.toMatchObject({ status: 429 });
  expect(tokenPosts).toBe(posts);
  expect(apiRequests).toHaveLength(0);
});

describe('with a simulated clock on the client side (the issuer keeps real time)', () => {
  it('3-4. reused for its lifetime; inside the refresh window calls go on with the current token while one background request renews it', async () => {
    let t = Date.now();
    const c = tokenClient({ now: () => t, scope: 'orders:read' });
    expect((await c.fetch(`${url}/api/orders`)).status).toBe(200);
    t += 3000_000;
    expect((await c.fetch(`${url}/api/orders`)).status).toBe(200);
    expect(tokenPosts).toBe(1);
    t += 361_000; // 3361 s: inside the window (3300-3540 s) past any jitter
    const first = apiRequests[0].authorization;
    const inWindow = await Promise.all(Array.from({ length: 20 }, () => c.fetch(`${url}/api/orders`)));
    expect(inWindow.every((r) => r.status === 200)).toBe(true);
    expect(apiRequests.slice(2).every((r) => r.authorization === first)).toBe(true);
    for (let i = 0; i < 200 && tokenPosts < 2; i++) await new Promise((r) => setTimeout(r, 5));
    let token = await c.getToken();
    for (let i = 0; i < 200 && `Bearer ${token.accessToken}` === first; i++) {
      await new Promise((r) => setTimeout(r, 5));
      token = await c.getToken();
    }
    expect(tokenPosts).toBe(2);
    const res = await c.fetch(`${url}/api/orders`);
    expect(res.status).toBe(200);
    expect(apiRequests.at(-1)!.authorization).not.toBe(first);
    expect(events.filter((e) => e.type === 'token.requested').map((e) => (e as { reason: string }).reason)).toEqual(['initial', 'refresh']);
  });
});

it("7. an aborted caller does not cancel the token request the others wait on", async () => {
  const c = tokenClient();
  const controller = new AbortController();
  const aborted = c.fetch(`${url}/api/whoami`, { signal: controller.signal });
  const others = Array.from({ length: 9 }, () => c.fetch(`${url}/api/whoami`));
  controller.abort();
  await expect(aborted).rejects.toMatchObject({ name: 'AbortError' });
  expect((await Promise.all(others)).map((r) => r.status)).toEqual(Array(9).fill(200));
  expect(tokenPosts).toBe(1);
});

it("8. a second client on the same store reuses the first one's token, and the API accepts it", async () => {
  const data = new Map<string, StoredToken>();
  const store: TokenStore = {
    get: async (k) => data.get(k),
    set: async (k, v) => void data.set(k, v),
    delete: async (k) => void data.delete(k),
  };
  await tokenClient({ store }).fetch(`${url}/api/whoami`);
  for (let i = 0; i < 50 && data.size === 0; i++) await new Promise((r) => setTimeout(r, 5));
  const second = tokenClient({ store });
  const responses = await Promise.all(Array.from({ length: 20 }, () => second.fetch(`${url}/api/whoami`)));
  expect(responses.map((r) => r.status)).toEqual(Array(20).fill(200));
  expect(tokenPosts).toBe(1);
  expect(events.filter((e) => e.type === 'token.requested')).toHaveLength(tokenPosts);
});
