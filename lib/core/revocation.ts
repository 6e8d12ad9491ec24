/**
 * What has been revoked, held in memory so that the protected path checks it
 * with two Map lookups: a jti denylist (RFC 7009, one token) and per-client
 * cut-offs (a revoked client; "every token issued before now").
 *
 * Same-second tokens. A cut-off is a per-client *generation number*, not a
 * time: every access token carries the client's current generation in the
 * private claim `gen` (see revocationClaims), and `revoke-tokens` raises the
 * generation by one. A token is refused when its `gen` is below the client's
 * generation. This is exact whatever the clock says: `iat` has one-second
 * resolution (a token issued in the same second as the cut-off would be
 * ambiguous), a millisecond claim would still tie within one millisecond and
 * would depend on every instance's clock agreeing with the one that revoked,
 * and jti order needs a central sequence. A generation needs none of that;
 * the store raises it atomically. An instance that has not yet learned of a
 * new generation signs tokens with the old one, which are refused as soon as
 * verifiers learn of it: the error is on the safe side, within the stated
 * propagation bound. Tokens without `gen` (signed before this claim existed)
 * count as generation 0.
 *
 * Every revocation event is monotone (a jti is added, a generation only
 * rises, a client once revoked stays revoked), so applying events or
 * snapshots in any order, twice, or merged from several sources refuses the
 * same tokens, provided each snapshot is of one moment (see below). Entries
 * are dropped once no token they concern can still be valid: denylisted
 * jtis after their token's `exp` (+ clock tolerance),
 * revoked clients after `maxTokenTtl` (the store refuses them new tokens).
 * Generations stay: one number per client that ever used revoke-tokens.
 *
 * A denylisted jti also goes once the client's generation has passed the
 * token's: the generation refuses it already. Each entry keeps an upper
 * bound of its token's generation (the token's own `gen` when it was
 * verified here, a snapshot's generation of the client when it came in one,
 * which holds only if the snapshot is of one moment, as the stores' and the
 * signed list are; unbounded otherwise), and an entry whose bound is below
 * the client's generation is dropped (or never added). So a cut-off (revoke-tokens, or
 * the cap on one client's denylisted tokens) leaves the client no entries,
 * and its count starts again; the stores delete them in the same
 * transaction as they raise the generation.
 */

import { InvalidTokenError } from '../errors';
import type { RevocationSnapshot } from '../stores/types';

/** Why a token is refused. */
export type RevocationReason = 'token_revoked' | 'client_revoked' | 'tokens_revoked_before';

/** The private claim carrying the client's token generation. */
export const GENERATION_CLAIM = 'gen';

/** A revocation, as published to other instances and verifiers. Times: `exp` in epoch seconds (as in the token), `at` in epoch ms. */
export type RevocationEvent =
  /** `gen`: at least the token's generation (its `gen` claim; a snapshot's generation of the client); absent: unknown. */
  | { type: 'token'; jti: string; clientId: string; exp: number; gen?: number }
  | { type: 'client'; clientId: string; at: number }
  | { type: 'tokens'; clientId: string; generation: number; at: number };

/** The claims the check reads; any verified access token's claims fit. */
export interface RevocableClaims {
  jti: string;
  client_id: string;
  [GENERATION_CLAIM]?: unknown;
}

/**
 * The longest access token lifetime an issuer may be given (accessTokenTtl),
 * seconds. Revocations are kept by it, not by an instance's own lifetime:
 * instances on one store may issue with different ones (during a rolling
 * change of ACCESS_TOKEN_TTL, say), and each must refuse the others' tokens
 * of a revoked client as long as they live.
 */
export const MAX_ACCESS_TOKEN_TTL = 86400;

/** The largest clockTolerance an issuer or verifier may be given, seconds: how long past its `exp` any of them may still accept a token. */
export const MAX_CLOCK_TOLERANCE = 300;

export interface RevocationStateOptions {
  /** Longest access token lifetime, seconds: bounds how long any entry is kept. */
  maxTokenTtl: number;
  /** Seconds of clock skew the verifier allows on `exp`: entries are kept that much longer. */
  clockTolerance?: number;
  /** Expired entries are swept at most this often (ms), on apply/load and by start()'s timer. Default 60 s. */
  sweepIntervalMs?: number;
  now?: () => number;
}

interface ClientCutoff {
  generation: number;
  revokedAt: number | null;
}

export class RevocationState {
  /** jti → { exp (epoch s), clientId, bound: at least the token's generation (Infinity: unknown) } */
  private readonly denied = new Map<string, { exp: number; clientId: string; bound: number }>();
  /** How many of `denied` each client has. */
  private readonly deniedByClient = new Map<string, number>();
  private readonly clients = new Map<string, ClientCutoff>();
  private readonly maxTtlMs: number;
  private readonly toleranceS: number;
  private readonly sweepIntervalMs: number;
  private readonly now: () => number;
  private lastSweep: number;
  private timer: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<() => void>();
  /** Rises on every change that alters what is refused (not on sweeps): lets a published list re-sign only when needed. */
  version = 0;

