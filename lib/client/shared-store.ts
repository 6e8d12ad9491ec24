import { createHash } from 'node:crypto';
import { cachedToken, type CachedToken, type Entry } from './cache-entry';
import { echoed, TokenClientClosedError } from './errors';
import type { ClientConfig, StoreOperation, TokenClientEvent, TokenRequestReason } from './options';
import type { FoundToken, ReleaseLock, StoredToken, TokenStore } from './store';
import type { TokenEndpoint } from './token-endpoint';
import { ACCESS_TOKEN_CHARS, MAX_LIFETIME_SECONDS } from './token-request';

const noop = (): void => undefined;

/** How long the shared store is skipped after a call of it got no answer within its time. */
const STORE_PAUSE_MS = 30_000;

/** The shared store as one token request sees it. */
interface Shared {
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

/**
 * What a store's failure says in a `store.error` event: its message (or the
 * value thrown), clipped and escaped as the token endpoint's text is: a store
 * may put anything in it, a value it read included, and events end up in
 * logs, where a newline or a bidi override could forge or reorder lines.
 */
function storeSays(err: unknown): string {
  let text: string;
  try {
    // an Error's message need not be a string (a subclass, or a message assigned later): undefined, a number, an object
    const message = err instanceof Error ? err.message : err;
    text = typeof message === 'string' ? message : message === undefined && err instanceof Error ? String(err.name) : String(message);
  } catch {
    text = 'a value that is neither an Error nor printable'; // (an object without toString)
  }
  return echoed(text);
}

/**
 * Why a stored entry cannot be used, `undefined` when it can. It is held to
 * what a token endpoint's answer is held to (an access token an
 * Authorization header can carry, a type this client sends, a lifetime the
 * endpoint path could have given it: at least 1 s, as the token endpoint's
 * `expires_in` must be, at most 24 h or `defaultTtl`): whoever can write to
 * the store (another instance, a bug, whoever reaches Redis) could otherwise
 * hand this one a token that splits its requests' headers, or one that never
 * expires. The reason never quotes the value.
 */
function unusable(config: ClientConfig, found: unknown, now: number): string | undefined {
  const t = found as { [K in keyof StoredToken]?: unknown };
  if (typeof t !== 'object' || t === null || typeof t.accessToken !== 'string' || typeof t.tokenType !== 'string' || typeof t.scope !== 'string' || !Number.isFinite(t.expiresAt) || !Number.isFinite(t.lifetime)) {
    return 'not a token record (accessToken, tokenType, scope, expiresAt, lifetime)';
  }
  if (!ACCESS_TOKEN_CHARS.test(t.accessToken)) return 'its access token holds characters an Authorization header cannot carry';
  const type = t.tokenType.toLowerCase();
  const pop = config.pop;
  if (type !== 'bearer' && (pop === undefined || type !== pop.scheme.toLowerCase())) return `its token type is not one this client sends (Bearer${pop ? ` or ${pop.scheme}` : ''})`;
  const lifetime = t.lifetime as number;
  const longest = Math.max(MAX_LIFETIME_SECONDS * 1000, config.defaultTtlMs);
  if (!(lifetime >= 1000 && lifetime <= longest)) return `its lifetime (${lifetime} ms) is not between 1000 and ${longest} ms`;
  return undefined;
}

/**
 * A stored entry as this instance uses it: its expiry no later than what is
 * left of it. That is at most its lifetime from now (an instance whose clock
 * runs ahead wrote an `expiresAt` too late by as much), and at most the
 * store's `ttlMs` when it tells (counted from the write, whoever's clock).
 */
function bounded(found: FoundToken, now: number): StoredToken {
  const ttl = found.ttlMs;
  let expiresAt = Math.min(found.expiresAt, now + found.lifetime);
  if (typeof ttl === 'number' && ttl >= 0) expiresAt = Math.min(expiresAt, now + ttl);
  return { accessToken: found.accessToken, tokenType: found.tokenType, scope: found.scope, expiresAt, lifetime: found.lifetime };
}

/**
 * The store shared by processes, under the in-process cache: a token another
 * process stored is taken from there; one this process gets is written
 * there; with a store that locks, one process at a time asks the token
 * endpoint for a key. A store that fails or is slow is skipped, never fails
 * a call.
 */
export class SharedStore {
  private storeKeyPrefix: string | undefined;
  /** When a store call last got no answer in time: calls are skipped for STORE_PAUSE_MS from then. */
  private storeSkippedAt: number | undefined;

