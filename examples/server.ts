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
import { createDemoClient } from './demo-client';
import { boolFromEnv, intFromEnv, issuerFromEnv, loggerFromEnv, portFromEnv } from './env';
import { createApp } from './orders-app';
import { closeOnSignals, gracefulClose } from './shutdown';
import { listen } from './http-server';

export { createApp } from './orders-app';

export interface RunningServer {
  server: Server;
  issuer: Issuer;
  url: string;
  close(): Promise<void>;
}

export async function startServer(
  env: NodeJS.ProcessEnv = process.env,
  print: (line: string) => void = console.log,
  options: { demoClient?: boolean } = {},
): Promise<RunningServer> {
  const port = portFromEnv(env, 3000);
  // DEMO_CLIENT=0 (or false, no, off): no demo client, so no secret is printed into a stdout that a log collector keeps
  const demoClient = options.demoClient !== false && boolFromEnv(env, 'DEMO_CLIENT', true);
  const logger = loggerFromEnv(env);
  const { issuer, publicUrl, redis, metrics, trustProxy } = await issuerFromEnv(env, logger);
  if (demoClient) await createDemoClient(issuer, publicUrl, print);

  const { server, url } = await listen(createApp(issuer, { metrics, trustProxy }), port, env.HOST);
  logger.info({ event: 'server.listening', url, issuer: publicUrl }, `listening on ${url}`);

  const close = gracefulClose(server, async () => {
    await issuer.close();
    await redis?.quit().catch(() => undefined);
  });
  return { server, issuer, url, close };
}

if (require.main === module) {
  // inside the promise, so that a bad WORKERS is one line on stderr too, not a stack trace
  const main = async (): Promise<void> => {
    const workers = intFromEnv(process.env, 'WORKERS', 0, 0, 256);
    if (workers > 0 && cluster.isPrimary) return startPrimary(workers);
    const running = await startServer(process.env, console.log, { demoClient: !cluster.isWorker });
    closeOnSignals(running.close);
  };
  main().catch((err: Error) => {
    // a worker writes into the primary's JSON log, so a JSON line (the primary then logs worker.exit)
    if (cluster.isWorker) loggerFromEnv(process.env).error({ event: 'worker.start_failed', err: err.message }, `worker failed to start: ${err.message}`);
    else console.error(`error: ${err.message}`);
    process.exit(1);
  });
}
