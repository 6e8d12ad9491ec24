import type { DpopProofFailure, TokenRejectionFacts, TokenRejectionReason } from '../errors';
import type { ResolvedLogger } from '../logger';
import { ThrottledLog } from './refusal-log';

/** Why a bearer check refused a request: the verifier's reasons, a missing scope, a malformed request (400), or the DPoP proof check that failed (`dpop_htu`, ...). */
export type BearerRejectionReason = TokenRejectionReason | 'insufficient_scope' | 'invalid_request' | `dpop_${DpopProofFailure}`;

/** The request a refusal answered, as logged: never its query string (a token sent in the URL would be in it). */
export interface RefusedRequest {
  ip?: string;
  method?: string;
  path?: string;
}

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

  /** `request`: where the refused request came from and went (the adapter's; the path without its query). */
  report(reason: BearerRejectionReason, detail: string | undefined, facts: TokenRejectionFacts, request?: RefusedRequest): void {
    this.log.report('info', reason, { event: 'token.rejected', reason, ...facts, detail, ...request }, `access token refused: ${reason}`);
  }
}
