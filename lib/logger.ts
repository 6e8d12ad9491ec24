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
}

/** A logger as used inside: `debug` always there (a no-op when the given logger has none). */
export type ResolvedLogger = Required<Logger>;

const noop = (): void => undefined;
export const silentLogger: ResolvedLogger = { debug: noop, info: noop, warn: noop, error: noop };

/** `undefined` → pino at `info` on stdout; `false` → silent; a logger → itself (with a no-op `debug` if it has none). */
export function resolveLogger(option: Logger | false | undefined): ResolvedLogger {
  if (option === false) return silentLogger;
  if (option === undefined) return pino({ name: 'express-client-credentials' });
  for (const level of ['info', 'warn', 'error'] as const) {
    if (typeof (option as Partial<Logger>)[level] !== 'function') {
      throw new TypeError(`option logger must have info(), warn() and error() methods, or be false`);
    }
  }
  if (typeof option.debug === 'function') return option as ResolvedLogger;
  return { debug: noop, info: option.info.bind(option), warn: option.warn.bind(option), error: option.error.bind(option) };
}

type Line = [obj: Record<string, unknown>, msg?: string];

/**
 * One logger for something several callers share (a revocation-list poller
 * or a Redis replay store of several requireBearer()s): each line goes to
 * every logger added, once per logger however often it was added. Loggers
 * are told apart by the option given, so `undefined` (the default pino
 * logger, a new one per resolveLogger() call) is one logger, and a logger
 * without `debug` (wrapped anew per call) is one too; `false` adds none.
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
}
