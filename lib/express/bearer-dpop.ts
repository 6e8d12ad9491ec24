/**
 * requireBearer()'s DPoP scheme (RFC 9449 §7): `Authorization: DPoP <token>`,
 * the token checked as for Bearer (cached), then this request's proof (never
 * cached) against the token's key, its hash, and this request's method and URL.
 */
import type { NextFunction, Request, Response } from 'express';
import { requestHtu, verifyDpopProof, type CheckedDpopProof, type DpopVerifyOptions, type ReplayStore, type VerifiedDpopProof } from '../core/dpop';
import type { AccessTokenAuth, AccessTokenVerifier } from '../core/verifier';
import { InvalidTokenError } from '../errors';
import { accessTokenHash } from '../jwt/dpop-proof';
import type { Fail, Scheme } from './bearer-refusals';

/**
 * The DPoP proof each request passed, for the next requireBearer() on its
 * way (`app.use('/api', requireBearer())` and a route's own with a scope),
 * and the replay stores that spent its jti: a later layer on the same store
 * takes it as checked (the same request is no replay); one on another store
 * (say Redis after the process's memory) checks it and spends its jti there
 * too, or a proof replayed to another instance would pass it unasked.
 */
const checkedProofs = new WeakMap<Request, { checked: CheckedDpopProof; stores: Set<ReplayStore> }>();

/** The four ways a token and the scheme or proof it came with disagree, each its own reason (two are signs of a stolen token). */
export type BindingReason = 'dpop_bound_as_bearer' | 'dpop_key_mismatch' | 'dpop_unbound_token' | 'dpop_required';

/** invalid_token for a token sent with the wrong scheme, or a proof not made with its key; `auth`: the token, when verified (its client_id is logged). */
export const bindingError = (description: string, reason: BindingReason, detail: string, auth?: AccessTokenAuth): InvalidTokenError =>
  new InvalidTokenError(description, { reason, detail, facts: auth ? { client_id: auth.clientId } : undefined });

export interface DpopRequestOptions {
  verifier: AccessTokenVerifier;
  /** `null` when the keys are loaded, else a promise to wait for first. */
  pending: (() => Promise<unknown> | null) | undefined;
  /** Base URL the request's `htu` is built from (with `req.originalUrl`). */
  publicUrl: string;
  /** Replay store, window, nonces; `status` 401. */
  verify: DpopVerifyOptions;
  fail: Fail;
  /** The scope check and hand-over, as for Bearer. */
  accept: (req: Request, res: Response, next: NextFunction, auth: AccessTokenAuth, scheme: Scheme) => void;
}

/** The DPoP path of one requireBearer() middleware: called with the token of a `DPoP` header and its cached auth, if any. */
export function dpopRequests(options: DpopRequestOptions): (req: Request, res: Response, next: NextFunction, token: string, known: AccessTokenAuth | undefined) => void {
  const { verifier, pending, publicUrl, verify: dpop, fail, accept } = options;

  /** `ath` of a verified token, computed once per token: the verifier's cache hands back the same auth object. */
  const athByAuth = new WeakMap<AccessTokenAuth, string>();
  const athOf = (auth: AccessTokenAuth): string => {
    let ath = athByAuth.get(auth);
    if (ath === undefined) athByAuth.set(auth, (ath = accessTokenHash(auth.token)));
    return ath;
  };

  /** `Authorization: DPoP <token>`: the token as for Bearer (cached), then this request's proof (never cached). */
  return (req, res, next, token, known) => {
    const withAuth = (auth: AccessTokenAuth): void => {
      const jkt = (auth.claims.cnf as { jkt?: unknown } | undefined)?.jkt;
      if (typeof jkt !== 'string') return fail(res, bindingError('the access token is not DPoP-bound; send it as Bearer', 'dpop_unbound_token', 'DPoP scheme with a token without cnf.jkt', auth), 'dpop');
      const proof = req.headers.dpop;
      const seen = checkedProofs.get(req);
      const checkedBefore = seen?.stores.has(dpop.replay) ? seen.checked : undefined;
      let verified;
      try {
        verified = verifyDpopProof(
          proof,
          { htm: req.method, htu: requestHtu(publicUrl, req.originalUrl), accessToken: token, accessTokenHash: athOf(auth), jkt, checkedBefore },
          dpop,
        );
      } catch (err) {
        return fail(res, err instanceof InvalidTokenError ? bindingError(err.description, 'dpop_key_mismatch', err.detail ?? 'dpop proof key is not cnf.jkt', auth) : err, 'dpop', auth);
      }
      const passed = (result: VerifiedDpopProof): void => {
        if (typeof proof === 'string') {
          if (seen?.checked.proof === proof) seen.stores.add(dpop.replay);
          else checkedProofs.set(req, { checked: { proof, verified: result }, stores: new Set([dpop.replay]) });
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
}
