import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type passport from 'passport';
import { Strategy as BearerStrategy } from 'passport-http-bearer';
import { DPOP_ALGORITHMS, requestHtu, verifyDpopProof, type CheckedDpopProof, type DpopVerifyOptions, type ReplayStore, type VerifiedDpopProof } from '../core/dpop';
import { accessTokenHash } from '../jwt/dpop-proof';
import { missingScopes } from '../core/scope';
import type { AccessTokenAuth, AccessTokenVerifier } from '../core/verifier';
import {
  bearerChallenge,
  dpopChallenge,
  InsufficientScopeError,
  InvalidDpopProofError,
  InvalidRequestError,
  InvalidTokenError,
  MissingTokenError,
  TemporarilyUnavailableError,
  toOAuthError,
  type OAuthError,
} from '../errors';
import type { RefusedRequest, RejectionLog } from '../core/rejection-log';
import { atMostEvery } from '../core/throttle';
import { bearerCheck, dpopProofReason, type BearerCheck, type Counts } from '../metrics/counts';
import type { Logger } from '../logger';
import { repeatedAuthorization } from './headers';
import { queryNames } from './read-form';
import { sendError } from './respond';

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

/** What token.rejected says of a refused request: the address (after `trust proxy`), the method and the path, never the query. */
function refusedRequest(req: Request): RefusedRequest {
  const url = req.originalUrl ?? req.url ?? '';
  const end = url.indexOf('?');
  const path = end === -1 ? url : url.slice(0, end);
  return { ip: req.ip, method: req.method, path: path.length > 200 ? `${path.slice(0, 200)}...` : path };
}

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
  return header.length === n || header.charCodeAt(n) === 32;
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

/** Which scheme a request used, for the challenges of its answer. */
type Scheme = 'none' | 'bearer' | 'dpop' | 'both';

type StrategyDone = (err: unknown, auth: AccessTokenAuth | false) => void;

/**
 * Runs the passport-http-bearer strategy the way passport's authenticate()
 * does (an object inheriting from the strategy, with success / fail / error
 * actions), without the middleware wrapper around it, which costs more than
 * the strategy itself on this hot path. One such object serves every request
 * of a middleware: the strategy reports synchronously while it runs (the
 * verify callback takes an asynchronous answer past it, to the request it
 * belongs to), so nothing is allocated per request.
 */
