import type { Request } from 'express';
import type passport from 'passport';
import { Strategy as BearerStrategy } from 'passport-http-bearer';
import type { AccessTokenAuth } from '../core/verifier';

export type StrategyDone = (err: unknown, auth: AccessTokenAuth | false) => void;

/**
 * Runs the passport-http-bearer strategy the way passport's authenticate()
 * does (an object inheriting from the strategy, with success / fail / error
 * actions), without the middleware wrapper around it, which costs more than
 * the strategy itself on this hot path. One such object serves every request
 * of a middleware: the strategy reports synchronously while it runs (the
 * verify callback takes an asynchronous answer past it, to the request it
 * belongs to), so nothing is allocated per request.
 */
export function strategyRunner(
  verify: (token: string) => AccessTokenAuth | Promise<AccessTokenAuth>,
): (authorization: string, done: StrategyDone, known?: AccessTokenAuth) => void {
  let current: StrategyDone | undefined;
  /** The auth the caller already holds for this token (from the verified-token cache): the strategy's answer without verify(). */
  let known: AccessTokenAuth | undefined;
  const strategy = new BearerStrategy((token: string, verified: (err: unknown, auth?: AccessTokenAuth | false) => void) => {
    let result: AccessTokenAuth | Promise<AccessTokenAuth>;
    try {
      result = known ?? verify(token);
    } catch (err) {
      return verified(err);
    }
    if (result instanceof Promise) {
      const mine = current!;
      result.then((auth) => mine(null, auth), (err: unknown) => mine(err, false));
    } else verified(null, result);
  });
  const runner = Object.create(strategy) as passport.StrategyCreated<passport.Strategy>;
  runner.success = (user) => current!(null, user as AccessTokenAuth);
  runner.fail = () => current!(null, false);
  runner.error = (err) => current!(err, false);
  runner.pass = () => current!(null, false);
  runner.redirect = () => current!(null, false);
  // Only the Authorization header counts (tokens in the URL or body are refused
  // before), so the strategy gets just that: it never touches Express's
  // req.query getter, which parses the query string on every read.
  const headers = { authorization: '' };
  const request = { headers } as unknown as Request;
  return (authorization, done, auth) => {
    headers.authorization = authorization;
    current = done;
    known = auth;
    try {
      runner.authenticate(request, { session: false });
    } finally {
      current = undefined;
      known = undefined;
      headers.authorization = '';
    }
  };
}
