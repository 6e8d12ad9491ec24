/**
 * The example's environment: the one place it reads settings, opens the
 * store (and Redis) and creates the issuer from them.
 *
 * PORT (3000), HOST (all interfaces), ISSUER (http://localhost:PORT),
 * AUDIENCE (ISSUER + /api), SCOPES_SUPPORTED (orders:read orders:write: the
 * scopes it offers, separated by single spaces), DATA_DIR (./data),
 * DATABASE_URL (PostgreSQL instead of the embedded store) and
 * DATABASE_SCHEMA, REDIS_URL (redis://,
 * rediss:// or a socket's path: shared brute-force counters, DPoP proofs
 * and revocation push), REDIS_KEY_PREFIX
 * (before the names of its keys, ecc:) and REVOCATION_CHANNEL (its
 * channel), ACCESS_TOKEN_TTL (3600 s, 1-86400), SIGNING_ALG (ES256),
 * KEY_ROTATION_LEAD_TIME (300 s, 0-86400), KEY_REFRESH_INTERVAL (30 s,
 * 0.1-3600), CLOCK_TOLERANCE (5 s, 0-300), WORKERS (0:
 * one process; N: node:cluster with N workers), LOG_LEVEL (info), METRICS (1:
 * Prometheus metrics at GET /metrics; with WORKERS=N the sum over the
 * workers, see cluster-metrics.ts), METRICS_PORT (GET /metrics on this port
 * instead of PORT; metrics on without METRICS=1) and METRICS_HOST (its
 * address; HOST's when unset), TRUST_PROXY (Express's
 * `trust proxy`: hops, true, or proxy addresses), DEMO_CLIENT (0: no demo
 * client on the first start; server.ts and cluster.ts read it),
 * REQUEST_TIMEOUT (30 s, 1-3600), HEADERS_TIMEOUT (10 s, 1-3600, at most
 * REQUEST_TIMEOUT), KEEP_ALIVE_TIMEOUT (5 s, 1-3600; above a load
 * balancer's idle timeout behind one: see http-server.ts). Switches take
 * 1/true/yes/on and 0/false/no/off.
 */
import express from 'express';
import type Redis from 'ioredis';
import pino from 'pino';
import type { Registry } from 'prom-client';
import { createIssuer, openStore, type Issuer } from '../lib';
import { DEFAULT_HTTP_TIMEOUTS, type HttpTimeouts } from './http-server';

// Reading one variable: unset or empty is the default; a bad value is a
// TypeError naming the variable (the entry points print `error: <message>`
// and exit 1). Numbers are digits only (no 1e3, no sign), as the CLI reads
// them, and within the bounds the CLI and the library take.

/** A whole number from `min` to `max`; `unit` goes into the message (" of seconds"). */
export function intFromEnv<T extends number | undefined>(env: NodeJS.ProcessEnv, name: string, fallback: T, min = 0, max = Number.MAX_SAFE_INTEGER, unit = ''): number | T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw.trim()) || Number(raw) < min || Number(raw) > max) {
    throw new TypeError(`${name} must be a whole number${unit} from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  }
  return Number(raw);
}

/** Seconds, a fraction allowed (0.5), from `min` to `max`. */
export function secondsFromEnv(env: NodeJS.ProcessEnv, name: string, min: number, max: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d+(\.\d+)?$/.test(raw.trim()) || Number(raw) < min || Number(raw) > max) {
    throw new TypeError(`${name} must be a number of seconds from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  }
  return Number(raw);
}

/** A switch: 1, true, yes, on or 0, false, no, off, in any case. */
export function boolFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const word = raw.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(word)) return true;
  if (['0', 'false', 'no', 'off'].includes(word)) return false;
  throw new TypeError(`${name} must be 0 or 1 (or false/true, no/yes, off/on), got ${JSON.stringify(raw)}`);
}

export interface MetricsSettings {
  /** METRICS=1, or METRICS_PORT set. */
  enabled: boolean;
  /** METRICS_PORT: /metrics on this port only (0: any free one), not on PORT. */
  port?: number;
  /** METRICS_HOST: the address the metrics port listens on (HOST's when unset). */
  host?: string;
}

