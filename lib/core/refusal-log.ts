import { InvalidDpopProofError, type OAuthError } from '../errors';
import { writesDebug, type Logger } from '../logger';
import { visibleFields } from '../shared/visible-text';
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

interface HeldLine {
  level: 'info' | 'warn';
  /** As reported: escaped only if it is written (visibleFields()). */
  fields: Record<string, unknown>;
  msg: string;
}

/**
 * Log lines an outsider can repeat at will, throttled per key: the first of
 * a key in a window (a minute by default) at `info` or `warn`, the rest of
 * that window at debug. Once the window is over (within a quarter of it),
 * one more line at the usual level says how many went to debug
 * (`debug_only_since_last`, with `summary: true` and the facts of the last
 * of them), so a burst that stops still leaves its count in the log. Keys
 * are chosen by the caller (a client_id, an address, and the reason), at
 * most `max` of them kept.
 */
export class ThrottledLog {
  private readonly windows: LogWindows<string, HeldLine>;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly windowMs = 60_000,
    now: () => number = Date.now,
    max = 10_000,
  ) {
    this.windows = new LogWindows(windowMs, now, max);
  }

  /**
   * `fields`' strings (a refused request's: a claimed client_id, a received
   * value, a detail quoting the request) are logged with their control,
   * bidi and line-separator characters escaped (visibleFields()). That is
   * done only for a line written: under a flood most calls go to debug, and
   * with a logger above debug (writesDebug()) such a call is a map lookup
   * and the window keeping `fields` (as they are: escaped when its summary
   * is written).
   */
  report(level: 'info' | 'warn', key: string, fields: Record<string, unknown>, msg: string): void {
    const debugOnly = this.windows.take(key, { level, fields, msg });
    if (debugOnly === undefined) {
      if (writesDebug(this.logger)) this.logger.debug!(visibleFields(fields), msg);
      // the count goes out once the window is over; the timer runs only while something is held back
      if (this.timer === undefined) {
        this.timer = setInterval(() => this.flush(), Math.max(1000, this.windowMs / 4));
        this.timer.unref();
      }
      return;
    }
    this.logger[level]({ ...visibleFields(fields), debug_only_since_last: debugOnly }, `${msg} (more of these within ${this.seconds()} s are logged at debug level)`);
  }

  /** Whether `key` has a window that is not over (its next report() goes to debug). */
  isOpen(key: string): boolean {
    return this.windows.isOpen(key);
  }

  /** Logs the count of each window that is over and held lines back (called by the timer). */
  flush(): void {
    for (const { heldBack, last } of this.windows.ended()) {
      if (!last) continue;
      this.logger[last.level]({ ...visibleFields(last.fields), debug_only_since_last: heldBack, summary: true }, `${last.msg}: ${heldBack} more within ${this.seconds()} s, logged at debug level (the last one's facts here)`);
    }
    if (!this.windows.holding()) this.stop();
  }

  /** Stops the timer; a window still holding lines back is told at its key's next line. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private seconds(): number {
    return Math.round(this.windowMs / 1000);
  }
}
