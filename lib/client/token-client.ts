import { createHash } from 'node:crypto';
import { cachedToken, Entry, entryKey, type CachedToken, type TokenParams } from './cache-entry';
import { TokenClientClosedError, TokenEndpointError } from './errors';
import { transportChecker, type FetchLike } from './http';
import { normaliseResource, normaliseScope, type ClientConfig, type StoreOperation, type TokenClientEvent, type TokenRequestReason } from './options';
import type { ReleaseLock, StoredToken, TokenStore } from './store';
import { TokenEndpoint } from './token-endpoint';

const noop = (): void => undefined;

/** How long the shared store is skipped after a call of it got no answer within its time. */
const STORE_PAUSE_MS = 30_000;

/** The shared store as one token request sees it. */
interface Shared {
  readonly store: TokenStore;
  readonly key: string;
  /** The token an API just refused: never taken from the store (and deleted there). */
  readonly rejected: string | undefined;
  /** The token held in memory: a refresh wants another one. */
  readonly held: string | undefined;
  /** When the store calls before the token request have used the request timeout (performance.now()): a slow store never holds a call for longer in all. */
  readonly budgetEnds: number;
}

/**
 * Milliseconds from now until `end` (performance.now() time); 0 below one:
 * a timer may fire a fraction of a millisecond early, and what is left then
 * is no time for another store call.
 */