function strategyRunner(
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
 * The DPoP proof each request passed, for the next requireBearer() on its
 * way (`app.use('/api', requireBearer())` and a route's own with a scope),
 * and the replay stores that spent its jti: a later layer on the same store
 * takes it as checked (the same request is no replay); one on another store
 * (say Redis after the process's memory) checks it and spends its jti there
 * too, or a proof replayed to another instance would pass it unasked.
 */
const checkedProofs = new WeakMap<Request, { checked: CheckedDpopProof; stores: Set<ReplayStore> }>();

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
    if (!known && !B64TOKEN.test(token)) throw new InvalidRequestError(`malformed ${scheme} authorization header`);
    return known;
  };
  const runStrategy = strategyRunner((token) => verifier.verifyUncached(token));

  /**
   * The challenges of an answer: those of the schemes this route accepts, the
   * error on the one used. A 503 (a key source or the replay store cannot be
   * reached) carries them as every other refusal does (RFC 6750 §3), so a
   * client reading only the challenge sees why too.
   */
  const challenges = (error: OAuthError, scheme: Scheme): string | string[] | undefined => {
    if (error.status !== 401 && error.status !== 403 && error.status !== 400 && error.status !== 503) return undefined;
    if (mode === 'disabled') return bearerChallenge(realm, error);
    if (mode === 'required') return dpopChallenge(algs, error);
    if (scheme === 'dpop') return [bearerChallenge(realm), dpopChallenge(algs, error)];
    if (scheme === 'both') return [bearerChallenge(realm, error), dpopChallenge(algs, error)];
    return [bearerChallenge(realm, error), dpopChallenge(algs)];
  };

  /**
   * A 503 (the JWKS or the store could not be reached): one warn line a
   * minute, so an operator sees why protected routes refuse without a line
   * per request.
   */
  const unavailable = atMostEvery(60_000, (error: OAuthError): void => {
    const dependency = error instanceof TemporarilyUnavailableError ? error.dependency : undefined;
    logger.warn(
      { event: 'bearer.unavailable', dependency, reason: error.detail ?? error.description },
      dependency === 'dpop_replay_store'
        ? 'requireBearer() cannot check DPoP proofs: the DPoP replay store is unavailable; answering 503'
        : 'requireBearer() cannot check tokens: a key source is unavailable; answering 503',
    );
  });

  /**
   * Logs why (the scope check reports its own refusals, with the token's
   * scopes) and answers. `auth`: the token, when it was verified before the
   * refusal (a DPoP proof refused for a valid token): its client_id is logged.
   */
  const fail = (res: Response, err: unknown, scheme: Scheme = 'bearer', auth?: AccessTokenAuth): void => {
    const error: OAuthError = toOAuthError(err);
    if (error instanceof InvalidTokenError) rejections.report(error.reason, error.detail, error.facts, refusedRequest(res.req));
    else if (error instanceof InvalidRequestError) rejections.report('invalid_request', error.description, {}, refusedRequest(res.req));
    else if (error instanceof InvalidDpopProofError) rejections.report(dpopProofReason(error.reason), error.detail, auth ? { client_id: auth.clientId } : {}, refusedRequest(res.req));
    else if (error.status === 503) unavailable(error);
    else if (error.status >= 500) logger.error({ event: 'error', err: error.cause ?? error }, error.detail ?? error.message);
    if (counts) counts[bearerCheck(error)]++;
    sendError(res, error, challenges(error, scheme));
  };

  const binding = (description: string, detail: string, auth?: AccessTokenAuth): InvalidTokenError =>
    new InvalidTokenError(description, { reason: 'dpop_binding', detail, facts: auth ? { client_id: auth.clientId } : undefined });

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

  /** `ath` of a verified token, computed once per token: the verifier's cache hands back the same auth object. */
  const athByAuth = new WeakMap<AccessTokenAuth, string>();
  const athOf = (auth: AccessTokenAuth): string => {
    let ath = athByAuth.get(auth);
    if (ath === undefined) athByAuth.set(auth, (ath = accessTokenHash(auth.token)));
    return ath;
  };

  /** `Authorization: DPoP <token>`: the token as for Bearer (cached), then this request's proof (never cached). */
  const dpopRequest = (req: Request, res: Response, next: NextFunction, token: string, known: AccessTokenAuth | undefined): void => {
    const withAuth = (auth: AccessTokenAuth): void => {
      const jkt = (auth.claims.cnf as { jkt?: unknown } | undefined)?.jkt;
      if (typeof jkt !== 'string') return fail(res, binding('the access token is not DPoP-bound; send it as Bearer', 'DPoP scheme with a token without cnf.jkt', auth), 'dpop');
      const proof = req.headers.dpop;
      const seen = checkedProofs.get(req);
      const checkedBefore = seen?.stores.has(dpop!.replay) ? seen.checked : undefined;
      let verified;
      try {
        verified = verifyDpopProof(
          proof,
          { htm: req.method, htu: requestHtu(publicUrl, req.originalUrl), accessToken: token, accessTokenHash: athOf(auth), jkt, checkedBefore },
          dpop!,
        );
      } catch (err) {
        return fail(res, err instanceof InvalidTokenError ? binding(err.description, err.detail ?? 'dpop proof key is not cnf.jkt', auth) : err, 'dpop', auth);
      }
      const passed = (result: VerifiedDpopProof): void => {
        if (typeof proof === 'string') {
          if (seen?.checked.proof === proof) seen.stores.add(dpop!.replay);
          else checkedProofs.set(req, { checked: { proof, verified: result }, stores: new Set([dpop!.replay]) });
        }
        accept(req, res, next, auth, 'dpop');
      };
      if (verified instanceof Promise) verified.then(passed, (err: unknown) => fail(res, err, 'dpop', auth));
      else passed(verified);
    };
    const verify = (): void => {
      let result: AccessTokenAuth | Promise<AccessTokenAuth>;
      try {
        result = known ?? verifier.verifyUncached(token);
      } catch (err) {
        return fail(res, err, 'dpop');
      }
      if (result instanceof Promise) result.then(withAuth, (err: unknown) => fail(res, err, 'dpop'));
      else withAuth(result);
    };
    const waiting = pending?.();
    if (waiting) waiting.then(verify, (err: unknown) => fail(res, err, 'dpop'));
    else verify();
  };

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
    if ((req.url.includes('?') && queryNames(req.url).has('access_token')) || (req.body && typeof req.body === 'object' && 'access_token' in req.body)) {
      return fail(res, new InvalidRequestError('send the access token in the Authorization header, not in the URL or the body'));
    }
    if (header && repeatedAuthorization(req.rawHeaders)) return fail(res, new InvalidRequestError('send one Authorization header'), 'both');
    if (mode !== 'disabled' && header && startsWithScheme(header, 'dpop')) {
      const token = credentialsAfter(header, 4);
      if (token === undefined) return fail(res, new InvalidRequestError('malformed DPoP authorization header'), 'dpop');
      let known;
      try {
        known = cachedOrWellFormed(token, 'DPoP');
      } catch (err) {
        if (afterPending(err, req, res, next, 'dpop')) return;
        return fail(res, err, 'dpop');
      }
      return dpopRequest(req, res, next, token, known);
    }
    if (!header || !startsWithScheme(header, 'bearer')) return fail(res, new MissingTokenError(), 'none');
    const token = credentialsAfter(header, 6);
    if (token === undefined) return fail(res, new InvalidRequestError('malformed Bearer authorization header'));
    let known;
    try {
      known = cachedOrWellFormed(token, 'Bearer');
    } catch (err) {
      if (afterPending(err, req, res, next, 'bearer')) return;
      return fail(res, err);
    }
    if (mode === 'required') return fail(res, binding('this resource requires a DPoP-bound access token', 'Bearer scheme where DPoP is required'));

    const done = (err: unknown, auth: AccessTokenAuth | false): void => {
      if (err) return fail(res, err);
      if (!auth) return fail(res, new InvalidRequestError('malformed Bearer authorization header'));
      // a DPoP-bound token is worth nothing without its proof (RFC 9449 §7.1)
      if (auth.claims.cnf !== undefined) {
        if (mode !== 'disabled' && req.headers.dpop !== undefined) {
          return fail(res, new InvalidRequestError('send a DPoP-bound token with the DPoP scheme, not Bearer'), 'both');
        }
        return fail(res, binding('the access token is DPoP-bound; send it with the DPoP scheme and a proof', 'DPoP-bound token sent as Bearer', auth));
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
