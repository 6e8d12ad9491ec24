/**
 * WORKERS=N: the primary prepares the store (and the demo client) once, then
 * forks N workers that each run the server; a worker that dies is replaced.
 */
import cluster from 'node:cluster';
import { createDemoClient } from './demo-client';
import { issuerFromEnv, loggerFromEnv } from './env';

export async function startPrimary(workers: number, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const logger = loggerFromEnv(env);
  const { issuer, publicUrl, redis } = await issuerFromEnv(env, logger);
  await createDemoClient(issuer, publicUrl, console.log);
  await issuer.close();
  redis?.disconnect();
  let stopping = false;
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on('exit', (worker, code) => {
    if (stopping) {
      if (Object.keys(cluster.workers ?? {}).length === 0) process.exit(0);
      return;
    }
    logger.warn({ event: 'worker.exit', pid: worker.process.pid, code }, 'worker exited; starting another');
    cluster.fork();
  });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      stopping = true;
      for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
    });
  }
}