function msUntil(end: number): number {
  const left = end - performance.now();
  return left < 1 ? 0 : left;
}

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
    this.endpoint = new TokenEndpoint(config, this.fetch, this.closing.signal, (event) => this.emit(event));
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
   * Drops the least recently used entry that has no token request running
   * (its callers wait on it, and a new entry for its key would send a second
   * one), nor the one just added; with every other entry busy, the bound is
   * passed until one is done.
   */
  private evict(added: Entry): void {
    for (const [key, entry] of this.entries) {
      // never the entry just added: its caller is about to start its token request on it
      if (entry.inflight === undefined && entry !== added) {
        this.entries.delete(key);
        return;
      }
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
    let pending = entry.inflight;
    if (pending === undefined) {
      const refusal = this.refusal(entry, now);
      if (refusal) {
        // the endpoint fails (a backoff runs): the token held is used up to its expiry rather than none at all
        if (token !== undefined && now < token.stored.expiresAt) return this.lastResort(entry, token);
        return Promise.reject(refusal);
      }
      pending = this.start(entry, token === undefined ? 'initial' : 'expired', undefined);
    }
    if (token !== undefined && now < token.stored.expiresAt) {
      // within the skew and renewing: should the renewal fail, the token held still serves until it expires
      pending = pending.catch((err: unknown) => {
        if (this.closed || this.config.now() >= token.stored.expiresAt || entry.token !== token) throw err;
        return this.lastResort(entry, token);
      });
    }
    return untilAborted(pending, signal);
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
    const pending = this.obtain(entry, reason, rejected).then(
      (token) => {
        if (entry.inflight === pending) entry.inflight = undefined;
        entry.token = token;
        entry.failures = 0;
        entry.blockedUntil = 0;
        entry.lastError = undefined;
        this.clientBlock = undefined;
        return token;
      },
      (err: unknown) => {
        if (entry.inflight === pending) entry.inflight = undefined;
        throw this.failed(entry, err);
      },
    );
    entry.inflight = pending;
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
    const delay =
      error.retryAfter !== undefined
        ? error.retryAfter * 1000
        : error.permanent
          ? Math.min(300_000, 10_000 * 2 ** n) * (0.75 + 0.25 * Math.random())
          : Math.min(30_000, 1_000 * 2 ** n) * (0.5 + 0.5 * Math.random());
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
    return error.retryAfter === undefined ? error.again(Math.ceil(delay / 1000)) : error;
  }

  private async obtain(entry: Entry, reason: TokenRequestReason, rejected: string | undefined): Promise<CachedToken> {
    const store = this.config.store;
    if (store === undefined) return this.request(entry, reason, undefined);
    const shared: Shared = {
      store,
      key: await this.storeKey(entry),
      rejected,
      held: entry.token?.value.accessToken,
      budgetEnds: performance.now() + this.config.timeoutMs,
    };
    const found = await this.fromStore(entry, shared, this.budget(shared));
    if (found !== undefined) return found;
    if (store.lock === undefined) return this.request(entry, reason, shared);
    // the metadata first, outside the lock: a holder holds it for the token request alone
    await this.endpoint.resolve();
    return this.underLock(entry, reason, shared, store.lock.bind(store));
  }

  /** What is left of the time store calls may take before the token request. */
  private budget(shared: Shared): number {
    return msUntil(shared.budgetEnds);
  }

  private checkOpen(): void {
    if (this.closed) throw new TokenClientClosedError();
  }

  /** A usable token of the shared store, neither the one the API refused nor the one held already. */
  private async fromStore(entry: Entry, shared: Shared, limitMs: number): Promise<CachedToken | undefined> {
    const { store, key, rejected, held } = shared;
    const stored = await this.storeCall('get', () => store.get(key), limitMs);
    if (!stored) return undefined;
    if (stored.accessToken === rejected) {
      this.storeCall('delete', () => store.delete(key)).catch(noop);
      return undefined;
    }
    if (stored.accessToken === held) return undefined;
    const token = cachedToken(this.config, stored);
    if (this.config.now() >= token.usableUntil) return undefined;
    this.emit({ type: 'token.cache_hit', scope: entry.scope, resource: entry.resource, source: 'store' });
    return token;
  }

  /**
   * With a store that locks. The process that takes the lock at once asks the
   * token endpoint and lets go once the answer is stored (in the background:
   * its own callers do not wait for the write), or, when no token came of it,
   * lets go saying so. The others read the store again (after 25 ms, doubling
   * up to 250 ms) and try the lock each time, for at most the lock's life (a
   * holder that died lets go when its lock runs out). When the store says the
   * holder failed, each asks on its own at once, side by side; a store that
   * cannot say so hands the lock to one of them after another, and one that
   * takes it after waiting lets go at once and asks on its own. A lock that
   * fails, or takes the rest of the store's time, is skipped: the process
   * asks alone.
   */
  private async underLock(entry: Entry, reason: TokenRequestReason, shared: Shared, lock: NonNullable<TokenStore['lock']>): Promise<CachedToken> {
    const { timeoutMs } = this.config;
    // a token request may take two attempts (a DPoP nonce retry), each up to the timeout
    const lockMs = 2 * timeoutMs;
    const waitEnds = performance.now() + lockMs;
    // a lock taken after its call timed out is let go as soon as it comes
    const lateLock = (release: ReleaseLock | null | 'failed'): void => {
      if (typeof release === 'function') this.unlock(release, false);
    };
    for (let pause = 25, waited = false; ; pause = Math.min(250, pause * 2), waited = true) {
      const limit = waited ? Math.min(timeoutMs, msUntil(waitEnds)) : this.budget(shared);
      const release = await this.storeCall('lock', () => lock(shared.key, lockMs), limit, lateLock);
      if (release === undefined) return this.request(entry, reason, shared);
      if (release === 'failed' || (release !== null && waited)) {
        if (release !== 'failed') this.unlock(release, false);
        return (await this.fromStore(entry, shared, timeoutMs)) ?? this.request(entry, reason, shared);
      }
      if (release !== null) return this.holdLock(entry, reason, shared, release);
      if (performance.now() >= waitEnds) return this.request(entry, reason, shared);
      await this.pause(pause);
      const found = await this.fromStore(entry, shared, Math.min(timeoutMs, msUntil(waitEnds)));
      if (found !== undefined) return found;
    }
  }

  /** The lock holder's part: one more look (the holder before may have stored a token and let go between the read and the lock), then the token request. */
  private async holdLock(entry: Entry, reason: TokenRequestReason, shared: Shared, release: ReleaseLock): Promise<CachedToken> {
    try {
      const found = await this.fromStore(entry, shared, this.budget(shared));
      if (found === undefined) return await this.request(entry, reason, shared, release);
      this.unlock(release, false);
      return found;
    } catch (err) {
      // the others wait on this lock: no token came of it, so they ask on their own (a closing client just lets go)
      this.unlock(release, !this.closed);
      throw err;
    }
  }

  private unlock(release: ReleaseLock, failed: boolean): void {
    this.storeCall('unlock', () => release(failed)).catch(noop);
  }

  /** Waits `ms`, or less when the client is closed meanwhile (then rejects). */
  private async pause(ms: number): Promise<void> {
    const signal = this.closing.signal;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
    this.checkOpen();
  }

  /**
   * One token request (with its retries). The answer goes to the shared store;
   * a lock holder (`release`) lets go once it is written, since the others
   * read it from there.
   */
  private async request(entry: Entry, reason: TokenRequestReason, shared: Shared | undefined, release?: ReleaseLock): Promise<CachedToken> {
    const stored = await this.endpoint.request(entry, reason);
    if (shared !== undefined) {
      const { store, key } = shared;
      const written = this.storeCall('set', () => Promise.resolve(store.set(key, stored, stored.expiresAt - this.config.now())).then(() => true));
      // a write that failed leaves the others nothing to read: they are told to ask on their own
      if (release) written.then((done) => this.unlock(release, done !== true), noop);
      else written.catch(noop);
    }
    return cachedToken(this.config, stored);
  }

  private storeKeyPrefix: string | undefined;
  /** When a store call last got no answer in time: calls are skipped for STORE_PAUSE_MS from then. */
  private storeSkippedAt: number | undefined;

  private storeSkipped(): boolean {
    if (this.storeSkippedAt === undefined) return false;
    const since = this.config.now() - this.storeSkippedAt;
    // (a clock that stepped back since says nothing of how long it has been: the pause is over)
    if (since >= 0 && since < STORE_PAUSE_MS) return true;
    this.storeSkippedAt = undefined;
    return false;
  }

  /**
   * The shared store's key: endpoint, client, the proof-of-possession key
   * tokens get bound to (instances with different DPoP keys cannot use each
   * other's tokens; Bearer-only instances share theirs), scope and resource.
   */
  private async storeKey(entry: Entry): Promise<string> {
    if (this.storeKeyPrefix === undefined) {
      const origin = this.config.tokenEndpoint ?? this.config.issuer!;
      const pop = this.config.pop;
      const binding = pop ? `${pop.scheme} ${pop.keyId ?? ''}` : 'Bearer';
      this.storeKeyPrefix = `${origin}\n${this.config.clientId}\n${binding}\n`;
    }
    return createHash('sha256').update(this.storeKeyPrefix + entry.key).digest('base64url');
  }

  /**
   * A store operation that cannot hold callers up: an error, or no answer
   * within `limitMs` (the request timeout unless less is left), is reported
   * (store.error) and the store skipped for this request; with no time left
   * it is skipped without being tried. Closing the client ends it at once.
   * `late` gets an answer that came after the limit (a lock to let go).
   */
  private storeCall<T>(operation: StoreOperation, run: () => Promise<T>, limitMs = this.config.timeoutMs, late?: (value: T) => void): Promise<T | undefined> {
    // a lock is let go even as the client closes: the others would wait for it to run out
    if (limitMs <= 0 || (this.closed && operation !== 'unlock')) return Promise.resolve(undefined);
    // a store that did not answer in time is left alone for a while: calls would each wait for it again
    if (operation !== 'unlock' && this.storeSkipped()) return Promise.resolve(undefined);
    const signal = this.closing.signal;
    return new Promise<T | undefined>((resolve) => {
      let settled = false;
      const finish = (value: T | undefined, message?: string): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal.removeEventListener('abort', closed);
        if (message !== undefined) this.emit({ type: 'store.error', operation, message });
        resolve(value);
      };
      const closed = (): void => finish(undefined);
      const limit = Math.ceil(limitMs);
      // (a call left only the end of a wait is no sign of a store that hangs)
      const tellsDown = limit >= Math.min(1000, this.config.timeoutMs);
      const timer = setTimeout(() => {
        if (!tellsDown) return finish(undefined, `no answer within ${limit} ms`);
        this.storeSkippedAt = this.config.now();
        finish(undefined, `no answer within ${limit} ms (the store is skipped for the next ${STORE_PAUSE_MS / 1000} s)`);
      }, limit);
      timer.unref?.();
      signal.addEventListener('abort', closed, { once: true });
      let pending: Promise<T>;
      try {
        pending = run();
      } catch (err) {
        return finish(undefined, err instanceof Error ? err.message : String(err));
      }
      Promise.resolve(pending).then(
        (value) => {
          if (settled) late?.(value);
          else finish(value);
        },
        (err: unknown) => finish(undefined, err instanceof Error ? err.message : String(err)),
      );
    });
  }
}
