import type { RequestHandler } from 'express';
import {
  checkDpopMode,
  checkInteger,
  checkKnown,
  checkMetrics,
  checkNumber,
  checkObject,
  checkPublicUrl,
  checkString,
  checkUrl,
  parseDpop,
  type BearerOptions,
} from './config';
import { MemoryReplayStore, type ReplayStore } from './core/dpop';
import { replayStoreState } from './core/issuer-health';
import { ReplayStoreHealth } from './core/replay-store-health';
import { sharedServiceGate } from './core/service-gate';
import { RemoteJwks, StaticKeys, loadJwks } from './core/jwks';
import type { KeyResolver, LoadedKey } from './core/keys';
import { RejectionLog } from './core/rejection-log';
import { MAX_ACCESS_TOKEN_TTL, RevocationState } from './core/revocation';
import { RevocationListPoller } from './core/revocation-list';
import { scopeOption } from './core/scope';
import { AccessTokenVerifier } from './core/verifier';
import { jwkThumbprint } from './jwt/thumbprint';
import { bearerMiddleware, type BearerDpopOptions } from './express/require-bearer';
import { LoggerFanout, resolveLogger, type ResolvedLogger } from './logger';
import { redisGateOptions } from './stores/redis-client';
import { RedisReplayStore, type RedisSetNxClient } from './stores/redis-replay';
import { BEARER_CHECKS, zeroCounts } from './metrics/counts';
import { metricsFor } from './metrics/prometheus';

const KNOWN = [
  'issuer', 'audience', 'jwksUri', 'keys', 'scope', 'realm', 'clockTolerance', 'tokenCacheMax',
  'jwksCooldown', 'jwksMaxAge', 'jwksTimeout', 'logger', 'metrics', 'dpop', 'publicUrl', 'dpopProofs', 'revocationList',
] as const;

interface ListSettings {
  uri: string;
  intervalMs: number;
  maxStaleMs: number;
  failOpen: boolean;
}

/** Checks the revocationList option: a URL, or `{ uri, interval, maxStale, failOpen }`. */
function listSettings(value: BearerOptions['revocationList']): ListSettings | undefined {
  if (value === undefined) return undefined;
  const o = typeof value === 'string' ? { uri: value } : value;
  checkObject('revocationList', o);
  checkKnown('revocationList', o, ['uri', 'interval', 'maxStale', 'failOpen']);
  const interval = checkNumber('revocationList.interval', o.interval, 10, 0.05, 3600);
  const maxStale = checkNumber('revocationList.maxStale', o.maxStale, 300, 0.1, 7 * 86400);
  if (maxStale < interval) throw new TypeError('option revocationList.maxStale must be at least revocationList.interval');
  if (o.failOpen !== undefined && typeof o.failOpen !== 'boolean') throw new TypeError('option revocationList.failOpen must be true or false');
  return { uri: checkUrl('revocationList.uri', o.uri), intervalMs: interval * 1000, maxStaleMs: maxStale * 1000, failOpen: o.failOpen ?? false };
}

/** A poller and when requests must wait for it. */
interface ListSource {
  poller: RevocationListPoller;
  /** The JWKS copies of the requireBearer()s on this list: told which kids the issuer publishes. */
  jwks: Set<RemoteJwks>;
  /** Where its lines go: the logger of every requireBearer() using it, each once. */
  loggers: LoggerFanout;
  /** `null` when the list is fresh (or was just tried), else the poll to wait for. */
  pending(): Promise<unknown> | null;
}

/**
 * One poller per issuer, key source, clock tolerance, list URL and settings,
 * shared by every requireBearer() with all of these the same: the list is
 * verified with the keys of the requireBearer() asking, and its entries kept
 * for as long as its clock tolerance accepts an expired token.
 */
const listSources = new Map<string, ListSource>();

/**
 * What verifies the tokens and the list, as a memo key: the JWKS URL (one
 * poller for every API of the process on it, whatever their audiences), or
 * the keys given up front by kid, alg and RFC 7638 thumbprint (the same set
 * given twice shares a poller; another set, such as one from before a key
 * rotation, gets its own).
 */
function keySourceOf(jwksUri: string | undefined, loaded: Map<string, LoadedKey> | undefined): string {
  if (jwksUri !== undefined) return `jwks ${jwksUri}`;
  const keys = [...loaded!.values()].map((k) => JSON.stringify([k.kid, k.alg, jwkThumbprint(k.jwk)])).sort();
  return `keys ${keys.join(' ')}`;
}

