/**
 * METRICS=1 with WORKERS=N: GET /metrics answers for the whole group, each
 * series summed over the workers, at the same path and port as with one
 * process (nothing listens in the primary).
 *
 * The worker that gets the scrape asks the primary over the cluster's IPC
 * channel; the primary asks every worker for its registry as JSON
 * (getMetricsAsJSON), combines them with prom-client's
 * AggregatorRegistry.aggregate() (counters and the histogram summed, a
 * gauge by the `aggregator` its definition names: ecc_store_up the minimum,
 * ecc_signing_key_age_seconds the maximum) and sends the text back.
 *
 * Not AggregatorRegistry.clusterMetrics(): it fails the whole scrape when one
 * worker has not answered within 5 s (a stuck worker, or one still starting),
 * and a dead worker's counts go with it, so the sums drop and Prometheus
 * reads the drop as a counter reset (rate() then counts the survivors' whole
 * totals as new). Here the primary keeps each worker's last answer: a worker
 * that does not answer within COLLECT_TIMEOUT_MS is counted with its counters
 * as last seen (its gauges are left out), and a dead worker's last counters
 * stay in the sums, so no counter goes down. A worker that stops gracefully
 * (SIGTERM to it, or to the group) sends its final registry as it closes,
 * once its server has stopped taking requests: its counters move to the
 * dead workers' sum and it is not asked again; only a worker killed (or
 * forced to stop by a second signal) loses what it counted after its last
 * collection.
 *
 * One collection at a time, and its sum reused for REUSE_MS: a scrape that
 * comes while a collection is under way gets that one's sum, and so does one
 * within REUSE_MS of its end. Before, every scrape had every worker serialize
 * its registry and the primary (which also hands each new connection to a
 * worker) sum them, however many came at once: /metrics needs no
 * credentials, and 16 loops scraping took GET /health on new connections
 * from under 1 ms to 18-28 ms at the median (bench/cluster-scrape.js, 2
 * workers). Prometheus scrapes every 15 to 60 s, so a sum up to a second old
 * costs it nothing; no scrape reads less than one that ended before it
 * began. A worker still owing an answer (stopped, blocked) is not asked
 * again until it answers, so no collections pile up for it to work through
 * when it runs again: until then it counts as last seen, and a scrape does
 * not wait for it.
 */
import cluster, { type Worker } from 'node:cluster';
import type * as PromClient from 'prom-client';
import type { MetricObjectWithValues, MetricValue, Registry } from 'prom-client';
import type { Logger } from 'pino';

/** How long the primary waits for the workers' registries; a late worker counts as last seen. */
export const COLLECT_TIMEOUT_MS = 3_000;
/** How long a worker waits for the primary's sum before answering the scrape 503. */
export const SCRAPE_TIMEOUT_MS = 5_000;
/** How long after a collection the primary answers scrapes with its sum, without collecting again. */
export const REUSE_MS = 1_000;
/** How long a stopping worker waits for its final registry to be read and sent to the primary. */
const FINAL_MS = 1_000;
/** The Retry-After of a scrape answered 503: the primary has just let it wait SCRAPE_TIMEOUT_MS, so not sooner. */
export const RETRY_AFTER_S = 5;

type Metrics = MetricObjectWithValues<MetricValue<string>>[];

// worker → primary: it answers collections from now on. worker → primary: a scrape; primary → worker: its answer.
// primary → worker: a collection; worker → primary: its registry. worker → primary: its registry as it stops, the last.
const HELLO = 'ecc:metrics:hello';
const SCRAPE = 'ecc:metrics:scrape';
const SCRAPED = 'ecc:metrics:scraped';
const COLLECT = 'ecc:metrics:collect';
const LOCAL = 'ecc:metrics:local';
const FINAL = 'ecc:metrics:final';

type Message =
  | { type: typeof HELLO }
  | { type: typeof SCRAPE; id: number }
  | { type: typeof SCRAPED; id: number; text?: string; error?: string }
  | { type: typeof COLLECT; round: number }
  | { type: typeof LOCAL; round: number; metrics?: Metrics; error?: string }
  | { type: typeof FINAL; metrics?: Metrics };

const isMessage = (m: unknown): m is Message => typeof m === 'object' && m !== null && typeof (m as { type?: unknown }).type === 'string' && (m as { type: string }).type.startsWith('ecc:metrics:');

const prom = (): typeof PromClient => require('prom-client') as typeof PromClient;