  constructor(options: RevocationStateOptions) {
    if (!(options.maxTokenTtl > 0)) throw new TypeError('maxTokenTtl must be a positive number of seconds');
    this.maxTtlMs = options.maxTokenTtl * 1000;
    this.toleranceS = options.clockTolerance ?? 0;
    this.sweepIntervalMs = options.sweepIntervalMs ?? 60_000;
    this.now = options.now ?? Date.now;
    this.lastSweep = this.now();
  }

  /**
   * `false` for a token nothing revokes, else why it is refused. Call it
   * after the signature and claims are verified (so it is no oracle for
   * forged tokens), on verified-token cache hits as well as misses.
   */
  isRevoked(claims: RevocableClaims): false | RevocationReason {
    if (this.denied.size !== 0 && this.denied.has(claims.jti)) return 'token_revoked';
    const cutoff = this.clients.get(claims.client_id);
    if (cutoff === undefined) return false;
    if (cutoff.revokedAt !== null) return 'client_revoked';
    const gen = claims[GENERATION_CLAIM];
    if ((typeof gen === 'number' ? gen : 0) < cutoff.generation) return 'tokens_revoked_before';
    return false;
  }

  /** The client's current token generation: what new tokens carry. */
  generation(clientId: string): number {
    return this.clients.get(clientId)?.generation ?? 0;
  }

  /** Applies events (from this process, a feed or the store). Idempotent, order-free. */
  apply(events: readonly RevocationEvent[] | RevocationEvent): void {
    let changed = false;
    for (const e of Array.isArray(events) ? events : [events as RevocationEvent]) changed = this.applyOne(e) || changed;
    this.sweepIfDue();
    if (changed) this.changed();
  }

  private applyOne(e: RevocationEvent): boolean {
    const now = this.now();
    if (e.type === 'token') {
      if (typeof e.jti !== 'string' || typeof e.exp !== 'number' || typeof e.clientId !== 'string') return false;
      if ((e.exp + this.toleranceS) * 1000 <= now) return false; // the token is dead already
      // no entry outlives the longest token lifetime, whatever exp an event claims
      const exp = Math.min(e.exp, Math.ceil((now + this.maxTtlMs) / 1000));
      const bound = typeof e.gen === 'number' && Number.isSafeInteger(e.gen) && e.gen >= 0 ? e.gen : Infinity;
      const had = this.denied.get(e.jti);
      const clientId = had?.clientId ?? e.clientId;
      const known = this.generation(clientId);
      // a token of generation g shows that the client's generation reached g (the issuer signed it so): raised here
      // too, so that a list this state publishes never names a token above its client's generation
      const raised = Number.isFinite(bound) && bound > known && this.raise(clientId, bound);
      // the client's generation refuses the token already: no entry
      if (bound < known) return raised;
      if (had && had.exp >= exp && had.bound <= bound) return raised;
      this.denied.set(e.jti, { exp: Math.max(exp, had?.exp ?? 0), clientId, bound: Math.min(bound, had?.bound ?? Infinity) });
      if (!had) this.deniedByClient.set(clientId, (this.deniedByClient.get(clientId) ?? 0) + 1);
      return true;
    }
    if (typeof e.clientId !== 'string') return false;
    const cutoff = this.clients.get(e.clientId);
    if (e.type === 'client') {
      if (typeof e.at !== 'number' || e.at + this.maxTtlMs + this.toleranceS * 1000 <= now) return false;
      if (cutoff?.revokedAt != null && cutoff.revokedAt <= e.at) return false;
      if (cutoff) cutoff.revokedAt = e.at;
      else this.clients.set(e.clientId, { generation: 0, revokedAt: e.at });
      return true;
    }
    if (e.type === 'tokens') {
      if (!Number.isSafeInteger(e.generation) || e.generation <= (cutoff?.generation ?? 0)) return false;
      return this.raise(e.clientId, e.generation);
    }
    return false;
  }

  /** Raises the client's generation to `generation` (above its current one) and drops the entries it makes redundant. */
  private raise(clientId: string, generation: number): true {
    const cutoff = this.clients.get(clientId);
    if (cutoff) cutoff.generation = generation;
    else this.clients.set(clientId, { generation, revokedAt: null });
    if (this.deniedByClient.has(clientId)) {
      for (const [jti, entry] of this.denied) {
        if (entry.clientId === clientId && entry.bound < generation) this.forget(jti, clientId);
      }
    }
    return true;
  }

  private forget(jti: string, clientId: string): void {
    this.denied.delete(jti);
    const left = (this.deniedByClient.get(clientId) ?? 1) - 1;
    if (left > 0) this.deniedByClient.set(clientId, left);
    else this.deniedByClient.delete(clientId);
  }

