/**
 * OAuth 2.0 errors (RFC 6749 §5.2, RFC 6750 §3.1). Each class fixes its code
 * and HTTP status. `description` is what a client may see; `detail` is for
 * operators only and never leaves the server.
 */

/** Characters RFC 6749 §5.2 allows in `error_description`: %x20-21 / %x23-5B / %x5D-7E. */
const DESCRIPTION_UNSAFE = /[^\x20\x21\x23-\x5b\x5d-\x7e]/g;

export function safeDescription(text: string): string {
  return text.replace(DESCRIPTION_UNSAFE, '?');
}

/** Quotes a value for an auth-param (RFC 9110 §5.6.4 quoted-string), dropping controls. */
export function quote(value: string): string {
  return `"${value.replace(/[^\x20-\x7e]/g, '').replace(/["\\]/g, '\\$&')}"`;
}

export interface OAuthErrorOptions {
  /** Operator-facing reason; logged, never sent. */
  detail?: string;
  cause?: unknown;
}

export abstract class OAuthError extends Error {
  /** The RFC error code sent as `error`. */
  abstract readonly code: string;
  readonly status: number;
  /** The public `error_description`. */
  readonly description: string;
  readonly detail: string | undefined;
  /** Extra response headers (e.g. `Allow`, `Retry-After`). */
  readonly headers: Record<string, string>;

  protected constructor(status: number, description: string, options: OAuthErrorOptions = {}, headers: Record<string, string> = {}) {
    super(options.detail ?? description, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = status;
    this.description = safeDescription(description);
    this.detail = options.detail;
    this.headers = headers;
  }

  toJSON(): { error: string; error_description: string } {
    return { error: this.code, error_description: this.description };
  }
}

/**
 * 400 by default; also used with 405, 413 and 415 for requests the endpoint
 * cannot take. `detail`, when a machine-readable code (`two_auth_methods`,
 * `missing_grant_type`, `body_too_large`…), is the `reason` of the refusal's
 * log line; the wire says `invalid_request` whatever it is.
 */
export class InvalidRequestError extends OAuthError {
  readonly code = 'invalid_request';
  /** What the log line of the refusal adds (e.g. the client_id a request named); never sent. */
  readonly facts: Readonly<Record<string, string>>;
  constructor(description: string, options: OAuthErrorOptions & { status?: number; headers?: Record<string, string>; facts?: Record<string, string> } = {}) {
    super(options.status ?? 400, description, options, options.headers);
    this.facts = options.facts ?? {};
  }
}

/** 401. The description is fixed: unknown client, wrong secret and revoked client look the same. */
export class InvalidClientError extends OAuthError {
  readonly code = 'invalid_client';
  constructor(options: OAuthErrorOptions = {}) {
    super(401, 'client authentication failed', options);
  }
}

export class UnauthorizedClientError extends OAuthError {
  readonly code = 'unauthorized_client';
  constructor(description = 'the client is not allowed to use this grant type', options: OAuthErrorOptions = {}) {
    super(400, description, options);
  }
}

export class UnsupportedGrantTypeError extends OAuthError {
  readonly code = 'unsupported_grant_type';
  constructor(description = 'grant_type must be client_credentials', options: OAuthErrorOptions = {}) {
    super(400, description, options);
  }
}

export class InvalidScopeError extends OAuthError {
  readonly code = 'invalid_scope';
  constructor(description: string, options: OAuthErrorOptions = {}) {
    super(400, description, options);
  }
}

/** 429: too many failed client authentications. */
export class TooManyRequestsError extends OAuthError {
  readonly code = 'invalid_request';
  readonly retryAfter: number;
  /** The limit that refused it, for logs and metrics: the address's (any client_id), or one client_id's from that address. */
  readonly limit: 'address' | 'client_address' | undefined;
  constructor(retryAfterSeconds: number, options: OAuthErrorOptions & { limit?: 'address' | 'client_address' } = {}) {
    const retryAfter = Math.max(1, Math.ceil(retryAfterSeconds));
    super(429, 'too many failed client authentication attempts; retry later', options, { 'Retry-After': String(retryAfter) });
    this.retryAfter = retryAfter;
    this.limit = options.limit;
  }
}

export class ServerError extends OAuthError {
  readonly code = 'server_error';
  constructor(options: OAuthErrorOptions = {}) {
    super(500, 'internal server error', options);
  }
}

/**
 * What could not be reached when a 503 is answered: the metric label
 * `reason` of the bearer checks' `unavailable`. `store`: the issuer's store
 * (at a protected route: to look up an unknown kid); `revocations`: the
 * issuer's revocations were not reloaded from its store for
 * revocationMaxStale; `revocation_list`: a standalone verifier's list is stale.
 */
export type UnavailableDependency = 'store' | 'jwks' | 'revocations' | 'revocation_list' | 'dpop_replay_store';
export const UNAVAILABLE_DEPENDENCIES: readonly UnavailableDependency[] = ['store', 'jwks', 'revocations', 'revocation_list', 'dpop_replay_store'];

/** 503 when a dependency (store, JWKS) cannot be reached; `Retry-After` in seconds (default 5). */
export class TemporarilyUnavailableError extends OAuthError {
  readonly code = 'temporarily_unavailable';
  readonly retryAfter: number;
  /** What could not be reached, when known. */
  readonly dependency: UnavailableDependency | undefined;
  constructor(
    description = 'the service is temporarily unavailable',
    options: OAuthErrorOptions & { retryAfter?: number; dependency?: UnavailableDependency } = {},
  ) {
    const retryAfter = Math.max(1, Math.ceil(options.retryAfter ?? 5));
    super(503, description, options, { 'Retry-After': String(retryAfter) });
    this.retryAfter = retryAfter;
    this.dependency = options.dependency;
  }
}

/**
 * A store could not be reached or used: connection refused, reset or timed
 * out, the database shutting down, a file that cannot be opened or written,
 * a full disk. Stores throw it (they know their drivers); the issuer answers
 * 503 while it lasts. Not an OAuthError: it is about the server, not the request.
 */
export class StoreUnavailableError extends Error {
  readonly code = 'store_unavailable';
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'StoreUnavailableError';
  }
}

