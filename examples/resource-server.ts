/**
 * An API process with no database and no secrets: it only verifies access
 * tokens, against the issuer's JWKS.
 *
 *   ISSUER=http://localhost:3000 PORT=4000 node dist/examples/resource-server.js   # built by npm install / npm run build
 *   ISSUER=http://localhost:3000 PORT=4000 npx ts-node --transpile-only examples/resource-server.ts
 *
 * Environment: PORT (4000), HOST (all interfaces), PUBLIC_URL (the URL its callers use,
 * http://localhost:PORT: DPoP proofs name it), ISSUER (http://localhost:3000),
 * AUDIENCE (ISSUER + /api), JWKS_URI (ISSUER + /.well-known/jwks.json), LOG_LEVEL (info),
 * REVOCATION_LIST (ISSUER + /oauth/revocation-list; `off` to accept tokens until they
 * expire), REVOCATION_LIST_INTERVAL (seconds between polls, 10, at most 300), CLOCK_TOLERANCE
 * (seconds of clock skew allowed, 5), REQUEST_TIMEOUT, HEADERS_TIMEOUT, KEEP_ALIVE_TIMEOUT (as the
 * orders API's, see env.ts), REDIS_URL (several instances behind one PUBLIC_URL: each DPoP proof is
 * accepted once by all of them, not once by each; REDIS_KEY_PREFIX as the orders API's). SIGTERM or
 * SIGINT stop it as shutdown.ts stops the orders API.
 */
import type { Server } from 'node:http';
import express, { type RequestHandler } from 'express';
import pino from 'pino';
import { requireBearer, type BearerMiddleware } from '../lib';
import {
  clockToleranceFromEnv,
  closeRedis,
  httpTimeoutsFromEnv,
  issuerUrlFromEnv,
  logLevelFromEnv,
  namingVariables,
  openRedis,
  portFromEnv,
  redisConnected,
  redisPrefixFromEnv,
  redisUrlFromEnv,
  secondsFromEnv,
} from './env';
import { listen } from './http-server';
import { gracefulClose, serveUntilSignal } from './shutdown';

/** requireBearer()'s options that the variables set. */
const RESOURCE_VARIABLES = { issuer: 'ISSUER', audience: 'AUDIENCE', jwksUri: 'JWKS_URI', publicUrl: 'PUBLIC_URL', 'revocationList.uri': 'REVOCATION_LIST' };

export interface RunningResourceServer {
  server: Server;
  url: string;
  close(): Promise<void>;
}

export async function startResourceServer(env: NodeJS.ProcessEnv = process.env): Promise<RunningResourceServer> {
  const port = portFromEnv(env, 4000);
  const timeouts = httpTimeoutsFromEnv(env);
  const issuer = issuerUrlFromEnv(env, 'http://localhost:3000');
  const logger = pino({ name: 'reports-api', level: logLevelFromEnv(env) });
  const list = env.REVOCATION_LIST || `${issuer}/oauth/revocation-list`;
  // at most the list's default maxStale (300 s), past which a list is stale
  const interval = secondsFromEnv(env, 'REVOCATION_LIST_INTERVAL', 0.05, 300);
  const redisUrl = redisUrlFromEnv(env);
  const redisPrefix = redisPrefixFromEnv(env);
  const redis = redisUrl ? openRedis(redisUrl, logger, 'DPoP requests get 503 (Bearer requests go on)') : undefined;
  // no store, no pool (the revocation list's poll timer does not hold the process): only Redis, if any
  const closeRedisIfAny = async (): Promise<void> => void (redis && (await closeRedis(redis)));
  try {
    const verify = {
      issuer,
      audience: env.AUDIENCE || `${issuer}/api`,
      jwksUri: env.JWKS_URI || `${issuer}/.well-known/jwks.json`,
      clockTolerance: clockToleranceFromEnv(env),
      // revoked tokens are refused within one poll of the issuer's signed list
      revocationList: list === 'off' ? undefined : { uri: list, interval },
      // a DPoP proof's htu is this API's URL (without it, the audience's origin: here the issuer's)
      publicUrl: env.PUBLIC_URL || `http://localhost:${port}`,
      // REDIS_URL: a proof is accepted once by every instance sharing the Redis (else once by each, from its memory)
      dpopProofs: redis && { redis, keyPrefix: `${redisPrefix}dpop:` },
      logger,
    };
    const app = reportsApp(
      namingVariables(env, RESOURCE_VARIABLES, () => requireBearer(verify)),
      requireBearer({ ...verify, scope: 'orders:read' }),
    );
    if (redis) await redisConnected(redis);
    const { server, url } = await listen(app, port, env.HOST, timeouts);
    logger.info({ event: 'server.listening', url, issuer }, `listening on ${url}`);
    return { server, url, close: gracefulClose(server, closeRedisIfAny) };
  } catch (err) {
    redis?.disconnect(); // a start that failed (a bad setting, the port taken): nothing to let finish
    throw err;
  }
}

/** The API itself: `guard` checks every /api request (and answers readiness), `readReports` the scope of /api/reports. */
function reportsApp(guard: BearerMiddleware, readReports: RequestHandler): express.Express {
  const app = express();
  app.disable('x-powered-by');
  // liveness: the process answers
  app.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });
  // readiness: the issuer's keys are held and its revocation list is fresh; 503 otherwise
  app.get('/health/ready', (_req, res) => {
    void guard.health().then((health) => {
      res.setHeader('Cache-Control', 'no-store');
      res.status(health.ok ? 200 : 503).json(health);
    });
  });
  app.use('/api', guard);
  app.get('/api/whoami', (req, res) => {
    res.json({ client_id: req.auth!.clientId, scope: req.auth!.scope.join(' ') });
  });
  app.get('/api/reports', readReports, (req, res) => {
    res.json({ reports: [], for: req.auth!.clientId });
  });
  app.use((_req, res) => {
    res.status(404).json({ error: 'not_found' });
  });
  return app;
}

if (require.main === module) {
  // SIGTERM and SIGINT handled from the start (a signal before the server listens ends the start, exit 0);
  // inside the promise, so that a bad LOG_LEVEL is one line on stderr too, not a stack trace
  const main = async (): Promise<void> => {
    const logger = pino({ name: 'reports-api', level: logLevelFromEnv(process.env) });
    await serveUntilSignal(logger, async () => (await startResourceServer()).close);
  };
  main().then(
    () => process.exit(0),
    (err: Error) => {
      console.error(`error: ${err.message}`);
      process.exit(1);
    },
  );
}
