import type { BearerRequestFault, DpopProofFailure, TokenRejectionFacts, TokenRejectionReason } from '../errors';
import type { ResolvedLogger } from '../logger';
import { addressKey } from './address-key';
import { ThrottledLog } from './refusal-log';

/**
 * Why a bearer check refused a request: the verifier's reasons, a missing
 * scope, a malformed request (400: what was wrong with it, `invalid_request`
 * for another cause), or the DPoP proof check that failed (`dpop_htu`, ...).
 */
export type BearerRejectionReason = TokenRejectionReason | 'insufficient_scope' | BearerRequestFault | 'invalid_request' | `dpop_${DpopProofFailure}`;

/** The request a refusal answered, as logged: never its query string (a token sent in the URL would be in it). */
export interface RefusedRequest {
  ip?: string;
  method?: string;
  path?: string;
}

/** How many addresses may open a window of their own per reason and window (a minute), the rest being counted together. */
export const NEW_ADDRESSES_PER_WINDOW = 20;
/** How many of the addresses counted together a line names (`example_addresses`). */
const EXAMPLES = 5;

/** A reason's openings of address windows in its current window, and the addresses past the limit named so far. */
interface Openings {
  startedAt: number;
  opened: number;
  examples: string[];
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
 * debug since the previous info line.
 *
 * Addresses cost a sender little (IPv6 /64s come by the thousand, a /48
 * holds 65,536 of them): at most NEW_ADDRESSES_PER_WINDOW addresses open a
 * window of their own per reason and window; refusals from further
 * addresses for that reason go to one window of the reason (`other_addresses:
 * true`, up to 5 of them named in `example_addresses`), whose info line and
 * summary say how many. So an address rotation yields about 21 info lines
 * per reason a minute (and their summaries), not one per request, and the
 * windows held are at most 21 per reason (a reason is one of a fixed set);
 * verified clients keep a window each (registered clients only), within
 * ThrottledLog's 10,000.
 */
export class RejectionLog {
  private readonly log: ThrottledLog;
  /** By reason: a fixed set, so bounded. */
  private readonly openings = new Map<string, Openings>();

  constructor(
    logger: ResolvedLogger,
    private readonly windowMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {
    this.log = new ThrottledLog(logger, windowMs, now);
  }

  /** `request`: where the refused request came from and went (the adapter's; the path without its query). */
  report(reason: BearerRejectionReason, detail: string | undefined, facts: TokenRejectionFacts, request?: RefusedRequest): void {
    const msg = `access token refused: ${reason}`;
    // a verified client_id names who failed; anything an unverified token says (claimed_client_id) is made up at will
    if (facts.client_id !== undefined) {
      this.log.report('info', `${reason}|client:${facts.client_id}`, { event: 'token.rejected', reason, ...facts, detail, ...request }, msg);
      return;
    }
    const address = request?.ip === undefined ? '' : addressKey(request.ip);
    const key = `${reason}|ip:${address}`;
    if (this.log.isOpen(key) || this.mayOpen(reason)) {
      this.log.report('info', key, { event: 'token.rejected', reason, ...facts, detail, ...request }, msg);
      return;
    }
    const others = `${reason}|ip:*`;
    const openings = this.openings.get(reason)!;
    // a new window of the others names its own examples; a line keeps the list it was given (a new one per example added)
    if (!this.log.isOpen(others)) openings.examples = [];
    if (openings.examples.length < EXAMPLES && !openings.examples.includes(address)) openings.examples = [...openings.examples, address];
    this.log.report(
      'info',
      others,
      { event: 'token.rejected', reason, ...facts, detail, ...request, other_addresses: true, example_addresses: openings.examples },
      `${msg}, from addresses past the first ${NEW_ADDRESSES_PER_WINDOW} in ${Math.round(this.windowMs / 1000)} s, counted together`,
    );
  }

  /**
   * Whether one more address may open a window of its own for `reason` now
   * (and counts it): NEW_ADDRESSES_PER_WINDOW of them from the first, for a
   * window; then none until both that window and the others' are over, so
   * an address rotation makes about NEW_ADDRESSES_PER_WINDOW + 1 info lines
   * a reason a window, and their summaries.
   */
  private mayOpen(reason: string): boolean {
    const now = this.now();
    let openings = this.openings.get(reason);
    if (openings === undefined || (now - openings.startedAt >= this.windowMs && !this.log.isOpen(`${reason}|ip:*`))) {
      openings = { startedAt: now, opened: 0, examples: [] };
      this.openings.set(reason, openings);
    }
    if (openings.opened >= NEW_ADDRESSES_PER_WINDOW) return false;
    openings.opened++;
    return true;
  }
}
