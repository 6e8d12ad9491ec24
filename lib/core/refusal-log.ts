import { InvalidDpopProofError, type OAuthError } from '../errors';
import type { Logger } from '../logger';
import { LogWindows } from './throttle';

/**
 * A stable, bounded `reason` for a refused request: the error's detail when
 * it is a machine-readable code (`dpop_required`, `credentials_in_url`,
 * `no_credentials`…), `dpop_` and the check that failed for a DPoP proof
 * (`dpop_htu`, `dpop_replayed`…, as requireBearer() reports them), else the RFC error code (`invalid_scope`, `invalid_target`,
 * `unsupported_grant_type`, `invalid_request`…).
 */
export function refusalReason(error: OAuthError): string {
  if (error instanceof InvalidDpopProofError) return `dpop_${error.reason}`;
  if (error.detail !== undefined && /^[a-z][a-z0-9_]{0,47}$/.test(error.detail)) return error.detail;
  return error.code;
}

/**
 * Log lines an outsider can repeat at will, throttled per key: the first of
 * a key in a window (a minute by default) at `info` or `warn`, the rest of
 * that window at debug; the next line at the usual level says how many went
 * to debug (`debug_only_since_last`). Keys are chosen by the caller (a
 * client_id, an address, and the reason), at most `max` of them kept.
 */
export class ThrottledLog {
  private readonly windows: LogWindows<string>;

  constructor(
    private readonly logger: Logger,
    private readonly windowMs = 60_000,
    now: () => number = Date.now,
    max = 10_000,
  ) {
    this.windows = new LogWindows(windowMs, now, max);
  }

  report(level: 'info' | 'warn', key: string, line: Record<string, unknown>, msg: string): void {
    const debugOnly = this.windows.take(key);
    if (debugOnly === undefined) {
      this.logger.debug?.(line, msg);
      return;
    }
    this.logger[level]({ ...line, debug_only_since_last: debugOnly }, `${msg} (more of these within ${Math.round(this.windowMs / 1000)} s are logged at debug level)`);
  }
}
