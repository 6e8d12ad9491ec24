/**
 * The way to a backing service that may stall (a Redis: connected, not
 * answering), shared by everything that calls it through one client: the
 * brute-force counters, the DPoP replay store, the revocation push. The
 * contract the stores see is ServiceGateway (stores/types.ts).
 */
import type { GatedCallOptions, ServiceClient, ServiceGateway } from '../stores/types';

export interface ServiceGateOptions {
  /** What the service is, in messages (`Redis`). */
  name: string;
  /** How long a call may take (ms) before its caller goes on without it; the service is then down. */
  deadlineMs: number;
  /**
   * While down, calls are held back as long as one sent before has not been
   * answered; when none has been answered (or failed) for this long (ms),
   * one more is let through, in case that one never will be. Default 30 000.
   */
  abandonAfterMs?: number;
  /**
   * While down, after a call whose end does not tell that the client let go
   * of it (the client's own timeout, as ioredis's commandTimeout, which
   * rejects the call but keeps the command until Redis answers; or any
   * failure other than a reply of the service at or after the deadline),
   * the next call is let through this long (ms) after it, not at once.
   * Default 5000, as often as ReplayStoreHealth's probe.
   */
  retryAfterGiveUpMs?: number;
  /**
   * While down, when calls sent have gone unanswered, and nothing has
   * settled, for this long (ms) while the client says it is connected, its
   * connection is made again (ServiceClient.reconnect, when it has one): a
   * connection a network dropped without closing it answers nothing, and
   * would stay open for TCP's own timeout (minutes). Default 10 000.
   */
  reconnectAfterMs?: number;
  /**
   * The client the calls go through, as far as it tells (see ServiceClient):
   * one connection or many, whether it is connected, which rejections are
   * the service's replies or the client's own timeouts, and when it has made
   * its connection again (nothing sent on the one before is waited for any
   * more). Without it: one connection, always connected, no reply or
   * timeout told apart.
   */
  client?: ServiceClient;
  now?: () => number;
}

/** The service did not answer a call within the deadline: the service is down from then on. */
export class ServiceDeadlineError extends Error {
  constructor(name: string, ms: number) {
    super(`${name} did not answer within ${ms} ms`);
    this.name = 'ServiceDeadlineError';
  }
}

/** The call was not sent (or given up on): the service is known not to answer. */
export class ServiceDownError extends Error {
  constructor(name: string, since: number, reason: string) {
    super(`${name} is not answering (since ${new Date(since).toISOString()}: ${reason}); not asked`);
    this.name = 'ServiceDownError';
  }
}

/** Told when the service goes down (`reason`: the first failure's message) and when it answers again. */
export interface ServiceGateListener {
  down(reason: string): void;
  up(): void;
}

/**
 * What the callers of one service have learned of it. Up: every call is
 * sent, and gets its answer or, at the deadline, ServiceDeadlineError (its
 * caller goes on; the call is left to settle whenever it does). A call that
 * fails or misses the deadline takes the service down for every caller: the
 * calls still waiting are let go at once (ServiceDownError), and later ones
 * get ServiceDownError at once without being sent, so that no request waits
 * a deadline again while it is known down, and a stalled service's client
 * does not queue one command per request (ioredis keeps every command it
 * sent until it is answered or the connection drops, whatever the caller's
 * deadline). While down, one call is let through when nothing sent before is
 * still unanswered (on one connection a later command cannot be answered
 * before an earlier one) and the client is connected: a service that fails
 * fast while connected is thus asked by each call, as before, and a stalled
 * one is asked again only once what it holds comes back (it answered) or
 * is gone (the client made its connection again: see ServiceClient). A call
 * whose end does not tell that its client let go of it (the client's own
 * timeout) is taken as held for retryAfterGiveUpMs; one that never ends,
 * for abandonAfterMs; and a connected client whose calls go unanswered for
 * reconnectAfterMs is made to connect again (a dead connection). The first
 * call begun after the outage was seen that
 * gets an answer within its deadline ends it: a later answer only tells
 * that the connection is free again (a Redis answering just past the
 * deadline, under load or in a fork pause, stays down rather than flap down
 * and up with every answer). A probe (ReplayStoreHealth's) is such a call.
 * A client over many connections (a Redis Cluster: oneConnection false) is
 * never held back: each call is sent and has its own deadline, and one
 * failing does not let go of the others; the gate still tells its callers
 * when a call failed and when one was answered again.
 */
