import {
  BEARER_REQUEST_FAULTS,
  bearerRequestFault,
  DPOP_PROOF_FAILURES,
  InsufficientScopeError,
  InvalidDpopProofError,
  InvalidRequestError,
  InvalidTokenError,
  MissingTokenError,
  TemporarilyUnavailableError,
  TooManyRequestsError,
  TOKEN_REJECTION_REASONS,
  UNAVAILABLE_DEPENDENCIES,
  UseDpopNonceError,
  type DpopProofFailure,
  type OAuthError,
  type UnavailableDependency,
} from '../errors';
import { signingKeyAt, type LoadedKey } from '../core/keys';

/**
 * Plain counters the hot paths increment (one property, no labels to hash,
 * nothing allocated); the Prometheus metrics read them when scraped.
 */
export type Counts<K extends string> = Record<K, number>;

export function zeroCounts<K extends string>(keys: readonly K[]): Counts<K> {
  const counts = {} as Counts<K>;
  for (const key of keys) counts[key] = 0;
  return counts;
}

/**
 * Why a client authentication failed, as `client.auth_failed` says: the
 * `reason` label of `ecc_token_requests_total{outcome="invalid_client"}` (a
 * fixed set; anything else counts as `other`).
 */
export const CLIENT_AUTH_FAILURE_REASONS = [
  'no_credentials',
  'unknown_client',
  'revoked_client',
  'wrong_secret',
  'expired_secret',
  'revoked_secret',
  'wrong_auth_method',
  'assertion_type_unsupported',
  'assertion_missing',
  'assertion_malformed',
  'assertion_embedded_key',
  'assertion_wrong_type',
  'assertion_crit_header',
  'assertion_jwks_uri_failed',
  'assertion_wrong_algorithm',
  'assertion_bad_signature',
  'assertion_unknown_key',
  'assertion_wrong_issuer',
  'assertion_wrong_subject',
  'assertion_client_id_mismatch',
  'assertion_wrong_audience',
  'assertion_no_exp',
  'assertion_expired',
  'assertion_lifetime_too_long',
  'assertion_bad_iat',
  'assertion_issued_in_future',
  'assertion_not_yet_valid',
  'assertion_no_jti',
  'assertion_jti_too_long',
  'assertion_replayed',
  'other',
] as const;
export type ClientAuthFailureReason = (typeof CLIENT_AUTH_FAILURE_REASONS)[number];

/** The `reason` of a refused DPoP proof, in logs and metrics: `dpop_htu`, `dpop_replayed`, ... */
export type DpopProofReason = `dpop_${DpopProofFailure}`;
export const dpopProofReason = (failure: DpopProofFailure): DpopProofReason => `dpop_${failure}`;

/** Which brute-force limit a 429 hit: the `reason` of the `rate_limited` series. */
export const RATE_LIMITS = ['address', 'client_address'] as const;
type RateLimit = (typeof RATE_LIMITS)[number];
/** The limit of a 429 (every TooManyRequestsError the issuer makes names one; the address's otherwise). */
const rateLimitOf = (error: OAuthError): RateLimit => (error instanceof TooManyRequestsError && error.limit === 'client_address' ? 'client_address' : 'address');

const OUTCOME_ONLY = ['issued', 'invalid_request', 'invalid_scope', 'invalid_target', 'unauthorized_client', 'unsupported_grant_type', 'use_dpop_nonce', 'unavailable', 'server_error'] as const;

/** What a token endpoint 503 could not reach, when known: the `reason` of its `unavailable` series. */
const TOKEN_UNAVAILABLE = ['client_jwks_uri', 'store', 'dpop_replay_store'] as const;

type Series = { outcome: string; reason?: string };
const seriesOf = <K extends string>(entries: [K, Series][]): Record<K, Series> => Object.fromEntries(entries) as Record<K, Series>;

/**
 * Token endpoint series: a key per series with its `outcome` label, and its
 * `reason` label where it has one (`invalid_client` by failure reason,
 * `invalid_dpop_proof` by the check that failed, `rate_limited` by the limit,
 * `unavailable` by what could not be reached when known).
 */
export const TOKEN_SERIES = {
  ...seriesOf(OUTCOME_ONLY.map((outcome) => [outcome, { outcome }])),
  ...seriesOf(TOKEN_UNAVAILABLE.map((reason) => [`unavailable:${reason}` as const, { outcome: 'unavailable', reason }])),
  ...seriesOf(CLIENT_AUTH_FAILURE_REASONS.map((reason) => [`invalid_client:${reason}` as const, { outcome: 'invalid_client', reason }])),
  ...seriesOf(DPOP_PROOF_FAILURES.map((f) => [`invalid_dpop_proof:${dpopProofReason(f)}` as const, { outcome: 'invalid_dpop_proof', reason: dpopProofReason(f) }])),
  ...seriesOf(RATE_LIMITS.map((limit) => [`rate_limited:${limit}` as const, { outcome: 'rate_limited', reason: limit }])),
};
export type TokenOutcome = keyof typeof TOKEN_SERIES;
export const TOKEN_OUTCOMES = Object.keys(TOKEN_SERIES) as TokenOutcome[];