  /** The event for "revoke every token of this client issued before now", with the next generation as this state knows it (one process; with a shared store use the store's bumpTokenGeneration). */
  revokeTokensEvent(clientId: string, at: number = this.now()): RevocationEvent {
    return { type: 'tokens', clientId, generation: this.generation(clientId) + 1, at };
  }

  snapshot(): RevocationSnapshot {
    this.sweepIfDue();
    const tokens: RevocationSnapshot['tokens'] = [];
    for (const [jti, { exp, clientId }] of this.denied) tokens.push({ jti, client_id: clientId, exp });
    const clients: RevocationSnapshot['clients'] = [];
    for (const [clientId, c] of this.clients) clients.push({ client_id: clientId, generation: c.generation, revoked_at: c.revokedAt });
    return { tokens, clients };
  }

  /**
   * Merges a snapshot (from the store, Redis or a signed list), as with apply(). A snapshot is one moment:
   * its tokens were issued at that moment's generation of their client or before, which bounds them.
   */
  load(snapshot: RevocationSnapshot): void {
    const events: RevocationEvent[] = [];
    const generations = new Map<string, number>();
    for (const c of snapshot.clients) {
      if (c.generation > 0) events.push({ type: 'tokens', clientId: c.client_id, generation: c.generation, at: 0 });
      if (c.revoked_at !== null) events.push({ type: 'client', clientId: c.client_id, at: c.revoked_at });
      generations.set(c.client_id, Math.max(c.generation, 0));
    }
    for (const t of snapshot.tokens) events.push({ type: 'token', jti: t.jti, clientId: t.client_id, exp: t.exp, gen: generations.get(t.client_id) ?? 0 });
    this.apply(events);
  }

  /** Drops entries no live token can match; answers how many went. */
  sweep(): number {
    const now = this.now();
    this.lastSweep = now;
    let removed = 0;
    const deadBefore = now / 1000 - this.toleranceS;
    for (const [jti, entry] of this.denied) {
      if (entry.exp <= deadBefore) {
        this.forget(jti, entry.clientId);
        removed++;
      }
    }
    for (const [clientId, c] of this.clients) {
      if (c.revokedAt !== null && c.revokedAt + this.maxTtlMs + this.toleranceS * 1000 <= now) {
        // every token of the client has expired; its generation still matters only if it is above 0
        if (c.generation > 0) c.revokedAt = null;
        else this.clients.delete(clientId);
        removed++;
      }
    }
    return removed;
  }

  private sweepIfDue(): void {
    if (this.now() - this.lastSweep >= this.sweepIntervalMs) this.sweep();
  }

  /** How many of the client's tokens are denylisted one by one (until they expire). */
  deniedCount(clientId: string): number {
    return this.deniedByClient.get(clientId) ?? 0;
  }

  /** Sizes, for metrics and tests. */
  size(): { tokens: number; clients: number } {
    return { tokens: this.denied.size, clients: this.clients.size };
  }

  /** Calls `listener` after every change that alters what is refused. Returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(): void {
    this.version++;
    for (const l of this.listeners) l();
  }

  /** Sweeps every `sweepIntervalMs` on an unref'd timer (never keeps the process alive). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => this.sweep(), this.sweepIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * The claims the issuer adds to every access token so that revoke-tokens
 * can refuse exactly the tokens issued before it: `{ gen }`, the client's
 * current generation as `state` knows it. Spread into the signed claims.
 */
export function revocationClaims(state: Pick<RevocationState, 'generation'>, clientId: string): { [GENERATION_CLAIM]: number } {
  return { [GENERATION_CLAIM]: state.generation(clientId) };
}

/** Anything that answers the revocation question: a RevocationState, or a RevocationListPoller (which may throw 503 when stale). */
export interface RevocationCheck {
  isRevoked(claims: RevocableClaims): false | RevocationReason;
}

/**
 * Throws `invalid_token` ("the access token was revoked"; reason `revoked`,
 * which kind in `detail`, for logs only) when `check` refuses the verified token's claims. Sync.
 */
export function assertNotRevoked<T extends { claims: RevocableClaims }>(auth: T, check: RevocationCheck): T {
  const why = check.isRevoked(auth.claims);
  if (why !== false) throw new InvalidTokenError('the access token was revoked', { reason: 'revoked', detail: why, facts: { client_id: auth.claims.client_id } });
  return auth;
}

/**
 * Wraps a verify function (e.g. `(t) => verifier.verify(t)`, whose verified-
 * token cache answers hits synchronously) so that every answer, cache hit or
 * miss, sync or async, passes assertNotRevoked() after the signature and
 * claims were checked. Keeps a sync answer sync.
 */
export function verifyWithRevocation<T extends { claims: RevocableClaims }>(
  verify: (token: string) => T | Promise<T>,
  check: RevocationCheck,
): (token: string) => T | Promise<T> {
  return (token) => {
    const result = verify(token);
    if (result instanceof Promise) return result.then((auth) => assertNotRevoked(auth, check));
    return assertNotRevoked(result, check);
  };
}
