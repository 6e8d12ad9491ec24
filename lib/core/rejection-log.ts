import type { DpopProofFailure, TokenRejectionFacts, TokenRejectionReason } from '../errors';
import type { ResolvedLogger } from '../logger';
import { addressKey } from './address-key';
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
 * window (a minute by default) for one client (the token's client_id, once
 * its signature is verified) or, for a token not verified, one address (an
 * IPv6 address by its /64), at `debug` for the rest of that window, so a
 * misconfiguration shows in default logs once a minute rather than once per
 * request, and one client that keeps failing (replaying its own revoked
 * token, say) does not push another client's refusal for the same reason
 * down to debug. The info line says how many refusals of its key went to
 * debug since the previous info line. Memory: at most 10,000 keys (the
 * oldest window goes first), as for every throttled refusal line.
 */
export class RejectionLog {
  private readonly log: ThrottledLog;

  constructor(logger: ResolvedLogger, windowMs = 60_000, now: () => number = Date.now) {
    this.log = new ThrottledLog(logger, windowMs, now);
  }

  /** `request`: where the refused request came from and went (the adapter's; the path without its query). */
  report(reason: BearerRejectionReason, detail: string | undefined, facts: TokenRejectionFacts, request?: RefusedRequest): void {
    // a verified client_id names who failed; anything an unverified token says (claimed_client_id) is made up at will
    const who = facts.client_id !== undefined ? `client:${facts.client_id}` : `ip:${request?.ip === undefined ? '' : addressKey(request.ip)}`;
    this.log.report('info', `${reason}|${who}`, { event: 'token.rejected', reason, ...facts, detail, ...request }, `access token refused: ${reason}`);
  }
}