export class ServiceGate implements ServiceGateway {
  private outage: { since: number; reason: string } | undefined;
  /**
   * Calls sent whose answer (or failure) has not come, past their deadline
   * or not: those sent since the service was last seen up, or since the
   * client's connection was last made (what it held before was resent or
   * dropped: a dropped call never settles).
   */
  private pending = 0;
  /** Counts the times `pending` was started afresh: a call of an earlier round settling leaves it alone. */
  private round = 0;
  /** While down, no call before this: one that ended without telling its client let go of it (see retryAfterGiveUpMs). */
  private retryAt = Number.NEGATIVE_INFINITY;
  /** When a call was last let through while down, or last settled, or the outage began. */
  private lastProgress = Number.NEGATIVE_INFINITY;
  /** The calls sent while up that are still waiting: let go when the service goes down. */
  private readonly waiting = new Set<(why: Error) => void>();
  private readonly listeners = new Set<ServiceGateListener>();
  private readonly now: () => number;
  private readonly client: ServiceClient | undefined;
  /** One connection (see ServiceClient.oneConnection): while down, calls are held back. */
  private readonly holdBack: boolean;
  private readonly abandonAfterMs: number;
  private readonly retryAfterGiveUpMs: number;
  private readonly reconnectAfterMs: number;
  /** When the gate last had the client connect again. */
  private reconnectedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: ServiceGateOptions) {
    this.now = options.now ?? Date.now;
    const settings = settingsOf(options);
    this.abandonAfterMs = settings.abandonAfterMs;
    this.retryAfterGiveUpMs = settings.retryAfterGiveUpMs;
    this.reconnectAfterMs = settings.reconnectAfterMs;
    this.client = options.client;
    this.holdBack = options.client?.oneConnection ?? true;
    options.client?.onConnect(() => this.reconnected());
  }

  get up(): boolean {
    return this.outage === undefined;
  }

  /** The first failure of the outage under way (its message), if any. */
  get reason(): string | undefined {
    return this.outage?.reason;
  }

  get deadlineMs(): number {
    return this.options.deadlineMs;
  }

  /** Calls sent and not answered yet (a stalled service: each one a command its client holds). */
  get unsettled(): number {
    return this.pending;
  }

  /** Whether a call would be sent now (see the class). */
  mayCall(): boolean {
    if (this.outage === undefined || !this.holdBack) return true;
    // not connected: a call would only wait in the client's queue (its deadline, for nothing)
    if (this.client !== undefined && !this.client.connected()) return false;
    const now = this.now();
    if (this.pending === 0) return now >= this.retryAt;
    const quietMs = now - this.lastProgress;
    if (this.client?.reconnect && quietMs >= this.reconnectAfterMs && now - this.reconnectedAt >= this.reconnectAfterMs) {
      // connected, and nothing answered for that long: a dead connection (the client's 'ready' on the new one frees the calls)
      this.reconnectedAt = now;
      this.client.reconnect();
      return false;
    }
    return quietMs >= this.abandonAfterMs;
  }

  /** Why a call is not sent now. */
  downError(): ServiceDownError {
    const { since, reason } = this.outage ?? { since: this.now(), reason: 'unknown' };
    return new ServiceDownError(this.options.name, since, reason);
  }

  /** `call()` when mayCall(), with the deadline (see the class); else ServiceDownError, or `otherwise`'s answer, at once. */
  run<T>(call: () => Promise<T>, options: GatedCallOptions<T> = {}): Promise<T> {
    if (!this.mayCall()) return this.instead(this.downError(), options);
    let promise: Promise<T>;
    try {
      promise = call();
    } catch (err) {
      promise = Promise.reject(err);
    }
    return this.track(promise, options);
  }

  /**
   * A call already sent (the caller checked mayCall()), with the deadline:
   * its answer, or why not (or `otherwise`'s answer instead).
   */
  track<T>(promise: Promise<T>, options: GatedCallOptions<T> = {}): Promise<T> {
    const startedAt = this.now();
    const sentWhileUp = this.outage === undefined;
    if (!sentWhileUp) this.lastProgress = startedAt;
    this.pending++;
    const round = this.round;
    /** The call's promise settled; `released`: in a way that tells its client holds it no more. */
    const settled = (released: boolean): void => {
      const now = this.now();
      this.lastProgress = now;
      if (round !== this.round) return;
      this.pending--;
      if (!released) this.retryAt = now + this.retryAfterGiveUpMs;
    };
    return new Promise<T>((resolve, reject) => {
      let done = false;
      // past its deadline: its answer, when it comes, says the service answers slower than the deadline
      let expired = false;
      const finish = (): boolean => {
        if (done) return false;
        done = true;
        clearTimeout(timer);
        this.waiting.delete(letGo);
        return true;
      };
      const fail = (why: Error): void => {
        if (finish()) this.instead(why, options).then(resolve, reject);
      };
      const letGo = (why: Error): void => fail(why);
      const timer = setTimeout(() => {
        expired = true;
        const why = new ServiceDeadlineError(this.options.name, this.options.deadlineMs);
        fail(why);
        this.failed(why);
      }, this.options.deadlineMs);
      timer.unref();
      if (sentWhileUp && this.holdBack) this.waiting.add(letGo);
      promise.then(
        (value) => {
          settled(true);
          // an answer within the deadline, to a call begun in the outage, ends it; a later one only frees the connection
          if (!expired) this.succeeded(startedAt);
          if (finish()) resolve(value);
        },
        (err: unknown) => {
          const answer = options.isAnswer?.(err) === true;
          const callError = !answer && options.isCallError?.(err) === true;
          // the service answered (an error reply is an answer), or the call failed before its deadline
          // (refused, closed): the client let go of it. Its own timeout, or a failure past the deadline,
          // says nothing of that: ioredis keeps a command its commandTimeout rejected until Redis answers
          settled(
            answer ||
              callError ||
              this.client?.isReply(err) === true ||
              (!expired && this.now() - startedAt < this.options.deadlineMs && this.client?.isClientTimeout(err) !== true),
          );
          if (answer) {
            if (!expired) this.succeeded(startedAt);
            if (finish()) reject(err);
            return;
          }
          // a call already given up on said what it had to
          if (done) return;
          const why = err instanceof Error ? err : new Error(String(err));
          fail(why);
          // the service answered, with an error of this call's own: neither down nor back
          if (!callError) this.failed(why);
        },
      );
    });
  }

  /** A call begun at `startedAt` was answered: that ends the outage when it began after the outage was seen. */
  succeeded(startedAt: number): void {
    if (this.outage === undefined || startedAt < this.outage.since) return;
    this.outage = undefined;
    // what is still unanswered from the outage is counted no more: the next one starts from nothing
    this.forgetPending();
    for (const l of [...this.listeners]) l.up();
  }

  /** A call failed: the service is down from now (nothing when it is already). */
  failed(err: unknown): void {
    if (this.outage !== undefined) return;
    const reason = err instanceof Error ? err.message : String(err);
    this.outage = { since: this.now(), reason };
    // the calls it holds are given abandonAfterMs from now
    this.lastProgress = this.outage.since;
    const letGo = [...this.waiting];
    this.waiting.clear();
    const why = this.downError();
    for (const l of letGo) l(why);
    for (const l of [...this.listeners]) l.down(reason);
  }

  /** Throws a TypeError when `options` asks for other settings than this gate's (see sharedServiceGate()). */
  checkSameSettings(options: ServiceGateOptions): void {
    const mine = settingsOf(this.options);
    const theirs = settingsOf(options);
    for (const key of Object.keys(mine) as Array<keyof typeof mine>) {
      if (mine[key] !== theirs[key]) {
        throw new TypeError(`the gate of this ${mine.name} client has ${key} ${String(mine[key])}; another part on the client asked for ${String(theirs[key])} (one set of settings per client)`);
      }
    }
  }

  /**
   * Tells `listener` of every change from now on; the function returned
   * stops that. The gate lives as long as its client (the process, often)
   * and holds `listener`: one that may be dropped without a word should
   * hold its owner weakly (as ReplayStoreHealth does).
   */
  watch(listener: ServiceGateListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** The client made its connection again: what it held on the one before is resent (answered soon) or dropped (never). */
  private reconnected(): void {
    this.forgetPending();
    this.lastProgress = this.now();
  }

  private forgetPending(): void {
    this.round++;
    this.pending = 0;
    this.retryAt = Number.NEGATIVE_INFINITY;
  }

  private instead<T>(why: Error, options: GatedCallOptions<T>): Promise<T> {
    if (!options.otherwise) return Promise.reject(why);
    try {
      return Promise.resolve(options.otherwise(why));
    } catch (err) {
      return Promise.reject(err);
    }
  }
}

/** The settings of `options` that make a gate behave as it does, defaults applied. */
function settingsOf(options: ServiceGateOptions) {
  const { name, deadlineMs, abandonAfterMs = 30_000, retryAfterGiveUpMs = 5000, reconnectAfterMs = 10_000 } = options;
  return { name, deadlineMs, abandonAfterMs, retryAfterGiveUpMs, reconnectAfterMs };
}

const shared = new WeakMap<object, ServiceGate>();

/**
 * The gate of `client` (an ioredis client, say) in this process, made on
 * first use: everything that calls the service through one client shares
 * what was learned of it (a stall the brute-force counters met is known to
 * the DPoP replay store at once), whichever issuer or requireBearer() uses it.
 * One gate has one set of settings: asked for another (a deadline of its own,
 * say), it throws a TypeError rather than quietly keep the first caller's.
 * The client's ServiceClient is the first caller's (all read the same client).
 */
export function sharedServiceGate(client: object, options: ServiceGateOptions): ServiceGate {
  let gate = shared.get(client);
  if (!gate) shared.set(client, (gate = new ServiceGate(options)));
  else gate.checkSameSettings(options);
  return gate;
}
