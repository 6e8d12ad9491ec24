import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createIssuer } from '../../lib';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { ClientAssertionVerifier, parseAssertion, type ParsedAssertion } from '../../lib/core/client-assertion';
import { checkClientKeys } from '../../lib/core/clients';
import { RemoteClientKeys, checkJwksUri } from '../../lib/core/client-jwks-uri';
import { signClientAssertion } from '../../lib/jwt/client-assertion';
import * as publicJwk from '../../lib/jwt/public-jwk';
import type { ClientPublicJwk, ClientRecord } from '../../lib/stores/types';

const ISSUER = 'https://as.example';

function ecPair(kid: string): { pub: ClientPublicJwk; priv: JsonWebKey } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { pub: { ...(publicKey.export({ format: 'jwk' }) as object), kid, kty: 'EC' }, priv: { ...privateKey.export({ format: 'jwk' }), kid } };
}

function record(keys: ClientPublicJwk[]): ClientRecord {
  // a fresh object each time, as a store without a client cache returns
  return {
    clientId: 'c1',
    name: 'c1',
    scopes: [],
    grantTypes: ['client_credentials'],
    createdAt: new Date(0),
    revokedAt: null,
    secrets: [],
    authMethod: 'private_key_jwt',
    jwks: JSON.parse(JSON.stringify({ keys })),
    jwksUri: null,
    resources: [],
    permissions: [],
    requireDpop: false,
  };
}

function parsed(jwt: string): ParsedAssertion {
  const p = parseAssertion(jwt);
  if (typeof p === 'string') throw new Error(p);
  return p;
}

describe('ClientAssertionVerifier key cache', () => {
  afterEach(() => jest.restoreAllMocks());

  it('imports a client key set once, however many requests and record copies; again only when the set changes', async () => {
    const check = jest.spyOn(publicJwk, 'checkPublicJwk');
    const used = new Set<string>();
    const verifier = new ClientAssertionVerifier({
      issuer: ISSUER,
      tokenEndpoint: `${ISSUER}/oauth/token`,
      audience: 'issuer',
      clockTolerance: 5,
      consumeJti: async (_c, h) => (used.has(h) ? false : (used.add(h), true)),
      now: Date.now,
    });
    const k1 = ecPair('k1');
    for (let i = 0; i < 5; i++) {
      await verifier.verify(record([k1.pub]), parsed(signClientAssertion({ clientId: 'c1', audience: ISSUER, privateKey: k1.priv })), undefined);
    }
    expect(check).toHaveBeenCalledTimes(1);
    const k2 = ecPair('k2');
    await verifier.verify(record([k1.pub, k2.pub]), parsed(signClientAssertion({ clientId: 'c1', audience: ISSUER, privateKey: k2.priv })), undefined);
    expect(check).toHaveBeenCalledTimes(3);
  });
});

