import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { DPOP_ALGORITHMS, type DpopVerifyOptions } from '../core/dpop';
import { missingScopes } from '../core/scope';
import type { AccessTokenAuth, AccessTokenVerifier } from '../core/verifier';
import { InsufficientScopeError, InvalidRequestError, MissingTokenError, TemporarilyUnavailableError, type BearerRequestFault } from '../errors';
import type { RejectionLog } from '../core/rejection-log';
import type { BearerCheck, Counts } from '../metrics/counts';
import type { Logger } from '../logger';
import { bindingError, dpopRequests } from './bearer-dpop';
import { bearerRefusals, refusedRequest, type Scheme } from './bearer-refusals';
import { strategyRunner } from './bearer-strategy';
import { repeatedAuthorization } from './headers';
import { queryNames } from './read-form';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** Set by `requireBearer()` once the access token is verified. */
      auth?: AccessTokenAuth;
    }
  }
}

/** The schemes, case-insensitive: RFC 6750 §2.1 "Bearer" 1*SP b64token, RFC 9449 §7.1 "DPoP" 1*SP token68 (the same characters). */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

/**
 * Whether `header` starts with the scheme `lower` (given in lower case),
 * in any case, followed by a space or nothing: what /^bearer(?: |$)/i says,
 * without a regular expression run on every request (two of them, Bearer
 * and DPoP, were about 300 instructions of a protected request under
 * callgrind). Letters only: `| 32` lower-cases an ASCII letter.
 */
function startsWithScheme(header: string, lower: string): boolean {
  const n = lower.length;
  if (header.length < n) return false;
  for (let i = 0; i < n; i++) if ((header.charCodeAt(i) | 32) !== lower.charCodeAt(i)) return false;
  // the scheme ends at a space, or at a tab (then credentialsAfter() finds no space: malformed, not another scheme)
  const next = header.charCodeAt(n);
  return header.length === n || next === 32 || next === 9;
}

/**
 * After a scheme of `schemeLength` characters matched: the credentials after
 * one or more spaces, or undefined when there are no spaces or nothing after
 * them. Whether they are a b64token is checked apart (cachedOrWellFormed()).
 */
function credentialsAfter(header: string, schemeLength: number): string | undefined {
  let i = schemeLength;
  while (header.charCodeAt(i) === 32) i++;
  return i > schemeLength && i < header.length ? header.slice(i) : undefined;
}

/** The log reason of a malformed Bearer or DPoP header (token.rejected, the metric's reason); the answer is invalid_request. */
const MALFORMED_HEADER = { detail: 'malformed_header' satisfies BearerRequestFault };

/** `dpop` of requireBearer(): whether DPoP-bound tokens are accepted, required, or not at all. */
export type DpopMode = 'allowed' | 'required' | 'disabled';

/** How requireBearer() checks DPoP proofs. */
export interface BearerDpopOptions {
  mode: DpopMode;
  /** Base URL the request's `htu` is built from (with `req.originalUrl`). */
  publicUrl: string;
  /** Replay store, window; `status` is forced to 401. */
  verify: DpopVerifyOptions;
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
  pending?: () => Promise<unknown> | null;
  /** DPoP; default: allowed, when the caller knows its public URL. */
  dpop?: BearerDpopOptions;
}

/**
 * The protected-resource check. Only the Authorization header counts; the
 * header is parsed by the passport-http-bearer strategy (run as passport runs
 * strategies, without sessions), the token checked by the core verifier, the
 * scope here.
 */
