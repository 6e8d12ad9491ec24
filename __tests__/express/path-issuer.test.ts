/**
 * An issuer whose identifier has a path (https://…/auth): its router mounted
 * at that path, and issuer.wellKnown() at the app's root for the RFC 8414 §3.1
 * location of its metadata, /.well-known/oauth-authorization-server/auth.
 */
import request from 'supertest';
import { setup, type TestSetup } from '../helpers/app';

const ORIGIN = 'http://auth.test';
const PATH_ISSUER = `${ORIGIN}/auth`;

describe('issuer http://auth.test/auth, router at /auth, wellKnown() at the root', () => {
  let t: TestSetup;
  beforeAll(async () => {
    t = await setup({ issuer: PATH_ISSUER }, (app, issuer) => {
      app.use(issuer.wellKnown());
      app.use('/auth', issuer.router());
    });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('serves the metadata at /.well-known/oauth-authorization-server/auth, naming the issuer with its path and the endpoints under it', async () => {
    const res = await request(t.app).get('/.well-known/oauth-authorization-server/auth');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
    expect(res.headers['cache-control']).toBe('public, max-age=3600');
    expect(res.body).toMatchObject({
      issuer: PATH_ISSUER,
      token_endpoint: `${PATH_ISSUER}/oauth/token`,
      jwks_uri: `${PATH_ISSUER}/.well-known/jwks.json`,
      revocation_endpoint: `${PATH_ISSUER}/oauth/revoke`,
      introspection_endpoint: `${PATH_ISSUER}/oauth/introspect`,
    });
    expect(res.body).toEqual(t.issuer.metadata());
  });

  it('serves the same document at the router\'s own /auth/.well-known/oauth-authorization-server', async () => {
    const res = await request(t.app).get('/auth/.well-known/oauth-authorization-server');
    expect(res.status).toBe(200);
    expect(res.body).toEqual(t.issuer.metadata());
  });

  it('answers HEAD, a trailing slash, and other methods with 405 and Allow: GET, HEAD', async () => {
    expect((await request(t.app).head('/.well-known/oauth-authorization-server/auth')).status).toBe(200);
    expect((await request(t.app).get('/.well-known/oauth-authorization-server/auth/')).body).toMatchObject({ issuer: PATH_ISSUER });
    const post = await request(t.app).post('/.well-known/oauth-authorization-server/auth');
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe('GET, HEAD');
    expect(post.body).toEqual({ error: 'invalid_request', error_description: expect.any(String) });
  });

  it.each([['/.well-known/oauth-authorization-server'], ['/.well-known/oauth-authorization-server/other'], ['/.well-known/oauth-authorization-server/auth/x']])(
    'does not answer %s: no other issuer is described',
    async (path) => {
      expect((await request(t.app).get(path)).status).toBe(404);
    },
  );

  it('issues tokens at /auth/oauth/token, with iss the issuer with its path', async () => {
    const client = await t.issuer.clients.create({ name: 'path', scopes: 'orders:read' });
    const res = await request(t.app).post('/auth/oauth/token').auth(client.clientId, client.clientSecret!).type('form').send({ grant_type: 'client_credentials' });
    expect(res.status).toBe(200);
    const claims = JSON.parse(Buffer.from(res.body.access_token.split('.')[1], 'base64url').toString('utf8'));
    expect(claims.iss).toBe(PATH_ISSUER);
  });
});

describe('two issuers with paths on one host', () => {
  let a: TestSetup;
  let b: TestSetup;
  beforeAll(async () => {
    a = await setup({ issuer: `${ORIGIN}/a` });
    // b's app also carries a's well-known handler and router: each answers for its own path only
    b = await setup({ issuer: `${ORIGIN}/b/` }, (app, issuer) => {
      app.use(a.issuer.wellKnown());
      app.use(issuer.wellKnown());
      app.use('/a', a.issuer.router());
      app.use('/b', issuer.router());
    });
  });
  afterAll(async () => {
    await b?.close();
    await a?.close();
  });

  it('serves each issuer\'s metadata at its own location (a terminating "/" of the issuer left out, RFC 8414 §3.1)', async () => {
    expect((await request(b.app).get('/.well-known/oauth-authorization-server/a')).body).toMatchObject({ issuer: `${ORIGIN}/a`, token_endpoint: `${ORIGIN}/a/oauth/token` });
    expect((await request(b.app).get('/.well-known/oauth-authorization-server/b')).body).toMatchObject({ issuer: `${ORIGIN}/b/`, token_endpoint: `${ORIGIN}/b/oauth/token` });
  });
});

describe('issuer without a path', () => {
  let t: TestSetup;
  beforeAll(async () => {
    t = await setup({}, (app, issuer) => {
      app.use(issuer.wellKnown());
      app.use(issuer.router());
    });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('wellKnown() serves the router\'s own /.well-known/oauth-authorization-server and nothing else', async () => {
    const res = await request(t.app).get('/.well-known/oauth-authorization-server');
    expect(res.status).toBe(200);
    expect(res.body).toEqual(t.issuer.metadata());
    expect((await request(t.app).get('/.well-known/oauth-authorization-server/x')).status).toBe(404);
  });
});
