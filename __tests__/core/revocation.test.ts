import { RevocationState, revocationClaims, type RevocableClaims } from '../../lib/core/revocation';

const T0 = Date.parse('2030-01-01T00:00:00Z');

function setup(overrides: { maxTokenTtl?: number; clockTolerance?: number } = {}) {
  let clock = T0;
  const state = new RevocationState({ maxTokenTtl: overrides.maxTokenTtl ?? 600, clockTolerance: overrides.clockTolerance ?? 0, now: () => clock });
  /** A token as the issuer signs it now for `clientId`. */
  const token = (clientId: string, jti: string): RevocableClaims & { exp: number } => ({
    jti,
    client_id: clientId,
    exp: Math.floor(clock / 1000) + 600,
    ...revocationClaims(state, clientId),
  });
  return { state, token, advance: (ms: number) => (clock += ms), now: () => clock };
}

describe('RevocationState', () => {
  it('refuses a denylisted jti and nothing else', () => {
    const { state, token } = setup();
    const a = token('c1', 'jti-a');
    const b = token('c1', 'jti-b');
    state.apply({ type: 'token', jti: a.jti, clientId: 'c1', exp: a.exp });
    expect(state.isRevoked(a)).toBe('token_revoked');
    expect(state.isRevoked(b)).toBe(false);
    expect(state.isRevoked(token('c2', 'jti-c'))).toBe(false);
  });

  it('a revoked client: every token of it refused, other clients untouched', () => {
    const { state, token, now } = setup();
    const a = token('c1', 'a');
    state.apply({ type: 'client', clientId: 'c1', at: now() });
    expect(state.isRevoked(a)).toBe('client_revoked');
    expect(state.isRevoked(token('c1', 'later'))).toBe('client_revoked');
    expect(state.isRevoked(token('c2', 'b'))).toBe(false);
  });

  it('revoke-tokens refuses tokens issued before it, in the same millisecond too, and accepts tokens issued after', () => {
    const { state, token, now } = setup();
    const before = token('c1', 'before');
    // same clock reading: iat (and even ms) cannot tell these two apart; the generation does
    state.apply(state.revokeTokensEvent('c1', now()));
    const after = token('c1', 'after');
    expect(state.isRevoked(before)).toBe('tokens_revoked_before');
    expect(state.isRevoked(after)).toBe(false);
    expect(after.gen).toBe(1);
    // a token signed before the claim existed counts as generation 0
    expect(state.isRevoked({ jti: 'legacy', client_id: 'c1' })).toBe('tokens_revoked_before');
    expect(state.isRevoked(token('c2', 'other'))).toBe(false);
    // a second revoke-tokens refuses the generation-1 token too
    state.apply(state.revokeTokensEvent('c1'));
    expect(state.isRevoked(after)).toBe('tokens_revoked_before');
  });

  it('events are idempotent and order-free: a stale generation never lowers the cut-off', () => {
    const { state, token } = setup();
    const t1 = token('c1', 'x');
    state.apply([
      { type: 'tokens', clientId: 'c1', generation: 3, at: 0 },
      { type: 'tokens', clientId: 'c1', generation: 2, at: 0 },
      { type: 'tokens', clientId: 'c1', generation: 3, at: 0 },
    ]);
    expect(state.generation('c1')).toBe(3);
    expect(state.isRevoked(t1)).toBe('tokens_revoked_before');
    expect(state.isRevoked({ jti: 'y', client_id: 'c1', gen: 3 })).toBe(false);
  });

  it('a cut-off drops the entries of tokens it refuses (their generation is below it) and keeps the others; the count starts again', () => {
    const { state, token } = setup();
    const old = [token('c1', 'old-1'), token('c1', 'old-2')];
    const otherClient = token('c2', 'other');
    for (const t of [...old, otherClient]) state.apply({ type: 'token', jti: t.jti, clientId: t.client_id, exp: t.exp, gen: 0 });
    // an entry whose generation is unknown (no gen) is never dropped by a cut-off
    state.apply({ type: 'token', jti: 'unknown-gen', clientId: 'c1', exp: old[0].exp });
    expect(state.deniedCount('c1')).toBe(3);
    state.apply({ type: 'tokens', clientId: 'c1', generation: 1, at: T0 });
    expect(state.deniedCount('c1')).toBe(1);
    expect(state.snapshot().tokens.map((t) => t.jti).sort()).toEqual(['other', 'unknown-gen']);
    for (const t of old) expect(state.isRevoked(t)).toBe('tokens_revoked_before');
    expect(state.isRevoked(otherClient)).toBe('token_revoked');
    // a token of the new generation revoked one by one is denylisted and counted; an old one is refused already: no entry
    const fresh = token('c1', 'fresh');
    state.apply({ type: 'token', jti: fresh.jti, clientId: 'c1', exp: fresh.exp, gen: 1 });
    state.apply({ type: 'token', jti: 'old-3', clientId: 'c1', exp: fresh.exp, gen: 0 });
    expect(state.deniedCount('c1')).toBe(2);
    expect(state.isRevoked(fresh)).toBe('token_revoked');
    // a second cut-off keeps nothing of generation 1 but the unknown one
    state.apply({ type: 'tokens', clientId: 'c1', generation: 2, at: T0 });
    expect(state.snapshot().tokens.map((t) => t.jti).sort()).toEqual(['other', 'unknown-gen']);
    expect(state.isRevoked(fresh)).toBe('tokens_revoked_before');
  });

  it('a token revoked with a generation above what the state knows raises it (the issuer signed that generation), so nothing it lists names a token above its client\'s generation', () => {
    const { state, token } = setup();
    const newer = { ...token('c1', 'newer'), gen: 3 };
    state.apply({ type: 'token', jti: newer.jti, clientId: 'c1', exp: newer.exp, gen: 3 });
    expect(state.generation('c1')).toBe(3);
    expect(state.isRevoked(newer)).toBe('token_revoked');
    expect(state.isRevoked({ ...token('c1', 'older'), gen: 2 })).toBe('tokens_revoked_before');
    // a verifier loading that list keeps the entry through the cut-offs it learns of up to 3, and drops it at 4
    const verifier = setup().state;
    verifier.load(state.snapshot());
    expect(verifier.isRevoked(newer)).toBe('token_revoked');
    verifier.apply({ type: 'tokens', clientId: 'c1', generation: 3, at: T0 });
    expect(verifier.isRevoked(newer)).toBe('token_revoked');
    verifier.apply({ type: 'tokens', clientId: 'c1', generation: 4, at: T0 });
    expect(verifier.deniedCount('c1')).toBe(0);
    expect(verifier.isRevoked(newer)).toBe('tokens_revoked_before');
  });

  it('a snapshot bounds its tokens by its own generation of their client: an older snapshot loaded after a cut-off adds no entry the cut-off covers', () => {
    const { state, token } = setup();
    const t = token('c1', 'in-old-snapshot');
    const oldSnapshot = { tokens: [{ jti: t.jti, client_id: 'c1', exp: t.exp }], clients: [] };
    state.apply({ type: 'tokens', clientId: 'c1', generation: 1, at: T0 });
    state.load(oldSnapshot);
    expect(state.deniedCount('c1')).toBe(0);
    expect(state.isRevoked(t)).toBe('tokens_revoked_before');
    // loaded before the cut-off, its entry goes when the cut-off comes
    const other = setup().state;
    other.load(oldSnapshot);
    expect(other.deniedCount('c1')).toBe(1);
    other.load({ tokens: [], clients: [{ client_id: 'c1', generation: 1, revoked_at: null }] });
    expect(other.deniedCount('c1')).toBe(0);
  });

  it('a client revoked and with a generation: both combine, the client revocation wins', () => {
    const { state, now } = setup();
    state.apply({ type: 'tokens', clientId: 'c1', generation: 1, at: now() });
    state.apply({ type: 'client', clientId: 'c1', at: now() });
    expect(state.isRevoked({ jti: 'j', client_id: 'c1', gen: 1 })).toBe('client_revoked');
  });

  it('snapshot() → load() into another state gives the same answers; version rises only on changes', () => {
    const a = setup();
    a.state.apply([
      { type: 'token', jti: 'j1', clientId: 'c1', exp: Math.floor(a.now() / 1000) + 100 },
      { type: 'client', clientId: 'c2', at: a.now() },
      { type: 'tokens', clientId: 'c3', generation: 2, at: a.now() },
    ]);
    const v = a.state.version;
    a.state.apply({ type: 'token', jti: 'j1', clientId: 'c1', exp: Math.floor(a.now() / 1000) + 100 });
    expect(a.state.version).toBe(v);
    const b = setup();
    b.state.load(JSON.parse(JSON.stringify(a.state.snapshot())));
    expect(b.state.isRevoked({ jti: 'j1', client_id: 'c9' })).toBe('token_revoked');
    expect(b.state.isRevoked({ jti: 'k', client_id: 'c2', gen: 0 })).toBe('client_revoked');
    expect(b.state.isRevoked({ jti: 'k', client_id: 'c3', gen: 1 })).toBe('tokens_revoked_before');
    expect(b.state.isRevoked({ jti: 'k', client_id: 'c3', gen: 2 })).toBe(false);
    expect(b.state.snapshot()).toEqual(a.state.snapshot());
  });

  it('10,000 revoked tokens are all gone once they expired (the set shrinks)', () => {
    const { state, advance, now } = setup({ maxTokenTtl: 600, clockTolerance: 5 });
    const exp = Math.floor(now() / 1000) + 600;
    const events = Array.from({ length: 10_000 }, (_, i) => ({ type: 'token' as const, jti: `jti-${i}`, clientId: `c${i % 7}`, exp: exp - (i % 300) }));
    state.apply(events);
    expect(state.size().tokens).toBe(10_000);
    expect(state.isRevoked({ jti: 'jti-9999', client_id: 'c3' })).toBe('token_revoked');
    advance(450_000); // entries whose token expired (exp + 5 s tolerance <= now) are dropped, the others kept
    const live = events.filter((e) => (e.exp + 5) * 1000 > now()).length;
    expect(live).toBeGreaterThan(0);
    expect(live).toBeLessThan(10_000);
    expect(state.sweep()).toBe(10_000 - live);
    expect(state.size().tokens).toBe(live);
    // the count per client follows: what is left of each client's entries
    const liveOf = (c: string) => events.filter((e) => e.clientId === c && (e.exp + 5) * 1000 > now()).length;
    expect([0, 1, 6].map((i) => state.deniedCount(`c${i}`))).toEqual([liveOf('c0'), liveOf('c1'), liveOf('c6')]);
    // the same jti again counts once
    state.apply(events.filter((e) => e.clientId === 'c0' && (e.exp + 5) * 1000 > now()));
    expect(state.deniedCount('c0')).toBe(liveOf('c0'));
    advance(155_000); // past the last exp + clock tolerance
    state.sweep();
    expect(state.size().tokens).toBe(0);
    expect(state.snapshot().tokens).toEqual([]);
    expect(state.deniedCount('c0')).toBe(0);
  });

  it('sweeps lazily on apply once the interval passed, and keeps entries through the clock tolerance', () => {
    const { state, advance, now } = setup({ clockTolerance: 30 });
    const exp = Math.floor(now() / 1000) + 10;
    state.apply({ type: 'token', jti: 'short', clientId: 'c1', exp });
    advance(10_000 + 20_000); // expired, but a verifier with 30 s tolerance still accepts it
    state.apply([]);
    expect(state.isRevoked({ jti: 'short', client_id: 'c1' })).toBe('token_revoked');
    advance(61_000);
    state.apply([]); // a minute since the last sweep: this apply sweeps
    expect(state.size().tokens).toBe(0);
  });

  it('a later snapshot without an entry (a list whose issuer has a smaller tolerance dropped it) does not drop it here before this state\'s own tolerance', () => {
    const { state, advance, now } = setup({ clockTolerance: 30 });
    const exp = Math.floor(now() / 1000) + 10;
    state.load({ tokens: [{ jti: 'short', client_id: 'c1', exp }], clients: [] });
    advance(10_000 + 20_000);
    state.load({ tokens: [], clients: [] });
    expect(state.isRevoked({ jti: 'short', client_id: 'c1' })).toBe('token_revoked');
  });

  it('never keeps an entry longer than maxTokenTtl, whatever exp it claims; ignores dead and malformed events', () => {
    const { state, advance, now } = setup({ maxTokenTtl: 600 });
    state.apply([
      { type: 'token', jti: 'forever', clientId: 'c1', exp: 4_102_444_800_000 },
      { type: 'token', jti: 'dead', clientId: 'c1', exp: Math.floor(now() / 1000) - 1 },
      { type: 'token', jti: 5 as unknown as string, clientId: 'c1', exp: 1 },
      { type: 'tokens', clientId: 'c1', generation: 1.5, at: 0 },
    ]);
    expect(state.size()).toEqual({ tokens: 1, clients: 0 });
    advance(601_000);
    state.sweep();
    expect(state.size().tokens).toBe(0);
  });

  it('drops a revoked client once all its tokens expired, keeping a raised generation', () => {
    const { state, advance, now } = setup({ maxTokenTtl: 600 });
    state.apply([
      { type: 'client', clientId: 'gone', at: now() },
      { type: 'client', clientId: 'gen', at: now() },
      { type: 'tokens', clientId: 'gen', generation: 4, at: now() },
    ]);
    advance(600_001);
    expect(state.sweep()).toBe(2);
    expect(state.size().clients).toBe(1);
    expect(state.generation('gen')).toBe(4);
    expect(state.snapshot().clients).toEqual([{ client_id: 'gen', generation: 4, revoked_at: null }]);
  });

  it('onChange listeners hear changes and can unsubscribe; start() timer is unref\'d', () => {
    const { state } = setup();
    const heard: number[] = [];
    const off = state.onChange(() => heard.push(state.version));
    state.apply({ type: 'tokens', clientId: 'c', generation: 1, at: 0 });
    off();
    state.apply({ type: 'tokens', clientId: 'c', generation: 2, at: 0 });
    expect(heard).toEqual([1]);
    state.start();
    expect((state as unknown as { timer: NodeJS.Timeout }).timer.hasRef()).toBe(false);
    state.stop();
  });
});