/**
 * The revocation list of a standalone verifier. The first request starts
 * polling and waits for the first answer; while the list is not fresh (the
 * issuer unreachable for longer than maxStale), a request waits for a new
 * poll at most once a second, so the verifier recovers as soon as the issuer
 * answers instead of at the next timer tick. Polls never reject: a failed
 * one leaves the last list in force until maxStale.
 */
function listSource(settings: ListSettings, issuer: string, keys: KeyResolver, keySource: string, clockTolerance: number): ListSource {
  const key = JSON.stringify([issuer, keySource, clockTolerance, settings]);
  const known = listSources.get(key);
  if (known) return known;
  const logger = new LoggerFanout();
  let lastError = '';
  let downSince: number | undefined;
  const jwks = new Set<RemoteJwks>();
  const poller = new RevocationListPoller({
    url: settings.uri,
    issuer,
    // a list signed by a key not fetched yet fetches it, even while made-up kids in requests hold fetches back
    keys: keys instanceof RemoteJwks ? { peek: (kid) => keys.peek(kid), resolve: (kid) => keys.resolveListed(kid) } : keys,
    state: new RevocationState({ maxTokenTtl: MAX_ACCESS_TOKEN_TTL, clockTolerance }),
    intervalMs: settings.intervalMs,
    maxStaleMs: settings.maxStaleMs,
    failOpen: settings.failOpen,
    clockTolerance,
    onError: (err) => {
      lastError = err instanceof Error ? err.message : String(err);
    },
    // a JWKS copy fetched before the list was signed (a second of iat's rounding, and the clocks' tolerance, too)
    // that holds another set of kids than the list names is fetched again: a revoked signing key goes, and a new
    // one comes, within a poll
    onKids: (kids, iat) => {
      for (const set of jwks) void set.listed(kids, (iat + 1 + clockTolerance) * 1000);
    },
    onResult: (result) => {
      if (result === 'failed' && downSince === undefined) {
        downSince = Date.now();
        logger.warn(
          { event: 'revocation_list.unavailable', uri: settings.uri, reason: lastError, max_stale_s: settings.maxStaleMs / 1000, fail_open: settings.failOpen },
          'the revocation list cannot be fetched; the last one is trusted until max_stale_s, then requests are refused with 503 (or let through with failOpen)',
        );
      } else if (result !== 'failed' && downSince !== undefined) {
        logger.info({ event: 'revocation_list.recovered', uri: settings.uri, down_ms: Date.now() - downSince }, 'the revocation list is fetched again');
        downSince = undefined;
      }
    },
  });
  let started: Promise<unknown> | undefined;
  const source: ListSource = {
    poller,
    jwks,
    loggers: logger,
    pending() {
      if (!started) return (started = poller.start());
      if (poller.fresh()) return null;
      const running = poller.inFlight();
      if (running) return running;
      if (poller.lastAttempt === undefined || Date.now() - poller.lastAttempt >= 1000) return poller.poll();
      return null;
    },
  };
  listSources.set(key, source);
  return source;
}

/**
 * One in-memory replay store per process for the standalone requireBearer()s
 * that use no Redis, bounded by the largest `dpopProofs.replayMax` any of
 * them asked for: each gets at least its own bound (a smaller one would
 * refuse its fresh proofs as too old once full), a jti spent at one is spent
 * at all (the layers of one API check a proof once, and a replay is refused
 * wherever it is sent), and the memory is that of the largest bound, not the
 * sum of them.
 */
let sharedReplay: MemoryReplayStore | undefined;

function memoryReplay(max: number): MemoryReplayStore {
  if (!sharedReplay) return (sharedReplay = new MemoryReplayStore({ max }));
  sharedReplay.raiseMax(max);
  return sharedReplay;
}

/** The public URL for DPoP `htu`: the option, else the audience's origin when it is an http(s) URL. */
function publicUrlOf(options: BearerOptions, audience: string): string | undefined {
  if (options.publicUrl !== undefined) return checkPublicUrl('publicUrl', options.publicUrl);
  try {
    const url = new URL(audience);
    return url.protocol === 'https:' || url.protocol === 'http:' ? url.origin : undefined;
  } catch {
    return undefined;
  }
}

interface SharedRedisReplay {
  replay: ReplayStore;
  health: ReplayStoreHealth;
  /** Where its outage lines go: the logger of every requireBearer() using it, each once. */
  loggers: LoggerFanout;
}

/**
 * One monitored replay store per Redis client and key prefix, so the layers
 * of one API log one outage once, in each of their loggers; one gate per
 * client, shared with an issuer of this process on it too.
 */