  constructor(
    private readonly config: ClientConfig,
    private readonly store: TokenStore,
    private readonly endpoint: TokenEndpoint,
    /** Aborted when the client closes: ends waits and store calls (but for letting a lock go). */
    private readonly closing: AbortSignal,
    private readonly emit: (event: TokenClientEvent) => void,
  ) {}

  /**
   * A token for `entry` by way of the store: the one found there, else one
   * token request, under the store's lock when it has one.
   */
  async obtain(entry: Entry, reason: TokenRequestReason, rejected: string | undefined): Promise<CachedToken> {
    const store = this.store;
    const shared: Shared = {
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

  /** A usable token of the shared store, neither the one the API refused nor the one held already. */
  private async fromStore(entry: Entry, shared: Shared, limitMs: number): Promise<CachedToken | undefined> {
    const { key, rejected, held } = shared;
    const store = this.store;
    const stored = await this.storeCall('get', () => store.get(key), limitMs);
    if (!stored) return undefined;
    const now = this.config.now();
    const why = unusable(this.config, stored, now);
    if (why !== undefined) {
      // a miss, told: the token request's answer overwrites the entry
      this.emit({ type: 'store.error', operation: 'get', message: `a stored token was not used: ${why}` });
      return undefined;
    }
    // expired by this instance's clock: a plain miss (a store that keeps entries past their ttlMs, or clocks that differ by a little)
    if (now >= stored.expiresAt) return undefined;
    if (stored.accessToken === rejected) {
      this.storeCall('delete', () => store.delete(key)).catch(noop);
      return undefined;
    }
    if (stored.accessToken === held) return undefined;
    const token = cachedToken(this.config, bounded(stored, now));
    if (now >= token.usableUntil) return undefined;
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
      this.unlock(release, !this.closing.aborted);
      throw err;
    }
  }

  private unlock(release: ReleaseLock, failed: boolean): void {
    this.storeCall('unlock', () => release(failed)).catch(noop);
  }

  /** Waits `ms`, or less when the client is closed meanwhile (then rejects). */
  private async pause(ms: number): Promise<void> {
    const signal = this.closing;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
    if (signal.aborted) throw new TokenClientClosedError();
  }

  /**
   * One token request (with its retries). The answer goes to the shared store;
   * a lock holder (`release`) lets go once it is written, since the others
   * read it from there.
   */
  private async request(entry: Entry, reason: TokenRequestReason, shared: Shared, release?: ReleaseLock): Promise<CachedToken> {
    const stored = await this.endpoint.request(entry, reason);
    const store = this.store;
    const key = shared.key;
    const written = this.storeCall('set', () => Promise.resolve(store.set(key, stored, stored.expiresAt - this.config.now())).then(() => true));
    // a write that failed leaves the others nothing to read: they are told to ask on their own
    if (release) written.then((done) => this.unlock(release, done !== true), noop);
    else written.catch(noop);
    return cachedToken(this.config, stored);
  }

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
    if (limitMs <= 0 || (this.closing.aborted && operation !== 'unlock')) return Promise.resolve(undefined);
    // a store that did not answer in time is left alone for a while: calls would each wait for it again
    if (operation !== 'unlock' && this.storeSkipped()) return Promise.resolve(undefined);
    const signal = this.closing;
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
        return finish(undefined, storeSays(err));
      }
      Promise.resolve(pending).then(
        (value) => {
          if (settled) late?.(value);
          else finish(value);
        },
        (err: unknown) => finish(undefined, storeSays(err)),
      );
    });
  }
}
