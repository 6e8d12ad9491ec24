import type { DpopProofFailure, TokenRejectionFacts, TokenRejectionReason } from '../errors';
import type { ResolvedLogger } from '../logger';
import { LogWindows } from './throttle';

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
  private readonly windows: LogWindows<BearerRejectionReason>;

  constructor(
    private readonly logger: ResolvedLogger,
    private readonly windowMs = 60_000,
    now: () => number = Date.now,
  ) {
    this.windows = new LogWindows(windowMs, now);
  }

  report(reason: BearerRejectionReason, detail: string | undefined, facts: TokenRejectionFacts): void {
    const debugOnly = this.windows.take(reason);
    if (debugOnly === undefined) {
      this.logger.debug({ event: 'token.rejected', reason, ...facts, detail }, 'access token refused');
      return;
    }
    this.logger.info(
      { event: 'token.rejected', reason, ...facts, detail, debug_only_since_last: debugOnly },
      `access token refused: ${reason} (more of these within ${Math.round(this.windowMs / 1000)} s are logged at debug level)`,
    );
  }
}
