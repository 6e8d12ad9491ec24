import jwt from 'jsonwebtoken';
import { InvalidRequestError, TemporarilyUnavailableError } from '../../lib/errors';
import { introspect, introspectWithReason, revocationFor, type VerifyAccessToken } from '../../lib/core/introspection';
import { signAccessToken } from '../../lib/core/issuer';
import { generateStoredKey, loadStoredKey, type KeyResolver } from '../../lib/core/keys';
import { RevocationState, revocationClaims } from '../../lib/core/revocation';
import { AccessTokenVerifier } from '../../lib/core/verifier';

const ISSUER = 'https://issuer.test';
const AUD = 'https://api.test';
let clock = Date.parse('2030-01-01T00:00:00Z');
const key = loadStoredKey(generateStoredKey('ES256', new Date(clock)));
const foreign = loadStoredKey(generateStoredKey('ES256', new Date(clock)));
const keys: KeyResolver = { peek: (kid) => (kid === key.kid ? key : undefined), resolve: (kid) => (kid === key.kid ? key : undefined) };
const verifier = new AccessTokenVerifier({ issuer: ISSUER, audience: AUD, keys, clockTolerance: 0, cacheMax: 100, now: () => clock });
const verify: VerifyAccessToken = (t) => verifier.verify(t);

function issue(clientId: string, state: RevocationState, extra: Record<string, unknown> = {}, signWith = key) {
  const { accessToken, claims } = signAccessToken(signWith, { issuer: ISSUER, audience: AUD, clientId, scopes: ['read', 'write'], ttl: 600, now: clock });
  if (Object.keys(extra).length === 0 && state.generation(clientId) === 0) return { token: accessToken, claims };
  // the lead adds revocationClaims() (and cnf for DPoP) in signAccessToken; here they are added by re-signing
  const full = { ...claims, ...revocationClaims(state, clientId), ...extra };
  const token = jwt.sign(full, signWith.privateKey!, { algorithm: 'ES256', header: { alg: 'ES256', typ: 'at+jwt', kid: signWith.kid } });
  return { token, claims: full };
}