describe('checkClientKeys', () => {
  it('keeps public members, kid and the pinned alg only; a key without kid gets its thumbprint', () => {
    const { pub } = ecPair('x');
    const [withKid] = checkClientKeys({ ...pub, use: 'sig', extra: 'dropped' });
    expect(withKid).toEqual({ kty: 'EC', crv: 'P-256', x: pub.x, y: pub.y, kid: 'x', alg: 'ES256' });
    const { kid: _kid, ...noKid } = pub;
    expect(checkClientKeys(noKid)[0].kid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const p384 = generateKeyPairSync('ec', { namedCurve: 'P-384' }).publicKey.export({ format: 'jwk' });
    expect(checkClientKeys(p384)[0].alg).toBe('ES384');
  });

  it.each([
    ['an HMAC alg on an EC key', (pub: object) => ({ ...pub, alg: 'HS256' }), /not one of ES256, ES384, PS256, RS256/],
    ['alg none', (pub: object) => ({ ...pub, alg: 'none' }), /not one of/],
    ['an alg that does not fit the curve', (pub: object) => ({ ...pub, alg: 'ES384' }), /does not fit/],
    ['a set whose only key is for encryption', (pub: object) => ({ ...pub, use: 'enc' }), /no key that signs client assertions: use enc: not a signing key/],
    ['an empty set', () => ({ keys: [] }), /at least one public key/],
    ['a point off the curve', (pub: object) => ({ ...pub, x: 'AAAA' }), /not a valid public key/],
  ])('refuses %s', (_name, make, message) => {
    expect(() => checkClientKeys(make(ecPair('k').pub))).toThrow(message);
  });
});

describe('checkClientKeys with keys a set may hold for other uses', () => {
  it('skips an encryption key, an Ed25519 key and a key without verify in key_ops, keeps the signing key, and says what it skipped', () => {
    const { pub } = ecPair('sig');
    const ed = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' });
    const enc = { ...ecPair('enc').pub, use: 'enc' };
    const wrap = { ...ecPair('wrap').pub, key_ops: ['wrapKey'] };
    const skipped: string[] = [];
    const keys = checkClientKeys({ keys: [enc, { ...ed, kid: 'ed' }, pub, wrap] }, (i, reason) => skipped.push(`${i}: ${reason}`));
    expect(keys.map((k) => k.kid)).toEqual(['sig']);
    expect(skipped).toEqual(['0: use enc: not a signing key', '1: kty OKP: this issuer verifies EC (P-256, P-384) and RSA keys', '3: key_ops without verify: not a signing key']);
  });

  it('still refuses private or symmetric material anywhere in the set', () => {
    const { pub } = ecPair('sig');
    const priv = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
    expect(() => checkClientKeys({ keys: [pub, { ...priv, use: 'enc' }] })).toThrow(/private member/);
    expect(() => checkClientKeys({ keys: [pub, { kty: 'oct', k: 'AAAA', use: 'enc' }] })).toThrow(/symmetric/);
  });
});

describe('RemoteClientKeys', () => {
  it('PK26: caches, refetches once per cooldown for an unknown kid, shares concurrent fetches, keeps the old set when a refresh fails', async () => {
    let now = 1_000_000;
    let calls = 0;
    let published: object = { keys: [ecPair('k1').pub] };
    let fail = false;
    const fakeFetch = (async () => {
      calls++;
      await new Promise((r) => setTimeout(r, 5));
      if (fail) throw new Error('down');
      return new Response(JSON.stringify(published), { status: 200 });
    }) as unknown as typeof fetch;
    const remote = new RemoteClientKeys({ now: () => now, fetch: fakeFetch, cooldownMs: 30_000, maxAgeMs: 300_000 });
    const uri = 'https://client.example/jwks';

    const first = await Promise.all(Array.from({ length: 10 }, () => remote.keys(uri, 'k1')));
    expect(first.every((m) => m.byKid.has('k1'))).toBe(true);
    expect(calls).toBe(1); // single flight

    published = { keys: [ecPair('k1').pub, ecPair('k2').pub] };
    expect((await remote.keys(uri, 'k2')).byKid.has('k2')).toBe(false); // within the cooldown
    expect(calls).toBe(1);
    // keys() says the cooldown held the fetch back, and for how long; not for a kid the set has
    now += 10_000;
    expect((await remote.keys(uri, 'k2')).heldBackMs).toBe(20_000);
    expect((await remote.keys(uri, 'k1')).heldBackMs).toBe(0);
    now += 20_000;
    const flood = await Promise.all(Array.from({ length: 20 }, (_, i) => remote.keys(uri, `unknown-${i}`)));
    expect(calls).toBe(2); // one refetch for the whole flood
    // each of them waited for that fetch (the one that started it, or a share of it): none was held back
    expect(flood.map((r) => r.heldBackMs)).toEqual(Array(20).fill(0));
    expect((await remote.keys(uri, 'unknown-x')).heldBackMs).toBe(30_000);
    expect((await remote.keys(uri, 'k2')).byKid.has('k2')).toBe(true);

    now += 300_001;
    fail = true;
    expect((await remote.keys(uri, 'k2')).byKid.has('k2')).toBe(true); // stale set kept when the refresh fails
    expect(calls).toBe(3);
    await expect(remote.keys('https://other.example/jwks', 'k1')).rejects.toThrow('down');
  });

  it('checkJwksUri: https, or http on loopback only', () => {
    expect(checkJwksUri('https://client.example/jwks')).toBe('https://client.example/jwks');
    expect(checkJwksUri('http://127.0.0.1:8080/jwks')).toBe('http://127.0.0.1:8080/jwks');
    expect(() => checkJwksUri('http://client.example/jwks')).toThrow(/https/);
    expect(() => checkJwksUri('https://u:p@client.example/jwks')).toThrow(/credentials/);
    expect(() => checkJwksUri('not a url')).toThrow(/absolute URL/);
  });
});

describe('jti purge', () => {
  it('runs every minute off the request path, with the current time, and stops at close()', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-purge-'));
    const inner = await openEmbeddedStore({ dataDir });
    const purged: Date[] = [];
    const store = Object.create(inner) as typeof inner;
    store.purgeJtis = async (before: Date) => {
      purged.push(before);
      return inner.purgeJtis(before);
    };
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask', 'performance', 'Date', 'hrtime'] });
    const issuer = createIssuer({ issuer: ISSUER, audience: 'api', store, logger: false, keyRefreshInterval: 3600 });
    try {
      await issuer.ready();
      expect(purged).toHaveLength(0);
      jest.advanceTimersByTime(60_000);
      expect(purged).toHaveLength(1);
      expect(Math.abs(purged[0].getTime() - Date.now())).toBeLessThan(5_000);
      jest.advanceTimersByTime(120_000);
      expect(purged).toHaveLength(3);
      await issuer.close();
      jest.advanceTimersByTime(120_000);
      expect(purged).toHaveLength(3);
    } finally {
      jest.useRealTimers();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
