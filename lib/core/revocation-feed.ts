/**
 * How revocations travel between the instances of one issuer (and
 * issuer-bound verifiers): every instance holds a RevocationState; a feed
 * applies an instance's revocations to its own state at once and makes
 * them reach the others.
 *
 * - InProcessRevocationHub: states in one process (tests, several issuers
 *   in one app).
 * - RedisRevocationFeed: Redis pub/sub for the push (others learn within a
 *   message's latency), a snapshot kept in Redis for instances that start
 *   later, and a periodic resync that bounds how long a lost message (a
 *   dropped subscription, a restart of Redis) can go unnoticed: the bound is
 *   max(push latency, resyncMs).
 *
 * The authoritative copy stays in the store (RevocationStore); a feed is the
 * fast path. Events are monotone (see revocation.ts), so echoes, duplicates
 * and reordering are harmless.
 */
import type { RevocationSnapshot, RevocationStore } from '../stores/types';
import type { RevocationEvent, RevocationState } from './revocation';

export interface RevocationFeed {
  /** Applies the events to this instance's state at once, then sends them to the others. */
  publish(events: RevocationEvent | RevocationEvent[]): Promise<void>;
  /** Subscribes and loads what the feed already holds; resolves once loaded. */
  start(): Promise<void>;
  close(): Promise<void>;
}

const asList = (events: RevocationEvent | RevocationEvent[]): RevocationEvent[] => (Array.isArray(events) ? events : [events]);

/** Every state attached to one hub sees every event published by any of them. */
export class InProcessRevocationHub {
  private readonly states = new Set<RevocationState>();

  feed(state: RevocationState): RevocationFeed {
    const states = this.states;
    return {
      publish: async (events) => {
        const list = asList(events);
        state.apply(list);
        for (const s of states) if (s !== state) s.apply(list);
      },
      start: async () => {
        for (const s of states) state.load(s.snapshot());
        states.add(state);
      },
      close: async () => {
        states.delete(state);
      },
    };
  }
}

/** The Redis commands the feed uses (an ioredis client fits). */
export interface RedisCommandClient {
  eval(script: string, numkeys: number, ...args: (string | number)[]): Promise<unknown>;
  zremrangebyscore(key: string, min: number | string, max: number | string): Promise<number>;
  hgetall(key: string): Promise<Record<string, string>>;
  hdel(key: string, ...fields: string[]): Promise<number>;
}

/** A connection in subscriber mode (an ioredis client used only for subscribe). */
export interface RedisSubscriberClient {
  subscribe(channel: string): Promise<unknown>;
  unsubscribe(channel: string): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  off(event: 'message', listener: (channel: string, message: string) => void): unknown;
}

export interface RedisRevocationFeedOptions {
  state: RevocationState;
  /** Runs commands (never put in subscriber mode). */
  redis: RedisCommandClient;
  /** A separate connection for pub/sub. */
  subscriber: RedisSubscriberClient;
  /** Key and channel prefix; one per issuer (default `ecc:revocation`). */
  prefix?: string;
  /** Full reload from Redis every resyncMs (default 30 000): bounds a lost message. */
  resyncMs?: number;
  /** Longest token lifetime, seconds: revoked clients older than this are dropped from Redis. */
  maxTokenTtl: number;
  /** Seconds of clock skew verifiers allow on `exp`: denylist entries stay in Redis that much longer. */
  clockTolerance?: number;
  now?: () => number;
  /** Told about failed resyncs and unreadable messages; the feed carries on. */
  onError?: (err: unknown) => void;
}

/**
 * KEYS: tokens zset, generations hash, revoked hash, channel. ARGV: message, then per event
 * (type, client id, a, b). Writes each event monotonically (a generation only
 * rises, the earliest revocation time stays) and publishes the message, in one round trip.
 */
const WRITE_AND_PUBLISH = `
local i = 2
while i <= #ARGV do
  local kind, client, a, b = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if kind == 'token' then
    redis.call('ZADD', KEYS[1], tonumber(b), cjson.encode({a, client}))
  elseif kind == 'tokens' then
    local cur = tonumber(redis.call('HGET', KEYS[2], client) or '0')
    if tonumber(a) > cur then redis.call('HSET', KEYS[2], client, a) end
  elseif kind == 'client' then
    local cur = redis.call('HGET', KEYS[3], client)
    if (not cur) or tonumber(a) < tonumber(cur) then redis.call('HSET', KEYS[3], client, a) end
  end
  i = i + 4
end
return redis.call('PUBLISH', KEYS[4], ARGV[1])
`;