const redisReplays = new WeakMap<object, Map<string, SharedRedisReplay>>();

function redisReplay(redis: object, prefix: string, loggerOption: BearerOptions['logger'], logger: ResolvedLogger): SharedRedisReplay {
  let byPrefix = redisReplays.get(redis);
  if (!byPrefix) redisReplays.set(redis, (byPrefix = new Map()));
  let known = byPrefix.get(prefix);
  if (!known) {
    const loggers = new LoggerFanout();
    const health = new ReplayStoreHealth(loggers, { kind: 'redis', gate: sharedServiceGate(redis, redisGateOptions(redis)) });
    known = { replay: health.monitor(new RedisReplayStore({ client: redis as RedisSetNxClient, prefix })), health, loggers };
    byPrefix.set(prefix, known);
  }
  known.loggers.add(loggerOption, logger);
  return known;
}

function dpopOptions(options: BearerOptions, audience: string, clockTolerance: number, logger: ResolvedLogger): (BearerDpopOptions & { health?: ReplayStoreHealth }) | undefined {
  const publicUrl = publicUrlOf(options, audience);
  if (options.dpop === undefined && publicUrl === undefined) return undefined;
  const mode = checkDpopMode(options.dpop);
  if (mode === 'disabled') return undefined;
  if (publicUrl === undefined) throw new TypeError(`requireBearer() with dpop '${mode}' needs publicUrl (the audience is not a URL)`);
  if (options.dpopProofs !== undefined && 'nonce' in (options.dpopProofs as object)) throw new TypeError('option dpopProofs.nonce is not supported here');
  const settings = parseDpop(options.dpopProofs);
  const redis = options.dpopProofs?.redis;
  const shared = redis ? redisReplay(redis, settings.keyPrefix, options.logger, logger) : undefined;
  const replay = shared ? shared.replay : memoryReplay(settings.replayMax);
  return { mode, publicUrl, verify: { replay, maxAge: settings.maxAge, clockTolerance }, health: shared?.health };
}

/** Verifiers shared by every requireBearer() of one issuer/audience/key source, so they share one JWKS and one cache. */
const verifiers = new Map<string, AccessTokenVerifier>();
/** The revocation list a verifier checks, if any. */
const verifierSources = new WeakMap<AccessTokenVerifier, ListSource>();
/** The keys each verifier checks with (a memoised verifier keeps the first middleware's). */
const verifierKeys = new WeakMap<AccessTokenVerifier, KeyResolver>();

/**
 * Stops every revocation-list poller this process started and forgets them:
 * for a graceful shutdown, and for test suites that start verifiers against
 * issuers they then close (a poller left running keeps asking a closed port,
 * which another server may take). The timers are unref'd, so this is never
 * needed for a process to exit. A standalone requireBearer() created after it
 * starts a new poller; one created before keeps its last list, which goes
 * stale after maxStale (then a request polls again, at most once a second).
 */
export function stopRevocationListPolling(): void {
  for (const source of listSources.values()) source.poller.stop();
  listSources.clear();
  for (const [key, verifier] of verifiers) if (verifierSources.has(verifier)) verifiers.delete(key);
}

/** What a standalone requireBearer() can check now (`health()`), for a readiness probe. */
export interface BearerHealth {
  /** Tokens can be checked: keys are held and, with a revocation list, it is fresh (or `failOpen` lets tokens through). */
  ok: boolean;
  /** With `jwksUri`: `up` (the last fetch worked), `stale` (keys held, the last fetch failed: they keep verifying), `down` (no key held). */
  jwks?: 'up' | 'stale' | 'down';
  /** With `revocationList`: `fresh`, or `stale` once it has not been verified for `maxStale` (requests get 503 unless `failOpen`). */
  revocationList?: 'fresh' | 'stale';
  /**
   * With `dpopProofs.redis`: whether that Redis answers (a `SET NX` of a key that expires in a second, as
   * the issuer's health() asks). `down` leaves `ok` as it is: Bearer requests are served, and the Redis is
   * shared by every instance, so taking them all out would refuse what still works.
   */
  dpopReplayStore?: 'up' | 'down';
}

/** A standalone requireBearer(): the middleware, and what it can check now. */
export type BearerMiddleware = RequestHandler & {
  /** Fetches the JWKS first while no key is held (at most once per retry pause), and polls a stale revocation list. Never rejects. */
  health(): Promise<BearerHealth>;
};

/**
 * `requireBearer()` for a process that only verifies: keys come from the
 * issuer's JWKS (fetched, cached, refetched on an unknown kid at most once
 * per cooldown) or are given up front.
 */
