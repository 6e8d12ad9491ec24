/**
 * Client authentication at one issuer's endpoints (token, revocation,
 * introspection): found clients cached briefly, the brute-force limits, and
 * the log lines of failures and lockouts. The checks themselves are
 * client-auth.ts's (secrets) and client-assertion.ts's (private_key_jwt).
 */
import { LRUCache } from 'lru-cache';
import { InvalidClientError, OAuthError, StoreUnavailableError, TemporarilyUnavailableError, TooManyRequestsError } from '../errors';
import { writesDebug, type Logger } from '../logger';
import type { ClientRecord, Store } from '../stores/types';
import { addressKey, type FailedAuthLimiter, type FailureCount, type FailureLimit } from './brute-force';
import { AssertionRejectedError, type ClientAssertionVerifier } from './client-assertion';
import { authenticateClient, EndedSecretError, loggedClientId, type ClientCredentials } from './client-auth';
import { JwksUriUnavailableError } from './client-jwks-uri';
import type { ThrottledLog } from './refusal-log';
import { asTemporarilyUnavailable, type StoreHealth } from './store-health';
import { visibleFields } from '../shared/visible-text';

/**
 * Failed authentications decided before a registered client was found: their
 * client_id is whatever the request said, so it does not key a log window.
 */
const BEFORE_CLIENT_LOOKUP = new Set(['no_credentials', 'unknown_client', 'assertion_type_unsupported', 'assertion_missing', 'assertion_malformed', 'assertion_wrong_subject']);

/** The endpoints that authenticate clients, as client.auth_failed and client.rate_limited name them. */
export type ClientAuthEndpoint = 'token' | 'revocation' | 'introspection';

/** An address as the brute-force limits count it (an IPv6 address by its /64). */
const addressOf = (ip: string | undefined): string => (ip === undefined ? '' : addressKey(ip));

/** The issuer's start-up, as authentication waits for it. */
export interface IssuerReadiness {
  /** True once ready() has finished. */
  readonly isReady: boolean;
  ready(): Promise<void>;
}

export class IssuerClientAuth {
  /** The store as opened: its calls here report to storeHealth inline (the hot path). */
  private store: Store | undefined;
  /** Found clients, briefly: a revoke reaches every instance within `clientCacheTtl`. */
  private clientCache: LRUCache<string, ClientRecord> | undefined;

  constructor(
    private readonly issuer: IssuerReadiness,
    /** Seconds a found client is kept (`clientCacheTtl`); undefined: 2, or 0 with a store that caches clients itself. */
    private readonly cacheTtl: number | undefined,
    private readonly storeHealth: StoreHealth,
    /** private_key_jwt assertions: keys imported once per client key set, jtis single use in the store. */
    private readonly assertions: ClientAssertionVerifier,
    private readonly limiter: FailedAuthLimiter | undefined,
    /** The issuer's throttled refusal lines (keys: event, reason, client, address). */
    private readonly refusalLog: ThrottledLog,
    private readonly logger: Logger,
    private readonly now: () => number,
  ) {}

  /** Called by the issuer's ready() once the store is open. */
  open(store: Store): void {
    // a store that keeps and invalidates found clients itself needs no second cache
    const ttl = this.cacheTtl ?? (store.cachesClients ? 0 : 2);
    if (ttl > 0) this.clientCache = new LRUCache({ max: 10_000, ttl: ttl * 1000 });
    this.store = store;
  }

  /** Forgets every found client: something was revoked, here or on another instance. */
  forgetClients(): void {
    this.clientCache?.clear();
  }

  /** Forgets one found client: it was updated through this issuer, and counts from its next request. */
  forgetClient(clientId: string): void {
    this.clientCache?.delete(clientId);
  }

  private async findFresh(clientId: string): Promise<ClientRecord | null> {
    let client: ClientRecord | null;
    try {
      client = await this.store!.findClient(clientId);
    } catch (err) {
      this.storeHealth.failed(err);
      throw err;
    }
    this.storeHealth.succeeded();
    if (client && this.clientCache) this.clientCache.set(clientId, client);
    return client;
  }

