import type { TokenEndpointError } from './errors';
import type { ClientConfig } from './options';
import type { StoredToken } from './store';

/** What `getToken()` returns. The same object for as long as the token is cached. */
export interface AccessToken {
  readonly accessToken: string;
  readonly tokenType: string;
  readonly expiresAt: Date;
  /** The granted scope (the asked one when the answer had none). */
  readonly scope: string;
}

export interface TokenParams {
  scope?: string | string[];
  resource?: string | string[];
}

/** A token as cached: its public face and the moments that drive its use. */
export interface CachedToken {
  readonly value: AccessToken;
  readonly stored: StoredToken;
  /** `Bearer`, or the proof-of-possession scheme. */
  readonly scheme: string;
  /** Not used from this moment (expiry − skew). */
  readonly usableUntil: number;
  /** Renewed in the background from this moment. */
  readonly refreshAt: number;
}

/** One cache key: a scope set and resource. */
export class Entry {
  token: CachedToken | undefined;
  inflight: Promise<CachedToken> | undefined;
  /** When `inflight` was sent (performance.now()): past the skew, calls wait for it only so long after that. */
  inflightSince = 0;
  failures = 0;
  /** When the backoff below was set: a clock read earlier than this stepped back, and the backoff no longer counts. */
  blockedAt = 0;
  blockedUntil = 0;
  lastError: TokenEndpointError | undefined;
  lastRenewal = -Infinity;
  constructor(
    readonly key: string,
    readonly scope: string,
    readonly resource: string[],
  ) {}
}

/** A cache key that no two (scope, resource list) pairs share: a resource may hold spaces or line breaks (new URL() accepts them). */
export const entryKey = (scope: string, resource: readonly string[]): string => `${scope}\n${JSON.stringify(resource)}`;

/**
 * A token as the cache holds it, with the moments that drive its use. Skew at
 * most half the lifetime. The refresh window opens min(refreshWindow, half the
 * lifetime) before expiry; each token starts its background renewal at a
 * random point in the first quarter of what is left of the window before the
 * skew, so a fleet does not renew in step. A token of at most twice the skew
 * has no room left: it is renewed when it stops being used.
 */
export function cachedToken(config: ClientConfig, stored: StoredToken): CachedToken {
  const skew = Math.min(config.skewMs, stored.lifetime / 2);
  const usableUntil = stored.expiresAt - skew;
  const opens = stored.expiresAt - Math.min(config.refreshWindowMs, stored.lifetime / 2);
  const pop = config.pop;
  const scheme = pop && stored.tokenType.toLowerCase() === pop.scheme.toLowerCase() ? pop.scheme : 'Bearer';
  return {
    value: Object.freeze({ accessToken: stored.accessToken, tokenType: stored.tokenType, expiresAt: new Date(stored.expiresAt), scope: stored.scope }),
    stored,
    scheme,
    usableUntil,
    refreshAt: opens + 0.25 * Math.random() * Math.max(0, usableUntil - opens),
  };
}