export function requireBearer(options: BearerOptions): BearerMiddleware {
  checkObject('requireBearer()', options);
  checkKnown('requireBearer()', options, KNOWN);
  const issuer = checkUrl('issuer', options.issuer);
  const audience = checkString('audience', options.audience);
  if ((options.jwksUri === undefined) === (options.keys === undefined)) {
    throw new TypeError('requireBearer() needs exactly one of jwksUri or keys');
  }
  const registry = checkMetrics(options.metrics);
  const logger = resolveLogger(options.logger);
  const jwksUri = options.jwksUri === undefined ? undefined : checkUrl('jwksUri', options.jwksUri);
  const settings = {
    clockTolerance: checkNumber('clockTolerance', options.clockTolerance, 5, 0, 300),
    cacheMax: checkInteger('tokenCacheMax', options.tokenCacheMax, 1000, 0, 10_000_000),
    cooldownMs: checkNumber('jwksCooldown', options.jwksCooldown, 30, 0, 86400) * 1000,
    maxAgeMs: checkNumber('jwksMaxAge', options.jwksMaxAge, 120, 1, 86400 * 7) * 1000,
    timeoutMs: checkNumber('jwksTimeout', options.jwksTimeout, 5, 0.1, 120) * 1000,
  };
  let keys: KeyResolver;
  let loaded: Map<string, LoadedKey> | undefined;
  if (jwksUri) {
    keys = new RemoteJwks(jwksUri, { ...settings, now: Date.now });
  } else {
    const set = Array.isArray(options.keys) ? { keys: options.keys } : options.keys;
    try {
      loaded = loadJwks(set);
    } catch (err) {
      throw new TypeError(`option keys must be a JWK Set or an array of JWKs: ${(err as Error).message}`);
    }
    if (loaded.size === 0) throw new TypeError('option keys holds no usable ES256 or RS256 public key with a kid');
    keys = new StaticKeys(loaded);
  }
  const realm = options.realm === undefined ? 'api' : checkString('realm', options.realm);
  const scope = scopeOption('scope', options.scope);
  const list = listSettings(options.revocationList);
  // last, as it joins the replay store shared with other requireBearer()s: only once every option passed
  const dpop = dpopOptions(options, audience, settings.clockTolerance, logger);
  const memoKey = jwksUri ? JSON.stringify([issuer, audience, jwksUri, settings, list ?? null]) : undefined;
  let verifier = memoKey ? verifiers.get(memoKey) : undefined;
  let source: ListSource | undefined;
  if (verifier) {
    source = verifierSources.get(verifier);
    keys = verifierKeys.get(verifier) ?? keys;
  } else {
    source = list && listSource(list, issuer, keys, keySourceOf(jwksUri, loaded), settings.clockTolerance);
    verifier = new AccessTokenVerifier({ issuer, audience, keys, clockTolerance: settings.clockTolerance, cacheMax: settings.cacheMax, now: Date.now, revocation: source?.poller });
    if (source) verifierSources.set(verifier, source);
    verifierKeys.set(verifier, keys);
    if (memoKey) verifiers.set(memoKey, verifier);
  }
  // the poller's lines go to this requireBearer()'s logger too, whoever created it
  source?.loggers.add(options.logger, logger);
  if (source && keys instanceof RemoteJwks) source.jwks.add(keys);
  const counts = registry && zeroCounts(BEARER_CHECKS);
  if (registry) metricsFor(registry).attach({ bearerChecks: counts, cache: verifier.cacheStats, dpopReplayStore: dpop?.health });
  const middleware = bearerMiddleware({
    verifier,
    realm,
    scope,
    logger,
    // one per middleware: the once-a-minute info lines are counted per requireBearer() call
    rejections: new RejectionLog(logger),
    counts,
    dpop,
    pending: source ? () => source.pending() : undefined,
  });
  const failOpen = list?.failOpen ?? false;
  const health = async (): Promise<BearerHealth> => {
    const report: BearerHealth = { ok: true };
    if (keys instanceof RemoteJwks) {
      report.jwks = await keys.health();
      if (report.jwks === 'down') report.ok = false;
    }
    if (source) {
      await source.pending()?.catch(() => undefined);
      report.revocationList = source.poller.fresh() ? 'fresh' : 'stale';
      if (report.revocationList === 'stale' && !failOpen) report.ok = false;
    }
    if (dpop?.health) report.dpopReplayStore = await replayStoreState(dpop.health);
    return report;
  };
  return Object.assign(middleware, { health });
}
