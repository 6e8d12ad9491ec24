/**
 * WORKERS=N: the primary prepares the store (and the demo client) once, then
 * forks N workers that each run the server; a worker that dies is replaced.
 * SIGTERM or SIGINT, from the primary's start on: one `server.stopping`
 * line; while it prepares the store, it stops after the step in progress
 * (startPrimary rejects with a StopSignal, exit 0); later, each worker gets
 * SIGTERM (one still starting stops in the same way) and the primary exits 0
 * once they all have, or at once when none is running (all waiting to be
 * restarted). A second signal, of either kind (SAME_STOP_MS or more after
 * the first): one `server.stop_forced` line, SIGTERM again to each worker
 * (its second: it exits at once too), and the primary exits at once with
 * 128 + the signal's number (130, 143): forceStop() in shutdown.ts, as for
 * one process.
 * METRICS=1: GET /metrics, at any worker, answers with the sum over all of
 * them (cluster-metrics.ts); with METRICS_PORT, every worker listens on that
 * port too (the cluster shares it, as it shares PORT).
 */
import cluster from 'node:cluster';
import { primaryMetrics } from './cluster-metrics';
import { createDemoClient } from './demo-client';
import { boolFromEnv, httpTimeoutsFromEnv, issuerFromEnv, loggerFromEnv, metricsFromEnv } from './env';
import { forceStop, STOP_SIGNALS, StopSignal } from './shutdown';

export async function startPrimary(workers: number, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  // DEMO_CLIENT=0 (or false, no, off): none, as for one process (no secret printed into a stdout a log collector keeps)
  const demoClient = boolFromEnv(env, 'DEMO_CLIENT', true);
  // read by each worker; here first, so that a bad one is one line from the primary, not a failed start per worker
  httpTimeoutsFromEnv(env);
  const wantMetrics = metricsFromEnv(env).enabled;
  const logger = loggerFromEnv(env);
  // handled before the store is opened: a signal while the primary prepares it found no handler, and killed it
  const preparing = new AbortController();
  let forked = false;
  let stopping = false;
  let stoppingAt = 0;
  const running = () => Object.values(cluster.workers ?? {});
  // the first signal, of either kind, stops in order; a second one (SIGINT after SIGTERM too) at once
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stopping) {
      forceStop(logger, signal, stoppingAt, () => {
        for (const worker of running()) worker?.process.kill('SIGTERM');
      });
      return;
    }
    logger.info({ event: 'server.stopping', signal, starting: !forked }, forked ? `${signal}: stopping the workers` : `${signal} during start-up: stopping after the step in progress`);
    stopping = true;
    stoppingAt = Date.now();
    preparing.abort(new StopSignal(signal));
    if (!forked) return;
    const workers = running();
    for (const worker of workers) worker?.process.kill('SIGTERM');
    // none to wait for: all dead, waiting for their restart (which `stopping` cancels)
    if (workers.length === 0) process.exit(0);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
  const { issuer, publicUrl, redis } = await issuerFromEnv(env, logger, preparing.signal);
  try {
    preparing.signal.throwIfAborted();
    // once begun, the demo client is created and printed (a client stored with its secret never shown would be of no use)
    if (demoClient) await createDemoClient(issuer, publicUrl, console.log);
  } finally {
    await issuer.close();
    redis?.disconnect();
  }
  preparing.signal.throwIfAborted();
  // METRICS=1: a worker's GET /metrics answers with the sum over all workers, which the primary collects (cluster-metrics.ts)
  const metrics = wantMetrics ? primaryMetrics(logger) : undefined;
  if (metrics) cluster.on('message', (worker, message) => metrics.onMessage(worker, message));
  forked = true;
  const forkedAt = new Map<number, number>();
  const fork = (): void => {
    const worker = cluster.fork();
    forkedAt.set(worker.id, Date.now());
  };
  for (let i = 0; i < workers; i++) fork();
  // a worker that dies right after its start (the database down, say) is replaced after a pause
  // that doubles with each such death, up to 30 s, instead of in a loop as fast as node can fork
  let quickDeaths = 0;
  cluster.on('exit', (worker, code, signal) => {
    metrics?.onExit(worker);
    if (stopping) {
      if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0);
      return;
    }
    const lived = Date.now() - (forkedAt.get(worker.id) ?? 0);
    forkedAt.delete(worker.id);
    // exit 0: a worker stopped on purpose (SIGTERM to it alone, to recycle it), which finished its graceful stop;
    // replaced at once and not counted as a failed start, however soon after its own start
    const stopped = code === 0;
    if (!stopped) quickDeaths = lived < 10_000 ? quickDeaths + 1 : 0;
    const delayMs = stopped || quickDeaths === 0 ? 0 : Math.min(30_000, 1000 * 2 ** (quickDeaths - 1));
    // killed: code is null and signal says by what (SIGKILL: the OOM killer, or kill -9)
    logger[stopped ? 'info' : 'warn']({ event: 'worker.exit', pid: worker.process.pid, code, signal, lived_ms: lived, restart_in_ms: delayMs }, stopped ? 'worker stopped; starting another' : 'worker exited; starting another');
    setTimeout(() => {
      if (!stopping) fork();
    }, delayMs);
  });
}
