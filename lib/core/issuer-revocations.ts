/**
 * Revocation for one issuer instance: what is revoked (in memory, checked on
 * every token), kept in step with the store (reloaded every
 * `revocationResync`, at once when another instance rings: the store's
 * LISTEN/NOTIFY, a Redis doorbell), the write side (persist, apply, ring),
 * the signed list standalone verifiers poll, and the RFC 7009 / RFC 7662
 * decisions.
 */
import type { IssuerConfig } from '../config';
import { writesDebug, type Logger } from '../logger';
import type { ClientRecord, RevocationNotifier, Store } from '../stores/types';
import { introspectWithReason, revocationFor, type IntrospectionResult, type VerifyAccessToken } from './introspection';
import type { LoadedKey } from './keys';
import { TemporarilyUnavailableError } from '../errors';
import { MAX_ACCESS_TOKEN_TTL, MAX_CLOCK_TOLERANCE, RevocationState, type RevocableClaims, type RevocationCheck, type RevocationReason } from './revocation';
import { Revoker, StoreRevocationFeed } from './revocation-feed';
import { PublishedRevocationList } from './revocation-list';
import { ThrottledLog } from './refusal-log';
import { asTemporarilyUnavailable } from './store-health';
import { visibleFields } from '../shared/visible-text';

export interface IssuerRevocationsOptions {
  config: IssuerConfig;
  logger: Logger;
  now: () => number;
  /** The key that signs the published list (the issuer's current signing key). */
  signingKey: () => LoadedKey;
  /** The kids the issuer's JWKS publishes, which the list names. */
  publishedKids?: () => readonly string[];
  /** Rings the other instances besides the store's own notifications (e.g. RedisRevocationNotifier). */
  push?: RevocationNotifier;
  /** Told as soon as another instance rings, before the reload it starts (the issuer drops its cached client records). */
  onRing?: () => void;
}

export class IssuerRevocations {
  /** What is revoked, in memory. */
  readonly state: RevocationState;
  /**
   * What the verifiers check on every token: the state, or 503 once no
   * reload has reached the store for `revocationMaxStale` (a revocation made
   * elsewhere meanwhile would be missed), unless `revocationFailOpen`.
   */
  readonly check: RevocationCheck;
  /** The signed list standalone verifiers poll: re-signed when the state or the signing key changes, or half its 5 min lifetime passed. */
  readonly list: PublishedRevocationList;
  private feed: StoreRevocationFeed | undefined;
  private revoker: Revoker | undefined;
  private readonly stops: (() => Promise<void>)[] = [];

  /** introspection.refused (no permission): once a minute per client at warn, the rest at debug. */
  private readonly refusals: ThrottledLog;

  constructor(private readonly options: IssuerRevocationsOptions) {
    const { config, now } = options;
    this.refusals = new ThrottledLog(options.logger, 60_000, now);
    // by the longest lifetime any instance may issue with, not this one's: see MAX_ACCESS_TOKEN_TTL; and entries
    // held by the largest clock tolerance there is, not this one's: the signed list carries them, and a standalone
    // verifier with a larger tolerance, which accepts a token that much longer past its exp, learns of it even
    // when it starts (or first polls) after this instance would have let the entry go
    this.state = new RevocationState({ maxTokenTtl: MAX_ACCESS_TOKEN_TTL, clockTolerance: MAX_CLOCK_TOLERANCE, now });
    this.list = new PublishedRevocationList({ state: this.state, issuer: config.issuer, signingKey: options.signingKey, publishedKids: options.publishedKids, now });
    this.check = config.revocationFailOpen ? this.state : this.failClosed();
  }

  /** The state's answers while the feed is current; TemporarilyUnavailableError while it is stale. One property read a token. */
  private failClosed(): RevocationCheck {
    const { state } = this;
    const retryAfter = Math.max(1, Math.ceil(this.options.config.revocationResync));
    return {
      isRevoked: (claims: RevocableClaims): false | RevocationReason => {
        if (this.feed?.stale) {
          throw new TemporarilyUnavailableError('revocation status cannot be checked now', {
            detail: `revocations not reloaded from the store for over ${this.options.config.revocationMaxStale} s`,
            retryAfter,
            dependency: 'revocations',
          });
        }
        return state.isRevoked(claims);
      },
    };
  }

  /**
   * Loads what is revoked from the store, then keeps it current. A failed
   * reload keeps the last state; the next one tries again. Once only.
   */
  async start(store: Store): Promise<void> {
    if (this.feed) return;
    const { config, now, push } = this.options;
    const notifiers: RevocationNotifier[] = [];
    if (store.notifyRevocations && store.listenRevocations) notifiers.push(store as RevocationNotifier);
    if (push) notifiers.push(push);
    const feed = new StoreRevocationFeed({
      state: this.state,
      store,
      maxTokenTtl: MAX_ACCESS_TOKEN_TTL,
      clockTolerance: MAX_CLOCK_TOLERANCE,
      resyncMs: config.revocationResync * 1000,
      notify:
        notifiers.length > 0
          ? async () => {
              await Promise.all(notifiers.map((n) => n.notifyRevocations()));
            }
          : undefined,
      now,
      maxStaleMs: config.revocationMaxStale * 1000,
      onStale: (stale, { sinceMs, err }) => {
        if (stale) {
          this.options.logger.error(
            { event: 'revocations.stale', since_ms: sinceMs, reason: err instanceof Error ? err.message : String(err), fail_open: config.revocationFailOpen },
            config.revocationFailOpen
              ? 'revocations cannot be reloaded from the store: tokens revoked elsewhere since may be accepted here (revocationFailOpen)'
              : 'revocations cannot be reloaded from the store: protected routes answer 503 until it answers (a token revoked elsewhere since would be accepted)',
          );
        } else {
          this.options.logger.info({ event: 'revocations.current', stale_ms: sinceMs }, 'revocations reloaded from the store again');
        }
      },
      onError: () => undefined, // an outage is reported once by the store's health
      onNotifyError: (err) =>
        this.options.logger.warn(
          { event: 'revocation.not_announced', reason: err instanceof Error ? err.message : String(err) },
          'a revocation is stored and in force here, but the other instances could not be told: they learn of it at their next reload',
        ),
    });
    await feed.start();
    this.feed = feed;
    this.revoker = new Revoker(store, feed);
    this.state.start();
    for (const n of notifiers) {
      this.stops.push(
        await n.listenRevocations(() => {
          // a cached client record may be older than what rang: a token request in the reload's few ms reads the store
          this.options.onRing?.();
          feed.resync().catch(() => undefined);
        }),
      );
    }
  }

