import type { Registry } from 'prom-client';
import type { Logger } from './logger';
import { SIGNING_ALGORITHMS, type SigningAlgorithm } from './core/keys';
import { MAX_ACCESS_TOKEN_TTL, MAX_CLOCK_TOLERANCE } from './core/revocation';
import { scopeOption } from './core/scope';
import type { BruteForceOptions, BruteForceSettings } from './core/brute-force';
import { isNodeRedis } from './stores/redis-client';
import type { Store } from './stores/types';

/** Options of `createIssuer()`. */
export interface IssuerOptions {
  /** Issuer identifier (`iss`), an http(s) URL without query or fragment, e.g. `https://api.example.com`. */
  issuer: string;
  /** Audience (`aud`) written into every token and required by `requireBearer()`. */
  audience: string;
  /** Where clients and keys live. Default: the embedded store under `dataDir`. */
  store?: Store;
  /** Folder of the embedded store. Default `./data`. Ignored when `store` is given. */
  dataDir?: string;
  /** Signing algorithm. Default `ES256`. */
  algorithm?: SigningAlgorithm;
  /** Access token lifetime in seconds (`expires_in`). Default 3600, at most 86400. */
  accessTokenTtl?: number;
  /** Scopes advertised as `scopes_supported` in the metadata. Default: none advertised. */
  scopesSupported?: string | string[];
  /**
   * RFC 8707: every API (absolute URI) this issuer issues tokens for, besides `audience`, which is the
   * default resource (tokens requested without `resource`). A client asks for one with `resource=…` and
   * gets a token whose `aud` is that resource, if the resource is on the client's list. Default: none.
   */
  resources?: string[];
  /** Realm of `WWW-Authenticate` challenges. Default `"api"` for bearer, the issuer URL for the token endpoint. */
  realm?: string;
  /** Seconds of clock skew allowed when verifying. Default 5. */
  clockTolerance?: number;
  /** Most verified tokens remembered by `requireBearer()`. Default 1000; 0 turns the cache off. */
  tokenCacheMax?: number;
  /** Lead time in seconds between publishing a rotated key and signing with it. Default 300. */
  keyRotationLeadTime?: number;
  /** Seconds to keep a found client in memory: a revoke reaches every instance within it. Default 2, or 0 for a store that caches clients itself (the embedded store). */
  clientCacheTtl?: number;
  /** Seconds between background reloads of the signing keys (rotations by the CLI or another instance). Default 30. */
  keyRefreshInterval?: number;
  /**
   * Seconds between reloads of the revocations from the store: the bound within which a revocation made
   * elsewhere (the CLI, another instance) reaches this one when no push arrives. Default 2.
   */
  revocationResync?: number;
  /**
   * Seconds an instance keeps answering from the revocations it holds when it cannot reload them from the
   * store (an outage): past it, tokens are refused with 503 and Retry-After (a token revoked elsewhere
   * meanwhile would be accepted), until a reload reaches the store. Default 300, as a standalone
   * verifier's `maxStale`.
   */
  revocationMaxStale?: number;
  /** `true`: past `revocationMaxStale`, tokens are checked against the revocations last loaded instead of refused. Default false. */
  revocationFailOpen?: boolean;
  /**
   * The most live tokens of one client revoked one by one (RFC 7009) before a revocation takes all the
   * client's tokens issued until then instead: each such token is an entry of the signed revocation list
   * until it expires, so this bounds what one client can add to it. Default 1000.
   */
  maxRevokedTokensPerClient?: number;
  /**
   * A Redis shared by the instances (an ioredis client): an instance that revokes publishes a short message
   * and the others reload the revocations at once, whatever the store (PostgreSQL notifies by itself). A
   * second connection is opened with `redis.duplicate()` for the subscription. `channel`: one per issuer
   * sharing a Redis (default `ecc:revocation:changed`).
   */
  revocationPush?: { redis: unknown; channel?: string };
  /**
   * Limits on failed client authentications, or `false` to turn them off. Default: in 15 minutes, 100 per source
   * address and 10 per (client_id, address), in memory; 20 failures of one client from all addresses raise
   * `client.auth_failures_high` but never refuse its right secret.
   */
  bruteForce?: BruteForceOptions | false;
  /**
   * Which `aud` a private_key_jwt client assertion may carry, as its only value: `'issuer'` (default) the
   * issuer identifier alone; `'issuer-or-token-endpoint'` also the token endpoint URL, for older clients.
   */
  clientAssertionAudience?: 'issuer' | 'issuer-or-token-endpoint';
  /**
   * Longest private_key_jwt assertion lifetime accepted (exp − iat, and exp − now), in seconds: 1 to 3600.
   * Default 300. Some client libraries default to an hour (authlib).
   */
  clientAssertionMaxLifetime?: number;
  /** A pino-compatible logger, or `false` for none. Default: pino on stdout. */
  logger?: Logger | false;
  /** Prometheus metrics on the app's own prom-client registry, e.g. `{ registry: new Registry() }`. Default: none (prom-client is not loaded). */
  metrics?: MetricsOptions | false;
  /** DPoP (RFC 9449) at the token endpoint: replay store, nonces, proof age. Default: accepted, replay in memory, no nonces. */
  dpop?: DpopOptions;
  /** Public base URL of the APIs behind this issuer's `requireBearer()`, for DPoP `htu` (e.g. behind a proxy). Default: the issuer's origin. */
  publicUrl?: string;
}