export function bearerMiddleware(options: BearerMiddlewareOptions): RequestHandler {
  const { verifier, realm, scope: required, logger, rejections, counts, pending } = options;
  const mode: DpopMode = options.dpop?.mode ?? 'disabled';
  const dpop = options.dpop && { ...options.dpop.verify, status: 401 as const };
  const publicUrl = options.dpop?.publicUrl ?? '';
  const algs = dpop?.algorithms ?? DPOP_ALGORITHMS;
  /**
   * The one look at a token before its scheme's checks: its auth when the
   * verified-token cache holds this very token (only verified tokens get
   * there, so a hit is well-formed and skips the b64token match: 6,200
   * instructions a request for a 510-character token, under callgrind), else
   * undefined once it matched as a b64token. Throws invalid_request for a
   * malformed token, invalid_token for a cached one since revoked.
   */
  const cachedOrWellFormed = (token: string, scheme: 'Bearer' | 'DPoP'): AccessTokenAuth | undefined => {
    const known = verifier.cached(token);
    if (!known && !B64TOKEN.test(token)) throw new InvalidRequestError(`malformed ${scheme} authorization header`, MALFORMED_HEADER);
    return known;
  };
  const runStrategy = strategyRunner((token) => verifier.verifyUncached(token));

  const fail = bearerRefusals({ realm, mode, algs, logger, rejections, counts });

  /** Scope check and hand-over, for either scheme. */
  const accept = (req: Request, res: Response, next: NextFunction, auth: AccessTokenAuth, scheme: Scheme): void => {
    if (required.length > 0) {
      const missing = missingScopes(auth.scope, required);
      if (missing.length > 0) {
        const detail = `missing ${missing.join(' ')}`;
        rejections.report('insufficient_scope', detail, { expected: required, received: auth.scope, client_id: auth.clientId }, refusedRequest(req));
        return fail(res, new InsufficientScopeError(required, { detail }), scheme);
      }
    }
    // counted once per request: a request a requireBearer() before this one accepted (`app.use('/api', requireBearer())`
    // and the route's own) carries its auth already; one property read, only with metrics on
    if (counts && req.auth === undefined) counts.accepted++;
    req.auth = auth;
    next();
  };

  const dpopRequest = dpop && dpopRequests({ verifier, pending, publicUrl, verify: dpop, fail, accept });

  /** Requests already checked once more after a wait for pending() (see afterPending). */
  const waited = new WeakSet<Request>();
  /**
   * A cached token refused with a 503 (its revocation status cannot be known:
   * the standalone verifier's list is stale) waits, once, for what pending()
   * offers (a new poll of the list, at most one a second) and is checked
   * again, as an uncached token is; so traffic of cached tokens recovers as
   * soon as the issuer answers, not at the poller's next tick. False when
   * there is nothing to wait for: the caller answers with the error.
   */
  const afterPending = (err: unknown, req: Request, res: Response, next: NextFunction, scheme: Scheme): boolean => {
    if (!pending || !(err instanceof TemporarilyUnavailableError) || waited.has(req)) return false;
    const waiting = pending();
    if (!waiting) return false;
    waited.add(req);
    waiting.then(() => middleware(req, res, next), (e: unknown) => fail(res, e, scheme));
    return true;
  };

  const middleware = function requireBearer(req: Request, res: Response, next: NextFunction): void {
    const header = req.headers.authorization;
    const inUrl = req.url.includes('?') && queryNames(req.url).has('access_token');
    const inBody = req.body !== null && typeof req.body === 'object' && 'access_token' in req.body;
    if (inUrl || inBody) {
      const fault: BearerRequestFault = header || (inUrl && inBody) ? 'multiple_tokens' : inUrl ? 'token_in_url' : 'token_in_body';
      // the error goes on the challenge of the scheme the Authorization header used, if it used DPoP
      const scheme = header && mode !== 'disabled' && startsWithScheme(header, 'dpop') ? 'dpop' : 'bearer';
      return fail(res, new InvalidRequestError('send the access token in the Authorization header, not in the URL or the body', { detail: fault }), scheme);
    }
    if (header && repeatedAuthorization(req.rawHeaders)) return fail(res, new InvalidRequestError('send one Authorization header', { detail: 'repeated_authorization' }), 'both');
    if (mode !== 'disabled' && header && startsWithScheme(header, 'dpop')) {
      const token = credentialsAfter(header, 4);
      if (token === undefined) return fail(res, new InvalidRequestError('malformed DPoP authorization header', MALFORMED_HEADER), 'dpop');
      let known;
      try {
        known = cachedOrWellFormed(token, 'DPoP');
      } catch (err) {
        if (afterPending(err, req, res, next, 'dpop')) return;
        return fail(res, err, 'dpop');
      }
      return dpopRequest!(req, res, next, token, known);
    }
    if (!header || !startsWithScheme(header, 'bearer')) return fail(res, new MissingTokenError(), 'none');
    const token = credentialsAfter(header, 6);
    if (token === undefined) return fail(res, new InvalidRequestError('malformed Bearer authorization header', MALFORMED_HEADER));
    let known;
    try {
      known = cachedOrWellFormed(token, 'Bearer');
    } catch (err) {
      if (afterPending(err, req, res, next, 'bearer')) return;
      return fail(res, err);
    }
    // the token is not verified for this answer; a verified one from the cache names its client
    if (mode === 'required') return fail(res, bindingError('this resource requires a DPoP-bound access token', 'dpop_required', 'Bearer scheme where DPoP is required', known));

    const done = (err: unknown, auth: AccessTokenAuth | false): void => {
      if (err) return fail(res, err);
      if (!auth) return fail(res, new InvalidRequestError('malformed Bearer authorization header', MALFORMED_HEADER));
      // a DPoP-bound token is worth nothing without its proof (RFC 9449 §7.1)
      if (auth.claims.cnf !== undefined) {
        if (mode !== 'disabled' && req.headers.dpop !== undefined) {
          return fail(res, new InvalidRequestError('send a DPoP-bound token with the DPoP scheme, not Bearer', { detail: 'both_schemes' }), 'both', auth);
        }
        return fail(res, bindingError('the access token is DPoP-bound; send it with the DPoP scheme and a proof', 'dpop_bound_as_bearer', 'DPoP-bound token sent as Bearer', auth));
      }
      accept(req, res, next, auth, 'bearer');
    };
    // passport-http-bearer splits on one space: hand it "Bearer <token>" when there were more
    const authorization = header.length - token.length === 7 ? header : `Bearer ${token}`;
    const waiting = pending?.();
    if (waiting) waiting.then(() => runStrategy(authorization, done, known), (err: unknown) => fail(res, err));
    else runStrategy(authorization, done, known);
  };
  return middleware;
}