// ---- RFC 6750: protected resources ----

/** 401 with no `error` attribute: the request carried no bearer token at all. */
export class MissingTokenError extends OAuthError {
  readonly code = 'unauthorized';
  constructor() {
    super(401, 'a bearer access token is required');
  }
}

/** Why an access token was refused: decided by the verifier, logged as `token.rejected`, never sent. */
export const TOKEN_REJECTION_REASONS = [
  'malformed',
  'wrong_alg',
  'wrong_typ',
  'missing_claim',
  'invalid_claim',
  'wrong_issuer',
  'wrong_audience',
  'unknown_kid',
  'bad_signature',
  'expired',
  'not_yet_valid',
  /** A DPoP-bound token (cnf.jkt) sent with the Bearer scheme: a copied token, or a client that lost its key. */
  'dpop_bound_as_bearer',
  /** A DPoP proof signed by another key than the token's cnf.jkt: someone else's token with their own key. */
  'dpop_key_mismatch',
  /** The DPoP scheme with a token that is not DPoP-bound. */
  'dpop_unbound_token',
  /** The Bearer scheme on a route that requires DPoP (`dpop: 'required'`): usually a client or route misconfigured. */
  'dpop_required',
  /** Revoked: the token itself (RFC 7009), its client, or every token of its client issued before a cut-off. */
  'revoked',
] as const;
export type TokenRejectionReason = (typeof TOKEN_REJECTION_REASONS)[number];

/**
 * Why requireBearer() answered 400 `invalid_request` (the error's detail):
 * token.rejected's `reason` and the `reason` of
 * `ecc_bearer_checks_total{outcome="invalid_request"}`; the wire says
 * `invalid_request` for each.
 */
