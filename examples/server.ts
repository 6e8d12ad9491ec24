/**
 * An "existing Express API" (a small orders API) protected by
 * express-client-credentials: the issuer's router serves POST /oauth/token
 * and the well-known documents, requireBearer() guards /api.
 *
 *   npm start                      # http://localhost:3000
 *   PORT=8080 DATA_DIR=/var/lib/orders npm start
 *
 * Environment: PORT (3000), HOST (all interfaces), ISSUER (http://localhost:PORT),
 * AUDIENCE (ISSUER + /api), DATA_DIR (./data), DATABASE_URL (PostgreSQL instead
 * of the embedded store) and DATABASE_SCHEMA, REDIS_URL (shared brute-force
 * counters), ACCESS_TOKEN_TTL (3600 s), SIGNING_ALG (ES256),
 * KEY_ROTATION_LEAD_TIME (300 s), KEY_REFRESH_INTERVAL (30 s), WORKERS (0: one
 * process; N: node:cluster with N workers), LOG_LEVEL (info).
 */
import cluster from 'node:cluster';
import type { AddressInfo } from 'node:net';
import type { Server, ServerResponse } from 'node:http';
import express from 'express';
import Redis from 'ioredis';
import pino from 'pino';
import { createIssuer, openStore, type Issuer } from '../lib';

interface Order {
  id: number;
  item: string;
  quantity: number;
  created_by: string;
}

export interface RunningServer {
  server: Server;
  issuer: Issuer;
  url: string;
  close(): Promise<void>;
}

function intFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new TypeError(`${name} must be a whole number, got ${JSON.stringify(raw)}`);
  return n;
}

export function createApp(issuer: Issuer): express.Express {
  const app = express();
  app.disable('x-powered-by');
  const orders: Order[] = [];

  app.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });

  // token endpoint, JWKS and metadata
  app.use(issuer.router());

  // everything under /api needs a valid access token...
  app.use('/api', issuer.requireBearer());

  app.get('/api/whoami', (req, res) => {
    res.json({ client_id: req.auth!.clientId, scope: req.auth!.scope.join(' ') });
  });

  // ...and each route its own scope
  app.get('/api/orders', issuer.requireBearer({ scope: 'orders:read' }), (_req, res) => {
    res.json({ orders });
  });

  app.post('/api/orders', issuer.requireBearer({ scope: 'orders:write' }), express.json({ limit: '16kb' }), (req, res) => {
    const { item, quantity } = (req.body ?? {}) as { item?: unknown; quantity?: unknown };
    if (typeof item !== 'string' || item === '' || !Number.isInteger(quantity) || (quantity as number) < 1) {
      res.status(400).json({ error: 'invalid_order', error_description: 'send {"item": string, "quantity": positive integer}' });
      return;
    }
    const order: Order = { id: orders.length + 1, item, quantity: quantity as number, created_by: req.auth!.clientId };
    orders.push(order);
    res.status(201).json(order);
  });

  app.use((_req, res) => {
    res.status(404).json({ error: 'not_found' });
  });
  // last resort for the app's own routes (e.g. a malformed JSON order): never a stack trace
  app.use((err: { status?: number; statusCode?: number }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    const status = err.status ?? err.statusCode ?? 500;
    res.status(status >= 400 && status < 600 ? status : 500).json({ error: status < 500 ? 'bad_request' : 'server_error' });
  });
  return app;
}

/** Options of the issuer from the environment; the one place the example reads it besides startServer(). */
async function issuerFromEnv(env: NodeJS.ProcessEnv, logger: pino.Logger): Promise<{ issuer: Issuer; publicUrl: string; redis?: Redis }> {
  const port = intFromEnv(env, 'PORT', 3000);
  const publicUrl = (env.ISSUER || `http://localhost:${port}`).replace(/\/+$/, '');
  const ttl = intFromEnv(env, 'ACCESS_TOKEN_TTL', 3600);
  const store = await openStore({ databaseUrl: env.DATABASE_URL || undefined, schema: env.DATABASE_SCHEMA || undefined, dataDir: env.DATA_DIR || './data' });
  const redis = env.REDIS_URL ? new Redis(env.REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false }) : undefined;
  redis?.on('error', (err) => logger.warn({ event: 'redis.error', err: err.message }, 'redis unavailable; counting failures in memory'));
  try {
    const issuer = createIssuer({
      issuer: publicUrl,
      audience: env.AUDIENCE || `${publicUrl}/api`,
      store,
      algorithm: (env.SIGNING_ALG as 'ES256' | 'RS256' | undefined) || undefined,
      accessTokenTtl: ttl,
      keyRotationLeadTime: env.KEY_ROTATION_LEAD_TIME ? intFromEnv(env, 'KEY_ROTATION_LEAD_TIME', 300) : undefined,
      keyRefreshInterval: env.KEY_REFRESH_INTERVAL ? Number(env.KEY_REFRESH_INTERVAL) : undefined,
      scopesSupported: ['orders:read', 'orders:write'],
      bruteForce: redis ? { redis } : undefined,
      logger,
    });
    await issuer.ready();
    return { issuer, publicUrl, redis };
  } catch (err) {
    await store.close();
    redis?.disconnect();
    throw err;
  }
}