  /** Rings the other instances with no revocation (a client's secret or key went): they drop their cached client records and look at the store. */
  async announce(): Promise<void> {
    await this.feed?.publish([]);
  }

  /** Persists, applies and announces (the CLI's and issuer.clients' revocations); after start(). */
  get writer(): Revoker {
    if (!this.revoker) throw new Error('revocations are not loaded yet: await issuer.ready() first');
    return this.revoker;
  }

  /**
   * RFC 7009 for an authenticated client: revokes `token` when it is one of
   * the client's own live access tokens; anything that is not a live token
   * of this issuer changes nothing (the endpoint answers 200 all the same);
   * another client's token → InvalidRequestError, and it stays valid.
   */
  async revoke(client: ClientRecord, token: string, verify: VerifyAccessToken): Promise<void> {
    const event = await revocationFor(token, client.clientId, verify);
    if (!event || event.type !== 'token') return;
    const cap = this.options.config.maxRevokedTokensPerClient;
    try {
      if (this.state.deniedCount(client.clientId) < cap) {
        await this.writer.token(event.jti, event.clientId, event.exp, event.gen);
      } else {
        // Every denylisted token is an entry of the signed list each standalone verifier polls, until it
        // expires: a client revoking its own tokens without end would grow it past what verifiers accept.
        // Past the cap a revocation takes all the client's tokens issued until now (RFC 7009 §2.1 lets a
        // revocation take related tokens): one entry, whatever the client sends.
        const generation = await this.writer.clientTokens(client.clientId, new Date(this.options.now()));
        this.options.logger.warn(
          { event: 'client.tokens_revoked', client_id: client.clientId, generation, reason: 'revoked_tokens_cap', cap },
          `the client has ${cap} tokens revoked one by one: this revocation takes every token issued to it until now`,
        );
        return;
      }
    } catch (err) {
      throw asTemporarilyUnavailable(err);
    }
    this.options.logger.info({ event: 'token.revoked', client_id: client.clientId, jti: event.jti }, 'access token revoked');
  }

  /**
   * RFC 7662 for an authenticated client: callers holding the `introspect`
   * permission learn a live token's claims; every other answer is exactly
   * `{ active: false }`, including for callers without the permission. Why
   * an answer is inactive comes back beside it (for the metric) and, but
   * for a caller without the permission (introspection.refused at warn), is
   * logged at debug as introspection.inactive: the reason, the caller, the
   * token's client_id once verified; never the token.
   */
  async introspect(client: ClientRecord, token: string, verify: VerifyAccessToken, ip?: string): Promise<IntrospectionResult> {
    if (!client.permissions.includes('introspect')) {
      this.refusals.report('warn', client.clientId, { event: 'introspection.refused', client_id: client.clientId, reason: 'no_permission', ip }, 'introspection by a client without the introspect permission');
      return { answer: { active: false }, inactive: { reason: 'no_permission' } };
    }
    // the store's answer, not this instance's last reload: what another instance revoked a moment ago is inactive
    // here too (one cheap version read; a reload only when something changed). A store whose last reload failed is
    // not waited for again (each try could take its whole timeout): the held state answers, until revocationMaxStale
    if (this.feed && !this.feed.failing) await this.feed.resync().catch(() => undefined);
    // RFC 7662 §4: a resource server learns of the tokens meant for it, those of its RFC 8707 resources (the
    // default audience for a client without a list, as at the token endpoint); another API's token is inactive
    const audiences = client.resources.length > 0 ? client.resources : [this.options.config.audience];
    const mayIntrospect = (claims: { aud: unknown }): boolean => {
      const aud = claims.aud;
      return Array.isArray(aud) ? aud.some((a) => audiences.includes(a as string)) : audiences.includes(aud as string);
    };
    const result = await introspectWithReason(token, verify, this.check, { now: this.options.now, mayIntrospect });
    // built and escaped only for a logger that writes debug lines: forged tokens sent to a resource server are forwarded here
    if (result.inactive && writesDebug(this.options.logger)) {
      const { reason, detail, tokenClientId } = result.inactive;
      this.options.logger.debug!(
        visibleFields({
          event: 'introspection.inactive',
          reason,
          client_id: client.clientId,
          ...(tokenClientId !== undefined && { token_client_id: tokenClientId }),
          ...(detail !== undefined && { detail: detail.slice(0, 300) }),
          ip,
        }),
        `introspection answered inactive: ${reason}`,
      );
    }
    return result;
  }

  async close(): Promise<void> {
    this.state.stop();
    await this.feed?.close();
    for (const stop of this.stops.splice(0)) await stop().catch(() => undefined);
  }
}
