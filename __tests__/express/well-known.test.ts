/**
 * GET /.well-known/jwks.json and GET /.well-known/oauth-authorization-server
 * (RFC 7517, RFC 8414) as served by issuer.router().
 */
import { createPublicKey, type JsonWebKey } from 'node:crypto';
import jwt from 'jsonwebtoken';
import request from 'supertest';
import { AUDIENCE, ISSUER, setup, type TestSetup } from '../helpers/app';

const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'];

function expectPublicJwks(res: request.Response, kty: 'EC' | 'RSA', alg: 'ES256' | 'RS256'): Record<string, unknown>[] {
  expect(res.status).toBe(200);
  expect(res.headers['content-type']).toMatch(/^application\/jwk-set\+json(;|$)/);
  const body = JSON.parse(res.text) as { keys: Record<string, unknown>[] };
  expect(Array.isArray(body.keys)).toBe(true);
  expect(body.keys.length).toBeGreaterThan(0);
  for (const jwk of body.keys) {
    expect(jwk).toMatchObject({ kid: expect.any(String), alg, use: 'sig', kty });
    expect(jwk.kid).not.toBe('');
    for (const member of PRIVATE_MEMBERS) expect(jwk).not.toHaveProperty(member);
    if (kty === 'EC') expect(jwk).toMatchObject({ crv: 'P-256', x: expect.any(String), y: expect.any(String) });
    else expect(jwk).toMatchObject({ n: expect.any(String), e: expect.any(String) });
  }
  return body.keys;
}

function expectMethodNotAllowed(res: request.Response): void {
  expect(res.status).toBe(405);
  expect(res.headers.allow).toBe('GET, HEAD');
  expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
  expect(res.body).toEqual({ error: expect.any(String), error_description: expect.any(String) });
}

