/**
 * AccessTokenVerifier: why a token is refused. Every refusal is an
 * InvalidTokenError with a typed reason and facts an operator can act on,
 * decided from the decoded token (exact expected and received values).
 */
import { sign } from 'node:crypto';
import { InvalidTokenError, type TokenRejectionReason } from '../../lib/errors';
import { StaticKeys, loadJwks } from '../../lib/core/jwks';
import { AccessTokenVerifier } from '../../lib/core/verifier';
import {
  TEST_AUDIENCE,
  TEST_ISSUER,
  accessClaims,
  freshKey,
  hmacToken,
  mint,
  nowSeconds,
  unsignedToken,
  type SigningKey,
} from '../helpers/tokens';

const key = freshKey('ES256', 'key-1');
const rsa = freshKey('RS256', 'key-rsa');

function verifier(cacheMax = 100): AccessTokenVerifier {
  const set = { keys: [key, rsa].map((k) => ({ ...k.publicKey.export({ format: 'jwk' }), kid: k.kid, alg: k.alg, use: 'sig' })) };
  return new AccessTokenVerifier({
    issuer: TEST_ISSUER,
    audience: TEST_AUDIENCE,
    keys: new StaticKeys(loadJwks(set)),
    clockTolerance: 5,
    cacheMax,
    now: Date.now,
  });
}

/** The error verify() throws for `token` (it must throw). */
function refusal(token: string, v = verifier()): InvalidTokenError {
  try {
    const result = v.verify(token);
    if (result instanceof Promise) throw new Error('StaticKeys resolve synchronously');
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidTokenError);
    return err as InvalidTokenError;
  }
  throw new Error('the token was accepted');
}

const signature = (token: string): string => token.split('.')[2];
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');

