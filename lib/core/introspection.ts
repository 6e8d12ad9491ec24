/**
 * RFC 7662 introspection and RFC 7009 revocation, as plain functions: the
 * HTTP layer authenticates the caller, reads the form and translates the
 * answer; the decisions are here.
 */
import { InvalidRequestError, InvalidTokenError, type TokenRejectionReason } from '../errors';
import type { AccessTokenClaims } from './issuer';
import { GENERATION_CLAIM, type RevocationCheck, type RevocationEvent } from './revocation';

/** Verifies a token's signature and claims (the issuer's own verifier, accepting any of its audiences). */
export type VerifyAccessToken = (token: string) => { claims: AccessTokenClaims & Record<string, unknown> } | Promise<{ claims: AccessTokenClaims & Record<string, unknown> }>;

export interface ActiveIntrospection {
  active: true;
  client_id: string;
  /** Absent for a token granted no scope. */
  scope?: string;
  exp: number;
  iat: number;
  sub: string;
  aud: string | string[];
  iss: string;
  jti: string;
  /** `DPoP` for a sender-constrained token (RFC 9449 §6.2), else `Bearer`. */
  token_type: 'Bearer' | 'DPoP';
  cnf?: { jkt: string };
}

export type IntrospectionResponse = ActiveIntrospection | { active: false };

/** Longest `token` value looked at; longer ones are inactive without parsing. */
const MAX_TOKEN_LENGTH = 8192;

const INACTIVE: { active: false } = Object.freeze({ active: false }) as { active: false };

/**
 * Why an introspection answered `{ active: false }`, for the log line
 * (introspection.inactive) and the metric: the verifier's reason for a token
 * it refused (forged, another issuer's, malformed…), or the issuer's own
 * decision on a verified one.
 */
export type InactiveReason = TokenRejectionReason | 'token_too_long' | 'expired' | 'revoked' | 'other_audience' | 'cnf_without_jkt' | 'no_permission';

/** An introspection's answer, and when inactive why (never sent: RFC 7662 §2.2 allows nothing but `active: false`). */
export interface IntrospectionResult {
  answer: IntrospectionResponse;
  inactive?: {
    reason: InactiveReason;
    /** The verifier's detail for a refused token (its values shortened and escaped). */
    detail?: string;
    /** The token's client_id, once its signature is verified. */
    tokenClientId?: string;
  };
}

export interface IntrospectOptions {
  /** Whether this caller may learn about this token (e.g. it is the token's audience); `false` → inactive. Default: yes. */
  mayIntrospect?: (claims: AccessTokenClaims & Record<string, unknown>) => boolean;
  /**
   * The issuer's clock (epoch ms; default Date.now). A token whose `exp` has
   * passed on it is inactive, whatever clock tolerance the verifier grants:
   * the tolerance is for verifiers on other machines, while the answer here
   * is the issuer's own (RFC 7662 §4), and states its `exp`.
   */
  now?: () => number;
}

/**
 * A live token → its claims (active: true); revoked, expired, forged, foreign,
 * malformed or not the caller's to see → exactly `{ active: false }` (RFC 7662
 * §2.2: nothing else). A dependency that cannot be reached (key store, stale
 * revocation list) is not an answer about the token: that error is thrown,
 * for the HTTP layer to answer 503.
 */
export async function introspect(
  token: unknown,
  verify: VerifyAccessToken,
  revocation: RevocationCheck,
  options: IntrospectOptions = {},
): Promise<IntrospectionResponse> {
  return (await introspectWithReason(token, verify, revocation, options)).answer;
}

/** introspect(), and why the answer is inactive when it is (for the log and the metric). */
export async function introspectWithReason(
  token: unknown,
  verify: VerifyAccessToken,
  revocation: RevocationCheck,
  options: IntrospectOptions = {},
): Promise<IntrospectionResult> {
  if (typeof token !== 'string' || token.length === 0 || token.length > MAX_TOKEN_LENGTH) {
    return { answer: { ...INACTIVE }, inactive: { reason: typeof token === 'string' && token.length > MAX_TOKEN_LENGTH ? 'token_too_long' : 'malformed' } };
  }
  let claims: AccessTokenClaims & Record<string, unknown>;
  try {
    ({ claims } = await verify(token));
  } catch (err) {
    if (err instanceof InvalidTokenError) return { answer: { ...INACTIVE }, inactive: { reason: err.reason, detail: err.detail, tokenClientId: err.facts.client_id } };
    throw err;
  }
  const inactive = (reason: InactiveReason): IntrospectionResult => ({ answer: { ...INACTIVE }, inactive: { reason, tokenClientId: claims.client_id } });
  if (claims.exp * 1000 <= (options.now ?? Date.now)()) return inactive('expired');
  if (revocation.isRevoked(claims) !== false) return inactive('revoked');
  if (options.mayIntrospect && !options.mayIntrospect(claims)) return inactive('other_audience');
  const cnf = claims.cnf as { jkt?: unknown } | undefined;
  const jkt = cnf && typeof cnf === 'object' && typeof cnf.jkt === 'string' ? cnf.jkt : undefined;
  // a confirmation without a key thumbprint binds the token to nothing it can prove: requireBearer() refuses it either way
  if (cnf !== undefined && jkt === undefined) return inactive('cnf_without_jkt');
  const answer: ActiveIntrospection = {
    active: true,
    client_id: claims.client_id,
    // a token granted no scope carries none (RFC 6749 §3.3: a scope is one or more scope-tokens)
    ...(claims.scope ? { scope: claims.scope } : {}),
    exp: claims.exp,
    iat: claims.iat,
    sub: claims.sub,
    aud: claims.aud,
    iss: claims.iss,
    jti: claims.jti,
    token_type: jkt ? 'DPoP' : 'Bearer',
  };
  if (jkt) answer.cnf = { jkt };
  return { answer };
}

/**
 * RFC 7009: what revoking `token` on behalf of `callerClientId` does. The
 * `token_type_hint` is ignored (only access tokens exist). A token that does
 * not verify (garbage, expired, another issuer's, unknown key) → `null`:
 * nothing to revoke, the endpoint answers 200 all the same (§2.2). A token of
 * another client → InvalidRequestError (400); it stays valid. Otherwise the
 * event to apply and persist (idempotent when already revoked).
 */
export async function revocationFor(token: unknown, callerClientId: string, verify: VerifyAccessToken): Promise<RevocationEvent | null> {
  if (typeof token !== 'string' || token.length === 0 || token.length > MAX_TOKEN_LENGTH) return null;
  let claims: AccessTokenClaims & Record<string, unknown>;
  try {
    ({ claims } = await verify(token));
  } catch (err) {
    if (err instanceof InvalidTokenError) return null;
    throw err;
  }
  if (claims.client_id !== callerClientId) {
    throw new InvalidRequestError('the token was not issued to this client', { detail: `client ${callerClientId} tried to revoke a token of ${claims.client_id}` });
  }
  // the token's generation: once the client's passes it, the generation refuses the token and its entry goes
  const gen = claims[GENERATION_CLAIM];
  return { type: 'token', jti: claims.jti, clientId: claims.client_id, exp: claims.exp, gen: typeof gen === 'number' ? gen : 0 };
}