/**
 * METRICS (a switch), METRICS_PORT (0-65535; setting it turns metrics on, and METRICS=0 with it is refused
 * rather than guessed at) and METRICS_HOST. PORT and METRICS_PORT the same (not 0) is refused too.
 */
export function metricsFromEnv(env: NodeJS.ProcessEnv): MetricsSettings {
  const port = intFromEnv(env, 'METRICS_PORT', undefined, 0, 65535);
  if (port === undefined) {
    // without METRICS_PORT, /metrics is on the API's port: a METRICS_HOST would look as if it had moved it
    if (env.METRICS_HOST) throw new TypeError(`METRICS_HOST is set (${JSON.stringify(env.METRICS_HOST)}) but METRICS_PORT is not: /metrics would stay on PORT; set METRICS_PORT too`);
    return { enabled: boolFromEnv(env, 'METRICS', false) };
  }
  if (!boolFromEnv(env, 'METRICS', true)) throw new TypeError(`METRICS_PORT is set (${port}) but METRICS is off (${JSON.stringify(env.METRICS)}): unset one of them`);
  const host = env.METRICS_HOST || env.HOST || undefined;
  // the same port on another address (METRICS_HOST=10.0.0.5, HOST=0.0.0.0 would still clash; 127.0.0.1 and 10.0.0.5 do not)
  if (port !== 0 && port === portFromEnv(env, 3000) && host === (env.HOST || undefined)) {
    throw new TypeError(`METRICS_PORT must differ from PORT (or METRICS_HOST from HOST), got ${port} for both`);
  }
  return { enabled: true, port, host };
}

/** The longest REDIS_KEY_PREFIX: the options it makes (`…authfail`, `…dpop:`) take at most 100 characters. */
const MAX_REDIS_KEY_PREFIX = 90;

/** REDIS_KEY_PREFIX: deployments sharing one Redis keep their counters and proofs apart (default `ecc:`). */
export function redisPrefixFromEnv(env: NodeJS.ProcessEnv): string {
  const prefix = env.REDIS_KEY_PREFIX || 'ecc:';
  // checked here, so that a prefix too long names the variable, not the option it feeds
  if (prefix.length > MAX_REDIS_KEY_PREFIX) throw new TypeError(`REDIS_KEY_PREFIX must be at most ${MAX_REDIS_KEY_PREFIX} characters, got ${prefix.length}`);
  return prefix;
}

/**
 * An ioredis client for REDIS_URL, which fails a command at once while Redis cannot be reached (no offline
 * queue, one retry); one `redis.unavailable` line (saying what `whileDown` means for this server) when Redis
 * goes, as ioredis reports each reconnection attempt, and one `redis.recovered` when it is back. ioredis is
 * loaded only when REDIS_URL is set (loading it is a sixth of the start-up time).
 */
export function openRedis(url: string, logger: pino.Logger, whileDown: string): Redis {
  const redis = new (require('ioredis') as typeof import('ioredis').default)(url, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  let down = false;
  redis.on('error', (err) => {
    if (down) return;
    down = true;
    logger.warn({ event: 'redis.unavailable', err: err.message }, `Redis unavailable: ${whileDown}`);
  });
  redis.on('ready', () => {
    if (!down) return;
    down = false;
    logger.info({ event: 'redis.recovered' }, 'Redis answers again');
  });
  return redis;
}

/**
 * Closes `redis`: QUIT, and the connection dropped if Redis has not answered
 * it within a second (a stalled Redis never would: a stop must not wait for it).
 */
export async function closeRedis(redis: Redis): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), 1000)));
  const answer = await Promise.race([redis.quit().catch(() => 'failed' as const), late]);
  clearTimeout(timer);
  if (answer !== 'OK') redis.disconnect();
}

/**
 * Resolves once `redis` is connected, has failed (it goes on reconnecting), or after `ms`: a server that
 * listened before would answer its first DPoP requests 503, Redis not yet being ready for the replay check.
 */
