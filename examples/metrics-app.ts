/**
 * GET /metrics for Prometheus: a route on the API's own app (METRICS=1), or
 * an app of its own on another port (METRICS_PORT), so that the API's port
 * answers no scrape and the metrics port can be kept to the monitoring
 * network (a firewall rule, a Kubernetes NetworkPolicy, METRICS_HOST on an
 * internal address).
 */
import express from 'express';
import type { MetricsEndpoint } from './cluster-metrics';

/**
 * The route: the registry's text; a worker of WORKERS=N answers with the primary's sum over all workers, which
 * rejects with a `status` of 503 and a `retryAfter` in seconds when it cannot be had (then `next(err)`, with
 * `Retry-After` set).
 */
export function serveMetrics(metrics: MetricsEndpoint): express.RequestHandler {
  return (_req, res, next) => {
    metrics.metrics().then(
      (text) => res.setHeader('Content-Type', metrics.contentType).send(text),
      (err: { retryAfter?: number }) => {
        if (typeof err?.retryAfter === 'number') res.setHeader('Retry-After', String(err.retryAfter));
        next(err);
      },
    );
  };
}

/** The app METRICS_PORT serves: GET (and HEAD) /metrics, 405 for its other methods, 404 for any other path. */
export function metricsApp(metrics: MetricsEndpoint): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.get('/metrics', serveMetrics(metrics));
  app.all('/metrics', (_req, res) => {
    res.setHeader('Allow', 'GET, HEAD');
    res.status(405).json({ error: 'method_not_allowed' });
  });
  app.use((_req, res) => {
    res.status(404).json({ error: 'not_found' });
  });
  app.use((err: { status?: number }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(err.status === 503 ? 503 : 500).json({ error: 'server_error' });
  });
  return app;
}
