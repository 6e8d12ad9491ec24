import { generateKeyPairSync } from 'node:crypto';
import { RemoteJwks } from '../../lib/core/jwks';
import { AccessTokenVerifier } from '../../lib/core/verifier';
import { TEST_AUDIENCE, TEST_ISSUER, freshKey, mint } from '../helpers/tokens';

function jwk(kid: string) {
  const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { ...publicKey.export({ format: 'jwk' }), kid, alg: 'ES256', use: 'sig' };
}

describe('RemoteJwks', () => {
  let clock = 0;
  let set: object[] = [];
  let fetches = 0;
  const fakeFetch = (async () => {
    fetches++;
    return new Response(JSON.stringify({ keys: set }), { status: 200 });
  }) as unknown as typeof fetch;
  const remote = () => new RemoteJwks('http://issuer.test/jwks', { cooldownMs: 30_000, maxAgeMs: 120_000, timeoutMs: 1000, now: () => clock, fetch: fakeFetch });

  /** A RemoteJwks whose JWKS cannot be fetched while `jwks.down`. */
  const flakyRemote = () => {
    const jwks = { down: true };
    const flaky = (async () => {
      fetches++;
      if (jwks.down) throw new TypeError('fetch failed');
      return new Response(JSON.stringify({ keys: set }), { status: 200 });
    }) as unknown as typeof fetch;
    return { jwks, r: new RemoteJwks('http://issuer.test/jwks', { cooldownMs: 30_000, maxAgeMs: 120_000, timeoutMs: 1000, now: () => clock, fetch: flaky }) };
  };

  beforeEach(() => {
    clock = 1_000_000;
    fetches = 0;
    set = [jwk('a')];
  });

  it('keeps the objects of unchanged keys across refetches, so verified tokens stay cached', async () => {
    const r = remote();
    const a = await r.resolve('a');
    set = [set[0], jwk('b')];
    expect(await r.resolve('b')).toBeDefined();
    expect(fetches).toBe(2);
    expect(r.peek('a')).toBe(a);
  });

  it('a JWKS that cannot be fetched is unavailable (503), also within the cooldown: never "unknown kid" for a key it could not look for', async () => {
    const { r, jwks } = flakyRemote();
    await expect(Promise.resolve().then(() => r.resolve('a'))).rejects.toMatchObject({ code: 'temporarily_unavailable', status: 503 });
    expect(() => r.resolve('a')).toThrow(expect.objectContaining({ code: 'temporarily_unavailable' }));
    expect(fetches).toBe(1); // before the retry (5 s after a failure): no second fetch
    jwks.down = false;
    clock += 30_000;
    expect(await r.resolve('a')).toBeDefined();
    expect(await r.resolve('made-up')).toBeUndefined(); // found nothing: an unknown kid again
  });

  it('a JWKS over 1 MiB (declared, or only as it streams) is not read whole: unavailable, as a failed fetch', async () => {
    const padded = JSON.stringify({ keys: set, pad: 'x'.repeat(1024 * 1024) });
    for (const body of [padded, new Blob([padded]).stream()]) {
      const big = (async () => new Response(body, { status: 200 })) as unknown as typeof fetch;
      const r = new RemoteJwks('http://issuer.test/jwks', { cooldownMs: 30_000, maxAgeMs: 120_000, timeoutMs: 1000, now: () => clock, fetch: big });
      await expect(Promise.resolve().then(() => r.resolve('a'))).rejects.toMatchObject({ code: 'temporarily_unavailable', status: 503 });
    }
    // under the cap, the same keys are found
    const small = (async () => new Response(JSON.stringify({ keys: set, pad: 'x'.repeat(1000) }), { status: 200 })) as unknown as typeof fetch;
    expect(await new RemoteJwks('http://issuer.test/jwks', { cooldownMs: 30_000, maxAgeMs: 120_000, timeoutMs: 1000, now: () => clock, fetch: small }).resolve('a')).toBeDefined();
  });

  it('a failed fetch is tried again after 5 s, as its Retry-After says, not after the whole cooldown', async () => {
    const { r, jwks } = flakyRemote();
    await expect(Promise.resolve().then(() => r.resolve('a'))).rejects.toMatchObject({ status: 503, retryAfter: 5 });
    clock += 2_000;
    expect(() => r.resolve('a')).toThrow(expect.objectContaining({ status: 503, retryAfter: 3 }));
    expect(fetches).toBe(1);
    // the JWKS is back (with a key rotated in meanwhile): asked again 5 s after the failure
    jwks.down = false;
    set = [jwk('rotated')];
    clock += 3_000;
    expect(await r.resolve('rotated')).toBeDefined();
    expect(fetches).toBe(2);
  });

  it('listed(): a set fetched before the revocation list and differing from the kids it names is fetched again, within the cooldown too; a newer set, or the same kids, is kept', async () => {
    const r = remote();
    const a = await r.resolve('a');
    set = [set[0], jwk('b')];
    expect(await r.resolve('b')).toBeDefined();
    expect(fetches).toBe(2);
    // the list names the held kids: nothing to fetch
    expect(r.listed(['b', 'a'], clock + 1000)).toBeUndefined();
    // a list as of before the last fetch is older than the set: kept as it is, whatever it names
    expect(r.listed(['b'], clock)).toBeUndefined();
    expect(r.listed(['a', 'b', 'c'], clock)).toBeUndefined();
    expect(fetches).toBe(2);

    // a made-up kid holds back the fetches unknown kids make (the cooldown); a key the list names is fetched all the same
    expect(await r.resolve('made-up')).toBeUndefined();
    expect(fetches).toBe(3);
    set = [...set, jwk('c')];
    clock += 1000;
    expect(await r.resolve('c')).toBeUndefined(); // within the cooldown
    expect(fetches).toBe(3);
    await r.listed(['a', 'b', 'c'], clock + 1);
    expect(fetches).toBe(4);
    expect(r.peek('c')).toBeDefined();
    // 'a' was revoked: the list signed since no longer names it; refetched at once (the last fetch was within the cooldown)
    set = set.slice(1);
    clock += 1000;
    await r.listed(['b', 'c'], clock + 1);
    expect(fetches).toBe(5);
    expect(r.peek('a')).toBeUndefined();
    expect(r.peek('b')).toBeDefined();
    expect(a).toBeDefined();
    // the set fetched now holds what the list names: the same list asks nothing more
    expect(r.listed(['b', 'c'], clock + 1)).toBeUndefined();
    expect(fetches).toBe(5);
  });

  it('listed(): a fetch under way that started before the list is followed by one more (asking caches to revalidate), not taken for one after it', async () => {
    const answers: ((keys: object[]) => void)[] = [];
    const sent: Record<string, string>[] = [];
    const held = (async (_url: string, init: { headers: Record<string, string> }) => {
      sent.push(init.headers);
      const keys = await new Promise<object[]>((resolve) => answers.push(resolve));
      return new Response(JSON.stringify({ keys }), { status: 200 });
    }) as unknown as typeof fetch;
    const r = new RemoteJwks('http://issuer.test/jwks', { cooldownMs: 30_000, maxAgeMs: 120_000, timeoutMs: 1000, now: () => clock, fetch: held });
    const [a, b] = [jwk('a'), jwk('b')];
    const first = r.refresh();
    answers[0]([a, b]);
    await first;
    // a background refresh starts, reading the set while it still holds 'a'; then 'a' is revoked and the list says so
    clock += 1000;
    const stale = r.refresh();
    const listed = r.listed(['b'], clock + 1)!;
    expect(listed).toBeDefined();
    answers[1]([a, b]);
    await stale;
    expect(r.peek('a')).toBeDefined();
    await new Promise((resolve) => setImmediate(resolve));
    expect(sent).toHaveLength(3);
    expect(sent[2]['cache-control']).toBe('no-cache');
    expect(sent[1]['cache-control']).toBeUndefined();
    answers[2]([b]);
    await listed;
    expect(r.peek('a')).toBeUndefined();
    expect(r.peek('b')).toBeDefined();
  });

  it('peek() with the time refreshes a set older than maxAge in the background (cache hits only), at most once a cooldown; without it, never', async () => {
    const r = remote();
    await r.resolve('a');
    clock += 120_001;
    expect(r.peek('a')).toBeDefined();
    expect(fetches).toBe(1); // no time given: no refresh
    set = [set[0], jwk('b')];
    expect(r.peek('a', clock)).toBeDefined();
    expect(fetches).toBe(2);
    await new Promise((resolve) => setImmediate(resolve));
    expect(r.peek('b')).toBeDefined(); // the refreshed set
    for (let i = 0; i < 10; i++) r.peek('a', clock + 1_000);
    expect(fetches).toBe(2);
  });

  it('finds a new kid at once, then holds back after a fetch that found nothing', async () => {
    const r = remote();
    await r.resolve('a');
    set = [set[0], jwk('new')];
    expect(await r.resolve('new')).toBeDefined(); // right after the first fetch
    for (let i = 0; i < 20; i++) expect(await r.resolve(`made-up-${i}`)).toBeUndefined();
    expect(fetches).toBe(3); // first load, the new kid, one fruitless fetch
    clock += 30_000;
    await r.resolve('made-up-again');
    expect(fetches).toBe(4);
  });

  it('concurrent unknown kids share one fetch', async () => {
    const r = remote();
    set = [jwk('a'), jwk('b')];
    const [a, b, none] = await Promise.all([r.resolve('a'), r.resolve('b'), r.resolve('made-up')]);
    expect(a).toBeDefined();
    expect(b).toBeDefined();
    expect(none).toBeUndefined();
    expect(fetches).toBe(1);
  });

  it('within the cooldown, an unknown kid joins a fetch under way (and gets its answer)', async () => {
    const r = remote();
    await r.resolve('a');
    expect(await r.resolve('made-up')).toBeUndefined();
    expect(fetches).toBe(2);
    set = [set[0], jwk('new')];
    const refreshing = r.refresh();
    expect(await r.resolve('new')).toBeDefined();
    await refreshing;
    expect(fetches).toBe(3);
  });

  it('a failed fetch holds back unknown kids for the cooldown too, once the JWKS is back', async () => {
    const { r, jwks } = flakyRemote();
    await expect(Promise.resolve().then(() => r.resolve('a'))).rejects.toMatchObject({ status: 503 });
    jwks.down = false;
    clock += 5_000;
    expect(await r.resolve('a')).toBeDefined();
    expect(fetches).toBe(2);
    expect(await r.resolve('made-up')).toBeUndefined(); // 5 s after the failure: no fetch
    expect(fetches).toBe(2);
    clock += 25_000;
    expect(await r.resolve('made-up')).toBeUndefined(); // the cooldown from the failure is over
    expect(fetches).toBe(3);
  });
});