/** A token jsonwebtoken would refuse to sign (claims of the wrong type), signed by hand with `k`. */
function signRaw(k: SigningKey, overrides: Record<string, unknown>): string {
  const input = `${b64({ alg: 'ES256', typ: 'at+jwt', kid: k.kid })}.${b64(accessClaims(overrides))}`;
  return `${input}.${sign('sha256', Buffer.from(input), { key: k.privateKey, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
}

describe('reasons', () => {
  const other = freshKey('ES256', key.kid);
  const cases: [string, () => string, TokenRejectionReason, Record<string, unknown>][] = [
    ['wrong iss', () => mint(key, { claims: { iss: 'http://other-issuer.test' } }), 'wrong_issuer', { expected: TEST_ISSUER, received: 'http://other-issuer.test', kid: 'key-1', claimed_client_id: 'client-test' }],
    ['wrong aud', () => mint(key, { claims: { aud: 'http://other-api.test' } }), 'wrong_audience', { expected: TEST_AUDIENCE, received: 'http://other-api.test' }],
    ['aud array without ours', () => mint(key, { claims: { aud: ['http://a.test', 'http://b.test'] } }), 'wrong_audience', { expected: TEST_AUDIENCE, received: ['http://a.test', 'http://b.test'] }],
    ['expired beyond the tolerance', () => mint(key, { claims: { iat: nowSeconds() - 120, exp: nowSeconds() - 60 } }), 'expired', { client_id: 'client-test' }],
    ['not yet valid', () => mint(key, { claims: { nbf: nowSeconds() + 600 } }), 'not_yet_valid', {}],
    ['issued in the future beyond the tolerance', () => mint(key, { claims: { iat: nowSeconds() + 600, exp: nowSeconds() + 1200 } }), 'not_yet_valid', {}],
    ['another key under our kid', () => mint(other), 'bad_signature', { kid: 'key-1', claimed_client_id: 'client-test' }],
    ['an empty signature', () => mint(key).replace(/[^.]+$/, ''), 'bad_signature', {}],
    ['an unknown kid', () => mint(freshKey('ES256', 'nobody')), 'unknown_kid', { kid: 'nobody' }],
    ['no kid', () => mint(key, { header: { kid: undefined } }), 'unknown_kid', {}],
    ['typ JWT', () => mint(key, { header: { typ: 'JWT' } }), 'wrong_typ', { expected: 'at+jwt', received: 'JWT' }],
    ['alg none', () => unsignedToken(key.kid), 'wrong_alg', { received: 'none' }],
    ['HS256', () => hmacToken(key.kid, 'secret'), 'wrong_alg', { received: 'HS256' }],
    ['RS256 under an ES256 kid', () => mint(freshKey('RS256', key.kid)), 'wrong_alg', { expected: 'ES256', received: 'RS256' }],
    ['no exp', () => mint(key, { omit: ['exp'] }), 'missing_claim', { claim: 'exp' }],
    ['no client_id', () => mint(key, { omit: ['client_id'] }), 'missing_claim', { claim: 'client_id' }],
    ['exp a string', () => signRaw(key, { exp: 'tomorrow' }), 'invalid_claim', { claim: 'exp', received: 'tomorrow' }],
    ['scope an array', () => signRaw(key, { scope: ['a', 'b'] }), 'invalid_claim', { claim: 'scope', received: '["a","b"]' }],
    ['iss a number', () => mint(key, { claims: { iss: 42 } }), 'invalid_claim', { claim: 'iss', received: '42' }],
    ['a crit header (RFC 7515 §4.1.11: no extension is understood here)', () => mint(key, { header: { crit: ['exp'] } as never }), 'malformed', {}],
    ['not three segments', () => 'abcdef', 'malformed', {}],
    ['garbage segments', () => 'abc.def.ghi', 'malformed', {}],
    ['claims that are no JSON object', () => `${mint(key).split('.')[0]}.${Buffer.from('[1]').toString('base64url')}.sig`, 'malformed', {}],
  ];

  it.each(cases)('%s → %s', (_name, make, reason, facts) => {
    const token = make();
    const err = refusal(token);
    expect(err.reason).toBe(reason);
    expect(err.facts).toMatchObject(facts);
    // a client_id read before the signature was verified is never logged as the client's
    if (!['expired', 'not_yet_valid'].includes(reason)) expect(err.facts.client_id).toBeUndefined();
    // the public side does not change: 401 invalid_token with a fixed description
    expect(err.status).toBe(401);
    expect(err.toJSON()).toEqual({
      error: 'invalid_token',
      error_description: reason === 'expired' ? 'the access token expired' : 'the access token is invalid',
    });
    // nothing of the signature in what is logged
    const sig = signature(token);
    if (sig && sig.length > 8) expect(JSON.stringify({ ...err.facts, detail: err.detail })).not.toContain(sig);
  });

  it('a forged token that also expired is refused for its signature (the public description stays "invalid")', () => {
    const err = refusal(mint(other, { claims: { iat: nowSeconds() - 120, exp: nowSeconds() - 60 } }));
    expect(err.reason).toBe('bad_signature');
    expect(err.description).toBe('the access token is invalid');
  });

  it('a token from another issuer is refused as wrong_issuer even when its kid is unknown here', () => {
    const err = refusal(mint(freshKey('ES256', 'their-key'), { claims: { iss: 'http://elsewhere.test' } }));
    expect(err.reason).toBe('wrong_issuer');
    expect(err.facts).toMatchObject({ expected: TEST_ISSUER, received: 'http://elsewhere.test', kid: 'their-key' });
  });

  it('shortens long values taken from an unverified token', () => {
    const err = refusal(mint(key, { claims: { iss: `http://x.test/${'a'.repeat(5000)}` } }));
    expect(err.reason).toBe('wrong_issuer');
    expect((err.facts.received as string).length).toBeLessThanOrEqual(210);
  });

  it('accepts a valid token signed with either key', () => {
    for (const k of [key, rsa] as SigningKey[]) {
      const auth = verifier().verify(mint(k));
      expect(auth).toMatchObject({ clientId: 'client-test', scope: ['orders:read'] });
    }
    // the hand-signing helper above makes valid tokens: its refusals are the claims'
    expect(verifier().verify(signRaw(key, {}))).toMatchObject({ clientId: 'client-test' });
  });
});

