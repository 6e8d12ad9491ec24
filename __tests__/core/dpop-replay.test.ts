import { verifyDpopProof, type DpopVerifyOptions } from '../../lib/core/dpop';
import { MemoryReplayStore } from '../../lib/core/dpop-replay';
import { InvalidDpopProofError } from '../../lib/errors';
import { newDpopKey } from '../helpers/dpop';

describe('MemoryReplayStore', () => {
  let clock: number;
  const store = (max?: number) => new MemoryReplayStore({ max, now: () => clock });
  beforeEach(() => {
    clock = Date.parse('2030-01-01T00:00:00Z');
  });

  it('answers true on first use and false until the key expires', () => {
    const s = store();
    expect(s.consume('a', clock + 10_000)).toBe(true);
    expect(s.consume('a', clock + 10_000)).toBe(false);
    clock += 9_999;
    expect(s.consume('a', clock + 10_000)).toBe(false);
    clock += 1;
    expect(s.consume('a', clock + 10_000)).toBe(true);
  });

  it('a key remembered again after it expired stays remembered when its first stay is trimmed away', () => {
    const s = store();
    expect(s.consume('long', clock + 5_000)).toBe(true);
    expect(s.consume('a', clock + 1_000)).toBe(true); // expires before the key remembered before it
    clock += 1_000;
    expect(s.consume('a', clock + 10_000)).toBe(true); // expired: a new use
    clock += 4_000;
    expect(s.consume('b', clock + 10_000)).toBe(true); // trims 'long' and the first stay of 'a'
    expect(s.consume('a', clock + 10_000)).toBe(false);
    expect(s.size).toBe(2);
  });

  it('answers the same through thousands of keys coming and going (its heap grows and shrinks)', () => {
    const s = store(20_000);
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i < 5_000; i++) expect(s.consume(`k${i}`, clock + 10_000 + (i % 3) * 1_000)).toBe(true);
      for (let i = 0; i < 5_000; i += 7) expect(s.consume(`k${i}`, clock + 10_000)).toBe(false);
      expect(s.size).toBe(5_000);
      clock += 12_000; // all expired: the same keys are new again
      expect(s.consume('tick', clock + 1_000)).toBe(true);
      expect(s.size).toBe(1);
      clock += 1_000;
    }
    expect(s.forgottenUntil).toBeUndefined();
  });

  it('raiseMax(): a larger bound holds more keys from then on; a smaller one changes nothing; forgotten keys stay forgotten', () => {
    const s = store(1);
    expect(s.consume('a', clock + 1_000)).toBe(true);
    expect(s.consume('b', clock + 2_000)).toBe(true); // full: 'a' is forgotten
    expect(s.forgottenUntil).toBe(clock + 1_000);
    s.raiseMax(3);
    s.raiseMax(2);
    expect(s.max).toBe(3);
    expect(s.consume('c', clock + 3_000)).toBe(true);
    expect(s.consume('d', clock + 4_000)).toBe(true);
    expect(s.size).toBe(3); // 'b', 'c', 'd': none forgotten for them
    expect([s.consume('b', clock + 2_000), s.consume('c', clock + 3_000), s.consume('d', clock + 4_000)]).toEqual([false, false, false]);
    expect(s.forgottenUntil).toBe(clock + 1_000);
  });

  it('remembers a key with an expiry decades ahead like any other', () => {
    const s = store(2);
    expect(s.consume('far', clock + 100 * 365 * 86_400_000)).toBe(true);
    expect(s.consume('far', clock + 1_000)).toBe(false);
    clock += 2_000;
    expect(s.consume('b', clock + 1_000)).toBe(true); // drops what has expired: not 'far'
    expect(s.consume('far', clock + 1_000)).toBe(false);
    expect(s.consume('c', clock + 2_000)).toBe(true); // full: 'b' expires first and is forgotten
    expect(s.forgottenUntil).toBe(clock + 1_000);
    const one = store(1);
    expect(one.consume('far', clock + 100 * 365 * 86_400_000)).toBe(true);
    expect(one.consume('d', clock + 1_000)).toBe(true); // full: the only key, 'far', is forgotten
    expect(one.forgottenUntil).toBeGreaterThan(clock + 60 * 365 * 86_400_000);
  });

  it('keeps nothing for a key that has already expired', () => {
    const s = store();
    expect(s.consume('a', clock)).toBe(true);
    expect(s.size).toBe(0);
  });

  it('rounds an expiry up, never down', () => {
    const s = store();
    s.consume('a', clock + 1_001);
    clock += 1_001;
    expect(s.consume('a', clock + 5_000)).toBe(false);
  });

  it('when full of unexpired keys, forgets the one that expires first and refuses every key expiring no later than it', () => {
    const s = store(3);
    expect(s.consume('a', clock + 10_000)).toBe(true);
    expect(s.consume('b', clock + 20_000)).toBe(true);
    expect(s.consume('c', clock + 30_000)).toBe(true);
    expect(s.forgottenUntil).toBeUndefined();
    // no room and nothing expired: 'a' (the first to expire) goes
    expect(s.consume('d', clock + 30_000)).toBe(true);
    expect(s.size).toBe(3);
    expect(s.forgottenUntil).toBe(clock + 10_000);
    // 'a' cannot be told from a new key any more: refused, like anything expiring by then
    expect(s.consume('a', clock + 10_000)).toBe(false);
    expect(s.consume('never-seen', clock + 10_000)).toBe(false);
    expect(s.consume('never-seen', clock + 5_000)).toBe(false);
    // the others are still remembered
    expect(s.consume('b', clock + 20_000)).toBe(false);
    expect(s.consume('c', clock + 30_000)).toBe(false);
    expect(s.consume('d', clock + 30_000)).toBe(false);
    // a key expiring later than anything forgotten is accepted (and 'b' makes room)
    expect(s.consume('e', clock + 10_001 + 1_000)).toBe(true);
    expect(s.forgottenUntil).toBe(clock + 20_000);
    expect(s.consume('b', clock + 20_000)).toBe(false);
  });

  it('never accepts a key twice while it is unexpired, however far over its size the flow goes', () => {
    // 200 proofs a second, each acceptable for 30 s, client clocks up to 6 s apart: 3 times what 2 000 keys hold
    const s = store(2_000);
    const seen: Array<[string, number]> = [];
    const replayAll = () => {
      for (const [key, at] of seen) if (at > clock) expect(s.consume(key, at)).toBe(false);
    };
    for (let i = 0; i < 6_000; i++) {
      clock += 5;
      const expiresAt = clock + 30_000 - (i % 7) * 1_000;
      // the store covers the last 10 s or so, more than the clocks' spread: every new key is accepted
      expect(s.consume(`k${i}`, expiresAt)).toBe(true);
      seen.push([`k${i}`, expiresAt]);
      if (i % 499 === 0) replayAll();
    }
    replayAll();
    expect(s.size).toBe(2_000);
    expect(s.forgottenUntil).toBeGreaterThan(clock);
  });

  it('under a flow far beyond its size, refuses only keys that expire by forgottenUntil, and keeps accepting the freshest', () => {
    // 20 proofs a second, clocks up to 18 s apart, a store that holds 5 s of them
    const s = store(100);
    let refused = 0;
    for (let i = 0; i < 5_000; i++) {
      clock += 50;
      const expiresAt = clock + 30_000 - (i % 7) * 3_000;
      const before = s.forgottenUntil ?? Number.NEGATIVE_INFINITY;
      const accepted = s.consume(`k${i}`, expiresAt);
      // a new key is refused only when it could be one forgotten; one expiring last is always accepted
      expect(accepted).toBe(expiresAt > before);
      if (i % 7 === 0) expect(accepted).toBe(true);
      if (!accepted) refused++;
      expect(s.size).toBeLessThanOrEqual(100);
    }
    // it keeps the keys that expire last: those from the clocks furthest behind are the ones refused
    expect(refused).toBeGreaterThan(500);
  });

  it('when full, forgets the keys that expire first, not those that came first', () => {
    const s = store(3);
    s.consume('late', clock + 60_000);
    s.consume('mid', clock + 30_000);
    s.consume('early', clock + 20_000);
    expect(s.consume('new', clock + 50_000)).toBe(true); // forgets 'early'
    expect(s.forgottenUntil).toBe(clock + 20_000);
    expect(s.consume('late', clock + 60_000)).toBe(false);
    expect(s.consume('mid', clock + 30_000)).toBe(false);
    expect(s.consume('new', clock + 50_000)).toBe(false);
    expect(s.consume('early', clock + 20_000)).toBe(false); // may be a replay: refused as forgotten
    expect(s.consume('later', clock + 40_000)).toBe(true); // forgets 'mid'
    expect(s.forgottenUntil).toBe(clock + 30_000);
    expect(s.consume('late', clock + 60_000)).toBe(false);
  });

  it('finds room among keys that expire out of insertion order', () => {
    const s = store(3);
    s.consume('late', clock + 60_000);
    s.consume('early', clock + 1_000);
    s.consume('mid', clock + 30_000);
    clock += 1_000;
    expect(s.consume('new', clock + 60_000)).toBe(true);
    expect(s.consume('late', clock + 60_000)).toBe(false);
    expect(s.consume('mid', clock + 60_000)).toBe(false);
    expect(s.size).toBe(3);
  });

  it('stays small under a steady flow: expired keys are dropped as new ones come', () => {
    const s = store(1_000);
    for (let i = 0; i < 5_000; i++) {
      clock += 100; // 10 proofs per second, each remembered 10 s
      expect(s.consume(`k${i}`, clock + 10_000)).toBe(true);
    }
    // 10 s of proofs (100), plus up to 1 s from rounding expiries up; without trimming it would reach 1 000
    expect(s.size).toBeLessThanOrEqual(111);
  });

  it('makes verifyDpopProof refuse as too old a proof a full store may have forgotten, and accept a fresh one', () => {
    const key = newDpopKey();
    let now = clock;
    const options: DpopVerifyOptions = { replay: store(2), now: () => now, maxAge: 300, clockTolerance: 5 };
    const proof = (iat: number) => key.proof({ htm: 'GET', htu: 'https://api.test/x', iat });
    const first = proof(now / 1000);
    verifyDpopProof(first, { htm: 'GET', htu: 'https://api.test/x' }, options);
    now += 10_000;
    verifyDpopProof(proof(now / 1000), { htm: 'GET', htu: 'https://api.test/x' }, options);
    now += 10_000;
    // full: the first proof's key is forgotten to make room for this one
    verifyDpopProof(proof(now / 1000), { htm: 'GET', htu: 'https://api.test/x' }, options);
    // the first proof, replayed: refused, as too old for what the store covers
    let err: unknown;
    try {
      verifyDpopProof(first, { htm: 'GET', htu: 'https://api.test/x' }, options);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidDpopProofError);
    expect((err as InvalidDpopProofError).reason).toBe('iat_too_old');
    expect((err as InvalidDpopProofError).detail).toMatch(/20 s old; the full replay store covers the last 20 s/);
    // a new proof as old as the first, never seen: refused the same way
    expect(() => verifyDpopProof(proof(clock / 1000), { htm: 'GET', htu: 'https://api.test/x' }, options)).toThrow(InvalidDpopProofError);
    // fresh proofs go on being accepted
    now += 1_000;
    expect(verifyDpopProof(proof(now / 1000), { htm: 'GET', htu: 'https://api.test/x' }, options)).toHaveProperty('jkt');
  });
});
