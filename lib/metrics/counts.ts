import {
  DPOP_PROOF_FAILURES,
  InsufficientScopeError,
  InvalidDpopProofError,
  InvalidRequestError,
  InvalidTokenError,
  MissingTokenError,
  TemporarilyUnavailableError,
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

export const TOKEN_OUTCOMES = [
  'issued',
  'invalid_client',
  'invalid_request',
  'invalid_scope',
  'unauthorized_client',
  'unsupported_grant_type',
  'invalid_dpop_proof',
  'use_dpop_nonce',
  'rate_limited',
  'unavailable',
  'server_error',
] as const;
export type TokenOutcome = (typeof TOKEN_OUTCOMES)[number];

/** The outcome of a failed token request: its error code, with 429, 503 and other 5xx apart. */
export function tokenOutcome(error: OAuthError): TokenOutcome {
  if (error.status === 429) return 'rate_limited';
  if (error.status === 503) return 'unavailable';
  if (error.status >= 500) return 'server_error';
  return (TOKEN_OUTCOMES as readonly string[]).includes(error.code) ? (error.code as TokenOutcome) : 'invalid_request';
}

/** The `reason` of a refused DPoP proof, in logs and metrics: `dpop_htu`, `dpop_replayed`, ... */
export type DpopProofReason = `dpop_${DpopProofFailure}`;
export const dpopProofReason = (failure: DpopProofFailure): DpopProofReason => `dpop_${failure}`;
/** The series of a 503 whose cause is known: `unavailable_store`, `unavailable_jwks`, ... */
type UnavailableCheck = `unavailable_${UnavailableDependency}`;

/** Bearer checks: a key per series, with its `outcome` and `reason` labels (a fixed set: no client_id, no token). */
export const BEARER_SERIES = {
  accepted: { outcome: 'accepted', reason: '' },
  missing_token: { outcome: 'missing_token', reason: '' },
  invalid_request: { outcome: 'invalid_request', reason: 'invalid_request' },
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
  if (error instanceof InvalidRequestError) return 'invalid_request';
  if (error instanceof MissingTokenError) return 'missing_token';
  if (error.status !== 503) return 'server_error';
  return error instanceof TemporarilyUnavailableError && error.dependency !== undefined ? `unavailable_${error.dependency}` : 'unavailable';
}

/** The key that signs now (as KeyRing.current() picks it) and how long it has been signing, without side effects. */
export function signingKeyAge(keys: Iterable<LoadedKey>, now: number): { kid: string; seconds: number } | undefined {
  const best = signingKeyAt(keys, now);
  return best && { kid: best.kid, seconds: (now - best.activatesAt) / 1000 };
}
