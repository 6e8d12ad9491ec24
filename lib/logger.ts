import pino from 'pino';

/**
 * The logging interface: a subset of pino's, so a pino logger (or anything
 * shaped like it) can be passed as is. Messages never carry a secret, a hash
 * or a token; events carry `event` and `client_id`. `debug` is optional: a
 * logger without it gets no debug lines.
 */
export interface Logger {
  debug?(obj: Record<string, unknown>, msg?: string): void;
  info(obj: Record<string, unknown>, msg?: string): void;
  warn(obj: Record<string, unknown>, msg?: string): void;
  error(obj: Record<string, unknown>, msg?: string): void;
  /**
   * Whether lines of `level` are written (pino's method). Optional: when
   * there, a debug line of a refused request is neither built nor escaped
   * while it says no to `debug`; without it, whenever `debug` exists.
   */
  isLevelEnabled?(level: string): boolean;
}

/**
 * A logger as used inside: `debug` always there (a no-op when the given
 * logger has none), and no method that throws (see resolveLogger());
 * `isLevelEnabled` when it can tell (see writesDebug()).
 */
export type ResolvedLogger = Required<Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>> & Pick<Logger, 'isLevelEnabled'>;

/**
 * Whether a debug line given to `logger` would be written: it has debug()
 * and, when it can tell (isLevelEnabled()), says debug is on. Asked per
 * line, as a pino logger's level may be changed while it runs. For lines
 * that cost something to build (the escaped facts of a refused request).
 */
export function writesDebug(logger: Logger): boolean {
  return typeof logger.debug === 'function' && (logger.isLevelEnabled === undefined || logger.isLevelEnabled('debug'));
}

type Line = [obj: Record<string, unknown>, msg?: string];

const noop = (): void => undefined;
export const silentLogger: ResolvedLogger = { debug: noop, info: noop, warn: noop, error: noop, isLevelEnabled: () => false };

/**
 * `undefined` → pino at `info` on stdout; `false` → silent; a logger → its
 * methods (with a no-op `debug` if it has none).
 *
 * An exception a logger throws is dropped: lines are written in the middle
 * of a request being checked, a token being issued or a poll, and a broken
 * log transport must not turn their answer into an error, nor keep the other
 * loggers of a LoggerFanout from the line. It is not reported: the logger
 * that threw cannot be told, and telling another one would repeat it at
 * every line.
 */
export function resolveLogger(option: Logger | false | undefined): ResolvedLogger {
  if (option === false) return silentLogger;
  if (option !== undefined) {
    for (const level of ['info', 'warn', 'error'] as const) {
      if (typeof (option as Partial<Logger>)[level] !== 'function') {
        throw new TypeError(`option logger must have info(), warn() and error() methods, or be false`);
      }
    }
  }
  const logger: Logger = option ?? pino({ name: 'express-client-credentials' });
  const hasDebug = typeof logger.debug === 'function';
  return {
    debug: hasDebug ? dropping(logger, 'debug') : noop,
    info: dropping(logger, 'info'),
    warn: dropping(logger, 'warn'),
    error: dropping(logger, 'error'),
    ...(!hasDebug
      ? { isLevelEnabled: (level: string) => level !== 'debug' }
      : typeof logger.isLevelEnabled === 'function' && { isLevelEnabled: askingLevel(logger) }),
  };
}

/** `logger.isLevelEnabled`, called as its method; one that throws counts as yes (the line is built and given, as without the method). */
function askingLevel(logger: Logger): (level: string) => boolean {
  return (level) => {
    try {
      return logger.isLevelEnabled!(level) !== false;
    } catch {
      return true;
    }
  };
}

/** `logger[level]`, called as its method, with any exception it throws dropped (see resolveLogger()). */
function dropping(logger: Logger, level: 'debug' | 'info' | 'warn' | 'error'): (...line: Line) => void {
  return (...line) => {
    try {
      logger[level]!(...line);
    } catch {
      // dropped: see resolveLogger()
    }
  };
}

/**
 * One logger for something several callers share (a revocation-list poller
 * or a Redis replay store of several requireBearer()s): each line goes to
 * every logger added, once per logger however often it was added. Loggers
 * are told apart by the option given, so `undefined` (the default pino
 * logger, a new one per resolveLogger() call) is one logger, and a logger
 * given (wrapped anew per call) is one too; `false` adds none. A logger that
 * throws keeps no other from a line: resolveLogger() drops its exceptions.
 */
export class LoggerFanout implements ResolvedLogger {
  private readonly loggers = new Map<Logger | undefined, ResolvedLogger>();

  /** Adds `resolved`, the resolveLogger() of `option`, unless that option was added before. */
  add(option: Logger | false | undefined, resolved: ResolvedLogger): void {
    if (option === false || this.loggers.has(option)) return;
    this.loggers.set(option, resolved);
  }

  debug = (...line: Line): void => {
    for (const logger of this.loggers.values()) logger.debug(...line);
  };

  info = (...line: Line): void => {
    for (const logger of this.loggers.values()) logger.info(...line);
  };

  warn = (...line: Line): void => {
    for (const logger of this.loggers.values()) logger.warn(...line);
  };

  error = (...line: Line): void => {
    for (const logger of this.loggers.values()) logger.error(...line);
  };

  /** Whether any of its loggers writes `level` (one that cannot tell counts as yes). */
  isLevelEnabled = (level: string): boolean => {
    for (const logger of this.loggers.values()) if (logger.isLevelEnabled?.(level) ?? true) return true;
    return false;
  };
}
