/**
 * private_key_jwt clients that publish their keys at a jwks_uri: fetched,
 * cached, refetched once per cooldown for an unknown kid, bounded in time and size.
 */
import { generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import request from 'supertest';
import { CLIENT_ASSERTION_TYPE, signClientAssertion } from '../../lib/jwt/client-assertion';
import { ISSUER, setup, type TestSetup } from '../helpers/app';

function ecPair(kid: string): { pub: JsonWebKey; priv: JsonWebKey } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { pub: { ...publicKey.export({ format: 'jwk' }), kid }, priv: { ...privateKey.export({ format: 'jwk' }), kid } };
}

describe('private_key_jwt with a jwks_uri', () => {
  let s: TestSetup;
  let server: http.Server;
  let uri: string;
  let published: { keys: JsonWebKey[] };
  let body: (() => string) | undefined;
  let fetches = 0;
  const k1 = ecPair('k1');

  beforeEach(async () => {
    published = { keys: [k1.pub] };
    body = undefined;
    fetches = 0;
    server = http.createServer((_req, res) => {
      fetches++;
      res.setHeader('content-type', 'application/jwk-set+json');
      res.end(body ? body() : JSON.stringify(published));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    uri = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`;
    s = await setup({ bruteForce: false });
  });
  afterEach(async () => {
    await s.close();
    server.close();
  });

  const post = (clientId: string, priv: JsonWebKey, kid?: string) =>
    request(s.app)
      .post('/oauth/token')
      .type('form')
      .send({
        grant_type: 'client_credentials',
        client_assertion_type: CLIENT_ASSERTION_TYPE,
        client_assertion: signClientAssertion({ clientId, audience: ISSUER, privateKey: priv, kid }),
      });

  it('PK26: fetches once and caches; within the cooldown a flood of unknown kids costs no fetch', async () => {
    const c = await s.issuer.clients.create({ name: 'remote', authMethod: 'private_key_jwt', jwksUri: uri });
    expect((await post(c.clientId, k1.priv)).status).toBe(200);
    expect((await post(c.clientId, k1.priv)).status).toBe(200);
    expect(fetches).toBe(1);

    const k2 = ecPair('k2');
    published = { keys: [k1.pub, k2.pub] };
    // the first fetch was just now: within the cooldown an unknown kid does not refetch
    expect((await post(c.clientId, k2.priv)).status).toBe(401);
    const statuses = await Promise.all(Array.from({ length: 50 }, (_, i) => post(c.clientId, k1.priv, `made-up-${i}`).then((r) => r.status)));
    expect(statuses.every((x) => x === 401)).toBe(true);
    expect(fetches).toBe(1);
  });

  it('refuses non-https URIs (except loopback) at registration', async () => {
    await expect(s.issuer.clients.create({ name: 'x', authMethod: 'private_key_jwt', jwksUri: 'http://client.example/jwks' })).rejects.toThrow(/https/);
    await expect(s.issuer.clients.create({ name: 'x', authMethod: 'private_key_jwt', jwksUri: uri, jwks: { keys: [k1.pub] } })).rejects.toThrow(/not both/);
  });

  it('a key set over the size cap, or not JSON, is refused with 401', async () => {
    const c = await s.issuer.clients.create({ name: 'big', authMethod: 'private_key_jwt', jwksUri: uri });
    body = () => JSON.stringify({ keys: [k1.pub], pad: 'x'.repeat(70 * 1024) });
    expect((await post(c.clientId, k1.priv)).status).toBe(401);
  });
});