/** A verifier (cache of 10) on a clock the test moves, and a token of `key` that expires a minute from now. */
function clockedVerifier(): { v: AccessTokenVerifier; token: string; exp: number; clock: { now: number } } {
  const clock = { now: Date.now() };
  const set = { keys: [{ ...key.publicKey.export({ format: 'jwk' }), kid: key.kid, alg: key.alg, use: 'sig' }] };
  const v = new AccessTokenVerifier({ issuer: TEST_ISSUER, audience: TEST_AUDIENCE, keys: new StaticKeys(loadJwks(set)), clockTolerance: 0, cacheMax: 10, now: () => clock.now });
  const exp = Math.floor(clock.now / 1000) + 60;
  return { v, token: mint(key, { claims: { iat: exp - 120, exp } }), exp, clock };
}

describe('cache statistics', () => {
  it('counts a miss for the first check and hits for repeats', () => {
    const v = verifier();
    const token = mint(key);
    for (let i = 0; i < 3; i++) v.verify(token);
    expect(v.cacheStats).toEqual({ hits: 2, misses: 1 });
    refusal(mint(freshKey()), v);
    expect(v.cacheStats).toEqual({ hits: 2, misses: 2 });
  });

  it('takes a cached token\'s signature with other claims or header for what it is: a forgery, and keeps the cached token', () => {
    const v = verifier();
    const token = mint(key, { claims: { scope: 'orders:read' } });
    v.verify(token);
    const [header, claims, sig] = token.split('.');
    const forgedClaims = `${header}.${b64({ ...JSON.parse(Buffer.from(claims, 'base64url').toString()), scope: 'orders:write' })}.${sig}`;
    const forgedHeader = `${b64({ alg: 'ES256', typ: 'at+jwt', kid: key.kid, x: 1 })}.${claims}.${sig}`;
    expect(refusal(forgedClaims, v).reason).toBe('bad_signature');
    expect(refusal(forgedHeader, v).reason).toBe('bad_signature');
    expect(v.cacheStats).toEqual({ hits: 0, misses: 3 });
    expect(v.verify(token)).toMatchObject({ clientId: 'client-test', scope: ['orders:read'] });
    expect(v.cacheStats).toEqual({ hits: 1, misses: 3 });
  });

  it('drops a cached token once it expires', () => {
    const { v, token, exp, clock } = clockedVerifier();
    v.verify(token);
    v.verify(token);
    expect(v.cacheStats).toEqual({ hits: 1, misses: 1 });
    clock.now = exp * 1000 + 1;
    expect(refusal(token, v).reason).toBe('expired');
    expect(v.cacheStats).toEqual({ hits: 1, misses: 2 });
  });

  it('cached(): the auth of a token verified before and still good, else undefined; verifyUncached() counts the miss', () => {
    const { v, token, exp, clock } = clockedVerifier();
    expect(v.cached(token)).toBeUndefined();
    expect(v.cacheStats).toEqual({ hits: 0, misses: 0 });
    const auth = v.verifyUncached(token);
    expect(v.cacheStats).toEqual({ hits: 0, misses: 1 });
    expect(v.cached(token)).toBe(auth);
    // another token with the same ending is not this one
    expect(v.cached(`x${token.slice(1)}`)).toBeUndefined();
    expect(v.cacheStats).toEqual({ hits: 1, misses: 1 });
    clock.now = exp * 1000 + 1;
    expect(v.cached(token)).toBeUndefined();
    expect(refusal(token, v).reason).toBe('expired');
  });

  it('counts nothing while the cache is off', () => {
    const v = verifier(0);
    v.verify(mint(key));
    expect(v.cacheStats).toEqual({ hits: 0, misses: 0 });
  });
});
