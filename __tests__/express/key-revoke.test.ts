/**
 * `keys revoke KID` (the CLI) and `issuer.keys.revoke(kid)`: a signing key
 * whose private part may have leaked goes at once. It is no longer published,
 * every token it signed is refused (by the instance that revoked it at once,
 * by the others on the store when they see the store's key version move,
 * within revocationResync, cached tokens included), and a new key signs.
 * Two issuers on one embedded store.
 */
import type { AddressInfo } from 'node:net';
import express, { type Express } from 'express';
import request from 'supertest';
import { createIssuer, KeyRevocationUnsupportedError, openEmbeddedStore, requireBearer, stopRevocationListPolling, UnknownSigningKeyError, type Issuer } from '../../lib';
import { apiApp, AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { runCli as cli } from '../helpers/cli';
import { fetchToken, headerOf } from '../helpers/tokens';

interface Instance {
  issuer: Issuer;
  app: Express;
}

const mount = (issuer: Issuer): Instance => ({ issuer, app: apiApp(issuer) });

const jwksKids = async (i: Instance): Promise<string[]> => ((await request(i.app).get('/.well-known/jwks.json')).body.keys as { kid: string }[]).map((k) => k.kid);
const callApi = (i: Instance, token: string) => request(i.app).get('/api').set('Authorization', `Bearer ${token}`);

/** Polls (real time, at most 3 s) until `check` holds. */
async function within(ms: number, check: () => Promise<boolean>): Promise<number> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > ms) throw new Error(`not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return Date.now() - started;
}

/**
 * A standalone resource server verifying the tokens of `issuer` over HTTP (its JWKS, and with `listInterval`
 * its revocation list polled that often, in seconds): `call(token)`; `close()` stops the issuer's listener
 * and the polls.
 */
async function standaloneVerifier(issuer: Instance, listInterval?: number) {
  const server = issuer.app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const verify = requireBearer({
    issuer: ISSUER,
    audience: AUDIENCE,
    jwksUri: `${base}/.well-known/jwks.json`,
    ...(listInterval !== undefined && { revocationList: { uri: `${base}/oauth/revocation-list`, interval: listInterval } }),
    logger: false,
  });
  const api = express();
  api.get('/api', verify, (req, res) => void res.json({ client: req.auth!.clientId }));
  return {
    verify,
    call: (token: string) => request(api).get('/api').set('Authorization', `Bearer ${token}`),
    close: async () => {
      stopRevocationListPolling();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('revoking a signing key', () => {
  let dataDir: string;
  let instances: Instance[];

  beforeEach(async () => {
    dataDir = tempDir();
    instances = [];
    for (let i = 0; i < 2; i++) {
      // a key refresh of an hour: only the store's key version (read every revocationResync, 2 s) can explain a quick refusal
      const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, keyRefreshInterval: 3600 });
      await issuer.ready();
      instances.push(mount(issuer));
    }
  });
  afterEach(async () => {
    for (const i of instances) await i.issuer.close();
  });

  it('keys revoke on the key that signs: a new key signs at once, the old one is unpublished and its tokens refused everywhere, cached ones too', async () => {
    const [a] = instances;
    const client = await a.issuer.clients.create({ name: 'svc' });
    const old = await fetchToken(a.app, client);
    const oldKid = headerOf(old).kid as string;
    // both verified it: it is in both verified-token caches
    for (const i of instances) expect((await callApi(i, old)).status).toBe(200);

    const env = { DATA_DIR: dataDir };
    const r = await cli(['keys', 'revoke', oldKid, '--json'], env);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as { revoked: string; replaced_by: string | null };
    expect(out.revoked).toBe(oldKid);
    expect(out.replaced_by).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const listed = JSON.parse((await cli(['keys', 'list', '--json'], env)).stdout) as { kid: string; status: string }[];
    expect(listed.map((k) => [k.kid, k.status])).toEqual([[out.replaced_by, 'current']]);

    // within revocationResync (2 s) and a request: each instance refuses the token, publishes only the new key, signs with it
    for (const i of instances) {
      await within(3000, async () => (await callApi(i, old)).status === 401);
      const refused = await callApi(i, old);
      expect(refused.body.error).toBe('invalid_token');
      expect(refused.headers['www-authenticate']).toMatch(/^Bearer realm="api", error="invalid_token"/);
      expect(await jwksKids(i)).toEqual([out.replaced_by]);
      const fresh = await fetchToken(i.app, client);
      expect(headerOf(fresh).kid).toBe(out.replaced_by);
      for (const j of instances) expect((await callApi(j, fresh)).status).toBe(200);
    }
  });

  it('issuer.keys.revoke: at once on its own instance; a retired key goes without a new one; an unknown kid changes nothing', async () => {
    const [a] = instances;
    const client = await a.issuer.clients.create({ name: 'svc' });
    const first = await fetchToken(a.app, client);
    const firstKid = headerOf(first).kid as string;
    // a rotation with no lead time: the first key is retired, published for its tokens, which still verify
    const second = await a.issuer.keys.rotate(0);
    expect((await callApi(a, first)).status).toBe(200);

    await expect(a.issuer.keys.revoke('no-such-kid')).rejects.toBeInstanceOf(UnknownSigningKeyError);
    expect((await a.issuer.keys.list()).map((k) => k.kid)).toEqual([firstKid, second.kid]);

    const result = await a.issuer.keys.revoke(firstKid);
    expect(result.revoked.kid).toBe(firstKid);
    expect(result.replacement).toBeNull();
    expect((await callApi(a, first)).status).toBe(401);
    expect(await jwksKids(a)).toEqual([second.kid]);
    expect((await a.issuer.keys.list()).map((k) => [k.kid, k.status])).toEqual([[second.kid, 'current']]);
    expect((await callApi(a, await fetchToken(a.app, client))).status).toBe(200);
  });

  it('a standalone verifier refuses the revoked key\'s tokens once it fetches the JWKS again: at once when a token of the new key makes it fetch', async () => {
    const [a] = instances;
    const rs = await standaloneVerifier(a);
    try {
      const client = await a.issuer.clients.create({ name: 'svc' });
      const old = await fetchToken(a.app, client);
      expect((await rs.call(old)).status).toBe(200);

      const { replacement } = await a.issuer.keys.revoke(headerOf(old).kid as string);
      // its JWKS copy (2 min) still has the old key: a cached token passes until it fetches again
      expect((await rs.call(old)).status).toBe(200);
      const fresh = await fetchToken(a.app, client);
      expect(headerOf(fresh).kid).toBe(replacement!.kid);
      expect((await rs.call(fresh)).status).toBe(200);
      const refused = await rs.call(old);
      expect(refused.status).toBe(401);
      expect(refused.body.error).toBe('invalid_token');
    } finally {
      await rs.close();
    }
  });

  it('a standalone verifier that polls the revocation list refuses a revoked retired key\'s tokens within a poll, cached ones too, with no unknown kid to make it fetch', async () => {
    const [a] = instances;
    // the JWKS copy is kept 2 min (jwksMaxAge): only the list (polled every 0.2 s) can explain a quick refusal
    const rs = await standaloneVerifier(a, 0.2);
    try {
      const client = await a.issuer.clients.create({ name: 'svc' });
      const old = await fetchToken(a.app, client);
      expect((await rs.call(old)).status).toBe(200);
      // a rotation with no lead time: the list is signed by the new key, whose kid makes the verifier fetch the JWKS;
      // the old key is retired and still published for its tokens, which pass
      const rotated = await a.issuer.keys.rotate(0);
      const fresh = await fetchToken(a.app, client);
      expect(headerOf(fresh).kid).toBe(rotated.kid);
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect((await rs.call(old)).status).toBe(200);
      expect((await rs.call(fresh)).status).toBe(200);

      // the retired key leaked: the list, signed by the same key as before, no longer names it
      const { revoked, replacement } = await a.issuer.keys.revoke(headerOf(old).kid as string);
      expect(revoked.kid).toBe(headerOf(old).kid);
      expect(replacement).toBeNull();
      const tookMs = await within(3000, async () => (await rs.call(old)).status === 401);
      expect(tookMs).toBeLessThan(3000);
      const refused = await rs.call(old);
      expect(refused.body.error).toBe('invalid_token');
      expect(refused.headers['www-authenticate']).toMatch(/^Bearer realm="api", error="invalid_token"/);
      expect((await rs.call(fresh)).status).toBe(200);
      expect((await rs.verify.health()).ok).toBe(true);
    } finally {
      await rs.close();
    }
  });

  it('made-up kids hold back the JWKS fetches of a standalone verifier, not a key the revocation list names: a rotation with no lead time is taken within a poll', async () => {
    const [a] = instances;
    const rs = await standaloneVerifier(a, 0.2);
    try {
      const client = await a.issuer.clients.create({ name: 'svc' });
      const first = await fetchToken(a.app, client);
      expect((await rs.call(first)).status).toBe(200);
      // a token with a made-up kid: the JWKS is fetched for it, found wanting, and unknown kids are held back for the cooldown (30 s)
      const [h, p, sig] = first.split('.');
      const header = { ...JSON.parse(Buffer.from(h, 'base64url').toString()), kid: 'made-up-kid' };
      expect((await rs.call(`${Buffer.from(JSON.stringify(header)).toString('base64url')}.${p}.${sig}`)).status).toBe(401);

      // the list is signed by the new key, whose kid the verifier fetches only because the list names it
      const rotated = await a.issuer.keys.rotate(0);
      const fresh = await fetchToken(a.app, client);
      expect(headerOf(fresh).kid).toBe(rotated.kid);
      await within(3000, async () => (await rs.call(fresh)).status === 200);
      expect((await rs.call(first)).status).toBe(200); // the retired key is still published for its tokens
    } finally {
      await rs.close();
    }
  });

  it('a store of one\'s own without deleteKey(): revoke is refused before anything changes (no rotation)', async () => {
    const full = await openEmbeddedStore({ dataDir: tempDir() });
    const { deleteKey: _omitted, ...store } = full;
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, store, logger: false });
    try {
      await issuer.ready();
      const before = await issuer.keys.list();
      await expect(issuer.keys.revoke(before[0].kid)).rejects.toBeInstanceOf(KeyRevocationUnsupportedError);
      expect(await issuer.keys.list()).toEqual(before);
    } finally {
      await issuer.close();
    }
  });

  it('keys revoke with an unknown kid exits 1 and changes nothing; without a kid it is a usage error', async () => {
    const env = { DATA_DIR: dataDir };
    const before = (await cli(['keys', 'list', '--json'], env)).stdout;
    const unknown = await cli(['keys', 'revoke', 'nope'], env);
    expect(unknown).toEqual({ code: 1, stdout: '', stderr: "error: no signing key has kid 'nope' ('keys list' shows them)\n" });
    // a kid is a thumbprint, which may start with '-' (one in 64 does): taken as the KID, not as an option
    const dashKid = `-${'Y'.repeat(42)}`;
    expect(await cli(['keys', 'revoke', dashKid, '--json'], env)).toEqual({ code: 1, stdout: '', stderr: `error: no signing key has kid '${dashKid}' ('keys list' shows them)\n` });
    // any other argument starting with one '-' that is no option is a KID too (a kid mistyped, a kid of another length)
    expect(await cli(['keys', 'revoke', `${dashKid}x`], env)).toEqual({ code: 1, stdout: '', stderr: `error: no signing key has kid '${dashKid}x' ('keys list' shows them)\n` });
    const missing = await cli(['keys', 'revoke'], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe("error: missing KID (run 'client-credentials keys revoke --help' for usage)\n");
    expect((await cli(['keys', 'list', '--json'], env)).stdout).toBe(before);
  });

  it('keys revoke in words: what was revoked, the new key, and when running issuers and resource servers learn of it', async () => {
    const [a] = instances;
    const kid = (await a.issuer.keys.list())[0].kid;
    const r = await cli(['keys', 'revoke', kid], { DATA_DIR: dataDir, KEY_REFRESH_INTERVAL: '1' });
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe(`Signing key ${kid} (ES256) revoked: it is no longer published, and every token it signed is refused.`);
    expect(lines[1]).toMatch(/^New signing key [A-Za-z0-9_-]{43} \(ES256\) signs from now on\.$/);
    expect(lines[2]).toContain('at once through PostgreSQL or Redis (REDIS_URL), within their revocationResync (2 s) on the embedded file, else at their next key refresh (keyRefreshInterval, 1 s here)');
  });
});
