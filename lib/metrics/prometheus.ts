import type * as PromClient from 'prom-client';
import type { Histogram, Registry } from 'prom-client';
import { BEARER_CHECKS, BEARER_SERIES, MANAGEMENT_CHECKS, MANAGEMENT_SERIES, TOKEN_OUTCOMES, TOKEN_SERIES, zeroCounts, type BearerCheck, type Counts, type ManagementCheck, type TokenOutcome } from './counts';

/** Metric names, all prefixed `ecc_`. */
export const METRIC_NAMES = {
  tokenRequests: 'ecc_token_requests_total',
  tokenDuration: 'ecc_token_request_duration_seconds',
  tokenManagement: 'ecc_token_management_requests_total',
  bearerChecks: 'ecc_bearer_checks_total',
  cacheHits: 'ecc_verified_token_cache_hits_total',
  cacheMisses: 'ecc_verified_token_cache_misses_total',
  signingKeyAge: 'ecc_signing_key_age_seconds',
  storeUp: 'ecc_store_up',
  dpopReplayStoreUp: 'ecc_dpop_replay_store_up',
  dpopReplayStoreErrors: 'ecc_dpop_replay_store_errors_total',
} as const;

/** What one issuer or one standalone requireBearer() contributes to a registry. */
export interface MetricsSource {
  tokenRequests?: Counts<TokenOutcome>;
  /** Revocation and introspection requests. */
  tokenManagement?: Counts<ManagementCheck>;
  bearerChecks?: Counts<BearerCheck>;
  cache?: { hits: number; misses: number };
  signingKey?: () => { kid: string; seconds: number } | undefined;
  /** An issuer's store as its calls found it. */
  store?: { readonly state: 'up' | 'read_only' | 'down' };
  /** A shared DPoP replay store (Redis): whether it answers, and the proof checks it failed. */
  dpopReplayStore?: { readonly up: boolean; readonly errors: number };
}

/**
 * The package's metrics on one prom-client registry, made once per registry
 * and shared by every issuer and requireBearer() given that registry (their
 * counts add up). Counters are read from the sources' plain counts when the
 * registry is scraped; the latency histogram is observed directly.
 */
export class RegistryMetrics {
  readonly tokenDuration: Histogram;
  private readonly sources = new Set<MetricsSource>();
  /** Counts of detached sources, so counters never go down. */
  private readonly retired = {
    tokenRequests: zeroCounts(TOKEN_OUTCOMES),
    tokenManagement: zeroCounts(MANAGEMENT_CHECKS),
    bearerChecks: zeroCounts(BEARER_CHECKS),
    cache: { hits: 0, misses: 0 },
    dpopReplayStoreErrors: 0,
  };
  /** To tell whether the registry still holds these metrics (e.g. after registry.clear()). */
  readonly marker: object;

