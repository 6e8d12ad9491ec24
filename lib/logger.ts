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