/** The `dpop` option of `createIssuer()`. */
export interface DpopOptions {
  /** Require a server nonce (`use_dpop_nonce`, `DPoP-Nonce`) in every proof. Default false. */
  nonce?: boolean;
  /** An ioredis client: proofs' `jti`s are remembered there, so every instance on it refuses a replay. Default: in memory. */
  redis?: unknown;
  /** Key prefix in Redis. Default `ecc:dpop:`. */
  keyPrefix?: string;
  /** Seconds a proof is accepted after its `iat`. Default 300. */
  maxAge?: number;
  /** Most proofs remembered by the in-memory replay store (default 250000); beyond it those that expire first are forgotten and older proofs refused as too old. */
  replayMax?: number;
}

/** The checked `dpop` option. */
export interface DpopSettings {
  nonce: boolean;
  keyPrefix: string;
  maxAge: number;
  replayMax: number;
}

export interface MetricsOptions {
  /** A prom-client `Registry`; several issuers and requireBearer() on one registry share (add up) the metrics. */
  registry: Registry;
}

/** Options of the standalone `requireBearer()`: exactly one of `jwksUri` and `keys`. */
export type BearerOptions = BearerCommonOptions &
  (
    | {
        /** URL of the issuer's JWKS; keys are fetched and cached. */
        jwksUri: string;
        keys?: undefined;
      }
    | {
        /** The keys themselves: a JWK Set or its array of keys. */
        keys: { keys: object[] } | object[];
        jwksUri?: undefined;
      }
  );

/** The options of the standalone `requireBearer()` besides its key source. */
export interface BearerCommonOptions {
  issuer: string;
  audience: string;
  /** Scopes the route requires, all of them. */
  scope?: string | string[];
  realm?: string;
  clockTolerance?: number;
  tokenCacheMax?: number;
  /** After a JWKS fetch that did not find an unknown kid, how long before another such fetch, in seconds. Default 30. */
  jwksCooldown?: number;
  /** Age after which the JWKS is refreshed in the background, in seconds. Default 120 (below the default key rotation lead time). */
  jwksMaxAge?: number;
  /** Timeout of a JWKS fetch, in seconds. Default 5. */
  jwksTimeout?: number;
  logger?: Logger | false;
  /** Bearer-check and verified-token cache metrics on the app's own prom-client registry. Default: none. */
  metrics?: MetricsOptions | false;
  /** DPoP-bound tokens: `'allowed'` (default when a public URL is known), `'required'` or `'disabled'` (default otherwise). */
  dpop?: 'allowed' | 'required' | 'disabled';
  /** Public base URL of this API as clients call it (DPoP `htu`), e.g. behind a proxy. Default: the audience's origin when the audience is an http(s) URL. */
  publicUrl?: string;
  /** DPoP proof replay: `redis` (an ioredis client shared by every instance; default in memory), `keyPrefix`, `maxAge` (s, default 300), `replayMax`. */
  dpopProofs?: Omit<DpopOptions, 'nonce'>;
  /**
   * Learn of revocations from the issuer's signed revocation list (its `revocation_list_uri`, e.g.
   * `https://auth.example.com/oauth/revocation-list`): the URL, or `{ uri, interval, maxStale, failOpen }`.
   * Polled every `interval` s (default 10) with ETag; trusted `maxStale` s (default 300) after the last
   * successful poll, then 503 (or every token passes with `failOpen: true`). Default: off.
   */
  revocationList?: string | RevocationListOptions;
}

