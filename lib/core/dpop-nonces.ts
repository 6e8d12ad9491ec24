import { createHmac } from 'node:crypto';

export interface DpopNoncesOptions {
  /** Length of one step in seconds; default 60. */
  stepSeconds?: number;
  /** Earlier steps still accepted; default 2 (a nonce lives 2 to 3 steps). */
  previousSteps?: number;
  now?: () => number;
}

/**
 * Stateless DPoP server nonces (RFC 9449 §8): the nonce of a time step is
 * base64url(HMAC-SHA-256(secret, step)), cut to 128 bits. Every instance
 * given the same secret hands out and accepts the same nonces, with no
 * shared state per request. A nonce is accepted during its step, the
 * `previousSteps` after it, and the step before it (an instance whose clock
 * runs a little ahead may have handed it out). Values are computed once per
 * step.
 */
export class DpopNonces {
  private readonly secret: Buffer;
  private readonly stepMs: number;
  private readonly previousSteps: number;
  private readonly now: () => number;
  private cachedStep = Number.NaN;
  /** Nonces accepted during `cachedStep`, newest first; [1] is the current one. */
  private accepted: string[] = [];

  constructor(secret: Uint8Array, options: DpopNoncesOptions = {}) {
    if (secret.length < 32) throw new TypeError('the DPoP nonce secret needs at least 32 bytes');
    this.secret = Buffer.from(secret);
    this.stepMs = Math.max(1, options.stepSeconds ?? 60) * 1000;
    this.previousSteps = Math.max(0, Math.floor(options.previousSteps ?? 2));
    this.now = options.now ?? Date.now;
  }

  /** The nonce to hand out now (`DPoP-Nonce`). */
  current(): string {
    return this.refresh()[1];
  }

  /** Whether a proof's `nonce` is one of the recent nonces. */
  isValid(nonce: unknown): boolean {
    return typeof nonce === 'string' && this.refresh().includes(nonce);
  }

  private refresh(): string[] {
    const step = Math.floor(this.now() / this.stepMs);
    if (step !== this.cachedStep) {
      const accepted: string[] = [];
      for (let s = step + 1; s >= step - this.previousSteps; s--) accepted.push(this.nonceOf(s));
      this.accepted = accepted;
      this.cachedStep = step;
    }
    return this.accepted;
  }

  private nonceOf(step: number): string {
    return createHmac('sha256', this.secret).update(`dpop-nonce:${step}`).digest().subarray(0, 16).toString('base64url');
  }
}
