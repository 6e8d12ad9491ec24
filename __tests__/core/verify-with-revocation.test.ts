import { InvalidTokenError } from '../../lib/errors';
import { signAccessToken } from '../../lib/core/issuer';
import { generateStoredKey, loadStoredKey, type KeyResolver } from '../../lib/core/keys';
import { RevocationState, verifyWithRevocation } from '../../lib/core/revocation';
import { AccessTokenVerifier, type AccessTokenAuth } from '../../lib/core/verifier';

const ISSUER = 'https://issuer.test';
const AUD = 'https://api.test';
const clock = Date.parse('2030-01-01T00:00:00Z');
const key = loadStoredKey(generateStoredKey('ES256', new Date(clock)));

function setup(asyncKeys: boolean) {
  // asyncKeys: the first lookup of the kid answers a promise (a remote JWKS fetch), as in standalone mode
  let fetched = false;
  const keys: KeyResolver = {
    peek: (kid) => (kid === key.kid && (fetched || !asyncKeys) ? key : undefined),
    resolve: (kid) => {
      if (kid !== key.kid) return undefined;
      if (!asyncKeys || fetched) return key;
      fetched = true;
      return Promise.resolve(key);
    },
  };
  const verifier = new AccessTokenVerifier({ issuer: ISSUER, audience: AUD, keys, clockTolerance: 0, cacheMax: 100, now: () => clock });
  const state = new RevocationState({ maxTokenTtl: 600, now: () => clock });
  const verify = verifyWithRevocation((t) => verifier.verify(t), state);
  const issue = (clientId: string) =>
    signAccessToken(key, { issuer: ISSUER, audience: AUD, clientId, scopes: ['read'], ttl: 600, now: clock });
  return { verify, state, issue };
}

async function refusal(fn: () => AccessTokenAuth | Promise<AccessTokenAuth>): Promise<InvalidTokenError> {
  try {
    await fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidTokenError);
    return err as InvalidTokenError;
  }
  throw new Error('the token was accepted');
}

describe.each([false, true])('verifyWithRevocation (async key lookup: %s)', (asyncKeys) => {
  it('RV10: a token accepted (and cached) is refused on the next call once revoked: the cache hit is checked too', async () => {
    const { verify, state, issue } = setup(asyncKeys);
    const { accessToken, claims } = issue('c1');
    expect((await verify(accessToken)).clientId).toBe('c1');
    const hit = verify(accessToken);
    expect(hit).not.toBeInstanceOf(Promise); // a cache hit stays synchronous
    state.apply({ type: 'token', jti: claims.jti, clientId: 'c1', exp: claims.exp });
    const err = await refusal(() => verify(accessToken));
    expect(err.status).toBe(401);
    expect(err.description).toBe('the access token was revoked');
    expect(err.detail).toBe('token_revoked');
  });

  it('RV7/RV8: revoked client and revoke-tokens refuse tokens on the first (uncached) verification as well', async () => {
    const { verify, state, issue } = setup(asyncKeys);
    const a = issue('c1');
    const b = issue('c2');
    state.apply([{ type: 'client', clientId: 'c1', at: clock }, state.revokeTokensEvent('c2')]);
    expect((await refusal(() => verify(a.accessToken))).detail).toBe('client_revoked');
    expect((await refusal(() => verify(b.accessToken))).detail).toBe('tokens_revoked_before');
  });

  it('a forged token is refused as invalid before any revocation lookup (no oracle)', async () => {
    const { verify, state, issue } = setup(asyncKeys);
    const { accessToken, claims } = issue('c1');
    state.apply({ type: 'token', jti: claims.jti, clientId: 'c1', exp: claims.exp });
    const [h, p, s] = accessToken.split('.');
    const tampered = `${h}.${p}.${s.slice(0, -4)}AAAA`;
    const err = await refusal(() => verify(tampered));
    expect(err.description).not.toBe('the access token was revoked');
  });
});