  constructor(prom: typeof PromClient, registry: Registry) {
    const metrics = this;
    const registers = [registry];
    const sum = <K extends string>(pick: (s: MetricsSource) => Counts<K> | undefined, base: Counts<K>, key: K): number => {
      let n = base[key];
      for (const s of metrics.sources) n += pick(s)?.[key] ?? 0;
      return n;
    };
    const caches = (): { hits: number; misses: number }[] => [...new Set([...this.sources].map((s) => s.cache).filter((c) => c !== undefined))];

    this.marker = new prom.Counter({
      name: METRIC_NAMES.tokenRequests,
      help: 'Token endpoint requests (POST /oauth/token) by outcome, and by reason for invalid_client, invalid_dpop_proof, rate_limited and unavailable',
      labelNames: ['outcome', 'reason'],
      registers,
      collect() {
        this.reset();
        for (const key of TOKEN_OUTCOMES) this.inc(TOKEN_SERIES[key], sum((s) => s.tokenRequests, metrics.retired.tokenRequests, key));
      },
    });
    new prom.Counter({
      name: METRIC_NAMES.tokenManagement,
      help: 'Revocation (POST /oauth/revoke) and introspection (POST /oauth/introspect) requests by endpoint and outcome, and by reason for invalid_client, rate_limited and inactive',
      labelNames: ['endpoint', 'outcome', 'reason'],
      registers,
      collect() {
        this.reset();
        for (const check of MANAGEMENT_CHECKS) this.inc(MANAGEMENT_SERIES[check], sum((s) => s.tokenManagement, metrics.retired.tokenManagement, check));
      },
    });
    this.tokenDuration = new prom.Histogram({
      name: METRIC_NAMES.tokenDuration,
      help: 'Time from the token request reaching the router to the answer being written, in seconds',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    new prom.Counter({
      name: METRIC_NAMES.bearerChecks,
      help: 'requireBearer() checks by outcome and refusal reason',
      labelNames: ['outcome', 'reason'],
      registers,
      collect() {
        this.reset();
        for (const check of BEARER_CHECKS) this.inc(BEARER_SERIES[check], sum((s) => s.bearerChecks, metrics.retired.bearerChecks, check));
      },
    });
    new prom.Counter({
      name: METRIC_NAMES.cacheHits,
      help: 'Access tokens found in the verified-token cache (no signature check needed)',
      registers,
      collect() {
        this.reset();
        this.inc(caches().reduce((n, c) => n + c.hits, metrics.retired.cache.hits));
      },
    });
    new prom.Counter({
      name: METRIC_NAMES.cacheMisses,
      help: 'Access tokens not in the verified-token cache (checked cryptographically)',
      registers,
      collect() {
        this.reset();
        this.inc(caches().reduce((n, c) => n + c.misses, metrics.retired.cache.misses));
      },
    });
    new prom.Gauge({
      name: METRIC_NAMES.signingKeyAge,
      help: 'Seconds since the current signing key began signing, by kid',
      labelNames: ['kid'],
      registers,
      // summed over a cluster's workers (prom-client's AggregatorRegistry) an age would double: each reports the same key
      aggregator: 'max',
      collect() {
        this.reset();
        for (const s of metrics.sources) {
          const key = s.signingKey?.();
          if (key) this.set({ kid: key.kid }, key.seconds);
        }
      },
    });
    // up-gauges from what the issuers already know (every store call reports; the revocation reload reads every
    // revocationResync seconds, so an idle instance notices too): 0 when any source on this registry finds it down
    new prom.Gauge({
      name: METRIC_NAMES.storeUp,
      help: 'Whether the issuer store answers reads and writes (1) or not (0: down, or read-only such as a full disk); absent without an issuer',
      registers,
      // over a cluster's workers: 0 when any finds it down, as for several issuers on one registry (a sum would read 2)
      aggregator: 'min',
      collect() {
        const stores = [...metrics.sources].filter((s) => s.store !== undefined);
        if (stores.length > 0) this.set(stores.every((s) => s.store!.state === 'up') ? 1 : 0);
        else this.remove(); // no sample (reset() would put a 0 back on a gauge without labels)
      },
    });
    new prom.Gauge({
      name: METRIC_NAMES.dpopReplayStoreUp,
      help: 'Whether the shared DPoP replay store (Redis) answered the last proof check or probe (1) or not (0); absent without one',
      registers,
      aggregator: 'min',
      collect() {
        const stores = [...new Set([...metrics.sources].map((s) => s.dpopReplayStore).filter((r) => r !== undefined))];
        if (stores.length > 0) this.set(stores.every((r) => r.up) ? 1 : 0);
        else this.remove();
      },
    });
    new prom.Counter({
      name: METRIC_NAMES.dpopReplayStoreErrors,
      help: 'DPoP proof checks refused with 503 because the shared DPoP replay store (Redis) did not answer, at the token endpoint and at protected routes',
      registers,
      collect() {
        this.reset();
        const stores = new Set([...metrics.sources].map((s) => s.dpopReplayStore).filter((r) => r !== undefined));
        this.inc([...stores].reduce((n, r) => n + r.errors, metrics.retired.dpopReplayStoreErrors));
      },
    });
  }

  /** Adds a source; the function returned removes it (its counts stay in the totals). */
  attach(source: MetricsSource): () => void {
    this.sources.add(source);
    return () => {
      if (!this.sources.delete(source)) return;
      const { retired } = this;
      if (source.tokenRequests) for (const k of TOKEN_OUTCOMES) retired.tokenRequests[k] += source.tokenRequests[k];
      if (source.tokenManagement) for (const k of MANAGEMENT_CHECKS) retired.tokenManagement[k] += source.tokenManagement[k];
      if (source.bearerChecks) for (const k of BEARER_CHECKS) retired.bearerChecks[k] += source.bearerChecks[k];
      if (source.dpopReplayStore && ![...this.sources].some((s) => s.dpopReplayStore === source.dpopReplayStore)) {
        retired.dpopReplayStoreErrors += source.dpopReplayStore.errors;
      }
      if (source.cache && ![...this.sources].some((s) => s.cache === source.cache)) {
        retired.cache.hits += source.cache.hits;
        retired.cache.misses += source.cache.misses;
      }
    };
  }
}

const MEMO = Symbol.for('express-client-credentials.metrics');

/**
 * The metrics on `registry`, created the first time (prom-client is loaded
 * only then: with metrics off it is never required).
 */
export function metricsFor(registry: Registry): RegistryMetrics {
  const holder = registry as Registry & { [MEMO]?: RegistryMetrics };
  const known = holder[MEMO];
  if (known && registry.getSingleMetric(METRIC_NAMES.tokenRequests) === known.marker) return known;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const prom = require('prom-client') as typeof PromClient;
  const metrics = new RegistryMetrics(prom, registry);
  Object.defineProperty(holder, MEMO, { value: metrics, configurable: true, enumerable: false });
  return metrics;
}