export interface RevocationListOptions {
  uri: string;
  /** Seconds between polls. Default 10. */
  interval?: number;
  /** Seconds the last list is trusted while the issuer cannot be reached. Default 300. */
  maxStale?: number;
  /** Past maxStale: `false` (default) answers 503; `true` lets tokens through unchecked. */
  failOpen?: boolean;
}

export function checkUrl(name: string, value: unknown): string {
  if (typeof value !== 'string' || value === '') throw new TypeError(`option ${name} is required and must be a URL string`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TypeError(`option ${name} must be an absolute URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new TypeError(`option ${name} must be an http(s) URL`);
  if (url.search || url.hash) throw new TypeError(`option ${name} must not have a query or fragment`);
  return value;
}

export function checkString(name: string, value: unknown, fallback?: string): string {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'string' || value === '') throw new TypeError(`option ${name} must be a non-empty string`);
  return value;
}

export function checkNumber(name: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    throw new TypeError(`option ${name} must be a number from ${min} to ${max}, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function checkBoolean(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new TypeError(`option ${name} must be true or false, got ${JSON.stringify(value)}`);
  return value;
}

export function checkInteger(name: string, value: unknown, fallback: number, min: number, max: number): number {
  const n = checkNumber(name, value, fallback, min, max);
  if (!Number.isInteger(n)) throw new TypeError(`option ${name} must be a whole number, got ${n}`);
  return n;
}

export function checkKnown(where: string, options: object, known: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new TypeError(`${where}: unknown option ${key}`);
  }
}

/** The registry of the `metrics` option, or `undefined` when metrics are off. */
export function checkMetrics(value: unknown): Registry | undefined {
  if (value === undefined || value === false) return undefined;
  if (!value || typeof value !== 'object') throw new TypeError('option metrics must be { registry } or false');
  checkKnown('option metrics', value, ['registry']);
  const registry = (value as { registry?: Record<string, unknown> }).registry;
  for (const method of ['registerMetric', 'getSingleMetric', 'metrics']) {
    if (typeof registry?.[method] !== 'function') throw new TypeError('option metrics.registry must be a prom-client Registry');
  }
  return registry as unknown as Registry;
}

export function checkObject(where: string, options: unknown): asserts options is Record<string, unknown> {
  if (!options || typeof options !== 'object') throw new TypeError(`${where} needs an options object`);
}

/** The complete issuer configuration every other module trusts. */
export interface IssuerConfig {
  issuer: string;
  audience: string;
  tokenEndpoint: string;
  jwksUri: string;
  dataDir: string;
  algorithm: SigningAlgorithm;
  accessTokenTtl: number;
  scopesSupported: string[];
  /** The resources besides `audience` (RFC 8707), as configured. */
  resources: string[];
  bearerRealm: string;
  tokenRealm: string;
  clockTolerance: number;
  tokenCacheMax: number;
  keyRotationLeadTime: number;
  /** `undefined`: chosen by the store (0 when it caches clients itself, 2 s otherwise). */
  clientCacheTtl: number | undefined;
  keyRefreshInterval: number;
  revocationResync: number;
  revocationMaxStale: number;
  revocationFailOpen: boolean;
  maxRevokedTokensPerClient: number;
  /** The Redis doorbell for revocations, as given (checked). */
  revocationPush: { redis: unknown; channel: string } | undefined;
  revocationEndpoint: string;
  introspectionEndpoint: string;
  /** Where the signed revocation list for standalone verifiers is served (a package extension). */
  revocationListUri: string;
  bruteForce: BruteForceSettings | false;
  clientAssertionAudience: 'issuer' | 'issuer-or-token-endpoint';
  clientAssertionMaxLifetime: number;
  dpop: DpopSettings;
  /** Base URL (origin and optional path prefix) the issuer-bound requireBearer() builds DPoP `htu`s from. */
  publicUrl: string;
}

const ISSUER_OPTIONS = [
  'issuer', 'audience', 'store', 'dataDir', 'algorithm', 'accessTokenTtl', 'scopesSupported', 'resources', 'realm',
  'clockTolerance', 'tokenCacheMax', 'keyRotationLeadTime', 'clientCacheTtl', 'keyRefreshInterval', 'revocationResync', 'revocationMaxStale', 'revocationFailOpen', 'maxRevokedTokensPerClient', 'revocationPush', 'bruteForce', 'logger',
  'metrics', 'clientAssertionAudience', 'clientAssertionMaxLifetime', 'dpop', 'publicUrl',
] as const;

function parseRevocationPush(value: unknown): { redis: unknown; channel: string } | undefined {
  if (value === undefined) return undefined;
  checkObject('revocationPush', value);
  const v = value as Record<string, unknown>;
  checkKnown('option revocationPush', v, ['redis', 'channel']);
  const redis = v.redis as { publish?: unknown; duplicate?: unknown } | null | undefined;
  if (typeof redis?.publish !== 'function' || typeof redis.duplicate !== 'function') {
    throw new TypeError('option revocationPush.redis must be an ioredis client (publish() and duplicate())');
  }
  // node-redis subscribes with a listener per channel, where ioredis emits 'message': no push would arrive
  if (isNodeRedis(redis)) throw new TypeError('option revocationPush.redis must be an ioredis client, not a node-redis one');
  return { redis, channel: checkString('revocationPush.channel', v.channel, 'ecc:revocation:changed') };
}

function checkResources(value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string' && v !== '')) throw new TypeError('option resources must be an array of absolute URIs');
  return [...value];
}

/** Checks the `dpop` option of createIssuer(); `redis` is used as given. */
export function parseDpop(value: DpopOptions | undefined): DpopSettings {
  if (value !== undefined && (typeof value !== 'object' || value === null)) throw new TypeError('option dpop must be an object');
  const v = value ?? {};
  checkKnown('option dpop', v, ['nonce', 'redis', 'keyPrefix', 'maxAge', 'replayMax']);
  if (v.nonce !== undefined && typeof v.nonce !== 'boolean') throw new TypeError('option dpop.nonce must be a boolean');
  if (v.redis !== undefined && typeof (v.redis as { set?: unknown } | null)?.set !== 'function') throw new TypeError('option dpop.redis must be an ioredis client');
  // node-redis's set(key, value, options) would take ioredis's 'PX', ttl, 'NX' for nothing: every replay accepted
  if (v.redis !== undefined && isNodeRedis(v.redis)) throw new TypeError('option dpop.redis must be an ioredis client, not a node-redis one (its SET takes other arguments, and replays would go unnoticed)');
  const keyPrefix = checkString('dpop.keyPrefix', v.keyPrefix, 'ecc:dpop:');
  if (keyPrefix.length > 100) throw new TypeError('option dpop.keyPrefix must be at most 100 characters');
  return {
    nonce: v.nonce ?? false,
    keyPrefix,
    maxAge: checkInteger('dpop.maxAge', v.maxAge, 300, 1, 3600),
    replayMax: checkInteger('dpop.replayMax', v.replayMax, 250_000, 1, 100_000_000),
  };
}

/** The `dpop` option of requireBearer(): 'allowed' (default), 'required' or 'disabled'. */
export function checkDpopMode(value: unknown): 'allowed' | 'required' | 'disabled' {
  if (value === undefined) return 'allowed';
  if (value !== 'allowed' && value !== 'required' && value !== 'disabled') {
    throw new TypeError(`option dpop must be 'allowed', 'required' or 'disabled', got ${JSON.stringify(value)}`);
  }
  return value;
}

/** A public base URL for DPoP `htu`: http(s), no query or fragment; trailing slashes dropped. */
export function checkPublicUrl(name: string, value: unknown): string {
  return checkUrl(name, value).replace(/\/+$/, '');
}

function parseBruteForce(value: IssuerOptions['bruteForce']): BruteForceSettings | false {
  if (value === false) return false;
  if (value !== undefined && (typeof value !== 'object' || value === null)) throw new TypeError('option bruteForce must be an object or false');
  const v = value ?? {};
  if ('maxFailuresPerClient' in v) {
    throw new TypeError(
      'option bruteForce.maxFailuresPerClient is gone: a per-client limit let anyone who knows a client_id lock it out. ' +
        'Use maxFailuresPerClientAddress (a limit per client_id and address) and alertFailuresPerClient (an audit event, never a refusal)',
    );
  }
  checkKnown('option bruteForce', v, ['maxFailuresPerAddress', 'maxFailuresPerClientAddress', 'alertFailuresPerClient', 'window', 'redis', 'keyPrefix']);
  if (v.redis !== undefined && (typeof v.redis !== 'object' || v.redis === null)) throw new TypeError('option bruteForce.redis must be an ioredis client');
  const keyPrefix = checkString('bruteForce.keyPrefix', v.keyPrefix, 'ecc:authfail');
  if (keyPrefix.length > 100) throw new TypeError('option bruteForce.keyPrefix must be at most 100 characters');
  return {
    maxFailuresPerAddress: checkInteger('bruteForce.maxFailuresPerAddress', v.maxFailuresPerAddress, 100, 1, 1_000_000),
    maxFailuresPerClientAddress: checkInteger('bruteForce.maxFailuresPerClientAddress', v.maxFailuresPerClientAddress, 10, 1, 1_000_000),
    alertFailuresPerClient: checkInteger('bruteForce.alertFailuresPerClient', v.alertFailuresPerClient, 20, 1, 1_000_000),
    window: checkInteger('bruteForce.window', v.window, 900, 1, 86400),
    keyPrefix,
  };
}

function parseAssertionAudience(value: unknown): 'issuer' | 'issuer-or-token-endpoint' {
  if (value === undefined) return 'issuer';
  if (value === 'issuer' || value === 'issuer-or-token-endpoint') return value;
  throw new TypeError(`option clientAssertionAudience must be 'issuer' or 'issuer-or-token-endpoint', got ${JSON.stringify(value)}`);
}

export function parseIssuerOptions(options: IssuerOptions): IssuerConfig {
  checkObject('createIssuer()', options);
  checkKnown('createIssuer()', options, ISSUER_OPTIONS);
  const issuer = checkUrl('issuer', options.issuer);
  const base = issuer.replace(/\/+$/, '');
  const algorithm = options.algorithm ?? 'ES256';
  if (!SIGNING_ALGORITHMS.includes(algorithm)) {
    throw new TypeError(`option algorithm must be one of ${SIGNING_ALGORITHMS.join(', ')}, got ${JSON.stringify(algorithm)}`);
  }
  const realm = options.realm === undefined ? undefined : checkString('realm', options.realm);
  const revocationResync = checkNumber('revocationResync', options.revocationResync, 2, 0.05, 60);
  return {
    issuer,
    audience: checkString('audience', options.audience),
    tokenEndpoint: `${base}/oauth/token`,
    jwksUri: `${base}/.well-known/jwks.json`,
    dataDir: checkString('dataDir', options.dataDir, './data'),
    algorithm,
    accessTokenTtl: checkInteger('accessTokenTtl', options.accessTokenTtl, 3600, 1, MAX_ACCESS_TOKEN_TTL),
    scopesSupported: scopeOption('scopesSupported', options.scopesSupported),
    resources: checkResources(options.resources),
    bearerRealm: realm ?? 'api',
    tokenRealm: realm ?? issuer,
    clockTolerance: checkNumber('clockTolerance', options.clockTolerance, 5, 0, MAX_CLOCK_TOLERANCE),
    tokenCacheMax: checkInteger('tokenCacheMax', options.tokenCacheMax, 1000, 0, 10_000_000),
    keyRotationLeadTime: checkNumber('keyRotationLeadTime', options.keyRotationLeadTime, 300, 0, 86400),
    clientCacheTtl: options.clientCacheTtl === undefined ? undefined : checkNumber('clientCacheTtl', options.clientCacheTtl, 0, 0, 60),
    keyRefreshInterval: checkNumber('keyRefreshInterval', options.keyRefreshInterval, 30, 0.1, 3600),
    revocationResync,
    revocationMaxStale: checkNumber('revocationMaxStale', options.revocationMaxStale, 300, revocationResync * 2, 86400),
    revocationFailOpen: checkBoolean('revocationFailOpen', options.revocationFailOpen, false),
    maxRevokedTokensPerClient: checkInteger('maxRevokedTokensPerClient', options.maxRevokedTokensPerClient, 1000, 1, 1_000_000),
    revocationPush: parseRevocationPush(options.revocationPush),
    revocationEndpoint: `${base}/oauth/revoke`,
    introspectionEndpoint: `${base}/oauth/introspect`,
    revocationListUri: `${base}/oauth/revocation-list`,
    bruteForce: parseBruteForce(options.bruteForce),
    clientAssertionAudience: parseAssertionAudience(options.clientAssertionAudience),
    clientAssertionMaxLifetime: checkInteger('clientAssertionMaxLifetime', options.clientAssertionMaxLifetime, 300, 1, 3600),
    dpop: parseDpop(options.dpop),
    publicUrl: options.publicUrl === undefined ? new URL(issuer).origin : checkPublicUrl('publicUrl', options.publicUrl),
  };
}