/**
 * On the first start on a store, creates the demo client and prints it. Only
 * one process ever creates a store's first key, so instances starting
 * together on one database create one demo client between them.
 */
async function createDemoClient(issuer: Issuer, publicUrl: string, print: (line: string) => void): Promise<void> {
  if (!issuer.isFirstStart() || (await issuer.clients.list()).length > 0) return;
  const demo = await issuer.clients.create({ name: 'demo', scopes: 'orders:read orders:write' });
  print('');
  print('Created a demo client (the secret is shown only now):');
  print(`  client_id:     ${demo.clientId}`);
  print(`  client_secret: ${demo.clientSecret}`);
  print('Get a token:');
  print(`  curl -s -u '${demo.clientId}:${demo.clientSecret}' -d grant_type=client_credentials ${publicUrl}/oauth/token`);
  print('');
}

export async function startServer(
  env: NodeJS.ProcessEnv = process.env,
  print: (line: string) => void = console.log,
  options: { demoClient?: boolean } = {},
): Promise<RunningServer> {
  const port = intFromEnv(env, 'PORT', 3000);
  const host = env.HOST || undefined;
  const logger = pino({ name: 'orders-api', level: env.LOG_LEVEL || 'info' });
  const { issuer, publicUrl, redis } = await issuerFromEnv(env, logger);
  if (options.demoClient !== false) await createDemoClient(issuer, publicUrl, print);

  const server = await new Promise<Server>((resolve, reject) => {
    const app = createApp(issuer);
    const s = host ? app.listen(port, host, () => resolve(s)) : app.listen(port, () => resolve(s));
    s.once('error', reject);
  });
  const address = server.address() as AddressInfo;
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  logger.info({ event: 'server.listening', url, issuer: publicUrl }, `listening on ${url}`);

  // Graceful stop: once closing, every response says `Connection: close`, and
  // each keep-alive connection is ended as soon as it is idle.
  let closing: Promise<void> | undefined;
  const inFlight = new Set<ServerResponse>();
  server.on('request', (_req, res: ServerResponse) => {
    if (closing) res.setHeader('Connection', 'close');
    inFlight.add(res);
    res.on('close', () => {
      inFlight.delete(res);
      if (closing) setImmediate(() => server.closeIdleConnections());
    });
  });
  /** Stops accepting, lets in-flight requests finish (10 s at most), then closes the store and Redis. */
  const close = (): Promise<void> =>
    (closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const res of inFlight) if (!res.headersSent) res.setHeader('Connection', 'close');
      server.closeIdleConnections();
      setTimeout(() => server.closeAllConnections(), 10_000).unref();
    }).then(async () => {
      await issuer.close();
      await redis?.quit().catch(() => undefined);
    }));
  return { server, issuer, url, close };
}

/** The primary of WORKERS=N: prepares the store (and the demo client) once, then forks. */
async function startPrimary(workers: number): Promise<void> {
  const logger = pino({ name: 'orders-api', level: process.env.LOG_LEVEL || 'info' });
  const { issuer, publicUrl, redis } = await issuerFromEnv(process.env, logger);
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

if (require.main === module) {
  const workers = intFromEnv(process.env, 'WORKERS', 0);
  const start =
    workers > 0 && cluster.isPrimary
      ? startPrimary(workers)
      : startServer(process.env, console.log, { demoClient: !cluster.isWorker }).then((running) => {
          for (const signal of ['SIGTERM', 'SIGINT'] as const) {
            process.once(signal, () => {
              running.close().then(() => process.exit(0));
            });
          }
        });
  start.catch((err: Error) => {
    console.error(`error: ${err.message}`);
    process.exit(1);
  });
}