export function redisConnected(redis: Redis, ms = 2_000): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      redis.off('ready', done);
      redis.off('error', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    redis.once('ready', done);
    redis.once('error', done);
  });
}

/** redis:// or rediss://, or a unix socket's absolute path (ioredis takes both); a malformed URL is refused, not taken for an outage. */
export function redisUrlFromEnv(env: NodeJS.ProcessEnv): string | undefined {
  const url = env.REDIS_URL;
  if (!url) return undefined;
  if ((url.startsWith('/') && !url.startsWith('//')) || (/^rediss?:\/\/[^/]/i.test(url) && URL.canParse(url))) return url;
  // without its user information (a password may hold '/' too): all from '//' to the last '@'
  throw new TypeError(`REDIS_URL must be redis://… or rediss://… (or a unix socket's absolute path), got ${JSON.stringify(url.replace(/\/\/.*@/, '//…@'))}`);
}

export type TrustProxy = boolean | number | string[];

/** For Express's `trust proxy`: a number of hops, true/false, or addresses, CIDRs, loopback, linklocal, uniquelocal separated by commas. */
export function trustProxyFromEnv(env: NodeJS.ProcessEnv): TrustProxy {
  const raw = (env.TRUST_PROXY ?? '').trim();
  if (raw === '' || /^false$/i.test(raw)) return false;
  if (/^true$/i.test(raw)) return true;
  if (/^\d+$/.test(raw)) return Number(raw);
  const list = raw.split(',').map((item) => item.trim());
  try {
    // Express compiles the setting when it is set: a bad address fails here, at start, not at the first request
    express().set('trust proxy', list);
  } catch (err) {
    throw new TypeError(`TRUST_PROXY must be a number of hops, true, false, or addresses, CIDRs, loopback, linklocal, uniquelocal separated by commas, got ${JSON.stringify(raw)} (${(err as Error).message})`);
  }
  return list;
}

const SECONDS = ' of seconds';
/** CLOCK_TOLERANCE, read by the issuer and the resource server alike (the library's default when unset). */
export const clockToleranceFromEnv = (env: NodeJS.ProcessEnv): number | undefined => intFromEnv(env, 'CLOCK_TOLERANCE', undefined, 0, 300, SECONDS);

export const portFromEnv = (env: NodeJS.ProcessEnv, fallback: number): number => intFromEnv(env, 'PORT', fallback, 0, 65535);

/**
 * REQUEST_TIMEOUT, HEADERS_TIMEOUT and KEEP_ALIVE_TIMEOUT, whole seconds (the `Keep-Alive: timeout=N` hint
 * is), for createHttpServer (its defaults, and why, in http-server.ts); in milliseconds, unset ones absent.
 */
export function httpTimeoutsFromEnv(env: NodeJS.ProcessEnv): HttpTimeouts {
  const seconds = (name: string): number | undefined => intFromEnv(env, name, undefined, 1, 3600, SECONDS);
  const request = seconds('REQUEST_TIMEOUT');
  const headers = seconds('HEADERS_TIMEOUT');
  const keepAlive = seconds('KEEP_ALIVE_TIMEOUT');
  // the headers are part of the request: Node refuses a headersTimeout over requestTimeout (unset, it is at most requestTimeout)
  const requestS = request ?? DEFAULT_HTTP_TIMEOUTS.requestTimeout / 1000;
  if (headers !== undefined && headers > requestS) {
    throw new TypeError(`HEADERS_TIMEOUT must be at most REQUEST_TIMEOUT (${requestS} s${request === undefined ? ', its default' : ''}), got ${JSON.stringify(env.HEADERS_TIMEOUT)}`);
  }
  const ms = (value: number | undefined): number | undefined => (value === undefined ? undefined : value * 1000);
  return { requestTimeout: ms(request), headersTimeout: ms(headers), keepAliveTimeout: ms(keepAlive) };
}