describe('introspect (RFC 7662)', () => {
  const state = new RevocationState({ maxTokenTtl: 600, now: () => clock });

  it('IN1: a live token → active with exactly the listed members', async () => {
    const { token, claims } = issue('c1', state);
    expect(await introspect(token, verify, state)).toEqual({
      active: true,
      client_id: 'c1',
      scope: 'read write',
      exp: claims.exp,
      iat: claims.iat,
      sub: 'c1',
      aud: AUD,
      iss: ISSUER,
      jti: claims.jti,
      token_type: 'Bearer',
    });
  });

  it("a token past its exp on the issuer's clock → inactive, even within the verifier's clock tolerance", async () => {
    const lenient = new AccessTokenVerifier({ issuer: ISSUER, audience: AUD, keys, clockTolerance: 30, cacheMax: 0, now: () => clock });
    const { token, claims } = issue('c1', state);
    const now = () => clock;
    const saved = clock;
    try {
      clock = claims.exp * 1000 - 1;
      expect((await introspect(token, (t) => lenient.verify(t), state, { now })).active).toBe(true);
      clock = claims.exp * 1000 + 10_000;
      // the verifier alone still takes it (10 s past exp, 30 s tolerance)...
      expect(lenient.verify(token)).toMatchObject({ clientId: 'c1' });
      // ...introspection does not: the answer would state an exp already past
      expect(await introspect(token, (t) => lenient.verify(t), state, { now })).toStrictEqual({ active: false });
    } finally {
      clock = saved;
    }
  });

  it('a token granted no scope → active without a scope member', async () => {
    const { accessToken } = signAccessToken(key, { issuer: ISSUER, audience: AUD, clientId: 'c9', scopes: [], ttl: 600, now: clock });
    const answer = await introspect(accessToken, verify, state, { now: () => clock });
    expect(answer.active).toBe(true);
    expect(answer).not.toHaveProperty('scope');
  });

  it('IN2: revoked (one token, the client, revoke-tokens), expired, forged, foreign, garbage → exactly { active: false }', async () => {
    const s = new RevocationState({ maxTokenTtl: 600, now: () => clock });
    const one = issue('c1', s);
    const other = issue('c1', s);
    s.apply({ type: 'token', jti: one.claims.jti, clientId: 'c1', exp: one.claims.exp });
    expect(await introspect(one.token, verify, s)).toStrictEqual({ active: false });
    expect((await introspect(other.token, verify, s)).active).toBe(true);
    s.apply(s.revokeTokensEvent('c1'));
    expect(await introspect(other.token, verify, s)).toStrictEqual({ active: false });
    expect((await introspect(issue('c1', s).token, verify, s)).active).toBe(true);
    const gone = issue('c2', s);
    s.apply({ type: 'client', clientId: 'c2', at: clock });
    expect(await introspect(gone.token, verify, s)).toStrictEqual({ active: false });

    const live = issue('c3', s);
    const [h, p] = live.token.split('.');
    const forged = `${h}.${p}.${issue('c4', s).token.split('.')[2]}`;
    expect(await introspect(forged, verify, s)).toStrictEqual({ active: false });
    expect(await introspect(issue('c3', s, {}, foreign).token, verify, s)).toStrictEqual({ active: false });
    expect(await introspect('garbage', verify, s)).toStrictEqual({ active: false });
    expect(await introspect(undefined, verify, s)).toStrictEqual({ active: false });
    expect(await introspect('x'.repeat(10_000), verify, s)).toStrictEqual({ active: false });
    clock += 601_000;
    try {
      expect(await introspect(live.token, verify, s)).toStrictEqual({ active: false });
    } finally {
      clock -= 601_000;
    }
  });

  it('IN4: a caller not entitled to the token → inactive', async () => {
    const { token } = issue('c1', state);
    expect(await introspect(token, verify, state, { mayIntrospect: (c) => c.aud === 'https://other.test' })).toStrictEqual({ active: false });
    expect((await introspect(token, verify, state, { mayIntrospect: (c) => c.aud === AUD })).active).toBe(true);
  });

  it('IN5: a DPoP-bound token → token_type DPoP and cnf.jkt', async () => {
    const { token } = issue('c1', state, { cnf: { jkt: 'thumbprint' } });
    expect(await introspect(token, verify, state)).toMatchObject({ active: true, token_type: 'DPoP', cnf: { jkt: 'thumbprint' } });
  });

  it('a token whose cnf names no key thumbprint (unusable at any API) → inactive, not a Bearer token', async () => {
    for (const cnf of [{}, { jkt: 42 }, 'x5t', null]) {
      const { token } = issue('c1', state, { cnf });
      expect(await introspect(token, verify, state)).toStrictEqual({ active: false });
    }
  });

  it('introspectWithReason(): the same answer, and why it is inactive (never sent)', async () => {
    const live = issue('c1', state);
    expect(await introspectWithReason(live.token, verify, state)).toEqual({ answer: await introspect(live.token, verify, state) });
    const why = async (token: unknown, options = {}) => (await introspectWithReason(token, verify, state, options)).inactive;
    expect(await why(live.token, { mayIntrospect: () => false })).toEqual({ reason: 'other_audience', tokenClientId: 'c1' });
    expect(await why(live.token, { now: () => live.claims.exp * 1000 })).toEqual({ reason: 'expired', tokenClientId: 'c1' });
    expect(await why(issue('c1', state, { cnf: {} }).token)).toEqual({ reason: 'cnf_without_jkt', tokenClientId: 'c1' });
    expect(await why('x'.repeat(9000))).toEqual({ reason: 'token_too_long' });
    expect(await why('a.b.c')).toMatchObject({ reason: 'malformed' });
    const [h, p] = live.token.split('.');
    const forged = await why(`${h}.${p}.${issue('c2', state).token.split('.')[2]}`);
    expect(forged).toMatchObject({ reason: 'bad_signature' });
    expect(forged!.tokenClientId).toBeUndefined();
  });

  it('a dependency outage is thrown (→ 503), not reported as inactive', async () => {
    const { token } = issue('c1', state);
    const down: VerifyAccessToken = () => Promise.reject(new TemporarilyUnavailableError());
    await expect(introspect(token, down, state)).rejects.toBeInstanceOf(TemporarilyUnavailableError);
    const stale = { isRevoked: () => { throw new TemporarilyUnavailableError(); } };
    await expect(introspect(token, verify, stale)).rejects.toBeInstanceOf(TemporarilyUnavailableError);
  });
});

describe('revocationFor (RFC 7009)', () => {
  const state = new RevocationState({ maxTokenTtl: 600, now: () => clock });

  it('RV1: the owner revokes its token → the event that refuses it', async () => {
    const { token, claims } = issue('c1', state);
    const event = await revocationFor(token, 'c1', verify);
    expect(event).toEqual({ type: 'token', jti: claims.jti, clientId: 'c1', exp: claims.exp, gen: 0 });
    state.apply(event!);
    expect(await introspect(token, verify, state)).toStrictEqual({ active: false });
  });

  it('RV2: garbage, expired, unknown-key tokens → null (the endpoint answers 200, nothing changes)', async () => {
    expect(await revocationFor('garbage', 'c1', verify)).toBeNull();
    expect(await revocationFor(issue('c1', state, {}, foreign).token, 'c1', verify)).toBeNull();
    const { token } = issue('c1', state);
    clock += 601_000;
    try {
      expect(await revocationFor(token, 'c1', verify)).toBeNull();
    } finally {
      clock -= 601_000;
    }
  });

  it("RV3: another client's token → 400 invalid_request, and it stays valid", async () => {
    const s = new RevocationState({ maxTokenTtl: 600, now: () => clock });
    const { token } = issue('c1', s);
    const err = await revocationFor(token, 'c2', verify).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidRequestError);
    expect((err as InvalidRequestError).status).toBe(400);
    expect((await introspect(token, verify, s)).active).toBe(true);
  });
});