/** Denylisted tokens not yet expired, with their exp (the zset score). */
const TOKENS_WITH_EXP = "return redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES')";

export class RedisRevocationFeed implements RevocationFeed {
  private readonly keys: { tokens: string; generations: string; revoked: string; channel: string };
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private readonly onMessage = (channel: string, message: string): void => {
    if (channel !== this.keys.channel) return;
    try {
      const events = JSON.parse(message) as unknown;
      if (Array.isArray(events)) this.options.state.apply(events as RevocationEvent[]);
    } catch (err) {
      this.options.onError?.(err);
    }
  };

  constructor(private readonly options: RedisRevocationFeedOptions) {
    const p = options.prefix ?? 'ecc:revocation';
    this.keys = { tokens: `${p}:tokens`, generations: `${p}:generations`, revoked: `${p}:revoked`, channel: `${p}:events` };
    this.now = options.now ?? Date.now;
  }

  async publish(events: RevocationEvent | RevocationEvent[]): Promise<void> {
    const list = asList(events);
    this.options.state.apply(list);
    const args: (string | number)[] = [JSON.stringify(list)];
    for (const e of list) {
      if (e.type === 'token') args.push('token', e.clientId, e.jti, e.exp);
      else if (e.type === 'tokens') args.push('tokens', e.clientId, e.generation, e.at);
      else args.push('client', e.clientId, e.at, 0);
    }
    const k = this.keys;
    await this.options.redis.eval(WRITE_AND_PUBLISH, 4, k.tokens, k.generations, k.revoked, k.channel, ...args);
  }

  /** Subscribes, then loads the snapshot (in that order: nothing published in between is missed), then resyncs every resyncMs. */
  async start(): Promise<void> {
    this.options.subscriber.on('message', this.onMessage);
    await this.options.subscriber.subscribe(this.keys.channel);
    await this.resync();
    if (!this.timer) {
      this.timer = setInterval(() => {
        this.resync().catch((err: unknown) => this.options.onError?.(err));
      }, this.options.resyncMs ?? 30_000);
      this.timer.unref();
    }
  }

  /** Reads the whole snapshot from Redis into the state, and drops what has expired there. */
  async resync(): Promise<void> {
    const { redis } = this.options;
    const now = this.now();
    const nowS = Math.floor(now / 1000) - (this.options.clockTolerance ?? 0);
    const k = this.keys;
    await redis.zremrangebyscore(k.tokens, '-inf', `(${nowS}`);
    const [flat, generations, revoked] = await Promise.all([
      redis.eval(TOKENS_WITH_EXP, 1, k.tokens, nowS) as Promise<string[]>,
      redis.hgetall(k.generations),
      redis.hgetall(k.revoked),
    ]);
    const snapshot: RevocationSnapshot = { tokens: [], clients: [] };
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const [jti, clientId] = JSON.parse(flat[i]) as [string, string];
      snapshot.tokens.push({ jti, client_id: clientId, exp: Number(flat[i + 1]) });
    }
    const oldest = now - this.options.maxTokenTtl * 1000;
    const stale = Object.entries(revoked).filter(([, at]) => Number(at) < oldest).map(([id]) => id);
    if (stale.length > 0) await redis.hdel(k.revoked, ...stale);
    const ids = new Set([...Object.keys(generations), ...Object.keys(revoked)]);
    for (const id of ids) {
      const at = revoked[id] !== undefined && !stale.includes(id) ? Number(revoked[id]) : null;
      snapshot.clients.push({ client_id: id, generation: Number(generations[id] ?? 0), revoked_at: at });
    }
    this.options.state.load(snapshot);
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.options.subscriber.off('message', this.onMessage);
    await this.options.subscriber.unsubscribe(this.keys.channel);
  }
}