/** One of pino's level names, in any case. */
export function logLevelFromEnv(env: NodeJS.ProcessEnv): pino.LevelWithSilent {
  const raw = env.LOG_LEVEL;
  if (raw === undefined || raw === '') return 'info';
  const names = [...Object.keys(pino.levels.values), 'silent'];
  const level = raw.trim().toLowerCase();
  if (!names.includes(level)) throw new TypeError(`LOG_LEVEL must be one of ${names.join(', ')} (any case), got ${JSON.stringify(raw)}`);
  return level as pino.LevelWithSilent;
}

/**
 * Runs `make` (createIssuer(), requireBearer()), whose option errors begin
 * "option <name>": when that option came from a variable the operator set
 * (`variables`: option → variable), the message names the variable instead
 * ("ISSUER must be an absolute URL, got …"), as the checks above do. Other
 * errors, and options left to their defaults, go on as they are.
 */
export function namingVariables<T>(env: NodeJS.ProcessEnv, variables: Record<string, string>, make: () => T): T {
  try {
    return make();
  } catch (err) {
    const option = err instanceof TypeError ? /^option ([\w.]+)(:? )/.exec(err.message) : null;
    const variable = option ? variables[option[1]] : undefined;
    if (!option || variable === undefined || !env[variable]) throw err;
    throw new TypeError(`${variable}${option[2]}${err instanceof Error ? err.message.slice(option[0].length) : ''}`);
  }
}

/** RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ). */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/;

/**
 * SCOPES_SUPPORTED: the scopes this server offers, separated by single
 * spaces; the orders API's own when unset or empty. Checked here, by the
 * rule createIssuer() applies to `scopesSupported` (and the CLI to the same
 * variable), so that a malformed value names the variable the operator set,
 * not the option.
 */
export function scopesSupportedFromEnv(env: NodeJS.ProcessEnv): string[] {
  const raw = env.SCOPES_SUPPORTED;
  if (raw === undefined || raw === '') return ['orders:read', 'orders:write'];
  const scopes = raw.split(' ');
  if (!scopes.every((s) => SCOPE_TOKEN.test(s))) {
    throw new TypeError(`SCOPES_SUPPORTED must be scope tokens separated by single spaces (RFC 6749 §3.3), got ${JSON.stringify(raw)}`);
  }
  return scopes;
}

/**
 * ISSUER without its trailing slashes (the issuer's URL is compared as written); one that is nothing but
 * slashes is refused here, where createIssuer() would call it missing.
 */
export function issuerUrlFromEnv(env: NodeJS.ProcessEnv, fallback: string): string {
  const url = (env.ISSUER || fallback).replace(/\/+$/, '');
  if (url === '') throw new TypeError(`ISSUER must be an absolute URL, got ${JSON.stringify(env.ISSUER)}`);
  return url;
}

/** A list of words separated by spaces or commas; `undefined` when there is none. */
function listFromEnv(raw: string | undefined): string[] | undefined {
  const items = (raw ?? '').split(/[\s,]+/).filter((item) => item !== '');
  return items.length > 0 ? items : undefined;
}

export function loggerFromEnv(env: NodeJS.ProcessEnv): pino.Logger {
  return pino({ name: 'orders-api', level: logLevelFromEnv(env) });
}

/** createIssuer()'s options that the variables set. */
const ISSUER_VARIABLES = { issuer: 'ISSUER', audience: 'AUDIENCE', algorithm: 'SIGNING_ALG', resources: 'RESOURCES' };

export interface IssuerFromEnv {
  issuer: Issuer;
  /** The issuer URL clients reach. */
  publicUrl: string;
  redis?: Redis;
  /** With METRICS=1: the registry to serve at GET /metrics. */
  metrics?: Registry;
  /** TRUST_PROXY, for the app's `trust proxy` setting. */
  trustProxy: TrustProxy;
}

/**
 * Opens the store (and Redis), creates the issuer and waits until it is ready.
 * `signal` aborted meanwhile (SIGTERM during the start-up): the step in
 * progress (opening the store, the issuer's ready()) ends, then what was
 * opened is closed and the promise rejects with the signal's reason.
 */
