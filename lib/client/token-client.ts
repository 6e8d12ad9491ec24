import { cachedToken, Entry, entryKey, type CachedToken, type TokenParams } from './cache-entry';
import { TokenClientClosedError, TokenEndpointError } from './errors';
import { transportChecker, type FetchLike } from './http';
import { normaliseResource, normaliseScope, type ClientConfig, type TokenClientEvent, type TokenRequestReason } from './options';
import { SharedStore } from './shared-store';
import { TokenEndpoint } from './token-endpoint';

const noop = (): void => undefined;

/**
 * Past the skew with a token still valid, how long (real time) after a
 * renewal was sent calls wait for it; past that, they get the token held.
 */
const RENEWAL_WAIT_MS = 1000;

/** Token endpoint errors about the client, not the scope or resource asked for (RFC 6749 §5.2). */
const CLIENT_ERRORS = new Set(['invalid_client', 'unauthorized_client', 'unsupported_grant_type']);

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** `promise`, or a rejection when `signal` aborts first; the promise itself goes on for others. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | null | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    // the request goes on for others; its failure is theirs to see, not an unhandled rejection
    promise.catch(noop);
    return Promise.reject(abortError(signal));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(abortError(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}

/**
 * The cache: one entry per key (LRU), one token request per key at a time
 * (cold start, refresh ahead and 401 renewal alike), backoff and negative
 * caching after failures, an optional shared store underneath.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>();
  private readonly fetch: FetchLike;
  private readonly closing = new AbortController();
  private readonly endpoint: TokenEndpoint;
  /** The store shared by processes under this cache, when one is configured. */
  private readonly shared: SharedStore | undefined;
  private closed = false;
  /** A refusal that holds for every entry: a Retry-After, or an answer about the client (see CLIENT_ERRORS). */
  private clientBlock: { at: number; until: number; error: TokenEndpointError } | undefined;
  readonly defaultEntryKey: string;
  /** Refuses an API URL a token must not be sent to (see checkTransport()); remembers the origins it allowed. */
  readonly checkApiUrl: (url: string) => void;

  constructor(readonly config: ClientConfig) {
    this.fetch = config.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.checkApiUrl = transportChecker(config.allowInsecureHttp, 'client.fetch()');
    this.defaultEntryKey = entryKey(config.scope, config.resource);
    const emit = (event: TokenClientEvent): void => this.emit(event);
    this.endpoint = new TokenEndpoint(config, this.fetch, this.closing.signal, emit);
    this.shared = config.store && new SharedStore(config, config.store, this.endpoint, this.closing.signal, emit);
  }

  get fetchImpl(): FetchLike {
    return this.fetch;
  }

  emit(event: TokenClientEvent): void {
    const listener = this.config.onEvent;
    if (!listener) return;
    try {
      listener(event);
    } catch {
      // a listener never breaks a call
    }
  }

  /** The entry of `params` (the client's defaults when absent), most recently used last. */
  entry(params?: TokenParams): Entry {
    let scope = this.config.scope;
    let resource = this.config.resource;
    let key = this.defaultEntryKey;
    if (params !== undefined && (params.scope !== undefined || params.resource !== undefined)) {
      if (params.scope !== undefined) scope = normaliseScope(params.scope);
      if (params.resource !== undefined) resource = normaliseResource(params.resource);
      key = entryKey(scope, resource);
    }
    const entries = this.entries;
    let entry = entries.get(key);
    if (entry === undefined) {
      entry = new Entry(key, scope, resource);
      entries.set(key, entry);
      if (entries.size > this.config.maxEntries) this.evict(entry);
    } else if (entries.size > 1) {
      entries.delete(key);
      entries.set(key, entry);
    }
    return entry;
  }

  /**
   * Drops the least recently used entries, down to the bound, that have no
   * token request running (its callers wait on it, and a new entry for its
   * key would send a second one) and are not backing off after a failure (a
   * new entry for its key would know nothing of it and ask at once: with
   * more failing keys than the bound, every call would), nor the one just
   * added. With every other entry busy, the bound is passed until one is
   * done: a backoff lasts 5 minutes at most.
   */
  private evict(added: Entry): void {
    const now = this.config.now();
    for (const [key, entry] of this.entries) {
      if (this.entries.size <= this.config.maxEntries) return;
      // never the entry just added: its caller is about to start its token request on it
      if (entry === added || entry.inflight !== undefined) continue;
      if (entry.lastError !== undefined && now < entry.blockedUntil && now >= entry.blockedAt) continue;
      this.entries.delete(key);
    }
  }

  /** A usable token of `entry`: at once from memory when it has one, else after (at most) one shared token request. */
  token(entry: Entry, signal?: AbortSignal | null): CachedToken | Promise<CachedToken> {
    if (this.closed) return Promise.reject(new TokenClientClosedError());
    // an aborted caller asks for nothing: no token request is started for it
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const now = this.config.now();
    const token = entry.token;
    if (token !== undefined && now < token.usableUntil) {
      if (now >= token.refreshAt && entry.inflight === undefined && this.blockedUntil(entry, now) === 0) this.start(entry, 'refresh', undefined).catch(noop);
      if (this.config.onEvent) this.emit({ type: 'token.cache_hit', scope: entry.scope, resource: entry.resource, source: 'memory' });
      return token;
    }
    // past the skew, not expired: renewed, but the call does not stall on it (see heldOrRenewed())
    if (token !== undefined && now < token.stored.expiresAt) return this.heldOrRenewed(entry, token, now, signal);
    let pending = entry.inflight;
    if (pending === undefined) {
      const refusal = this.refusal(entry, now);
      if (refusal) return Promise.reject(refusal);
      pending = this.start(entry, token === undefined ? 'initial' : 'expired', undefined);
    }
    return untilAborted(pending, signal);
  }

  /**
   * A call past the skew of `token`, which has not expired: the renewed
   * token when the renewal comes soon, else the token held. A renewal is
   * started unless one runs or a backoff holds. Once a renewal of this token
   * has failed, the call gets the token held at once (the endpoint fails: a
   * wait would be for nothing, up to `timeout` each time a backoff ends);
   * before that, it waits for the renewal until RENEWAL_WAIT_MS after the
   * renewal was sent, then gets the token held while the renewal goes on.
   * A healthy endpoint gives the new token; a slow or hanging one costs a
   * call at most RENEWAL_WAIT_MS, once per token.
   */
  private heldOrRenewed(entry: Entry, token: CachedToken, now: number, signal: AbortSignal | null | undefined): CachedToken | Promise<CachedToken> {
    let pending = entry.inflight;
    if (pending === undefined) {
      // a backoff or Retry-After runs: the token held is used up to its expiry rather than none at all
      if (this.blockedUntil(entry, now) !== 0) return this.lastResort(entry, token);
      pending = this.start(entry, 'expired', undefined);
    }
    if (entry.failures > 0) {
      pending.catch(noop);
      return this.lastResort(entry, token);
    }
    const left = RENEWAL_WAIT_MS - (performance.now() - entry.inflightSince);
    if (left <= 0) {
      pending.catch(noop);
      return this.lastResort(entry, token);
    }
    // the token held serves while it is still the cached one, not expired, and the client is open; else the call waits on
    const holds = (): boolean => !this.closed && entry.token === token && this.config.now() < token.stored.expiresAt;
    const renewed = pending;
    const bounded = new Promise<CachedToken>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (holds()) resolve(this.lastResort(entry, token));
      }, left);
      timer.unref();
      renewed.then(
        (next) => {
          clearTimeout(timer);
          resolve(next);
        },
        (err: unknown) => {
          clearTimeout(timer);
          if (holds()) resolve(this.lastResort(entry, token));
          else reject(err);
        },
      );
    });
    return untilAborted(bounded, signal);
  }

  /** The token held, past the skew but not expired, while the endpoint fails. */
  private lastResort(entry: Entry, token: CachedToken): CachedToken {
    if (this.config.onEvent) this.emit({ type: 'token.cache_hit', scope: entry.scope, resource: entry.resource, source: 'memory' });
    return token;
  }

  /**
   * Until when no token request may be sent for `entry` (0: it may be now):
   * the entry's own backoff, or the client's (a Retry-After, or an answer
   * about the client itself such as invalid_client, holds for every scope and
   * resource). Allocates nothing: cache hits ask it while a refresh is due.
   */
  private blockedUntil(entry: Entry, now: number): number {
    // a clock that stepped back since a backoff was set (now < its start) would stretch it by the step: it is over
    let until = 0;
    if (now < entry.blockedUntil && now >= entry.blockedAt && entry.lastError) until = entry.blockedUntil;
    const client = this.clientBlock;
    if (client !== undefined && now < client.until && now >= client.at && client.until > until) until = client.until;
    return until;
  }

  /** The error a call gets while blockedUntil() holds, saying how long is left; undefined when not blocked. */
  private refusal(entry: Entry, now: number): TokenEndpointError | undefined {
    const until = this.blockedUntil(entry, now);
    if (until === 0) return undefined;
    const error = until === entry.blockedUntil && entry.lastError ? entry.lastError : this.clientBlock!.error;
    return error.again(Math.ceil((until - now) / 1000));
  }

  /**
   * After an API refused `rejected`: drop it if it is still the cached token
   * (at most once per minRenewalInterval) and return the token to retry with,
   * or `undefined` when there is none to try.
   */
  async renewAfter401(entry: Entry, rejected: CachedToken, signal: AbortSignal | null | undefined, wait: boolean): Promise<CachedToken | undefined> {
    const now = this.config.now();
    const current = entry.token;
    if (current !== undefined && current.value.accessToken === rejected.value.accessToken) {
      const since = now - entry.lastRenewal;
      // (a negative interval: the clock stepped back, and the last renewal's time says nothing)
      if (since >= 0 && since < this.config.minRenewalIntervalMs) return undefined;
      entry.lastRenewal = now;
      entry.token = undefined;
      // a Retry-After or backoff still running holds for renewals too: the callers get that error
      if (entry.inflight === undefined && this.blockedUntil(entry, now) === 0) this.start(entry, 'renew_401', rejected.value.accessToken).catch(noop);
    }
    if (!wait) return undefined;
    try {
      const next = await this.token(entry, signal);
      return next.value.accessToken === rejected.value.accessToken ? undefined : next;
    } catch {
      return undefined;
    }
  }

  close(): void {
    this.closed = true;
    this.closing.abort(new TokenClientClosedError());
    this.entries.clear();
  }

  // ---- token requests

  private start(entry: Entry, reason: TokenRequestReason, rejected: string | undefined): Promise<CachedToken> {
    // a success lifts the client's block only if it was sent after that block was set: one sent before says nothing of it
    const block = this.clientBlock;
    const pending = this.obtain(entry, reason, rejected).then(
      (token) => {
        if (entry.inflight === pending) entry.inflight = undefined;
        entry.token = token;
        entry.failures = 0;
        entry.blockedUntil = 0;
        entry.lastError = undefined;
        if (this.clientBlock === block) this.clientBlock = undefined;
        return token;
      },
      (err: unknown) => {
        if (entry.inflight === pending) entry.inflight = undefined;
        throw this.failed(entry, err);
      },
    );
    entry.inflight = pending;
    entry.inflightSince = performance.now();
    return pending;
  }

  private failed(entry: Entry, err: unknown): unknown {
    // a request aborted by close(): its callers are told so, not given the abort as a network error
    if (this.closed) return new TokenClientClosedError({ cause: err });
    const error = err instanceof TokenEndpointError ? err : new TokenEndpointError({ error: 'invalid_response', cause: err });
    const now = this.config.now();
    entry.failures++;
    entry.lastError = error;
    const n = Math.min(entry.failures - 1, 20);
    const backoff = error.permanent
      ? Math.min(300_000, 10_000 * 2 ** n) * (0.75 + 0.25 * Math.random())
      : Math.min(30_000, 1_000 * 2 ** n) * (0.5 + 0.5 * Math.random());
    // a Retry-After is waited out, but never less than the backoff: 0, or a date already past, does not turn it off
    const delay = error.retryAfter === undefined ? backoff : Math.max(error.retryAfter * 1000, backoff);
    entry.blockedAt = now;
    entry.blockedUntil = now + delay;
    // the endpoint's Retry-After, or an answer about the client itself, is not about this scope or resource alone
    if (error.retryAfter !== undefined || CLIENT_ERRORS.has(error.error)) {
      if (this.clientBlock === undefined || this.clientBlock.until < entry.blockedUntil) this.clientBlock = { at: now, until: entry.blockedUntil, error };
    }
    const token = entry.token;
    this.emit({
      type: 'token.refresh_failed',
      scope: entry.scope,
      resource: entry.resource,
      status: error.status,
      error: error.error,
      retryAfter: Math.ceil(delay / 1000),
      tokenStillValid: token !== undefined && now < token.usableUntil,
    });
    const wait = Math.ceil(delay / 1000);
    return wait === error.retryAfter ? error : error.again(wait);
  }

  /** A new token for `entry`: by way of the shared store when there is one, else straight from the endpoint. */
  private async obtain(entry: Entry, reason: TokenRequestReason, rejected: string | undefined): Promise<CachedToken> {
    if (this.shared !== undefined) return this.shared.obtain(entry, reason, rejected);
    return cachedToken(this.config, await this.endpoint.request(entry, reason));
  }
}
