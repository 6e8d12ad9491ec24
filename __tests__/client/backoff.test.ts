/**
 * How long the token client waits after a failed token request: Retry-After
 * in every form it comes in, the backoff under it, and which success lifts a
 * Retry-After that holds for every scope.
 */
import type { FetchLike } from '../../lib/client';
import { endpointFailure, gate, until, useClientFixture } from './fakes';

const fx = useClientFixture({ clientId: 'svc', clientSecret: 's3cret-value' });
const { client, tokenRequests } = fx;

/** fetch, with the Date header of each answer dropped (the fake server always sends one). */
const withoutDate: FetchLike = async (input, init) => {
  const res = await fetch(input, init);
  const headers = new Headers(res.headers);
  headers.delete('date');
  return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
};

const failure = endpointFailure;

describe('Retry-After that asks for no wait', () => {
  const unavailable = (headers: Record<string, string>) => () => ({ status: 503, headers, body: { error: 'temporarily_unavailable' } });

  it.each([
    ['0', () => ({ 'retry-after': '0' }), undefined],
    ['an HTTP-date already past (no Date header)', () => ({ 'retry-after': new Date(fx.time.t - 10_000).toUTCString() }), withoutDate],
    ['an HTTP-date equal to the Date header', () => ({ 'retry-after': new Date(fx.time.t).toUTCString(), date: new Date(fx.time.t).toUTCString() }), undefined],
  ])('%s does not turn the backoff off: 20 calls in 0.5 s with no token held make 1 token request', async (_what, headers, fetch) => {
    fx.endpoint.reply = unavailable(headers());
    const c = client({ fetch });
    for (let i = 0; i < 20; i++) {
      const err = await failure(c.getToken());
      expect(err).toMatchObject({ status: 503, error: 'temporarily_unavailable' });
      expect(err.retryAfter).toBeGreaterThanOrEqual(1);
      fx.time.advance(0.025);
    }
    expect(tokenRequests()).toBe(1);
  });

  it('the wait is at least the backoff: 6 requests failing in a row with Retry-After 0 are spread over at least 15.5 s (1, 2, 4, 8 s…, jittered)', async () => {
    fx.endpoint.reply = unavailable({ 'retry-after': '0' });
    const c = client();
    const sentAt: number[] = [];
    const start = fx.time.t;
    while (sentAt.length < 6 && fx.time.t < start + 600_000) {
      const before = tokenRequests();
      await failure(c.getToken());
      if (tokenRequests() > before) sentAt.push(fx.time.t);
      fx.time.advance(0.1);
    }
    // backoffs 1, 2, 4, 8, 16 s, jitter halving each at most: 0.5 + 1 + 2 + 4 + 8 s at least
    expect(sentAt).toHaveLength(6);
    expect(sentAt[5] - sentAt[0]).toBeGreaterThanOrEqual(15_500);
  });
});

describe('Retry-After as an HTTP-date', () => {
  it('counts from the answer\'s own Date header: a server whose clock is 1 h behind ours gets the 30 s it asked for', async () => {
    const serverNow = fx.time.t - 3_600_000;
    fx.endpoint.reply = (req, n) =>
      n === 1
        ? {
            status: 503,
            headers: { date: new Date(serverNow).toUTCString(), 'retry-after': new Date(serverNow + 30_000).toUTCString() },
            body: { error: 'temporarily_unavailable' },
          }
        : { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
    const c = client();
    expect(await failure(c.getToken())).toMatchObject({ status: 503, retryAfter: 30 });
    for (let i = 0; i < 10; i++) {
      fx.time.advance(2.9);
      expect((await failure(c.getToken())).retryAfter).toBeLessThanOrEqual(30);
    }
    expect(tokenRequests()).toBe(1);
    fx.time.advance(1.1);
    expect((await c.getToken()).accessToken).toBe('tok-2');
  });

  it('a server whose clock is 1 h ahead of ours does not get a 1 h wait for the 30 s it asked for', async () => {
    const serverNow = fx.time.t + 3_600_000;
    fx.endpoint.reply = () => ({
      status: 429,
      headers: { date: new Date(serverNow).toUTCString(), 'retry-after': new Date(serverNow + 30_000).toUTCString() },
      body: { error: 'slow_down' },
    });
    expect(await failure(client().getToken())).toMatchObject({ status: 429, retryAfter: 30 });
  });

  it('without a Date header (or with one that cannot be read) it counts from our clock', async () => {
    fx.endpoint.reply = () => ({ status: 503, headers: { date: 'yesterday', 'retry-after': new Date(fx.time.t + 20_000).toUTCString() }, body: {} });
    expect(await failure(client().getToken())).toMatchObject({ status: 503, retryAfter: 20 });
    fx.endpoint.reply = () => ({ status: 503, headers: { 'retry-after': new Date(fx.time.t + 40_000).toUTCString() }, body: {} });
    expect(await failure(client({ fetch: withoutDate }).getToken())).toMatchObject({ status: 503, retryAfter: 40 });
  });
});

describe('which success lifts a Retry-After', () => {
  it('a success for another scope that was sent before the Retry-After came does not lift it', async () => {
    const slow = gate();
    fx.endpoint.reply = async (req, n) => {
      if (req.form.get('scope') === 'slow') {
        await slow.promise;
        return { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
      }
      return n === 2 ? { status: 503, headers: { 'retry-after': '30' }, body: { error: 'temporarily_unavailable' } } : { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
    };
    const c = client();
    const first = c.getToken({ scope: 'slow' });
    await until(() => tokenRequests() === 1, 'the slow request');
    expect(await failure(c.getToken({ scope: 'a' }))).toMatchObject({ status: 503, retryAfter: 30 });
    slow.open();
    expect((await first).accessToken).toBe('tok-1');
    fx.time.advance(1);
    expect(await failure(c.getToken({ scope: 'c' }))).toMatchObject({ status: 503, retryAfter: 29 });
    expect(await failure(c.getToken({ scope: 'a' }))).toMatchObject({ status: 503, retryAfter: 29 });
    expect(tokenRequests()).toBe(2);
    // once it ends, the first success for any scope lifts it for the others at once
    fx.time.advance(29.1);
    expect((await c.getToken({ scope: 'c' })).accessToken).toBe('tok-3');
    expect((await c.getToken({ scope: 'a' })).accessToken).toBe('tok-4');
  });

  it('nor one that was sent before an invalid_client came', async () => {
    const slow = gate();
    fx.endpoint.reply = async (req, n) => {
      if (req.form.get('scope') === 'slow') {
        await slow.promise;
        return { body: { access_token: `tok-${n}`, token_type: 'Bearer', expires_in: 3600 } };
      }
      return { status: 401, body: { error: 'invalid_client' } };
    };
    const c = client();
    const first = c.getToken({ scope: 'slow' });
    await until(() => tokenRequests() === 1, 'the slow request');
    expect(await failure(c.getToken({ scope: 'a' }))).toMatchObject({ status: 401, error: 'invalid_client' });
    slow.open();
    await first;
    fx.time.advance(1);
    expect(await failure(c.getToken({ scope: 'b' }))).toMatchObject({ status: 401, error: 'invalid_client' });
    expect(tokenRequests()).toBe(2);
  });
});