export async function issuerFromEnv(env: NodeJS.ProcessEnv, logger: pino.Logger, signal?: AbortSignal): Promise<IssuerFromEnv> {
  const port = portFromEnv(env, 3000);
  if (env.DATABASE_URL && !env.ISSUER) {
    logger.warn(
      { event: 'config.warning', setting: 'ISSUER' },
      `DATABASE_URL is set but ISSUER is not: this instance calls itself http://localhost:${port}, and instances on one database with different ports refuse each other's tokens; set ISSUER to the URL clients reach`,
    );
  }
  const publicUrl = issuerUrlFromEnv(env, `http://localhost:${port}`);
  // the CLI's rules (lib/cli/keys.ts) for the variables it reads too
  const timing = {
    accessTokenTtl: intFromEnv(env, 'ACCESS_TOKEN_TTL', undefined, 1, 86400, SECONDS),
    clockTolerance: clockToleranceFromEnv(env),
    keyRotationLeadTime: intFromEnv(env, 'KEY_ROTATION_LEAD_TIME', undefined, 0, 86400, SECONDS),
    keyRefreshInterval: secondsFromEnv(env, 'KEY_REFRESH_INTERVAL', 0.1, 3600),
  };
  const wantMetrics = metricsFromEnv(env).enabled;
  const redisUrl = redisUrlFromEnv(env);
  const trustProxy = trustProxyFromEnv(env);
  // SCOPES_SUPPORTED: the scopes this server offers, advertised as scopes_supported (the CLI checks a client's scopes
  // against the same variable); the orders API's own when unset
  const scopesSupported = scopesSupportedFromEnv(env);
  const redisPrefix = redisPrefixFromEnv(env);
  const store = await openStore({ databaseUrl: env.DATABASE_URL || undefined, schema: env.DATABASE_SCHEMA || undefined, dataDir: env.DATA_DIR || './data' });
  const redis = redisUrl ? openRedis(redisUrl, logger, 'failed authentications are counted in memory, DPoP proofs get 503, revocations reach the other instances through the store') : undefined;
  // prom-client is loaded only when metrics are asked for
  const metrics = wantMetrics ? new (require('prom-client') as typeof import('prom-client')).Registry() : undefined;
  let issuer: Issuer | undefined;
  try {
    signal?.throwIfAborted();
    issuer = namingVariables(env, ISSUER_VARIABLES, () => createIssuer({
      issuer: publicUrl,
      audience: env.AUDIENCE || `${publicUrl}/api`,
      store,
      algorithm: (env.SIGNING_ALG as 'ES256' | 'RS256' | undefined) || undefined,
      ...timing,
      scopesSupported,
      // RESOURCES: other APIs this issuer serves tokens for (RFC 8707), beside AUDIENCE, the default
      resources: listFromEnv(env.RESOURCES),
      // REDIS_KEY_PREFIX: deployments sharing one Redis keep their counters and proofs apart
      bruteForce: redis ? { redis, keyPrefix: `${redisPrefix}authfail` } : undefined,
      // each DPoP proof is accepted once by all instances (and workers), not once by each
      dpop: redis ? { redis, keyPrefix: `${redisPrefix}dpop:` } : undefined,
      // instances on one store hear of each other's revocations at once (PostgreSQL also notifies by itself)
      // (REVOCATION_CHANNEL: the channel, when several issuers share one Redis; the CLI reads the same variable)
      revocationPush: redis ? { redis, channel: env.REVOCATION_CHANNEL || undefined } : undefined,
      logger,
      metrics: metrics ? { registry: metrics } : undefined,
    }));
    // side by side: the start waits 2 s at most for a Redis that is connected but does not answer, not twice that
    await Promise.all([issuer.ready(), redis && redisConnected(redis)]);
    signal?.throwIfAborted();
    return { issuer, publicUrl, redis, metrics, trustProxy };
  } catch (err) {
    // stopped: the issuer is closed as a running one is (its timers, then the store); failed: the store
    await (signal?.aborted && issuer ? issuer.close() : store.close());
    redis?.disconnect();
    throw err;
  }
}
