import type { RequestHandler } from 'express';
import { checkInteger, checkKnown, checkMetrics, checkNumber, checkObject, checkString, checkUrl, type BearerOptions } from './config';
import { RemoteJwks, StaticKeys, loadJwks } from './core/jwks';
import type { KeyResolver } from './core/keys';
import { RejectionLog } from './core/rejection-log';
import { scopeOption } from './core/scope';
import { AccessTokenVerifier } from './core/verifier';
import { bearerMiddleware } from './express/require-bearer';
import { resolveLogger } from './logger';
import { BEARER_CHECKS, zeroCounts } from './metrics/counts';
import { metricsFor } from './metrics/prometheus';

const KNOWN = [
  'issuer', 'audience', 'jwksUri', 'keys', 'scope', 'realm', 'clockTolerance', 'tokenCacheMax',
  'jwksCooldown', 'jwksMaxAge', 'jwksTimeout', 'logger', 'metrics',
] as const;

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
  });
}
