import { generateKeyPairSync } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { verifyDpopProof } from '../../lib/core/dpop';
import { MemoryReplayStore } from '../../lib/core/dpop-replay';
import { jwkThumbprint as keysThumbprint } from '../../lib/core/keys';
import { DpopKey, accessTokenHash, createDpopProof, proofHtu } from '../../lib/jwt/dpop-proof';
import { jwkThumbprint } from '../../lib/jwt/thumbprint';

const decode = (segment: string) => JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));

describe('jwkThumbprint (RFC 7638)', () => {
  const rfcKey = {
    kty: 'RSA',
    n: '0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw',
    e: 'AQAB',
    alg: 'RS256',
    kid: '2011-04-29',
  };

  it('matches the example of RFC 7638 §3.1', () => {
    expect(jwkThumbprint(rfcKey)).toBe('NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs');
  });

  it('hashes the required members only, whatever their order', () => {
    const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const jwk = publicKey.export({ format: 'jwk' });
    const reordered = { y: jwk.y, x: jwk.x, kid: 'k', use: 'sig', crv: jwk.crv, kty: jwk.kty };
    expect(jwkThumbprint(reordered)).toBe(jwkThumbprint(jwk));
    expect(jwkThumbprint({ ...jwk, x: jwk.y })).not.toBe(jwkThumbprint(jwk));
  });

  it('is the one keys.ts exports', () => {
    expect(keysThumbprint(rfcKey)).toBe('NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs');
  });

  it('refuses key types it cannot hash', () => {
    expect(() => jwkThumbprint({ kty: 'oct', k: 'c2VjcmV0' })).toThrow(TypeError);
  });
});

describe('accessTokenHash and proofHtu', () => {
  it('hashes the access token as RFC 9449 §7.1 does', () => {
    expect(accessTokenHash('Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU')).toBe('fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo');
  });

  it('drops query and fragment', () => {
    expect(proofHtu('https://api.test/v1/orders?id=1#top')).toBe('https://api.test/v1/orders');
    expect(proofHtu(new URL('http://127.0.0.1:8080/x?y'))).toBe('http://127.0.0.1:8080/x');
  });
});

describe('DpopKey and createDpopProof', () => {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const key = new DpopKey({ privateKey });

  it('makes a proof with typ dpop+jwt, the alg and the public jwk only', () => {
    const [h] = key.proof({ htm: 'GET', htu: 'https://api.test/x' }).split('.');
    const header = decode(h);
    expect(header).toEqual({ typ: 'dpop+jwt', alg: 'ES256', jwk: key.publicJwk });
    expect(Object.keys(header.jwk).sort()).toEqual(['crv', 'kty', 'x', 'y']);
  });

  it('fills jti (random), iat (now), htm, htu (no query), ath and nonce', () => {
    const before = Math.floor(Date.now() / 1000);
    const proofs = [1, 2].map(() =>
      decode(key.proof({ htm: 'GET', htu: 'https://api.test/x?secret=1#f', accessToken: 'at', nonce: 'n1' }).split('.')[1]),
    );
    const claims = proofs[0];
    expect(claims).toMatchObject({ htm: 'GET', htu: 'https://api.test/x', ath: accessTokenHash('at'), nonce: 'n1' });
    expect(claims.iat).toBeGreaterThanOrEqual(before);
    expect(claims.iat).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000));
    expect(claims.jti).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(proofs[1].jti).not.toBe(claims.jti);
    const bare = decode(key.proof({ htm: 'POST', htu: 'https://as.test/oauth/token' }).split('.')[1]);
    expect(bare).not.toHaveProperty('ath');
    expect(bare).not.toHaveProperty('nonce');
  });

  it.each([
    ['P-256 (KeyObject)', () => generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey, 'ES256'],
    ['P-384 (private JWK)', () => generateKeyPairSync('ec', { namedCurve: 'P-384' }).privateKey.export({ format: 'jwk' }), 'ES384'],
    ['RSA (KeyObject)', () => generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey, 'PS256'],
  ])('picks the algorithm of a %s key, and the server accepts its proofs', (_, make, alg) => {
    const k = new DpopKey({ privateKey: make() });
    expect(k.alg).toBe(alg);
    const result = verifyDpopProof(k.proof({ htm: 'POST', htu: 'https://as.test/oauth/token' }), { htm: 'POST', htu: 'https://as.test/oauth/token' }, { replay: new MemoryReplayStore() });
    expect(result).toHaveProperty('jkt', k.jkt);
  });

  it('takes RS256 for an RSA key when asked, and the given public JWK', () => {
    const pair = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const k = new DpopKey({ privateKey: pair.privateKey, publicJwk: pair.publicKey.export({ format: 'jwk' }), alg: 'RS256' });
    expect(decode(k.proof({ htm: 'GET', htu: 'https://a.test/' }).split('.')[0]).alg).toBe('RS256');
  });

  it('refuses a public key, an algorithm that does not fit the key, and unsupported keys', () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    expect(() => new DpopKey({ privateKey: ec.publicKey })).toThrow(TypeError);
    expect(() => new DpopKey({ privateKey: ec.privateKey, alg: 'PS256' })).toThrow(TypeError);
    expect(() => new DpopKey({ privateKey: ec.privateKey, alg: 'ES384' })).toThrow(TypeError);
    expect(() => new DpopKey({ privateKey: ec.privateKey, alg: 'HS256' as never })).toThrow(TypeError);
    expect(() => new DpopKey({ privateKey: generateKeyPairSync('ed25519').privateKey })).toThrow(TypeError);
  });

  it('createDpopProof answers the proof and the key thumbprint', () => {
    const { proof, jkt } = createDpopProof({ privateKey, htm: 'POST', htu: 'https://as.test/oauth/token' });
    expect(jkt).toBe(key.jkt);
    expect(decode(proof.split('.')[0]).jwk).toEqual(key.publicJwk);
  });
});

describe('lib/jwt stays client-safe', () => {
  it('imports only node: built-ins and its own files', () => {
    const dir = join(__dirname, '../../lib/jwt');
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
      const source = readFileSync(join(dir, file), 'utf8');
      const specifiers = [...source.matchAll(/(?:from|import|require\()\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);
      for (const spec of specifiers) expect([file, spec]).toEqual([file, expect.stringMatching(/^(node:|\.\/)/)]);
    }
  });
});