/** What GET /metrics serves (a prom-client Registry is one). */
export interface MetricsEndpoint {
  readonly contentType: string;
  metrics(): Promise<string>;
}

export interface WorkerMetrics {
  /**
   * For GET /metrics: the primary's sum over the workers; rejects with an error of `status` 503 and `retryAfter`
   * RETRY_AFTER_S (seconds) after SCRAPE_TIMEOUT_MS, or when the primary cannot be asked or has no sum.
   */
  readonly endpoint: MetricsEndpoint;
  /** Answers the primary's collections with `registry` from now on (until then with no metrics, so a starting worker does not hold a scrape up). */
  serve(registry: Registry): void;
  /**
   * Stops answering (a scrape waiting for the primary gets 503 at once) and sends the primary the registry's
   * final counts, so that nothing counted since the last collection is lost; resolves once they are sent
   * (FINAL_MS at most). For a graceful stop, once the server takes no more requests.
   */
  close(): Promise<void>;
}

/**
 * In a worker: answers the primary's collections and asks it for the sum. A scrape the primary does not
 * answer is logged, metrics.primary_unanswered (warn, `reason`) once, until one is answered again
 * (metrics.primary_answered, info, `down_ms`, `failures`).
 */
export function workerMetrics(logger: Logger, scrapeTimeoutMs = SCRAPE_TIMEOUT_MS): WorkerMetrics {
  let registry: Registry | undefined;
  let nextId = 0;
  let closing: Promise<void> | undefined;
  /** Each scrape waiting for the primary: `fail` with why, and whether it is the primary's doing (logged). */
  const waiting = new Map<number, { resolve: (text: string) => void; fail: (why: string, primary: boolean) => void }>();
  const unavailable = (why: string): Error => Object.assign(new Error(`metrics unavailable: ${why}`), { status: 503, retryAfter: RETRY_AFTER_S });
  /** Since when, and for how many scrapes, the primary has not answered: logged once, then when it answers again. */
  let down: { since: number; failures: number } | undefined;
  const primaryFailed = (reason: string): void => {
    if (down) {
      down.failures++;
      return;
    }
    down = { since: Date.now(), failures: 1 };
    logger.warn(
      { event: 'metrics.primary_unanswered', reason },
      'GET /metrics answered 503: the cluster primary did not send the sum over the workers (logged once, until it does)',
    );
  };
  const primaryAnswered = (): void => {
    if (!down) return;
    logger.info({ event: 'metrics.primary_answered', down_ms: Date.now() - down.since, failures: down.failures }, 'the cluster primary answers the metrics scrapes again');
    down = undefined;
  };
  // a send to a primary that is gone: its callback gets the error (without one, the process would get an 'error' event)
  const ignore = (): void => undefined;
  const onMessage = (message: unknown): void => {
    if (!isMessage(message)) return;
    if (message.type === COLLECT) {
      const { round } = message;
      (registry ? registry.getMetricsAsJSON() : Promise.resolve([])).then(
        (metrics) => process.send?.({ type: LOCAL, round, metrics } satisfies Message, undefined, undefined, ignore),
        (err: Error) => process.send?.({ type: LOCAL, round, error: String(err?.message ?? err) } satisfies Message, undefined, undefined, ignore),
      );
    } else if (message.type === SCRAPED) {
      const waiter = waiting.get(message.id);
      if (message.text !== undefined) waiter?.resolve(message.text);
      else waiter?.fail(`the primary has no sum: ${message.error ?? 'no answer'}`, true);
    }
  };
  process.on('message', onMessage);
  process.send?.({ type: HELLO } satisfies Message, undefined, undefined, ignore);
  return {
    endpoint: {
      get contentType() {
        // the primary's sum is a registry of prom-client's default format, the Prometheus text format
        return prom().Registry.PROMETHEUS_CONTENT_TYPE;
      },
      metrics() {
        const id = nextId++;
        return new Promise<string>((resolve, reject) => {
          // whichever comes first settles the scrape and removes its entry (the sum, the timeout, a failed send, close())
          const timer = setTimeout(() => waiting.get(id)?.fail(`the primary did not answer within ${scrapeTimeoutMs} ms`, true), scrapeTimeoutMs);
          waiting.set(id, {
            resolve: (text) => {
              clearTimeout(timer);
              waiting.delete(id);
              primaryAnswered();
              resolve(text);
            },
            fail: (why, primary) => {
              clearTimeout(timer);
              waiting.delete(id);
              if (primary) primaryFailed(why);
              reject(unavailable(why));
            },
          });
          process.send?.({ type: SCRAPE, id } satisfies Message, undefined, undefined, (err) => {
            if (err) waiting.get(id)?.fail(`the primary cannot be asked: ${err.message}`, true);
          });
        });
      },
    },
    serve(r) {
      registry = r;
    },
    close() {
      return (closing ??= new Promise<void>((resolve) => {
        process.off('message', onMessage);
        // not the primary's doing: not logged (server.stopping is)
        for (const waiter of [...waiting.values()]) waiter.fail('the worker is stopping', false);
        const timer = setTimeout(resolve, FINAL_MS);
        const done = (): void => {
          clearTimeout(timer);
          resolve();
        };
        // a registry that fails now: the primary keeps the counters it last saw, and stops asking all the same
        (registry ? registry.getMetricsAsJSON().then((m) => m as Metrics, () => undefined) : Promise.resolve([])).then((metrics) => {
          if (!process.send || !process.connected) return done();
          process.send({ type: FINAL, metrics } satisfies Message, undefined, undefined, done);
        });
      }));
    },
  };
}

