/**
 * An "existing Express API" (a small orders API) protected by
 * express-client-credentials: the issuer's router serves POST /oauth/token
 * and the well-known documents, requireBearer() guards /api.
 */
import express from 'express';
import type { Issuer } from '../lib';
import type { MetricsEndpoint } from './cluster-metrics';
import { serveMetrics } from './metrics-app';

interface Order {
  id: number;
  item: string;
  quantity: number;
  created_by: string;
}

function onlyMethods(allow: string): express.RequestHandler {
  return (_req, res) => {
    res.setHeader('Allow', allow);
    res.status(405).json({ error: 'method_not_allowed' });
  };
}

/**
 * `metrics`: a prom-client registry to serve at GET /metrics (the example passes one with METRICS=1 and no
 * METRICS_PORT; a worker of WORKERS=N the primary's sum over all workers: see metrics-app.ts);
 * `trustProxy`: Express's `trust proxy` (TRUST_PROXY), so that behind a proxy `req.ip`, the address the
 * brute-force limits count, is the caller's and not the proxy's.
 */
export function createApp(issuer: Issuer, options: { metrics?: MetricsEndpoint; trustProxy?: boolean | number | string[] } = {}): express.Express {
  const app = express();
  app.disable('x-powered-by');
  if (options.trustProxy !== undefined) app.set('trust proxy', options.trustProxy);
  const orders: Order[] = [];

  // liveness: the process answers
  app.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });
  // readiness: the store answers and a key signs; 503 otherwise (take the instance out of rotation)
  app.get('/health/ready', (_req, res) => {
    void issuer.health().then((health) => {
      res.setHeader('Cache-Control', 'no-store');
      res.status(health.ok ? 200 : 503).json(health);
    });
  });

  // METRICS=1: the scrape on the API's port (with METRICS_PORT, server.ts serves it on that port instead)
  if (options.metrics) app.get('/metrics', serveMetrics(options.metrics));

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

  // a known path with another method: 405 and what it takes (after the token check, like any /api request)
  app.all('/api/whoami', onlyMethods('GET, HEAD'));
  app.all('/api/orders', onlyMethods('GET, HEAD, POST'));

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
