/**
 * Graceful stop of an HTTP server: once closing, every response says
 * `Connection: close` and each keep-alive connection is ended as soon as it
 * is idle; in-flight requests get 10 s at most, and closing the store and
 * Redis 5 s more (a stalled database would hold its pool's end for ever).
 */
import type { Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Returns close(): stops accepting, lets in-flight requests finish, then runs `release` (store, Redis), waiting for it `releaseMs` at most. */
export function gracefulClose(server: Server, release: () => Promise<void>, releaseMs = 5_000): () => Promise<void> {
  let closing: Promise<void> | undefined;
  // Open connections, tracked per connection, not per request: a Set of the
  // responses in flight, added to and deleted from on every request, made V8
  // run a full collection every few seconds under load (measured: 8 instead
  // of 1 in 20 s of GET /health, p99 at one connection 0.7-2.1 ms instead
  // of 0.4-0.6 ms).
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  /** Says `Connection: close` on a response not sent yet, and closes its connection once it is idle. */
  const lastOnItsConnection = (res: ServerResponse): void => {
    if (!res.headersSent) res.setHeader('Connection', 'close');
    res.once('close', () => setImmediate(() => server.closeIdleConnections()));
  };
  return () =>
    (closing ??= new Promise<void>((resolve) => {
      server.on('request', (_req, res: ServerResponse) => lastOnItsConnection(res));
      server.close(() => resolve());
      for (const socket of sockets) {
        // the response in flight on this connection: Node's own reference to it
        const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
        if (res) lastOnItsConnection(res);
      }
      server.closeIdleConnections();
      setTimeout(() => server.closeAllConnections(), 10_000).unref();
    }).then(() => within(releaseMs, release())));
}

/** `work`, or nothing more to wait for after `ms`. */
function within(ms: number, work: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const given = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  return Promise.race([work.catch(() => undefined), given]).finally(() => clearTimeout(timer));
}

/** SIGTERM or SIGINT: close, then exit 0. */
export function closeOnSignals(close: () => Promise<void>): void {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      void close().then(() => process.exit(0));
    });
  }
}
