/**
 * How requireBearer() refuses a request: why goes to token.rejected (or a
 * warn / error line), the check is counted, and the answer carries the
 * challenges of the schemes the route accepts.
 */
import type { Request, Response } from 'express';
import type { RefusedRequest, RejectionLog } from '../core/rejection-log';
import { atMostEvery } from '../core/throttle';
import type { AccessTokenAuth } from '../core/verifier';
import {
  bearerChallenge,
  bearerRequestFault,
  dpopChallenge,
  InvalidDpopProofError,
  InvalidRequestError,
  InvalidTokenError,
  TemporarilyUnavailableError,
  toOAuthError,
  type OAuthError,
  type UnavailableDependency,
} from '../errors';
import type { Logger } from '../logger';
import { bearerCheck, dpopProofReason, type BearerCheck, type Counts } from '../metrics/counts';
import type { DpopMode } from './require-bearer';
import { sendError } from './respond';

/** Which scheme a request used, for the challenges of its answer. */
export type Scheme = 'none' | 'bearer' | 'dpop' | 'both';

/**
 * Logs why and answers. `auth`: the token, when it was verified before the
 * refusal (a DPoP proof refused for a valid token, a bound token sent as
 * Bearer with a DPoP header): its client_id is logged.
 */
export type Fail = (res: Response, err: unknown, scheme?: Scheme, auth?: AccessTokenAuth) => void;

/** What bearer.unavailable says, by what could not be reached. */
const UNAVAILABLE_MESSAGES: Record<UnavailableDependency | 'unknown', string> = {
  store: "cannot check a token: its kid is not loaded and the issuer's store, where it would be looked up, is unavailable",
  jwks: 'cannot check a token: its kid is not loaded and the JWKS, where it would be looked up, cannot be fetched',
  revocations: "cannot check tokens: the revocations are stale (not reloaded from the issuer's store for revocationMaxStale), so a revoked token could pass",
  revocation_list: 'cannot check tokens: the revocation list is stale (not fetched or verified for maxStale), so a revoked token could pass',
  dpop_replay_store: 'cannot check DPoP proofs: the DPoP replay store is unavailable',
  unknown: 'cannot check tokens: a dependency is unavailable',
};

/** What token.rejected says of a refused request: the address (after `trust proxy`), the method and the path, never the query. */
export function refusedRequest(req: Request): RefusedRequest {
  const url = req.originalUrl ?? req.url ?? '';
  const end = url.indexOf('?');
  const path = end === -1 ? url : url.slice(0, end);
  return { ip: req.ip, method: req.method, path: path.length > 200 ? `${path.slice(0, 200)}...` : path };
}

export interface RefusalOptions {
  realm: string;
  mode: DpopMode;
  /** The DPoP algorithms the route accepts, for its DPoP challenge. */
  algs: readonly string[];
  logger: Logger;
  rejections: RejectionLog;
  counts: Counts<BearerCheck> | undefined;
}

/** The `fail` of one requireBearer() middleware (the scope check reports its own refusals, with the token's scopes). */
export function bearerRefusals(options: RefusalOptions): Fail {
  const { realm, mode, algs, logger, rejections, counts } = options;

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
    logger.warn({ event: 'bearer.unavailable', dependency, reason: error.detail ?? error.description }, `requireBearer() ${UNAVAILABLE_MESSAGES[dependency ?? 'unknown']}; answering 503`);
  });

  return (res: Response, err: unknown, scheme: Scheme = 'bearer', auth?: AccessTokenAuth): void => {
    const error: OAuthError = toOAuthError(err);
    if (error instanceof InvalidTokenError) rejections.report(error.reason, error.detail, error.facts, refusedRequest(res.req));
    else if (error instanceof InvalidRequestError) rejections.report(bearerRequestFault(error), error.description, auth ? { client_id: auth.clientId } : {}, refusedRequest(res.req));
    else if (error instanceof InvalidDpopProofError) rejections.report(dpopProofReason(error.reason), error.detail, auth ? { client_id: auth.clientId } : {}, refusedRequest(res.req));
    else if (error.status === 503) unavailable(error);
    else if (error.status >= 500) logger.error({ event: 'error', err: error.cause ?? error }, error.detail ?? error.message);
    if (counts) counts[bearerCheck(error)]++;
    sendError(res, error, challenges(error, scheme));
  };
}