const AUTH_FAILURES: ReadonlySet<string> = new Set(CLIENT_AUTH_FAILURE_REASONS);

/** The `reason` label of a failed client authentication: its detail when one of the known reasons, else `other`. */
export function clientAuthFailureReason(detail: string | undefined): ClientAuthFailureReason {
  return detail !== undefined && AUTH_FAILURES.has(detail) ? (detail as ClientAuthFailureReason) : 'other';
}

/** The series of a failed token request: its error code (invalid_client, invalid_dpop_proof and 429 by reason), with 503 and other 5xx apart. */
export function tokenOutcome(error: OAuthError): TokenOutcome {
  if (error.status === 429) return `rate_limited:${rateLimitOf(error)}`;
  if (error.status === 503) {
    if (error.detail === 'assertion_jwks_uri_unavailable') return 'unavailable:client_jwks_uri';
    const dependency = error instanceof TemporarilyUnavailableError ? error.dependency : undefined;
    return dependency === 'store' || dependency === 'dpop_replay_store' ? `unavailable:${dependency}` : 'unavailable';
  }
  if (error.status >= 500) return 'server_error';
  if (error.code === 'invalid_client') return `invalid_client:${clientAuthFailureReason(error.detail)}`;
  if (error instanceof InvalidDpopProofError) return `invalid_dpop_proof:${dpopProofReason(error.reason)}`;
  return (OUTCOME_ONLY as readonly string[]).includes(error.code) ? (error.code as TokenOutcome) : 'invalid_request';
}

/**
 * The `reason` of `ecc_token_management_requests_total{endpoint="introspection",outcome="inactive"}`:
 * a caller without the permission, a token past its exp, revoked, for
 * another API than the caller's, or refused by the verifier (forged,
 * another issuer's, malformed…; the log line has the verifier's reason).
 */
export const INACTIVE_REASONS = ['no_permission', 'expired', 'revoked', 'other_audience', 'invalid_token'] as const;
export type InactiveMetricReason = (typeof INACTIVE_REASONS)[number];
export function inactiveReason(reason: string | undefined): InactiveMetricReason {
  return reason === 'no_permission' || reason === 'expired' || reason === 'revoked' || reason === 'other_audience' ? reason : 'invalid_token';
}

/** How a revocation (RFC 7009) or introspection (RFC 7662) request ended, besides its answer. */
const MANAGEMENT_PLAIN = ['invalid_request', 'unavailable', 'server_error'] as const;
type ManagementEndpoint = 'revocation' | 'introspection';
/**
 * What a revocation or introspection 503 could not reach, when known: the
 * `reason` of its `unavailable` series (a client's jwks_uri, for a
 * private_key_jwt caller; the issuer's store; the revocations, stale past
 * revocationMaxStale); another 503 (an issuer shut down) has none.
 */
const MANAGEMENT_UNAVAILABLE = ['client_jwks_uri', 'store', 'revocations'] as const;
type ManagementError =
  | (typeof MANAGEMENT_PLAIN)[number]
  | `unavailable:${(typeof MANAGEMENT_UNAVAILABLE)[number]}`
  | `invalid_client:${ClientAuthFailureReason}`
  | `rate_limited:${RateLimit}`;
export type ManagementCheck = `revocation_${'ok' | ManagementError}` | `introspection_${'active' | `inactive:${InactiveMetricReason}` | ManagementError}`;
type ManagementSeries = { endpoint: string; outcome: string; reason?: string };

function managementErrors(endpoint: ManagementEndpoint): [ManagementCheck, ManagementSeries][] {
  return [
    ...MANAGEMENT_PLAIN.map((outcome): [ManagementCheck, ManagementSeries] => [`${endpoint}_${outcome}`, { endpoint, outcome }]),
    ...MANAGEMENT_UNAVAILABLE.map((reason): [ManagementCheck, ManagementSeries] => [`${endpoint}_unavailable:${reason}`, { endpoint, outcome: 'unavailable', reason }]),
    ...CLIENT_AUTH_FAILURE_REASONS.map((reason): [ManagementCheck, ManagementSeries] => [`${endpoint}_invalid_client:${reason}`, { endpoint, outcome: 'invalid_client', reason }]),
    ...RATE_LIMITS.map((reason): [ManagementCheck, ManagementSeries] => [`${endpoint}_rate_limited:${reason}`, { endpoint, outcome: 'rate_limited', reason }]),
  ];
}

/**
 * Each series of `ecc_token_management_requests_total`, with its `endpoint`
 * and `outcome` labels, and its `reason` where it has one (`invalid_client`
 * by failure reason, `rate_limited` by limit, `unavailable` by what could
 * not be reached when known, introspection's `inactive` by why); the others
 * have none (the same as `""` in PromQL).
 */