describe('ES256 issuer (default)', () => {
  let t: TestSetup;
  beforeAll(async () => {
    t = await setup();
  });
  afterAll(async () => {
    await t?.close();
  });

  describe('GET /.well-known/jwks.json', () => {
    it('serves the public signing key, without private members', async () => {
      const keys = expectPublicJwks(await request(t.app).get('/.well-known/jwks.json'), 'EC', 'ES256');
      const [current] = await t.issuer.keys.list();
      expect(keys.map((k) => k.kid)).toContain(current.kid);
    });

    it('answers HEAD', async () => {
      const res = await request(t.app).head('/.well-known/jwks.json');
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/jwk-set\+json(;|$)/);
    });

    it.each(['post', 'put', 'delete'] as const)('answers %s with 405, Allow: GET, HEAD and a JSON error', async (method) => {
      expectMethodNotAllowed(await request(t.app)[method]('/.well-known/jwks.json'));
    });
  });

  describe('GET /.well-known/oauth-authorization-server', () => {
    it('describes the issuer (RFC 8414)', async () => {
      const res = await request(t.app).get('/.well-known/oauth-authorization-server');
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toMatch(/^application\/json(;|$)/);
      expect(res.body).toEqual({
        issuer: ISSUER,
        token_endpoint: `${ISSUER}/oauth/token`,
        jwks_uri: `${ISSUER}/.well-known/jwks.json`,
        grant_types_supported: ['client_credentials'],
        token_endpoint_auth_methods_supported: expect.arrayContaining(['client_secret_basic', 'client_secret_post', 'private_key_jwt']),
        token_endpoint_auth_signing_alg_values_supported: ['ES256', 'ES384', 'PS256', 'RS256'],
        response_types_supported: [],
        dpop_signing_alg_values_supported: ['ES256', 'ES384', 'PS256', 'RS256'],
        revocation_endpoint: `${ISSUER}/oauth/revoke`,
        revocation_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
        revocation_endpoint_auth_signing_alg_values_supported: ['ES256', 'ES384', 'PS256', 'RS256'],
        introspection_endpoint: `${ISSUER}/oauth/introspect`,
        introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
        introspection_endpoint_auth_signing_alg_values_supported: ['ES256', 'ES384', 'PS256', 'RS256'],
        revocation_list_uri: `${ISSUER}/oauth/revocation-list`,
      });
      expect(res.body).not.toHaveProperty('scopes_supported');
    });

    it('points at the JWKS and token endpoint this router serves', async () => {
      const { body } = await request(t.app).get('/.well-known/oauth-authorization-server');
      const jwks = expectPublicJwks(await request(t.app).get(new URL(body.jwks_uri).pathname), 'EC', 'ES256');
      const tokenPath = new URL(body.token_endpoint).pathname;

      // served, and it is the token endpoint: no client authentication → RFC 6749 §5.2 invalid_client with a Basic challenge
      const anonymous = await request(t.app).post(tokenPath).type('form').send({ grant_type: 'client_credentials' });
      expect(anonymous.status).toBe(401);
      expect(anonymous.body).toEqual({ error: 'invalid_client', error_description: expect.any(String) });
      expect(anonymous.headers['www-authenticate']).toBe(`Basic realm="${ISSUER}", error="invalid_client"`);

      // a client's request there is granted a token signed by a key of the advertised JWKS, naming this issuer
      const client = await t.issuer.clients.create({ name: 'discovered', scopes: ['orders:read'] });
      const token = await request(t.app).post(tokenPath).type('form').auth(client.clientId, client.clientSecret).send({ grant_type: 'client_credentials' });
      expect(token.status).toBe(200);
      expect(token.body).toMatchObject({ token_type: 'Bearer', expires_in: 3600, scope: 'orders:read', access_token: expect.any(String) });
      const { kid } = jwt.decode(token.body.access_token, { complete: true })!.header;
      const signer = jwks.find((k) => k.kid === kid);
      expect(signer).toBeDefined();
      const claims = jwt.verify(token.body.access_token, createPublicKey({ key: signer as JsonWebKey, format: 'jwk' }), {
        algorithms: ['ES256'],
        issuer: body.issuer,
        audience: AUDIENCE,
      }) as jwt.JwtPayload;
      expect(claims).toMatchObject({ iss: ISSUER, sub: client.clientId, client_id: client.clientId, scope: 'orders:read' });

      for (const endpoint of [body.revocation_endpoint, body.introspection_endpoint]) {
        const res = await request(t.app).post(new URL(endpoint).pathname).type('form').send({ token: 'x' });
        expect(res.status).toBe(401); // served: no client authentication
        expect(res.body.error).toBe('invalid_client');
      }
    });

    it.each(['post', 'put', 'delete'] as const)('answers %s with 405, Allow: GET, HEAD and a JSON error', async (method) => {
      expectMethodNotAllowed(await request(t.app)[method]('/.well-known/oauth-authorization-server'));
    });
  });
});

describe('with scopesSupported', () => {
  let t: TestSetup;
  beforeAll(async () => {
    t = await setup({ scopesSupported: 'orders:read orders:write' });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('lists scopes_supported in the metadata', async () => {
    const res = await request(t.app).get('/.well-known/oauth-authorization-server');
    expect(res.status).toBe(200);
    expect(res.body.scopes_supported).toEqual(['orders:read', 'orders:write']);
    expect(res.body.issuer).toBe(ISSUER);
  });
});

describe('RS256 issuer', () => {
  let t: TestSetup;
  beforeAll(async () => {
    t = await setup({ algorithm: 'RS256' });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('serves RSA public keys only, also after a rotation (old and new key published)', async () => {
    const first = expectPublicJwks(await request(t.app).get('/.well-known/jwks.json'), 'RSA', 'RS256');
    expect(first).toHaveLength(1);
    const rotated = await t.issuer.keys.rotate(60);
    const keys = expectPublicJwks(await request(t.app).get('/.well-known/jwks.json'), 'RSA', 'RS256');
    expect(keys.map((k) => k.kid).sort()).toEqual([first[0].kid, rotated.kid].sort());
  });
});
