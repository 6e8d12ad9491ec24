/**
 * A doorbell for revocations over Redis pub/sub: an instance that revoked
 * publishes one short message; every instance subscribed reloads the
 * revocations from the store at once. The store stays the only copy (a lost
 * message only delays an instance until its next periodic reload), so any
 * store gets push delivery where a Redis is shared, as PostgreSQL has with
 * LISTEN/NOTIFY.
 */
import { withDeadline } from '../shared/deadline';
import { REDIS_DEADLINE_MS } from './redis-deadline';
import type { RevocationNotifier, ServiceGateway } from './types';

/** The commands used on the shared connection (an ioredis client fits). */
export interface RedisPublishClient {
  publish(channel: string, message: string): Promise<unknown>;
  /** A new connection with the same options: subscriber mode needs a connection of its own. */
  duplicate(): RedisDoorbellSubscriber;
}

/** The connection in subscriber mode (what ioredis's duplicate() gives). */
export interface RedisDoorbellSubscriber {
  /** ioredis: `wait`, `connecting`, `connect`, `ready`, … (absent: taken as ready). */
  readonly status?: string;
  subscribe(channel: string): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'ready', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  quit(): Promise<unknown>;
  /** ioredis: `disconnect(true)` drops the connection and makes a new one (subscriptions are made again on it). */
  disconnect(reconnect?: boolean): void;
  /** Allowed in subscriber mode; absent: the connection is never checked. */
  ping?(): Promise<unknown>;
}

export interface RedisRevocationNotifierOptions {
  redis: RedisPublishClient;
  /** One channel per issuer sharing a Redis (default `ecc:revocation:changed`). */
  channel?: string;
  /** Told when a publish fails; the revocation itself is already stored, others reload within their resync. */
  onError?: (err: unknown) => void;
  /**
   * The gate of `redis` (core/service-gate.ts's), shared with whatever else calls that client: a
   * publish while Redis is known not to answer is not sent (reported at once), and a stall it meets
   * is known to the others. Default: each publish waits REDIS_DEADLINE_MS at most on its own.
   */
  gate?: ServiceGateway;
  /**
   * How often (ms) the subscribed connection is asked whether it still answers (PING, within the same
   * time or 5 s): one that does not, a connection a network dropped without a word, is made again.
   * Default 30 000, as PostgreSQL's LISTEN check.
   */
  checkEveryMs?: number;
}

const LIVENESS_CHECK_MS = 30_000;

/**
 * How long listenRevocations() waits, in all, for a connection still being
 * made and then for the subscription, before it goes on without it (and
 * reports why): a server's start waits that long at most for a Redis that
 * is connected but does not answer.
 */
const CONNECT_WAIT_MS = 2000;

/** Resolves at the connection's first 'ready' or 'error', or after `ms`. */
function firstConnection(subscriber: RedisDoorbellSubscriber, ms: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    timer.unref?.();
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    subscriber.on('ready', done);
    subscriber.on('error', done);
  });
}

export class RedisRevocationNotifier implements RevocationNotifier {
  private readonly channel: string;

  constructor(private readonly options: RedisRevocationNotifierOptions) {
    this.channel = options.channel ?? 'ecc:revocation:changed';
  }

  /** Best effort: a failed publish is reported and never fails the revocation (it is persisted). */
  async notifyRevocations(): Promise<void> {
    try {
      // a stalled Redis (connected, not answering) would hold up the revocation that rings
      const { gate, redis } = this.options;
      if (gate) await gate.run(() => redis.publish(this.channel, '1'));
      else await withDeadline(redis.publish(this.channel, '1'), REDIS_DEADLINE_MS, () => new Error(`Redis did not answer PUBLISH within ${REDIS_DEADLINE_MS} ms`));
    } catch (err) {
      this.options.onError?.(err);
    }
  }

  /**
   * Subscribes on a connection of its own. `onNotify` runs on each message,
   * and again whenever the connection comes back after a loss (ioredis
   * subscribes again by itself; a subscription that failed at start is made
   * then), to catch up on what was published meanwhile.
   */
  async listenRevocations(onNotify: () => void): Promise<() => Promise<void>> {
    const subscriber = this.options.redis.duplicate();
    let subscribed = false;
    let subscribing: Promise<void> | undefined;
    let readyBefore = false;
    const subscribe = (): Promise<void> =>
      (subscribing ??= subscriber.subscribe(this.channel).then(
        () => {
          subscribed = true;
        },
        (err: unknown) => {
          // Redis down: the next 'ready' tries again
          subscribing = undefined;
          this.options.onError?.(err);
        },
      ));
    subscriber.on('message', (channel) => {
      if (channel === this.channel) onNotify();
    });
    subscriber.on('ready', () => {
      if (readyBefore) onNotify(); // back after a loss: catch up on what was published meanwhile
      readyBefore = true;
      if (!subscribed) void subscribe();
    });
    // without a listener, ioredis prints every connection error; the periodic reload covers the gap
    subscriber.on('error', (err) => this.options.onError?.(err));
    // a connection still being made (ioredis connects in the background; with its offline queue off a
    // subscribe now fails): the 'ready' listener subscribes, and only no connection at all is reported
    const waitUntil = Date.now() + CONNECT_WAIT_MS;
    if (subscriber.status !== undefined && subscriber.status !== 'ready') await firstConnection(subscriber, CONNECT_WAIT_MS);
    // a stalled Redis: start without the subscription (it completes when Redis answers; the periodic reload covers the gap)
    const left = Math.max(0, waitUntil - Date.now());
    await withDeadline(subscribing ?? (subscribed ? Promise.resolve() : subscribe()), left, () => new Error(`Redis did not answer SUBSCRIBE within ${CONNECT_WAIT_MS} ms`)).catch(
      (err: unknown) => this.options.onError?.(err),
    );
    // a connection a network dropped without closing it looks open for hours (TCP keepalive): nothing would ring
    // again until then, so it is asked now and then, and made again when it does not answer
    const every = this.options.checkEveryMs ?? LIVENESS_CHECK_MS;
    const timeout = Math.min(5_000, every);
    let checking = false;
    const check = setInterval(() => {
      if (checking || !subscribed || !subscriber.ping) return;
      checking = true;
      withDeadline(subscriber.ping(), timeout, () => new Error(`Redis did not answer PING on the revocation subscription within ${timeout} ms; reconnecting`))
        .catch((err: unknown) => {
          this.options.onError?.(err);
          subscriber.disconnect(true);
        })
        .finally(() => {
          checking = false;
        });
    }, every);
    check.unref?.();
    return async () => {
      clearInterval(check);
      await withDeadline(subscriber.quit(), REDIS_DEADLINE_MS, () => new Error('QUIT')).catch(() => subscriber.disconnect());
    };
  }
}