  /** Checks the credentials against a cached record first, then (on failure) against the store. */
  private async check(credentials: ClientCredentials): Promise<ClientRecord> {
    const now = new Date(this.now());
    const cached = this.clientCache?.get(credentials.clientId);
    if (cached) {
      try {
        return await authenticateClient(async () => cached, credentials, now, this.assertions);
      } catch (err) {
        if (!(err instanceof InvalidClientError) || err.detail === 'assertion_replayed') throw err;
        // a rotated secret or an added key may be newer than the cached record
      }
    }
    return authenticateClient((id) => this.findFresh(id), credentials, now, this.assertions);
  }

  /** `source`: the caller's address, and the endpoint asked (for the log lines; `token` by default). */
  async authenticate(credentials: ClientCredentials, source: { ip?: string; endpoint?: ClientAuthEndpoint } = {}): Promise<ClientRecord> {
    const endpoint = source.endpoint ?? 'token';
    // a store outage is a 503 (already reported to storeHealth by the store call that failed)
    if (!this.issuer.isReady) await this.issuer.ready().catch((err: unknown) => Promise.reject(asTemporarilyUnavailable(err)));
    // only what the caller controls can refuse it: its address, and this client_id from its address
    const limit = this.limiter && (await this.limiter.check(credentials.clientId, source.ip));
    if (limit && limit.retryAfterMs > 0) throw this.rateLimited(credentials, source.ip, limit, endpoint);
    try {
      const client = await this.check(credentials);
      if (limit && limit.pairFailures > 0) await this.limiter!.succeeded(credentials.clientId, source.ip);
      return client;
    } catch (err) {
      if (err instanceof StoreUnavailableError) throw asTemporarilyUnavailable(err);
      // the client's key host is down: a 503, neither a failed authentication nor counted as one
      if (err instanceof TemporarilyUnavailableError && err.cause instanceof JwksUriUnavailableError) {
        this.jwksUriUnavailable(err.cause, credentials, source.ip);
        throw err;
      }
      if (err instanceof OAuthError) {
        const facts = err instanceof AssertionRejectedError || err instanceof EndedSecretError ? err.facts : undefined;
        this.authFailed({ event: 'client.auth_failed', endpoint, client_id: loggedClientId(credentials.clientId), method: credentials.method, ip: source.ip, reason: err.detail, ...facts });
        // an assertion refused only because the client's key set could not be fetched again yet guesses nothing
        const counts = !(err instanceof AssertionRejectedError) || err.countsAsFailure;
        if (err instanceof InvalidClientError && this.limiter && counts) {
          const counted = await this.countFailure(credentials.clientId, source.ip, err.detail !== 'unknown_client');
          // one of a burst that passed the check together, past the limit once counted: answered as the check would have
          if (counted.retryAfterMs > 0) throw this.rateLimited(credentials, source.ip, counted, endpoint);
        }
      }
      throw err;
    }
  }

  /**
   * `client.jwks_uri_unavailable`: at warn for the first request refused in
   * an outage of that jwks_uri, at debug for the others (an outage lasts at
   * least a cooldown, and any caller naming the client can repeat it). The
   * client_id is the one the assertion claims: its signature was not checked.
   */
  private jwksUriUnavailable(err: JwksUriUnavailableError, credentials: ClientCredentials, ip: string | undefined): void {
    if (!err.firstOfOutage && !writesDebug(this.logger)) return;
    // the fetch error's message (200 characters at most) may quote what the key host chose, such as the names of
    // its certificate: escaped as every refusal line's text
    const line = visibleFields({
      event: 'client.jwks_uri_unavailable',
      claimed_client_id: loggedClientId(credentials.clientId),
      jwks_uri: err.uri,
      reason: err.reason,
      retry_after_ms: err.retryAfterMs,
      ip,
    });
    if (err.firstOfOutage) this.logger.warn(line, "a client's jwks_uri cannot be fetched; its token requests are answered 503 until it can");
    else this.logger.debug!(line, "a client's jwks_uri cannot be fetched");
  }