export interface StoreRevocationFeedOptions {
  state: RevocationState;
  store: RevocationStore;
  /** Longest token lifetime, seconds: how far back revoked clients are listed. */
  maxTokenTtl: number;
  /** Reload from the store every resyncMs (default 2 000, the client-cache bound). */
  resyncMs?: number;
  /** Expired denylist entries are deleted from the store at most this often (ms, default 60 000). */
  purgeEveryMs?: number;
  /**
   * Tells other instances at once (e.g. PostgreSQL NOTIFY); they call
   * `resync()` when told (LISTEN). Without it, others learn within resyncMs.
   */
  notify?: (events: RevocationEvent[]) => Promise<void>;
  now?: () => number;
  onError?: (err: unknown) => void;
  /**
   * A notification that failed (the revocation is stored and applied here
   * already; the others learn of it within resyncMs): publish() resolves all
   * the same. Default: onError.
   */
  onNotifyError?: (err: unknown) => void;
}

/**
 * A feed over the shared store alone (no Redis): every instance reloads the
 * revocations every resyncMs (default 2 s), sooner when a notification
 * arrives. The events published here must already be persisted (see
 * Revoker).
 */
export class StoreRevocationFeed implements RevocationFeed {
  private timer: NodeJS.Timeout | undefined;
  private lastPurge = Number.NEGATIVE_INFINITY;
  private running: Promise<void> | undefined;
  /** The store's revocationsVersion() at the last reload. */
  private loadedVersion: string | number | undefined;
  private readonly now: () => number;

  constructor(private readonly options: StoreRevocationFeedOptions) {
    this.now = options.now ?? Date.now;
  }

  async publish(events: RevocationEvent | RevocationEvent[]): Promise<void> {
    const list = asList(events);
    this.options.state.apply(list);
    try {
      await this.options.notify?.(list);
    } catch (err) {
      // stored and in force here: a failed ring is no failed revocation
      (this.options.onNotifyError ?? this.options.onError)?.(err);
    }
  }

  async start(): Promise<void> {
    await this.resync();
    if (!this.timer) {
      this.timer = setInterval(() => {
        this.resync().catch((err: unknown) => this.options.onError?.(err));
      }, this.options.resyncMs ?? 2_000);
      this.timer.unref();
    }
  }

  /**
   * Reloads from the store (concurrent calls share one read); purges expired
   * entries now and then. When the store tells a version of its revocations
   * (revocationsVersion) and it has not moved since the last reload, the
   * reload is skipped, except right after a purge (every purgeEveryMs): a
   * full reload at least that often whatever the version says.
   */
  resync(): Promise<void> {
    this.running ??= (async () => {
      const { store } = this.options;
      const now = this.now();
      let full = false;
      if (now - this.lastPurge >= (this.options.purgeEveryMs ?? 60_000)) {
        await store.purgeExpiredRevocations(new Date(now));
        this.lastPurge = now;
        full = true;
      }
      // read before the list: a change made while listing moves it again, and the next resync reloads
      const version = store.revocationsVersion ? await store.revocationsVersion() : undefined;
      if (!full && version !== undefined && version === this.loadedVersion) return;
      const snapshot = await store.listRevocations(new Date(now), new Date(now - this.options.maxTokenTtl * 1000));
      this.options.state.load(snapshot);
      this.loadedVersion = version;
    })().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/**
 * The write side, for /oauth/revoke and the CLI: persist in the store, then
 * publish, so that a restart never forgets and the others hear at once.
 */
export class Revoker {
  constructor(
    private readonly store: RevocationStore,
    private readonly feed: RevocationFeed,
  ) {}

  /** RFC 7009: one token (its jti, owner and exp in epoch seconds). */
  async token(jti: string, clientId: string, exp: number): Promise<void> {
    await this.store.revokeToken({ jti, clientId, exp: new Date(exp * 1000) });
    await this.feed.publish({ type: 'token', jti, clientId, exp });
  }

  /** revoke-tokens: every token issued to the client so far; answers the new generation. */
  async clientTokens(clientId: string, at: Date): Promise<number> {
    const generation = await this.store.bumpTokenGeneration(clientId, at);
    await this.feed.publish({ type: 'tokens', clientId, generation, at: at.getTime() });
    return generation;
  }

  /** An update that took something away: call after ClientStore.updateClient() raised the generation (the store keeps it). */
  async clientTokensRaised(clientId: string, generation: number, at: Date): Promise<void> {
    await this.feed.publish({ type: 'tokens', clientId, generation, at: at.getTime() });
  }

  /** revoke: call after ClientStore.revokeClient() answered true (the store keeps revoked_at). */
  async client(clientId: string, at: Date): Promise<void> {
    await this.feed.publish({ type: 'client', clientId, at: at.getTime() });
  }
}
