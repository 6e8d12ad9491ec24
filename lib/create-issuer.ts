import type { RequestHandler } from 'express';
import { parseIssuerOptions, checkKnown, checkMetrics, type IssuerConfig, type IssuerOptions } from './config';
import { AuthorizationServer } from './core/authorization-server';
import type { IssuerHealth } from './core/issuer-health';
import { FailedAuthLimiter } from './core/brute-force';
import type { ClientService } from './core/clients';
import { keyStatus, type LoadedKey, type PublicJwk } from './core/keys';
import { KeyDerivedNonces } from './core/key-derived-nonces';
import { RejectionLog } from './core/rejection-log';
import { scopeOption } from './core/scope';
import { sharedServiceGate } from './core/service-gate';
import { atMostEvery } from './core/throttle';
import { bearerMiddleware, type DpopMode } from './express/require-bearer';
import { checkDpopMode } from './config';
import { issuerRouter, type TokenMetrics } from './express/token-router';
import { wellKnownHandler } from './express/well-known';
import { resolveLogger, type Logger } from './logger';
import { BEARER_CHECKS, MANAGEMENT_CHECKS, signingKeyAge, TOKEN_OUTCOMES, zeroCounts, type BearerCheck, type Counts } from './metrics/counts';
import { metricsFor } from './metrics/prometheus';
import { openEmbeddedStore } from './stores/embedded';
import { redisGateOptions } from './stores/redis-client';
import { redisFailureCounters } from './stores/redis-rate-limiter';
import { RedisReplayStore, type RedisSetNxClient } from './stores/redis-replay';
import { RedisRevocationNotifier, type RedisPublishClient } from './stores/redis-revocation-notifier';
import type { Store } from './stores/types';

export interface KeyInfo {
  kid: string;
  alg: string;
  /** `pending` (published, not signing yet), `current` (the one key signing), `retired` (not signing, or withdrawn by a later rotation before it signed; published until its tokens expire). */
  status: 'pending' | 'current' | 'retired';
  activatesAt: Date;
  retiredAt: Date | null;
}

export interface Issuer {
  readonly config: Readonly<IssuerConfig>;
  /**
   * Router serving POST /oauth/token, /oauth/revoke, /oauth/introspect, GET /oauth/revocation-list,
   * /.well-known/jwks.json and /.well-known/oauth-authorization-server, relative to where it is mounted:
   * at the issuer's path (`app.use('/auth', issuer.router())` for `https://example.com/auth`).
   */
  router(): RequestHandler;
  /**
   * For the app's root: GET `/.well-known/oauth-authorization-server` followed by the issuer's path, where
   * RFC 8414 §3.1 puts the metadata of an issuer with a path (`…/oauth-authorization-server/auth` for
   * `https://example.com/auth`) and where clients such as openid-client look for it. Only that path; every
   * other request goes on. For an issuer without a path it is the router's own metadata route.
   */
  wellKnown(): RequestHandler;
  /**
   * Middleware accepting only this issuer's access tokens, with all of `scope` when given.
   * `dpopNonce: true`: DPoP proofs at this route must carry a server nonce (401 `use_dpop_nonce` + `DPoP-Nonce`
   * otherwise); the same nonces as the token endpoint's, valid on every instance of the issuer.
   * `audience`: one of the issuer's `resources` (RFC 8707); the route accepts only tokens for it. Default `audience`.
   */
  requireBearer(options?: { scope?: string | string[]; dpop?: DpopMode; dpopNonce?: boolean; audience?: string }): RequestHandler;
  /** Opens the store and loads or creates the signing key. Await it before listening. */
  ready(): Promise<void>;
  /** Closes the store. */
  close(): Promise<void>;
  /**
   * Readiness: `{ ok, store: 'up' | 'read_only' | 'down', signingKid }` (and `dpopReplayStore` with a shared DPoP replay store). Pings the store at
   * most once a second (concurrent callers share the answer); `ok` when the
   * store answers and a key signs. Never rejects.
   */
  health(): Promise<IssuerHealth>;
  /** Create, list, update and revoke clients, rotate their secrets and keys. */
  readonly clients: ClientService;
  readonly keys: {
    list(): Promise<KeyInfo[]>;
    /** Publishes a new key now; it signs after `leadTime` seconds (default: the `keyRotationLeadTime` option). */
    rotate(leadTime?: number): Promise<KeyInfo>;
    /** Removes retired keys whose tokens have all expired. */
    prune(): Promise<number>;
    /**
     * Takes the key `kid` out at once (its private part leaked): no longer published, every token it signed
     * refused; a key that signs now or would sign later is first replaced by one that signs at once. Answers
     * the new key (`replacement`), if one was made. Rejects with UnknownSigningKeyError for an unknown kid.
     */
    revoke(kid: string): Promise<{ revoked: KeyInfo; replacement: KeyInfo | null }>;
    jwks(): Promise<{ keys: PublicJwk[] }>;
  };
  metadata(): Record<string, unknown>;
  /**
   * After ready(): whether this process created the store's first signing key,
   * i.e. is the first ever to start on this store. At most one process on a
   * store sees `true`, which makes it the place for one-time set-up.
   */
  isFirstStart(): boolean;
}

