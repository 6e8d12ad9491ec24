import { createHash } from 'node:crypto';
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { addressKey, FailedAuthLimiter, type BruteForceSettings } from '../../lib/core/brute-force';
import { clientIdDigest, generateClientId, generateSecret } from '../../lib/core/secrets';
import type { FailureCounter, FailureCounterFactory } from '../../lib/stores/types';

const settings = (over: Partial<BruteForceSettings> = {}): BruteForceSettings => ({
  maxFailuresPerAddress: 100,
  maxFailuresPerClientAddress: 10,
  alertFailuresPerClient: 20,
  window: 60,
  keyPrefix: 'test',
  ...over,
});

describe('FailedAuthLimiter (in memory)', () => {
  it('refuses a (client_id, address) pair over its limit, and nothing else', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 3 }));
    for (let i = 0; i < 3; i++) {
      expect((await l.check('victim', '192.0.2.1')).retryAfterMs).toBe(0);
      await l.failed('victim', '192.0.2.1', true);
    }
    const blocked = await l.check('victim', '192.0.2.1');
    expect(blocked.retryAfterMs).toBeGreaterThan(0);
    expect(blocked.retryAfterMs).toBeLessThanOrEqual(60_000);
    expect(blocked.pairFailures).toBe(3);
    expect(blocked).toMatchObject({ limit: 'client_address', addressFailures: 3 });
    expect(await l.check('victim', '192.0.2.2')).toEqual({ retryAfterMs: 0, pairFailures: 0, addressFailures: 0 });
    expect(await l.check('other', '192.0.2.1')).toEqual({ retryAfterMs: 0, pairFailures: 0, addressFailures: 3 });
  });

  it('a client failing from many addresses is never refused from a fresh one', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 2, alertFailuresPerClient: 5 }));
    for (let a = 1; a <= 50; a++) {
      await l.failed('victim', `198.51.100.${a}`, true);
      await l.failed('victim', `198.51.100.${a}`, true);
    }
    expect(await l.check('victim', '203.0.113.9')).toEqual({ retryAfterMs: 0, pairFailures: 0, addressFailures: 0 });
    expect((await l.check('victim', '198.51.100.7')).retryAfterMs).toBeGreaterThan(0);
  });

  it('counts client_ids of any length and content apart: long ones sharing a prefix, and ones that look like another’s key', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 2 }));
    const long = 'x'.repeat(100_000);
    const ids = [long, `${long}y`, 'a'.repeat(64), 'a'.repeat(65), 'ü-client', 'with space', 'h.abc', 'i.abc', 'abc'];
    await l.failed(long, '192.0.2.1', false);
    await l.failed(long, '192.0.2.1', false);
    expect((await l.check(long, '192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
    for (const id of ids.slice(1)) expect({ id: id.slice(0, 70), ...(await l.check(id, '192.0.2.1')) }).toEqual({ id: id.slice(0, 70), retryAfterMs: 0, pairFailures: 0, addressFailures: 2 });
    for (const id of ids.slice(1)) await l.failed(id, '192.0.2.2', false);
    for (const id of ids.slice(1)) expect((await l.check(id, '192.0.2.2')).pairFailures).toBe(1);
  });

  it('keys: a client id as it is, anything a client id cannot look like (a 43-character secret sent in its place) only as an unkeyed digest', async () => {
    const keys: string[] = [];
    const recording: FailureCounterFactory = (limit) => {
      const inner = new RateLimiterMemory(limit);
      return {
        get: (key: string) => (keys.push(`${limit.keyPrefix}:${key}`), inner.get(key)),
        consume: (key: string) => (keys.push(`${limit.keyPrefix}:${key}`), inner.consume(key)),
        delete: (key: string) => (keys.push(`${limit.keyPrefix}:${key}`), inner.delete(key)),
      } as FailureCounter;
    };
    const l = new FailedAuthLimiter(settings(), recording);
    const id = generateClientId();
    const secret = generateSecret();
    for (const sent of [id, secret]) {
      await l.check(sent, '192.0.2.1');
      await l.failed(sent, '192.0.2.1', true);
      await l.succeeded(sent, '192.0.2.1');
    }
    expect(keys.filter((k) => k.includes(secret))).toEqual([]);
    expect(new Set(keys.filter((k) => !k.startsWith('test:addr:')))).toEqual(new Set([
      `test:pair:i.${id}:192.0.2.1`, `test:client:i.${id}`,
      `test:pair:${clientIdDigest(secret)}:192.0.2.1`, `test:client:${clientIdDigest(secret)}`,
    ]));
    // the digest is unkeyed: the same in every process sharing the Redis
    expect(clientIdDigest(secret)).toBe(`h.${createHash('sha256').update(secret).digest('base64url').slice(0, 22)}`);
  });

  it('refuses an address over its limit for every client_id', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerAddress: 4 }));
    for (let i = 0; i < 4; i++) await l.failed(`guess-${i}`, '203.0.113.7', false);
    expect((await l.check('anyone', '203.0.113.7')).retryAfterMs).toBeGreaterThan(0);
    expect(await l.check('anyone', '203.0.113.7')).toMatchObject({ limit: 'address', addressFailures: 4, pairFailures: 0 });
    expect((await l.check('anyone', '203.0.113.8')).retryAfterMs).toBe(0);
  });

  it('alerts when a registered client reaches the threshold and each doubling, not per failure', async () => {
    const l = new FailedAuthLimiter(settings({ alertFailuresPerClient: 3, maxFailuresPerClientAddress: 1_000 }));
    const alerts: number[] = [];
    for (let i = 1; i <= 25; i++) {
      const r = await l.failed('victim', `198.51.100.${i}`, true);
      expect(r.clientFailures).toBe(i);
      if (r.alert) alerts.push(r.clientFailures);
    }
    expect(alerts).toEqual([3, 6, 12, 24]);
  });

  it('counts no alert for an unknown client_id', async () => {
    const l = new FailedAuthLimiter(settings({ alertFailuresPerClient: 1 }));
    expect(await l.failed('nobody', '192.0.2.1', false)).toEqual({ clientFailures: 0, alert: false, retryAfterMs: 0, pairFailures: 1, addressFailures: 1 });
  });

  it('a success clears the pair count only', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 3, maxFailuresPerAddress: 5, alertFailuresPerClient: 1_000 }));
    for (let i = 0; i < 2; i++) await l.failed('c', '192.0.2.1', true);
    expect((await l.check('c', '192.0.2.1')).pairFailures).toBe(2);
    await l.succeeded('c', '192.0.2.1');
    expect((await l.check('c', '192.0.2.1')).pairFailures).toBe(0);
    // the address kept its 2: three more failures (another client) reach its limit of 5
    for (let i = 0; i < 3; i++) await l.failed('d', '192.0.2.1', true);
    expect((await l.check('c', '192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
    // and the client's alert count kept its 2 failures
    expect((await l.failed('c', '192.0.2.2', true)).clientFailures).toBe(3);
  });

  it('without an address, nothing is refused', async () => {
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 1, maxFailuresPerAddress: 1 }));
    await l.failed('c', undefined, true);
    expect(await l.check('c', undefined)).toEqual({ retryAfterMs: 0, pairFailures: 0, addressFailures: 0 });
  });

  it('an IPv4 address carried in IPv6 counts as that IPv4 address, however it is written: IPv4 clients are not one count by the /64 of their embedding', async () => {
    for (const a of ['192.0.2.1', '::ffff:192.0.2.1', '::ffff:c000:201', '::FFFF:C000:0201', '0:0:0:0:0:ffff:c000:201', '64:ff9b::c000:201', '64:ff9b::192.0.2.1', '64:FF9B:0:0:0:0:C000:201', '::192.0.2.1', '::c000:201']) {
      expect({ a, key: addressKey(a) }).toEqual({ a, key: '192.0.2.1' });
    }
    // another IPv6 address in those /64s is not an IPv4 one: by its /64 as before
    expect(addressKey('::fffe:c000:201')).toBe('0:0:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('::')).toBe('0:0:0:0::/64');
    expect(addressKey('64:ff9b:1::c000:201')).toBe('64:ff9b:1:0::/64');
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 100, maxFailuresPerAddress: 2 }));
    await l.failed('c', '64:ff9b::c000:201', true);
    await l.failed('c', '::ffff:c000:201', true);
    expect((await l.check('d', '192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
    expect((await l.check('d', '64:ff9b::c000:202')).retryAfterMs).toBe(0);
  });

  it('an IPv6 address counts by its /64: one host cannot escape the limits by picking another of its addresses', async () => {
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('2001:DB8:0:0:ffff:1:2:3')).toBe('2001:db8:0:0::/64');
    expect(addressKey('2001:db8:0:1::1')).toBe('2001:db8:0:1::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    // not an IPv6 address: as it is
    expect(addressKey('1:2:3')).toBe('1:2:3');
    expect(addressKey('1::2::3')).toBe('1::2::3');
    expect(addressKey('::1.2.3.400')).toBe('::1.2.3.400');
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 3 }));
    await l.failed('c', '2001:db8:5:6::a', true);
    await l.failed('c', '2001:db8:5:6:1:2:3:4', true);
    expect((await l.check('c', '2001:db8:5:6:ffff::1')).retryAfterMs).toBeGreaterThan(0);
    expect((await l.check('c', '2001:db8:5:7::1')).retryAfterMs).toBe(0);
    await l.failed('d', '2001:db8:5:6::b', false);
    expect((await l.check('e', '2001:db8:5:6::c')).retryAfterMs).toBeGreaterThan(0);
  });

  it('an IPv4-mapped IPv6 address is the same peer as its IPv4 form', async () => {
    expect(addressKey('::ffff:127.0.0.5')).toBe('127.0.0.5');
    expect(addressKey('192.0.2.1')).toBe('192.0.2.1');
    const l = new FailedAuthLimiter(settings({ maxFailuresPerClientAddress: 2 }));
    await l.failed('c', '::ffff:192.0.2.1', true);
    await l.failed('c', '192.0.2.1', true);
    expect((await l.check('c', '::ffff:192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
    expect((await l.check('c', '192.0.2.1')).retryAfterMs).toBeGreaterThan(0);
  });
});
