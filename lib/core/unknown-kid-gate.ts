export interface UnknownKidGateOptions {
  /** How long after a fetch that did not find its kid an unknown kid is answered as unknown without a fetch, in ms. */
  cooldownMs: number;
  /** How long after a fetch that failed an unknown kid gets that failure again without a fetch, in ms (at most cooldownMs). */
  failedRetryMs: number;
  now: () => number;
}

/**
 * Whether an unknown `kid` may have its key set fetched (or reloaded) again:
 * at once, unless a fetch made for an unknown kid in the last `cooldownMs`
 * did not find its kid (the kid is unknown, without a fetch), or one in the
 * last `failedRetryMs` failed (its failure again, without a fetch; a 503, as
 * a set that could not be fetched cannot tell). A failed fetch also starts
 * the cooldown, which holds once a later fetch works. So a new key is found
 * at once, a flood of made-up kids costs one fetch per cooldown, and a set
 * that could not be fetched is asked again soon. The owner looks a known kid
 * up before (the hot path never comes here), makes the fetch (one at a time,
 * concurrent misses joining it) and reports its outcome here. Used by
 * RemoteJwks (a standalone verifier's JWKS) and KeyRing (the issuer's keys).
 */
export class UnknownKidGate {
  /** When a fetch for an unknown kid last did not find it, or failed: the pauses run from there. */
  private lastFruitless = Number.NEGATIVE_INFINITY;
  /** Whether the last fetch for an unknown kid failed (and why), while no later one succeeded. */
  private failed = false;
  private lastFailure: unknown;

  constructor(private readonly options: UnknownKidGateOptions) {}

  /**
   * What an unknown kid gets at `now` without a fetch: `unknown` within the
   * cooldown of a fetch that did not find its kid, `failed` within the pause
   * after a fetch that failed (see failure and retryInMs), else `fetch`.
   */
  check(now: number): 'fetch' | 'unknown' | 'failed' {
    if (this.failed) return this.retryInMs(now) > 0 ? 'failed' : 'fetch';
    return now - this.lastFruitless < this.options.cooldownMs ? 'unknown' : 'fetch';
  }

  /** Why the last fetch for an unknown kid failed (while check() says `failed`). */
  get failure(): unknown {
    return this.lastFailure;
  }

  /** How long after `now` an unknown kid may fetch again, after a fetch that failed. */
  retryInMs(now: number): number {
    return this.lastFruitless + this.options.failedRetryMs - now;
  }

  /** A fetch for an unknown kid worked: `found`, the key when the set had it, is returned. */
  fetched<K>(found: K | undefined): K | undefined {
    this.failed = false;
    this.lastFailure = undefined;
    if (!found) this.lastFruitless = this.options.now();
    return found;
  }

  /** A fetch for an unknown kid failed. */
  fetchFailed(err: unknown): void {
    this.lastFruitless = this.options.now();
    this.failed = true;
    this.lastFailure = err;
  }
}
