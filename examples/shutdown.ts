/**
 * Graceful stop of an HTTP server: once closing, every response says
 * `Connection: close` and each keep-alive connection is ended as soon as it
 * is idle; in-flight requests get 10 s at most.
 */
import type { Server, ServerResponse } from 'node:http';

/** Returns close(): stops accepting, lets in-flight requests finish, then runs `release` (store, Redis). */
export function gracefulClose(server: Server, release: () => Promise<void>): () => Promise<void> {
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
  return () =>
    (closing ??= new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const res of inFlight) if (!res.headersSent) res.setHeader('Connection', 'close');
      server.closeIdleConnections();
      setTimeout(() => server.closeAllConnections(), 10_000).unref();
    }).then(release));
}

/** SIGTERM or SIGINT: close, then exit 0. */
export function closeOnSignals(close: () => Promise<void>): void {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      void close().then(() => process.exit(0));
    });
  }
}
