import type { DpopProofFailure, TokenRejectionFacts, TokenRejectionReason } from '../errors';
import type { ResolvedLogger } from '../logger';
import { ThrottledLog } from './refusal-log';

/** Why a bearer check refused a request: the verifier's reasons, a missing scope, a malformed request (400), or the DPoP proof check that failed (`dpop_htu`, ...). */
export type BearerRejectionReason = TokenRejectionReason | 'insufficient_scope' | 'invalid_request' | `dpop_${DpopProofFailure}`;

/**
 * Logs `token.rejected`: at `info` the first time a reason appears in a
 * window (a minute by default), at `debug` for the rest of that window, so a
 * misconfiguration shows in default logs once a minute rather than once per
 * request. The info line says how many refusals for its reason went to debug
 * since the previous info line. Memory: one entry per reason.
 */
export class RejectionLog {
  private readonly log: ThrottledLog;

  constructor(logger: ResolvedLogger, windowMs = 60_000, now: () => number = Date.now) {
    this.log = new ThrottledLog(logger, windowMs, now);
  }

  report(reason: BearerRejectionReason, detail: string | undefined, facts: TokenRejectionFacts): void {
    this.log.report('info', reason, { event: 'token.rejected', reason, ...facts, detail }, `access token refused: ${reason}`);
  }
}