describe('RemoteJwks under the verifier', () => {
  it('a set older than maxAge is refetched by a request whose token is in the verified-token cache', async () => {
    const key = freshKey('ES256', 'k1');
    let fetches = 0;
    const published = { keys: [{ ...key.publicKey.export({ format: 'jwk' }), kid: key.kid, alg: 'ES256', use: 'sig' }] };
    const countingFetch = (async () => {
      fetches++;
      return new Response(JSON.stringify(published), { status: 200 });
    }) as unknown as typeof fetch;
    let clock = Date.now();
    const keys = new RemoteJwks('http://issuer.test/jwks', { cooldownMs: 1_000, maxAgeMs: 120_000, timeoutMs: 1000, now: () => clock, fetch: countingFetch });
    const verifier = new AccessTokenVerifier({ issuer: TEST_ISSUER, audience: TEST_AUDIENCE, keys, clockTolerance: 5, cacheMax: 10, now: () => clock });
    const token = mint(key, { claims: { iat: Math.floor(clock / 1000), exp: Math.floor(clock / 1000) + 3600 } });
    await verifier.verify(token);
    expect(fetches).toBe(1);
    clock += 60_000;
    expect(verifier.cached(token)).toBeDefined();
    expect(fetches).toBe(1); // younger than maxAge
    clock += 61_000;
    expect(verifier.cached(token)).toBeDefined(); // a hit, answered at once...
    expect(fetches).toBe(2); // ...that refetches the set in the background
  });
});