interface Round {
  /** Workers (by id) asked and not answered yet. */
  pending: Set<number>;
  answers: Map<number, Metrics>;
  done: () => void;
}

/** Only what may be carried over from an earlier answer: counters and histograms, never below what they were. */
const countersOf = (metrics: Metrics): Metrics => metrics.filter((m) => (m.type as unknown as string) === 'counter' || (m.type as unknown as string) === 'histogram');

export interface PrimaryMetrics {
  /** The cluster's 'message' listener (a stopping worker's final counts included). */
  onMessage(worker: Worker, message: unknown): void;
  /** The cluster's 'exit' listener: the worker's last counters stay in the sums. */
  onExit(worker: Worker): void;
}

/** In the primary: answers the workers' scrapes with the sum over all of them. */
export function primaryMetrics(logger: Logger, collectTimeoutMs = COLLECT_TIMEOUT_MS, reuseMs = REUSE_MS): PrimaryMetrics {
  const { AggregatorRegistry } = prom();
  /** Each live worker's last answer (by worker id), with the round it answered. */
  const lastSeen = new Map<number, { round: number; metrics: Metrics }>();
  /** The last counters of workers that died; merged into one list once there are several. */
  let retired: Metrics[] = [];
  let merging = false;
  /** Workers that answer collections: one still loading its modules would not, and has counted nothing yet. */
  const answering = new Set<number>();
  /** Workers that missed a round, so that a stuck one is logged once, not at every scrape. */
  const late = new Set<number>();
  /** Workers asked for their registry that have not answered: not asked again until they do. */
  const asked = new Set<number>();
  /** Workers that sent their final counts as they stop: never asked again, a late answer not taken. */
  const stopping = new Set<number>();
  /** Moved on when a stopping worker's counts are in: a collection begun before is not reused. */
  let generation = 0;
  const rounds = new Map<number, Round>();
  let nextRound = 0;
  /** The collection under way, which every scrape meanwhile shares. */
  let collecting: Promise<string> | undefined;
  /** The last collection's sum and when it ended (performance.now()), reused for `reuseMs`. */
  let last: { text: string; at: number } | undefined;

  const answered = (worker: Worker, round: number, metrics: Metrics | undefined, error: string | undefined): void => {
    // one collection at a time per worker: this answers it, whichever round it was for
    asked.delete(worker.id);
    const r = rounds.get(round);
    // an answer read after the worker's exit or its final counts (its counters are in `retired` already) is not taken again
    if (metrics !== undefined && !worker.isDead() && !stopping.has(worker.id)) {
      if ((lastSeen.get(worker.id)?.round ?? -1) < round) lastSeen.set(worker.id, { round, metrics });
      if (late.delete(worker.id)) logger.info({ event: 'metrics.worker_answered', pid: worker.process.pid }, 'a worker answers the metrics collection again');
    }
    if (!r || !r.pending.delete(worker.id)) return;
    if (metrics !== undefined) r.answers.set(worker.id, metrics);
    else missed(worker, error ?? 'no metrics');
    if (r.pending.size === 0) r.done();
  };

  const missed = (worker: Worker, reason: string): void => {
    if (late.has(worker.id)) return;
    late.add(worker.id);
    logger.warn(
      { event: 'metrics.worker_unanswered', pid: worker.process.pid, reason },
      'a worker did not answer the metrics collection: its counters count as last seen, its gauges are left out',
    );
  };

  const collect = async (): Promise<string> => {
    const round = nextRound++;
    const r: Round = { pending: new Set(), answers: new Map(), done: () => undefined };
    rounds.set(round, r);
    try {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, collectTimeoutMs);
        r.done = () => {
          clearTimeout(timer);
          resolve();
        };
        for (const worker of Object.values(cluster.workers ?? {})) {
          if (!worker?.isConnected() || !answering.has(worker.id)) continue;
          // still owes an earlier round its answer (so it was late for it, and logged): counts as last seen
          if (asked.has(worker.id)) continue;
          asked.add(worker.id);
          r.pending.add(worker.id);
          worker.send({ type: COLLECT, round } satisfies Message, (err) => {
            if (err) answered(worker, round, undefined, err.message);
          });
        }
        if (r.pending.size === 0) r.done();
      });
    } finally {
      rounds.delete(round);
    }
    for (const id of r.pending) {
      const worker = cluster.workers?.[id];
      if (worker) missed(worker, `no answer within ${collectTimeoutMs} ms`);
    }
    // the live workers (one that answered and then died is in `retired` by now, and counts once): this round's
    // answer, or for one that did not answer (stuck, or dying) its counters as last seen, so that no sum drops
    const parts: Metrics[] = [...retired];
    for (const [id, seen] of lastSeen) parts.push(r.answers.get(id) ?? countersOf(seen.metrics));
    return AggregatorRegistry.aggregate(parts).metrics();
  };

  /** The sum for a scrape: the last one if it is recent enough, else the collection under way, else a new one. */
  const scrape = (): Promise<string> => {
    if (last && performance.now() - last.at < reuseMs) return Promise.resolve(last.text);
    const begun = generation;
    collecting ??= collect()
      .then((text) => {
        if (generation === begun) last = { text, at: performance.now() };
        return text;
      })
      .finally(() => {
        collecting = undefined;
      });
    return collecting;
  };

  /** A worker's final counts, sent as it stops gracefully: they join the dead workers' (undefined: its registry failed, its last seen will). */
  const finished = (worker: Worker, metrics: Metrics | undefined): void => {
    answering.delete(worker.id);
    asked.delete(worker.id);
    late.delete(worker.id);
    if (stopping.has(worker.id)) return;
    stopping.add(worker.id);
    if (metrics !== undefined) {
      lastSeen.delete(worker.id);
      // none: it stops before its registry was made (a failed start), having counted nothing
      if (metrics.length > 0) retire(metrics);
      // no scrape from now on reads less than this
      last = undefined;
      generation++;
    }
    for (const r of rounds.values()) {
      if (r.pending.delete(worker.id) && r.pending.size === 0) r.done();
    }
  };

  const retire = (metrics: Metrics): void => {
    retired.push(countersOf(metrics));
    // should it fail, the lists stay apart: the sums are the same
    mergeRetired().catch(() => undefined);
  };

  /** Keeps `retired` one list: a worker that crash-loops adds one at each death. */
  const mergeRetired = async (): Promise<void> => {
    if (merging || retired.length < 2) return;
    merging = true;
    try {
      const merged = retired.slice();
      const sum = (await AggregatorRegistry.aggregate(merged).getMetricsAsJSON()) as Metrics;
      // those retired meanwhile stay after the sum
      retired = [sum, ...retired.slice(merged.length)];
    } finally {
      merging = false;
    }
  };

  return {
    onMessage(worker, message) {
      if (!isMessage(message)) return;
      if (message.type === HELLO) {
        answering.add(worker.id);
      } else if (message.type === LOCAL) {
        answered(worker, message.round, message.metrics, message.error);
      } else if (message.type === FINAL) {
        finished(worker, message.metrics);
      } else if (message.type === SCRAPE) {
        const reply = (answer: { text?: string; error?: string }): void => {
          if (worker.isConnected()) worker.send({ type: SCRAPED, id: message.id, ...answer } satisfies Message, () => undefined);
        };
        scrape().then(
          (text) => reply({ text }),
          (err: Error) => reply({ error: String(err?.message ?? err) }),
        );
      }
    },
    onExit(worker) {
      const seen = lastSeen.get(worker.id);
      lastSeen.delete(worker.id);
      answering.delete(worker.id);
      late.delete(worker.id);
      asked.delete(worker.id);
      stopping.delete(worker.id);
      // killed (or its final counts not read): its counters as last seen
      if (seen) retire(seen.metrics);
      for (const r of rounds.values()) {
        if (r.pending.delete(worker.id) && r.pending.size === 0) r.done();
      }
    },
  };
}