const STORE_METHODS = ['findClient', 'createClient', 'listClients', 'revokeClient', 'rotateSecret', 'close', 'listKeys', 'insertFirstKey', 'rotateKey', 'pruneKeys'] as const;

function checkStore(store: unknown): Store {
  for (const m of STORE_METHODS) {
    if (typeof (store as Record<string, unknown>)?.[m] !== 'function') throw new TypeError(`option store must implement ${m}()`);
  }
  return store as Store;
}

/** Stores already warned about (once per store in a process, however many issuers share it). */
const warnedStores = new WeakSet<object>();

/**
 * A store whose `rotateSecret` declares 1 to 3 parameters was written for
 * the interface before `expectedSecrets`: it rotates whatever happened
 * meanwhile, so of two rotations at once both succeed and the later ends the
 * earlier's new secret. TypeScript cannot tell (an implementation may take
 * fewer parameters), so this says it once, as a warning: `Function.length`
 * does not count a parameter with a default or a rest parameter (0, as a
 * wrapper's `(...args)`: nothing is said then), so refusing to start on it
 * would stop stores that are right.
 */
function warnUnconditionalRotation(store: Store, logger: Logger): void {
  const declared = store.rotateSecret.length;
  if (declared === 0 || declared >= 4 || warnedStores.has(store)) return;
  warnedStores.add(store);
  logger.warn(
    { event: 'store.rotate_secret_unconditional', parameters: declared },
    `the store's rotateSecret() takes ${declared} parameter${declared === 1 ? '' : 's'}, not the 4th (expectedSecrets): two secret rotations of one client at once can both succeed, and the later ends the secret the earlier handed out. Rotate only while the client's secret hashes are still expectedSecrets (see ClientStore.rotateSecret)`,
  );
}

/**
 * The issuer: token endpoint, keys, clients, and a `requireBearer()` bound to
 * the same issuer, audience and keys. Options are checked here, at start-up.
 */