export const MANAGEMENT_SERIES = Object.fromEntries([
  ['revocation_ok', { endpoint: 'revocation', outcome: 'ok' }],
  ...managementErrors('revocation'),
  ['introspection_active', { endpoint: 'introspection', outcome: 'active' }],
  ...INACTIVE_REASONS.map((reason) => [`introspection_inactive:${reason}`, { endpoint: 'introspection', outcome: 'inactive', reason }]),
  ...managementErrors('introspection'),
]) as Record<ManagementCheck, ManagementSeries>;
export const MANAGEMENT_CHECKS = Object.keys(MANAGEMENT_SERIES) as ManagementCheck[];

/** The series of a refused revocation or introspection request: a failed client authentication (by reason), 429 (by limit), 503 (by what could not be reached, when known), other 5xx, or any other 4xx. */
export function managementCheck(endpoint: ManagementEndpoint, error: OAuthError): ManagementCheck {
  if (error.status === 429) return `${endpoint}_rate_limited:${rateLimitOf(error)}`;
  if (error.status === 503) {
    if (error.detail === 'assertion_jwks_uri_unavailable') return `${endpoint}_unavailable:client_jwks_uri`;
    const dependency = error instanceof TemporarilyUnavailableError ? error.dependency : undefined;
    return dependency === 'store' || dependency === 'revocations' ? `${endpoint}_unavailable:${dependency}` : `${endpoint}_unavailable`;
  }
  if (error.status >= 500) return `${endpoint}_server_error`;
  if (error.code === 'invalid_client') return `${endpoint}_invalid_client:${clientAuthFailureReason(error.detail)}`;
  return `${endpoint}_invalid_request`;
}
/** The series of a 503 whose cause is known: `unavailable_store`, `unavailable_jwks`, ... */
type UnavailableCheck = `unavailable_${UnavailableDependency}`;

/** Bearer checks: a key per series, with its `outcome` and `reason` labels (a fixed set: no client_id, no token). */
export const BEARER_SERIES = {
  accepted: { outcome: 'accepted', reason: '' },
  missing_token: { outcome: 'missing_token', reason: '' },
  invalid_request: { outcome: 'invalid_request', reason: 'invalid_request' },
  ...(Object.fromEntries(BEARER_REQUEST_FAULTS.map((fault) => [fault, { outcome: 'invalid_request', reason: fault }])) as Record<
    (typeof BEARER_REQUEST_FAULTS)[number],
    { outcome: 'invalid_request'; reason: string }
  >),
  insufficient_scope: { outcome: 'insufficient_scope', reason: 'insufficient_scope' },
  use_dpop_nonce: { outcome: 'use_dpop_nonce', reason: '' },
  unavailable: { outcome: 'unavailable', reason: '' },
  server_error: { outcome: 'server_error', reason: '' },
  ...(Object.fromEntries(TOKEN_REJECTION_REASONS.map((reason) => [reason, { outcome: 'invalid_token', reason }])) as Record<
    (typeof TOKEN_REJECTION_REASONS)[number],
    { outcome: 'invalid_token'; reason: string }
  >),
  ...(Object.fromEntries(DPOP_PROOF_FAILURES.map((f) => [dpopProofReason(f), { outcome: 'invalid_dpop_proof', reason: dpopProofReason(f) }])) as Record<
    DpopProofReason,
    { outcome: 'invalid_dpop_proof'; reason: string }
  >),
  ...(Object.fromEntries(UNAVAILABLE_DEPENDENCIES.map((d) => [`unavailable_${d}`, { outcome: 'unavailable', reason: d }])) as Record<
    UnavailableCheck,
    { outcome: 'unavailable'; reason: string }
  >),
};
export type BearerCheck = keyof typeof BEARER_SERIES;
export const BEARER_CHECKS = Object.keys(BEARER_SERIES) as BearerCheck[];

/** The series a refused bearer check counts in. */
export function bearerCheck(error: OAuthError): BearerCheck {
  if (error instanceof InvalidTokenError) return error.reason;
  if (error instanceof InsufficientScopeError) return 'insufficient_scope';
  if (error instanceof InvalidDpopProofError) return dpopProofReason(error.reason);
  if (error instanceof UseDpopNonceError) return 'use_dpop_nonce';
  if (error instanceof InvalidRequestError) return bearerRequestFault(error);
  if (error instanceof MissingTokenError) return 'missing_token';
  if (error.status !== 503) return 'server_error';
  return error instanceof TemporarilyUnavailableError && error.dependency !== undefined ? `unavailable_${error.dependency}` : 'unavailable';
}

/** The key that signs now (as KeyRing.current() picks it) and how long it has been signing, without side effects. */
export function signingKeyAge(keys: Iterable<LoadedKey>, now: number): { kid: string; seconds: number } | undefined {
  const best = signingKeyAt(keys, now);
  return best && { kid: best.kid, seconds: (now - best.activatesAt) / 1000 };
}