export const BEARER_REQUEST_FAULTS = [
  /** `access_token` in the query string, no Authorization header. */
  'token_in_url',
  /** `access_token` in a body parsed before requireBearer(), no Authorization header. */
  'token_in_body',
  /** `access_token` in the query or the body and an Authorization header too, or in both the query and the body (RFC 6750 §2: one method per request). */
  'multiple_tokens',
  /** Two Authorization headers. */
  'repeated_authorization',
  /** A Bearer or DPoP header without a token, or with one that is not a b64token (quotes, commas, several tokens). */
  'malformed_header',
  /** A DPoP-bound token sent with the Bearer scheme and a DPoP header. */
  'both_schemes',
] as const;
export type BearerRequestFault = (typeof BEARER_REQUEST_FAULTS)[number];

const BEARER_FAULTS: ReadonlySet<string> = new Set(BEARER_REQUEST_FAULTS);

/** Why requireBearer() refused a request with `error`: its detail when one of BEARER_REQUEST_FAULTS, else `invalid_request`. */
export function bearerRequestFault(error: InvalidRequestError): BearerRequestFault | 'invalid_request' {
  return error.detail !== undefined && BEARER_FAULTS.has(error.detail) ? (error.detail as BearerRequestFault) : 'invalid_request';
}

/**
 * What may be logged about a refused token: values of its header and claims
 * and what was expected instead, never the token or its signature. Values
 * taken from a token whose signature was not (or not yet) checked are
 * shortened to 200 characters.
 */
export interface TokenRejectionFacts {
  expected?: string | readonly string[];
  received?: string | readonly string[] | number;
  /** The claim that is missing or has the wrong type. */
  claim?: string;
  kid?: string;
  alg?: string;
  /** The token's client_id, once its signature is verified. */
  client_id?: string;
  /** The client_id a token names whose signature was not (or not yet) verified: may be made up. */
  claimed_client_id?: string;
}

const NO_FACTS: TokenRejectionFacts = Object.freeze({});

export interface InvalidTokenOptions extends OAuthErrorOptions {
  /** Default `malformed`. */
  reason?: TokenRejectionReason;
  facts?: TokenRejectionFacts;
}

/** 401. The description is fixed (`expired` has its own); the reason and facts are for operators only. */
export class InvalidTokenError extends OAuthError {
  readonly code = 'invalid_token';
  readonly reason: TokenRejectionReason;
  readonly facts: TokenRejectionFacts;
  constructor(description = 'the access token is invalid', options: InvalidTokenOptions = {}) {
    super(401, description, options);
    this.reason = options.reason ?? 'malformed';
    this.facts = options.facts ?? NO_FACTS;
  }
}

export class InsufficientScopeError extends OAuthError {
  readonly code = 'insufficient_scope';
  readonly requiredScopes: string[];
  constructor(requiredScopes: string[], options: OAuthErrorOptions = {}) {
    super(403, 'the access token lacks a required scope', options);
    this.requiredScopes = requiredScopes;
  }
}

/**
 * `WWW-Authenticate` for the token endpoint's 401 (RFC 6749 §5.2), naming the
 * error as the body does: clients that read a 401's challenge rather than its
 * body (oauth4webapi, openid-client) see `invalid_client` too; Basic clients
 * ignore parameters they do not know (RFC 7235 §2.1).
 */
export function basicChallenge(realm: string): string {
  return `Basic realm=${quote(realm)}, error="invalid_client"`;
}

/** `WWW-Authenticate` for a protected resource (RFC 6750 §3). */
export function bearerChallenge(realm: string, error?: OAuthError): string {
  let challenge = `Bearer realm=${quote(realm)}`;
  if (!error || error instanceof MissingTokenError) return challenge;
  challenge += `, error=${quote(error.code)}, error_description=${quote(error.description)}`;
  if (error instanceof InsufficientScopeError) challenge += `, scope=${quote(error.requiredScopes.join(' '))}`;
  return challenge;
}

/**
 * `WWW-Authenticate` DPoP challenge (RFC 9449 §7.1): the accepted `algs`,
 * and the error when there is one; same quoting and charset as Bearer.
 */