  /**
   * `client.auth_failed`, at warn for the first of its key in a minute and at
   * debug for the rest of that minute (a warn line counts them once it is over), so
   * that neither a guesser nor a flood without credentials sets the log's
   * rate. The key: the endpoint, the reason and the address, and the
   * client_id for a client that exists (wrong secret, revoked, a refused
   * assertion), so each client's failures from each address still show, and
   * a failure at /oauth/introspect is not hidden by the token endpoint's.
   */
  private authFailed(line: { endpoint: ClientAuthEndpoint; client_id: string; ip: string | undefined; reason: string | undefined } & Record<string, unknown>): void {
    // a client_id only keys the window once a registered client was found: made-up ids would each get a warn line
    const perClient = line.reason !== undefined && !BEFORE_CLIENT_LOOKUP.has(line.reason);
    const at = line.endpoint === 'token' ? '' : ` at /oauth/${line.endpoint === 'revocation' ? 'revoke' : 'introspect'}`;
    this.refusalLog.report('warn', `auth_failed|${line.endpoint}|${line.reason}|${addressOf(line.ip)}|${perClient ? line.client_id : ''}`, line, `client authentication failed${at}`);
  }

  /**
   * A 429, with the limit it is over (`address`: the address failed too
   * often, whatever client_id it sent, so this request's client_id may be
   * an innocent one that came next; `client_address`: this client_id failed
   * too often from this address) and both counts. Logged at warn for the
   * first in a minute of an address's lockout, or of a client_id's at an
   * address (a few per address at most: the address's own limit stops more
   * pairs from filling), the rest of that minute at debug (a warn line says
   * how many once it is over), so a guesser cannot set the log's rate and
   * every lockout shows; the failures that led to it are in
   * client.auth_failed lines and counts.
   */
  private rateLimited(
    credentials: ClientCredentials,
    ip: string | undefined,
    over: { retryAfterMs: number; limit?: FailureLimit; addressFailures: number; pairFailures: number },
    endpoint: ClientAuthEndpoint,
  ): TooManyRequestsError {
    const clientId = loggedClientId(credentials.clientId);
    const limit = over.limit ?? 'address';
    const { maxFailuresPerAddress, maxFailuresPerClientAddress } = this.limiter!.settings;
    const line = {
      event: 'client.rate_limited',
      limit,
      endpoint,
      client_id: clientId,
      method: credentials.method,
      ip,
      address_failures: over.addressFailures,
      client_address_failures: over.pairFailures,
      max_failures: limit === 'address' ? maxFailuresPerAddress : maxFailuresPerClientAddress,
      retry_after_ms: over.retryAfterMs,
    };
    if (limit === 'address') {
      // keyed by the address alone: the client_id of a refused request is whatever it sent (each made-up one would be a warn line)
      this.refusalLog.report(
        'warn',
        `rate_limited|address|${addressOf(ip)}`,
        line,
        'too many failed client authentications from this address: every request from it is refused for now, whatever client_id it names (client_id is this request\'s, not necessarily one that failed)',
      );
    } else {
      this.refusalLog.report('warn', `rate_limited|client_address|${addressOf(ip)}|${clientId}`, line, 'too many failed client authentications for this client_id from this address');
    }
    return new TooManyRequestsError(over.retryAfterMs / 1000, { limit });
  }

  /**
   * A token, revocation or introspection request that sent no client
   * credentials: logged as a failed authentication, not counted (it guesses
   * nothing). `clientId`: a client_id the body sent without a secret, named
   * in the line (as sent, or `h.` and a keyed hash: see loggedClientId()).
   */
  noCredentials(source: { ip?: string; endpoint?: ClientAuthEndpoint; clientId?: string } = {}): InvalidClientError {
    const clientId = source.clientId === undefined ? '' : loggedClientId(source.clientId);
    this.authFailed({ event: 'client.auth_failed', endpoint: source.endpoint ?? 'token', client_id: clientId, method: 'none', ip: source.ip, reason: 'no_credentials' });
    return new InvalidClientError({ detail: 'no_credentials' });
  }

  /**
   * Counts a failure; at the alert threshold (and each doubling) of a
   * registered client, one audit event. Answers the counts, and how long
   * the address or the pair is refused when this failure went past a limit
   * (else retryAfterMs 0).
   */
  private async countFailure(clientId: string, ip: string | undefined, knownClient: boolean): Promise<FailureCount> {
    const counted = await this.limiter!.failed(clientId, ip, knownClient);
    const { clientFailures, alert } = counted;
    if (!alert) return counted;
    const { alertFailuresPerClient, window } = this.limiter!.settings;
    this.logger.warn(
      { event: 'client.auth_failures_high', client_id: clientId, failures: clientFailures, threshold: alertFailuresPerClient, window_s: window, ip },
      'many failed authentications for one client; its right secret still works',
    );
    return counted;
  }
}
