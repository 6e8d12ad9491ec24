/**
 * The example orders API: environment → issuer → app → listen.
 *
 *   npm start                      # http://localhost:3000 (compiled: node dist/examples/server.js)
 *   PORT=8080 DATA_DIR=/var/lib/orders npm start
 *   npm run dev                    # the same through ts-node, from the sources
 *
 * The app is in orders-app.ts, the environment in env.ts (the variables are
 * listed there), WORKERS=N in cluster.ts, the graceful stop in shutdown.ts.
 */
import cluster from 'node:cluster';
import type { Server } from 'node:http';
import type { Issuer } from '../lib';
import { startPrimary } from './cluster';
import { workerMetrics } from './cluster-metrics';
import { createDemoClient } from './demo-client';
import { boolFromEnv, closeRedis, httpTimeoutsFromEnv, intFromEnv, issuerFromEnv, loggerFromEnv, metricsFromEnv, portFromEnv } from './env';
import { metricsApp } from './metrics-app';
import { createApp } from './orders-app';
import { closeNow, gracefulClose, serveUntilSignal, StopSignal, within } from './shutdown';
import { listen } from './http-server';

export { createApp } from './orders-app';

export interface RunningServer {
  server: Server;
  issuer: Issuer;
  url: string;
  /** With METRICS_PORT: where GET /metrics answers. */
  metricsUrl?: string;
  close(): Promise<void>;
}

/**
 * `signal` (serveUntilSignal's, in server.ts's own start): once it is aborted, the start-up takes no further
 * step, closes what it opened and rejects with the signal's reason; the step in progress is let end.
 */
export async function startServer(
  env: NodeJS.ProcessEnv = process.env,
  print: (line: string) => void = console.log,
  options: { demoClient?: boolean; signal?: AbortSignal } = {},
): Promise<RunningServer> {
  const { signal } = options;
  const port = portFromEnv(env, 3000);
  // REQUEST_TIMEOUT, HEADERS_TIMEOUT, KEEP_ALIVE_TIMEOUT: read before anything is opened, so a bad one stops the start at once
  const timeouts = httpTimeoutsFromEnv(env);
  // DEMO_CLIENT=0 (or false, no, off): no demo client, so no secret is printed into a stdout that a log collector keeps
  const demoClient = options.demoClient !== false && boolFromEnv(env, 'DEMO_CLIENT', true);
  const logger = loggerFromEnv(env);
  // a worker of WORKERS=N with METRICS=1: GET /metrics answers with the primary's sum over all workers, and this
  // worker answers the primary's collections from now on (with no metrics until its registry is made)
  const metricsSettings = metricsFromEnv(env);
  const clustered = cluster.isWorker && metricsSettings.enabled ? workerMetrics(logger) : undefined;
  let opened: Awaited<ReturnType<typeof issuerFromEnv>>;
  try {
    opened = await issuerFromEnv(env, logger, signal);
  } catch (err) {
    await clustered?.close();
    throw err;
  }
  const { issuer, publicUrl, redis, metrics, trustProxy } = opened;
  if (clustered && metrics) clustered.serve(metrics);
  let metricsServer: Server | undefined;
  const release = async (): Promise<void> => {
    // the API takes no more requests: the metrics port closes (its scrapes watched the drain), and this
    // worker's final counts go to the primary (cluster-metrics.ts)
    if (metricsServer) await closeNow(metricsServer);
    await clustered?.close();
    await issuer.close();
    if (redis) await closeRedis(redis);
  };

  let listening: Awaited<ReturnType<typeof listen>>;
  let metricsUrl: string | undefined;
  try {
    signal?.throwIfAborted();
    // once begun, the demo client is created and printed: a client stored with its secret never shown would be of no use
    if (demoClient) await createDemoClient(issuer, publicUrl, print);
    signal?.throwIfAborted();
    const endpoint = clustered?.endpoint ?? metrics;
    // METRICS_PORT: /metrics there, and not on the API's port
    if (endpoint && metricsSettings.port !== undefined) {
      const served = await listen(metricsApp(endpoint), metricsSettings.port, metricsSettings.host, timeouts);
      metricsServer = served.server;
      metricsUrl = `${served.url}/metrics`;
    }
    signal?.throwIfAborted();
    listening = await listen(createApp(issuer, { metrics: metricsServer ? undefined : endpoint, trustProxy }), port, env.HOST, timeouts);
  } catch (err) {
    await within(5_000, release());
    throw err;
  }
  const { server, url } = listening;
  const close = gracefulClose(server, release);
  if (signal?.aborted) {
    await close();
    signal.throwIfAborted();
  }
  logger.info({ event: 'server.listening', url, issuer: publicUrl, ...(metricsUrl && { metrics_url: metricsUrl }) }, `listening on ${url}${metricsUrl ? `, metrics at ${metricsUrl}` : ''}`);
  return { server, issuer, url, metricsUrl, close };
}

if (require.main === module) {
  // inside the promise, so that a bad WORKERS is one line on stderr too, not a stack trace
  const main = async (): Promise<void> => {
    const workers = intFromEnv(process.env, 'WORKERS', 0, 0, 256);
    if (workers > 0 && cluster.isPrimary) return startPrimary(workers);
    // SIGTERM and SIGINT are handled from here on, before the store is opened (see serveUntilSignal)
    await serveUntilSignal(loggerFromEnv(process.env), async (signal) => {
      const running = await startServer(process.env, console.log, { demoClient: !cluster.isWorker, signal });
      return running.close;
    });
    process.exit(0);
  };
  main().catch((err: Error) => {
    // stopped by a signal during the start-up: its line is logged, what was opened is closed
    if (err instanceof StopSignal) process.exit(0);
    // a worker writes into the primary's JSON log, so a JSON line (the primary then logs worker.exit)
    if (cluster.isWorker) loggerFromEnv(process.env).error({ event: 'worker.start_failed', err: err.message }, `worker failed to start: ${err.message}`);
    else console.error(`error: ${err.message}`);
    process.exit(1);
  });
}