export function dpopChallenge(algs: readonly string[], error?: OAuthError): string {
  let challenge = `DPoP algs=${quote(algs.join(' '))}`;
  if (!error || error instanceof MissingTokenError) return challenge;
  challenge += `, error=${quote(error.code)}, error_description=${quote(error.description)}`;
  if (error instanceof InsufficientScopeError) challenge += `, scope=${quote(error.requiredScopes.join(' '))}`;
  return challenge;
}

/** A store outage becomes a 503; anything else that is not an OAuthError a generic 500. Messages stay private. */
export function toOAuthError(err: unknown): OAuthError {
  if (err instanceof OAuthError) return err;
  if (err instanceof StoreUnavailableError) return new TemporarilyUnavailableError(undefined, { detail: err.message, cause: err, dependency: 'store' });
  return new ServerError({ detail: err instanceof Error ? err.message : String(err), cause: err });
}

// ---- RFC 9449: DPoP ----

/** Why a DPoP proof was refused; operators see it, clients get the matching description. */
export const DPOP_PROOF_FAILURES = [
  'missing',
  'multiple',
  'malformed',
  'typ',
  'alg',
  'jwk',
  'claims',
  'htm',
  'htu',
  'iat_too_old',
  'iat_in_future',
  'ath',
  'signature',
  'replayed',
] as const;
export type DpopProofFailure = (typeof DPOP_PROOF_FAILURES)[number];

const DPOP_PROOF_DESCRIPTIONS: Record<DpopProofFailure, string> = {
  missing: 'a DPoP proof is required',
  multiple: 'exactly one DPoP proof is allowed',
  malformed: 'the DPoP proof is not a compact JWS',
  typ: 'the DPoP proof typ must be dpop+jwt',
  alg: 'the DPoP proof algorithm is not supported',
  jwk: 'the DPoP proof jwk must be a supported public key',
  claims: 'the DPoP proof lacks a valid jti, htm, htu or iat',
  htm: 'the DPoP proof htm does not match the request method',
  htu: 'the DPoP proof htu does not match the request URI',
  iat_too_old: 'the DPoP proof is too old',
  iat_in_future: 'the DPoP proof is issued in the future',
  ath: 'the DPoP proof ath does not match the access token',
  signature: 'the DPoP proof signature is invalid',
  replayed: 'the DPoP proof was already used',
};

/**
 * RFC 9449 §5, §7.1: the DPoP proof failed a check. 400 at the token
 * endpoint, 401 at a protected resource: the caller picks `status`.
 */
export class InvalidDpopProofError extends OAuthError {
  readonly code = 'invalid_dpop_proof';
  readonly reason: DpopProofFailure;
  /** `description`: the `error_description` when the reason's own would mislead (a proof too long is not "not a compact JWS"). */
  constructor(reason: DpopProofFailure, options: OAuthErrorOptions & { status?: number; description?: string } = {}) {
    super(options.status ?? 400, options.description ?? DPOP_PROOF_DESCRIPTIONS[reason], { ...options, detail: options.detail ?? `dpop proof: ${reason}` });
    this.reason = reason;
  }
}

/**
 * RFC 9449 §8, §9: the proof lacks the server's current nonce. Carries one
 * `DPoP-Nonce` header with the nonce to use; 400 at the token endpoint, 401
 * at a protected resource.
 */
export class UseDpopNonceError extends OAuthError {
  readonly code = 'use_dpop_nonce';
  readonly nonce: string;
  constructor(nonce: string, options: OAuthErrorOptions & { status?: number; stale?: boolean } = {}) {
    super(
      options.status ?? 400,
      options.stale ? 'the DPoP nonce is stale or unknown; use the one in DPoP-Nonce' : 'a DPoP nonce is required; use the one in DPoP-Nonce',
      options,
      { 'DPoP-Nonce': nonce },
    );
    this.nonce = nonce;
  }
}

// ---- RFC 8707: resource indicators ----

/** 400: the `resource` asked for is invalid, unknown, not allowed for the client, or given more than once. */
export class InvalidTargetError extends OAuthError {
  readonly code = 'invalid_target';
  constructor(description = 'the requested resource is invalid or not allowed', options: OAuthErrorOptions = {}) {
    super(400, description, options);
  }
}
