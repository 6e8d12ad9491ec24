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
import { MemoryReplayStore, RedisReplayStore, type RedisSetNxClient } from './core/dpop';
import { RemoteJwks, StaticKeys, loadJwks } from './core/jwks';
import type { KeyResolver } from './core/keys';
import { RejectionLog } from './core/rejection-log';
import { scopeOption } from './core/scope';
import { AccessTokenVerifier } from './core/verifier';
import { bearerMiddleware, type BearerDpopOptions } from './express/require-bearer';
import { resolveLogger } from './logger';
import { BEARER_CHECKS, zeroCounts } from './metrics/counts';
import { metricsFor } from './metrics/prometheus';

const KNOWN = [
  'issuer', 'audience', 'jwksUri', 'keys', 'scope', 'realm', 'clockTolerance', 'tokenCacheMax',
  'jwksCooldown', 'jwksMaxAge', 'jwksTimeout', 'logger', 'metrics', 'dpop', 'publicUrl', 'dpopProofs',
] as const;

/** One in-memory replay store per process for the standalone requireBearer()s that use no Redis. */
let sharedReplay: MemoryReplayStore | undefined;

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

function dpopOptions(options: BearerOptions, audience: string, clockTolerance: number): BearerDpopOptions | undefined {
  const publicUrl = publicUrlOf(options, audience);
  if (options.dpop === undefined && publicUrl === undefined) return undefined;
  const mode = checkDpopMode(options.dpop);
  if (mode === 'disabled') return undefined;
  if (publicUrl === undefined) throw new TypeError(`requireBearer() with dpop '${mode}' needs publicUrl (the audience is not a URL)`);
  if (options.dpopProofs !== undefined && 'nonce' in (options.dpopProofs as object)) throw new TypeError('option dpopProofs.nonce is not supported here');
  const settings = parseDpop(options.dpopProofs);
  const redis = options.dpopProofs?.redis;
  const replay = redis
    ? new RedisReplayStore({ client: redis as RedisSetNxClient, prefix: settings.keyPrefix })
    : (sharedReplay ??= new MemoryReplayStore({ max: settings.replayMax }));
  return { mode, publicUrl, verify: { replay, maxAge: settings.maxAge, clockTolerance } };
}

/** Verifiers shared by every requireBearer() of one issuer/audience/key source, so they share one JWKS and one cache. */
const verifiers = new Map<string, AccessTokenVerifier>();

/**
 * `requireBearer()` for a process that only verifies: keys come from the
 * issuer's JWKS (fetched, cached, refetched on an unknown kid at most once
 * per cooldown) or are given up front.
 */
export function requireBearer(options: BearerOptions): RequestHandler {
  checkObject('requireBearer()', options);
  checkKnown('requireBearer()', options, KNOWN);
  const issuer = checkUrl('issuer', options.issuer);
  const audience = checkString('audience', options.audience);
  if ((options.jwksUri === undefined) === (options.keys === undefined)) {
    throw new TypeError('requireBearer() needs exactly one of jwksUri or keys');
  }
  const registry = checkMetrics(options.metrics);
  const dpop = dpopOptions(options, audience, checkNumber('clockTolerance', options.clockTolerance, 5, 0, 300));
  const jwksUri = options.jwksUri === undefined ? undefined : checkUrl('jwksUri', options.jwksUri);
  const settings = {
    clockTolerance: checkNumber('clockTolerance', options.clockTolerance, 5, 0, 300),
    cacheMax: checkInteger('tokenCacheMax', options.tokenCacheMax, 1000, 0, 10_000_000),
    cooldownMs: checkNumber('jwksCooldown', options.jwksCooldown, 30, 0, 86400) * 1000,
    maxAgeMs: checkNumber('jwksMaxAge', options.jwksMaxAge, 120, 1, 86400 * 7) * 1000,
    timeoutMs: checkNumber('jwksTimeout', options.jwksTimeout, 5, 0.1, 120) * 1000,
  };
  let keys: KeyResolver;
  if (jwksUri) {
    keys = new RemoteJwks(jwksUri, { ...settings, now: Date.now });
  } else {
    const set = Array.isArray(options.keys) ? { keys: options.keys } : options.keys;
    let loaded;
    try {
      loaded = loadJwks(set);
    } catch (err) {
      throw new TypeError(`option keys must be a JWK Set or an array of JWKs: ${(err as Error).message}`);
    }
    if (loaded.size === 0) throw new TypeError('option keys holds no usable ES256 or RS256 public key with a kid');
    keys = new StaticKeys(loaded);
  }
  const memoKey = jwksUri ? JSON.stringify([issuer, audience, jwksUri, settings]) : undefined;
  let verifier = memoKey ? verifiers.get(memoKey) : undefined;
  if (!verifier) {
    verifier = new AccessTokenVerifier({ issuer, audience, keys, clockTolerance: settings.clockTolerance, cacheMax: settings.cacheMax, now: Date.now });
    if (memoKey) verifiers.set(memoKey, verifier);
  }
  const realm = options.realm === undefined ? 'api' : checkString('realm', options.realm);
  const scope = scopeOption('scope', options.scope);
  const logger = resolveLogger(options.logger);
  const counts = registry && zeroCounts(BEARER_CHECKS);
  if (registry) metricsFor(registry).attach({ bearerChecks: counts, cache: verifier.cacheStats });
  return bearerMiddleware({
    verifier,
    realm,
    scope,
    logger,
    // one per middleware: the once-a-minute info lines are counted per requireBearer() call
    rejections: new RejectionLog(logger),
    counts,
    dpop,
  });
}
