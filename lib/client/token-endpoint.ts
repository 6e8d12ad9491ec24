import { clientSecretBasic, clientSecretPost, type ClientAuthContext, type ClientAuthentication } from './auth';
import type { Entry } from './cache-entry';
import { discover } from './discovery';
import { TokenClientClosedError } from './errors';
import type { FetchLike } from './http';
import type { ClientConfig, TokenClientEvent, TokenRequestReason } from './options';
import type { StoredToken } from './store';
import { requestToken, type TokenRequestSettings } from './token-request';

/**
 * The token endpoint as the cache asks it: where it is and how the client
 * authenticates there (configured, or read once from the issuer's metadata),
 * and one token request turned into the token to keep.
 */
export class TokenEndpoint {
  private endpoint: Promise<{ url: string; auth: ClientAuthentication }> | undefined;

  constructor(
    private readonly config: ClientConfig,
    private readonly fetch: FetchLike,
    /** Aborted when the client closes: ends discovery and token requests in flight. */
    private readonly closing: AbortSignal,
    private readonly emit: (event: TokenClientEvent) => void,
  ) {}

  /** The URL and client authentication; a failed discovery is tried again by the next call. */
  resolve(): Promise<{ url: string; auth: ClientAuthentication }> {
    const config = this.config;
    if (config.tokenEndpoint !== undefined) return Promise.resolve({ url: config.tokenEndpoint, auth: config.auth! });
    if (this.endpoint === undefined) {
      const pending = discover(config.issuer!, this.fetch, config.timeoutMs, this.closing, config.allowInsecureHttp).then((found) => {
        let auth = config.auth;
        if (auth === undefined) {
          const post = found.authMethods !== undefined && !found.authMethods.includes('client_secret_basic') && found.authMethods.includes('client_secret_post');
          auth = post ? clientSecretPost(config.clientSecret!) : clientSecretBasic(config.clientSecret!);
        }
        return { url: found.tokenEndpoint, auth };
      });
      this.endpoint = pending;
      pending.catch(() => {
        if (this.endpoint === pending) this.endpoint = undefined;
      });
    }
    return this.endpoint;
  }

  /** One token request for `entry` (with its retries), as the shared store keeps its answer. */
  async request(entry: Entry, reason: TokenRequestReason): Promise<StoredToken> {
    // the one gate for every path: a call that waited on the store (or the lock) while the client closed sends nothing
    if (this.closing.aborted) throw new TokenClientClosedError();
    const { url, auth } = await this.resolve();
    const context: ClientAuthContext = { clientId: this.config.clientId, tokenEndpoint: url, issuer: this.config.issuer };
    const settings: TokenRequestSettings = {
      fetch: this.fetch,
      auth,
      context,
      pop: this.config.pop,
      timeoutMs: this.config.timeoutMs,
      now: this.config.now,
      onSend: (attempt) => this.emit({ type: 'token.requested', scope: entry.scope, resource: entry.resource, reason, attempt }),
      onNonceRetry: () => this.emit({ type: 'dpop.nonce_retry', kind: 'token' }),
    };
    const res = await requestToken(settings, entry.scope, entry.resource, this.closing);
    const lifetime = (res.expiresIn === undefined ? this.config.defaultTtlMs : res.expiresIn * 1000);
    return {
      accessToken: res.accessToken,
      tokenType: res.tokenType,
      scope: res.scope ?? entry.scope,
      expiresAt: res.sentAt + lifetime,
      lifetime,
    };
  }
}
