/**
 * Past the skew (the last minute before expiry) with a token still valid:
 * what a call waits for while the token is renewed, with the token endpoint
 * healthy, slow, or hanging. Expiry runs on the fake clock; latencies are
 * real time.
 */
import { gate, until, useClientFixture } from './fakes';

const fx = useClientFixture({ clientId: 'svc', clientSecret: 's3cret-value' });
const { client, count, tokenRequests } = fx;

/** The token a call gets, and how long (real ms) it took. */
async function timed(get: () => Promise<{ accessToken: string }>): Promise<{ token: string; ms: number }> {
  const started = Date.now();
  const token = (await get()).accessToken;
  return { token, ms: Date.now() - started };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A token endpoint that answers tok-<n> after `ms` of real time. */
const answersAfter = (ms: number) => async (_req: unknown, n: number) => {
  await sleep(ms);
  return { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
};

/** The token calls get once the renewal under way has come back: asks every 5 ms, for up to 3 s. */
async function tokenOnceRenewed(c: { getToken(): Promise<{ accessToken: string }> }, held: string): Promise<string> {
  const end = Date.now() + 3000;
  let next = await c.getToken();
  while (next.accessToken === held && Date.now() < end) {
    await sleep(5);
    next = await c.getToken();
  }
  return next.accessToken;
}

describe('past the skew, a token still valid', () => {
  it('endpoint healthy (answers in 200 ms): the call waits for the renewal and gets the new token', async () => {
    const c = client({ refreshWindow: 0 });
    await c.getToken();
    fx.endpoint.reply = answersAfter(200);
    fx.time.advance(3541);
    expect((await timed(() => c.getToken())).token).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('endpoint hanging (timeout 2 s): no call waits more than 1 s, and once the renewal has failed none waits at all, while it is retried in the background', async () => {
    const c = client({ refreshWindow: 0, timeout: 2 });
    await c.getToken();
    fx.endpoint.gate = new Promise(() => undefined);
    fx.time.advance(3541);
    // 50 calls at once: one renewal, and each gets the token held after 1 s
    const first = await Promise.all(Array.from({ length: 50 }, () => timed(() => c.getToken())));
    expect(new Set(first.map((call) => call.token))).toEqual(new Set(['tok-1']));
    expect(Math.min(...first.map((call) => call.ms))).toBeGreaterThanOrEqual(900);
    expect(Math.max(...first.map((call) => call.ms))).toBeLessThan(1500);
    expect(tokenRequests()).toBe(2);
    // the renewal has run for 1 s: calls get the token held at once
    for (let i = 0; i < 5; i++) {
      const call = await timed(() => c.getToken());
      expect(call).toMatchObject({ token: 'tok-1' });
      expect(call.ms).toBeLessThan(100);
    }
    await until(() => count('token.refresh_failed') === 1, 'the renewal to time out');
    // after each backoff (1 s at most, then 2 s) a call starts the next renewal and does not wait for it
    for (let round = 0; round < 2; round++) {
      fx.time.advance(2 ** round + 0.01);
      const requests = tokenRequests();
      const call = await timed(() => c.getToken());
      expect(call).toMatchObject({ token: 'tok-1' });
      expect(call.ms).toBeLessThan(100);
      await until(() => tokenRequests() === requests + 1, 'the background renewal');
      await until(() => count('token.refresh_failed') === round + 2, 'the renewal to time out');
    }
  }, 20_000);

  it('endpoint slow (answers after 1.5 s): the first call gets the token held after 1 s, the next ones the new token once it came; 1 renewal', async () => {
    const c = client({ refreshWindow: 0 });
    await c.getToken();
    fx.endpoint.reply = answersAfter(1500);
    fx.time.advance(3541);
    const first = await timed(() => c.getToken());
    expect(first.token).toBe('tok-1');
    expect(first.ms).toBeGreaterThanOrEqual(900);
    expect(first.ms).toBeLessThan(1400);
    await until(() => count('token.requested') === 2);
    expect(await tokenOnceRenewed(c, 'tok-1')).toBe('tok-2');
    expect(tokenRequests()).toBe(2);
  });

  it('a renewal of the held token failed in the refresh window: past the skew calls get it at once, and the new one as soon as a renewal succeeds', async () => {
    const c = client({ timeout: 2 });
    await c.getToken();
    fx.endpoint.reply = () => ({ status: 503, body: { error: 'temporarily_unavailable' } });
    fx.time.advance(3361); // past any jittered start of the background renewal
    await c.getToken();
    await until(() => count('token.refresh_failed') === 1, 'the background renewal to fail');
    const held = gate();
    fx.endpoint.gate = held.promise;
    fx.endpoint.reply = (_req, n) => ({ body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } });
    fx.time.advance(200); // past the skew, the backoff over
    const call = await timed(() => c.getToken());
    expect(call.token).toBe('tok-1');
    expect(call.ms).toBeLessThan(100);
    await until(() => tokenRequests() === 3, 'the renewal');
    held.open();
    fx.endpoint.gate = undefined;
    expect(await tokenOnceRenewed(c, 'tok-1')).toBe('tok-3');
    expect(tokenRequests()).toBe(3);
  });
});
