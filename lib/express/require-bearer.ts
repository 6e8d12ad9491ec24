import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type passport from 'passport';
import { Strategy as BearerStrategy } from 'passport-http-bearer';
import { missingScopes } from '../core/scope';
import type { AccessTokenAuth, AccessTokenVerifier } from '../core/verifier';
import { InsufficientScopeError, InvalidRequestError, InvalidTokenError, MissingTokenError, toOAuthError, type OAuthError } from '../errors';
import type { RejectionLog } from '../core/rejection-log';
import { bearerCheck, type BearerCheck, type Counts } from '../metrics/counts';
import type { Logger } from '../logger';
import { queryNames } from './read-form';
import { sendBearerError } from './respond';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** Set by `requireBearer()` once the access token is verified. */
      auth?: AccessTokenAuth;
    }
  }
}

/** RFC 6750 §2.1: "Bearer" 1*SP b64token. */
const BEARER = /^bearer +[A-Za-z0-9\-._~+/]+=*$/i;
const BEARER_SCHEME = /^bearer(?: |$)/i;

/**
 * Runs a passport strategy for one request the way passport's authenticate()
 * does (a per-request object inheriting from the strategy, with success /
 * fail / error actions), without the middleware wrapper around it, which
 * costs more than the strategy itself on this hot path.
 */
function runStrategy(strategy: passport.Strategy, authorization: string, done: (err: unknown, auth: AccessTokenAuth | false) => void): void {
  const run = Object.create(strategy) as passport.StrategyCreated<passport.Strategy>;
  run.success = (user) => done(null, user as AccessTokenAuth);
  run.fail = () => done(null, false);
  run.error = (err) => done(err, false);
  run.pass = () => done(null, false);
  run.redirect = () => done(null, false);
  // Only the Authorization header counts (tokens in the URL or body were refused
  // above), so the strategy gets just that: it never touches Express's
  // req.query getter, which parses the query string on every read.
  run.authenticate({ headers: { authorization } } as unknown as Request, { session: false });
}

export interface BearerMiddlewareOptions {
  verifier: AccessTokenVerifier;
  realm: string;
  scope: string[];
  logger: Logger;
  /** Where `token.rejected` goes: one per issuer, or per standalone middleware. */
  rejections: RejectionLog;
  /** Checks by outcome, when metrics are on. */
  counts?: Counts<BearerCheck>;
  /** `null` when the keys are loaded, else a promise to wait for first. */
  pending?: () => Promise<void> | null;
}

/**
 * The protected-resource check. Only the Authorization header counts; the
 * header is parsed by the passport-http-bearer strategy (run as passport runs
 * strategies, without sessions), the token checked by the core verifier, the
 * scope here.
 */
export function bearerMiddleware(options: BearerMiddlewareOptions): RequestHandler {
  const { verifier, realm, scope: required, logger, rejections, counts, pending } = options;
  const strategy = new BearerStrategy((token: string, done: (err: unknown, auth?: AccessTokenAuth | false) => void) => {
    let result: AccessTokenAuth | Promise<AccessTokenAuth>;
    try {
      result = verifier.verify(token);
    } catch (err) {
      return done(err);
    }
    if (result instanceof Promise) result.then((auth) => done(null, auth), done);
    else done(null, result);
  });

  /** Logs why (the scope check reports its own refusals, with the token's scopes) and answers. */
  const fail = (res: Response, err: unknown): void => {
    const error: OAuthError = toOAuthError(err);
    if (error instanceof InvalidTokenError) rejections.report(error.reason, error.detail, error.facts);
    else if (error instanceof InvalidRequestError) rejections.report('invalid_request', error.description, {});
    else if (error.status >= 500 && error.status !== 503) logger.error({ event: 'error', err: error.cause ?? error }, error.detail ?? error.message);
    if (counts) counts[bearerCheck(error)]++;
    sendBearerError(res, error, realm);
  };

  return function requireBearer(req: Request, res: Response, next: NextFunction): void {
    const header = req.headers.authorization;
    if ((req.url.includes('?') && queryNames(req.url).has('access_token')) || (req.body && typeof req.body === 'object' && 'access_token' in req.body)) {
      return fail(res, new InvalidRequestError('send the access token in the Authorization header, not in the URL or the body'));
    }
    if (!header || !BEARER_SCHEME.test(header)) return fail(res, new MissingTokenError());
    if (!BEARER.test(header)) return fail(res, new InvalidRequestError('malformed Bearer authorization header'));

    const done = (err: unknown, auth: AccessTokenAuth | false): void => {
      if (err) return fail(res, err);
      if (!auth) return fail(res, new InvalidRequestError('malformed Bearer authorization header'));
      if (required.length > 0) {
        const missing = missingScopes(auth.scope, required);
        if (missing.length > 0) {
          const detail = `missing ${missing.join(' ')}`;
          rejections.report('insufficient_scope', detail, { expected: required, received: auth.scope, client_id: auth.clientId });
          return fail(res, new InsufficientScopeError(required, { detail }));
        }
      }
      req.auth = auth;
      if (counts) counts.accepted++;
      next();
    };
    // passport-http-bearer splits on one space: hand it "Bearer <token>" when there were more
    const authorization = header.charCodeAt(7) === 32 ? `Bearer ${header.slice(header.lastIndexOf(' ') + 1)}` : header;
    const authenticate = (): void => runStrategy(strategy, authorization, done);

    const waiting = pending?.();
    if (waiting) waiting.then(authenticate, (err: unknown) => fail(res, err));
    else authenticate();
  };
}
