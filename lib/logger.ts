import pino from 'pino';

/**
 * The logging interface: a subset of pino's, so a pino logger (or anything
 * shaped like it) can be passed as is. Messages never carry a secret, a hash
 * or a token; events carry `event` and `client_id`.
 */
export interface Logger {
  info(obj: Record<string, unknown>, msg?: string): void;
  warn(obj: Record<string, unknown>, msg?: string): void;
  error(obj: Record<string, unknown>, msg?: string): void;
}

const noop = (): void => undefined;
export const silentLogger: Logger = { info: noop, warn: noop, error: noop };

/** `undefined` → pino at `info` on stdout; `false` → silent; a logger → itself. */
export function resolveLogger(option: Logger | false | undefined): Logger {
  if (option === false) return silentLogger;
  if (option === undefined) return pino({ name: 'express-client-credentials' });
  for (const level of ['info', 'warn', 'error'] as const) {
    if (typeof (option as Partial<Logger>)[level] !== 'function') {
      throw new TypeError(`option logger must have info(), warn() and error() methods, or be false`);
    }
  }
  return option;
}