export function createIssuer(options: IssuerOptions): Issuer {
  const config = parseIssuerOptions(options);
  const registry = checkMetrics(options.metrics);
  const logger = resolveLogger(options.logger);
  const store = options.store === undefined ? undefined : checkStore(options.store);
  if (store) warnUnconditionalRotation(store, logger);
  // every part on one Redis client shares what was learned of it (a stall met by one is known to all at once)
  const redisGate = (redis: unknown) => sharedServiceGate(redis as object, redisGateOptions(redis));
  // brute-force counts in Redis when given one, shared by every instance; else in this instance's memory
  const bruteForceRedis = options.bruteForce ? options.bruteForce.redis : undefined;
  const limiter = config.bruteForce
    ? new FailedAuthLimiter(
        config.bruteForce,
        bruteForceRedis
          ? redisFailureCounters(
              bruteForceRedis,
              redisGate(bruteForceRedis),
              atMostEvery(60_000, (reason: string) =>
                logger.warn({ event: 'brute_force.redis_unavailable', reason }, "Redis holds no failed-authentication counts now: counting in this instance's memory"),
              ),
            )
          : undefined,
      )
    : undefined;
  const server = new AuthorizationServer(
    config,
    () => (store ? Promise.resolve(store) : openEmbeddedStore({ dataDir: config.dataDir })),
    logger,
    limiter,
    undefined,
    options.dpop?.redis
      ? { store: new RedisReplayStore({ client: options.dpop.redis as RedisSetNxClient, prefix: config.dpop.keyPrefix }), gate: redisGate(options.dpop.redis) }
      : undefined,
    config.revocationPush &&
      new RedisRevocationNotifier({
        redis: config.revocationPush.redis as RedisPublishClient,
        channel: config.revocationPush.channel,
        gate: redisGate(config.revocationPush.redis),
        // a lost doorbell costs at most revocationResync; one line per burst is enough
        onError: atMostEvery(60_000, (err: unknown) => logger.warn({ event: 'revocation_push.unavailable', err: (err as Error)?.message }, 'revocation push (Redis) unavailable; instances reload revocations every revocationResync seconds')),
      }),
  );
  // one per issuer: its requireBearer() middlewares share the once-a-minute info lines
  const rejections = new RejectionLog(logger);
  // nonces for routes with dpopNonce when the token endpoint has none of its own
  let rsNonces: KeyDerivedNonces | undefined;

  // metrics: plain counts here, read by prom-client on the app's registry when it is scraped
  let metrics: (TokenMetrics & { bearerChecks: Counts<BearerCheck> }) | undefined;
  let detachMetrics: (() => void) | undefined;
  if (registry) {
    const shared = metricsFor(registry);
    metrics = {
      tokenRequests: zeroCounts(TOKEN_OUTCOMES),
      tokenManagement: zeroCounts(MANAGEMENT_CHECKS),
      bearerChecks: zeroCounts(BEARER_CHECKS),
      tokenDuration: shared.tokenDuration,
    };
    detachMetrics = shared.attach({
      tokenRequests: metrics.tokenRequests,
      tokenManagement: metrics.tokenManagement,
      bearerChecks: metrics.bearerChecks,
      cache: server.verifier.cacheStats,
      signingKey: () => signingKeyAge(server.keys.list(), Date.now()),
      store: server.storeHealth,
      dpopReplayStore: server.replayHealth,
    });
  }

  const info = (k: LoadedKey, now: number): KeyInfo => ({
    kid: k.kid,
    alg: k.alg,
    status: keyStatus(k, server.keys.list(), now),
    activatesAt: new Date(k.activatesAt),
    retiredAt: k.retiredAt === null ? null : new Date(k.retiredAt),
  });

  return {
    config,
    router: () => issuerRouter(server, metrics),
    wellKnown: () => wellKnownHandler(server),
    requireBearer(routeOptions = {}) {
      checkKnown('requireBearer()', routeOptions, ['scope', 'dpop', 'dpopNonce', 'audience']);
      // RFC 8707: a route of another API this issuer serves accepts only tokens for that API
      const verifier = server.verifierFor(routeOptions.audience);
      const { dpopNonce = false } = routeOptions;
      if (typeof dpopNonce !== 'boolean') throw new TypeError('option dpopNonce must be true or false');
      // by default no nonces at resources: the proof's single use and the short window suffice (RFC 9449 §9 makes them optional)
      const nonces = dpopNonce ? (server.dpop.nonces ?? (rsNonces ??= new KeyDerivedNonces(server.keys, server.now))) : undefined;
      const dpop = { mode: checkDpopMode(routeOptions.dpop), publicUrl: config.publicUrl, verify: { ...server.dpop, nonces } };
      return bearerMiddleware({
        verifier,
        realm: config.bearerRealm,
        scope: scopeOption('scope', routeOptions.scope),
        logger,
        rejections,
        counts: metrics?.bearerChecks,
        pending: () => server.pending(),
        dpop,
      });
    },
    ready: () => server.ready(),
    health: () => server.health(),
    close: () => {
      detachMetrics?.();
      return server.close();
    },
    clients: server.clients,
    keys: {
      async list() {
        await server.ready();
        await server.keys.reload();
        const now = Date.now();
        return server.keys.list().map((k) => info(k, now));
      },
      async rotate(leadTime = config.keyRotationLeadTime) {
        return info(await server.rotateKey(leadTime * 1000), Date.now());
      },
      async prune() {
        await server.ready();
        return server.keys.prune();
      },
      async revoke(kid) {
        const { revoked, replacement } = await server.revokeKey(kid);
        const now = Date.now();
        return { revoked: info(revoked, now), replacement: replacement ? info(replacement, now) : null };
      },
      async jwks() {
        await server.ready();
        return server.keys.jwks();
      },
    },
    metadata: () => server.metadata,
    isFirstStart: () => server.keys.createdFirstKey,
  };
}
