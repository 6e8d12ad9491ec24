import { randomBytes } from 'node:crypto';
import { DpopNonces } from '../../lib/core/dpop-nonces';

describe('DpopNonces', () => {
  const secret = randomBytes(32);
  let clock: number;
  const nonces = (s: Uint8Array = secret) => new DpopNonces(s, { now: () => clock });
  beforeEach(() => {
    clock = Date.parse('2030-01-01T00:00:30Z');
  });

  it('hands out one NQCHAR nonce per 60 s step', () => {
    const n = nonces();
    const first = n.current();
    expect(first).toMatch(/^[A-Za-z0-9_-]{22}$/);
    clock += 29_000;
    expect(n.current()).toBe(first);
    clock += 1_000;
    expect(n.current()).not.toBe(first);
  });

  it('is the same on every instance with the same secret, and differs with another', () => {
    expect(nonces(Buffer.from(secret)).current()).toBe(nonces().current());
    expect(nonces(randomBytes(32)).current()).not.toBe(nonces().current());
  });

  it('accepts a nonce during its step and the two after, not later', () => {
    const n = nonces();
    const issued = n.current();
    for (let step = 0; step <= 2; step++) {
      expect(n.isValid(issued)).toBe(true);
      clock += 60_000;
    }
    expect(n.isValid(issued)).toBe(false);
  });

  it("accepts the next step's nonce (an instance whose clock runs ahead), not the one after", () => {
    const ahead = new DpopNonces(secret, { now: () => clock + 60_000 }).current();
    const further = new DpopNonces(secret, { now: () => clock + 120_000 }).current();
    expect(nonces().isValid(ahead)).toBe(true);
    expect(nonces().isValid(further)).toBe(false);
  });

  it('refuses made-up values and non-strings', () => {
    const n = nonces();
    for (const value of ['', 'forged', `${n.current()}x`, undefined, 42, null, {}]) expect(n.isValid(value)).toBe(false);
  });

  it('follows stepSeconds and previousSteps', () => {
    const n = new DpopNonces(secret, { stepSeconds: 10, previousSteps: 0, now: () => clock });
    const issued = n.current();
    clock += 10_000;
    expect(n.isValid(issued)).toBe(false);
  });

  it('needs a secret of at least 32 bytes', () => {
    expect(() => new DpopNonces(randomBytes(16))).toThrow(TypeError);
  });
});
