/**
 * Graceful stop of an HTTP server: once closing, it accepts no new
 * connection, and every response says `Connection: close`, so that each
 * keep-alive connection ends after its next response; a connection idle at
 * that moment is left open until its next request (answered, then closed)
 * or its keep-alive timeout (the `Keep-Alive: timeout=N` its client was
 * told; Node closes it a second after, while undici, fetch's client, lets go
 * of it 2 s before and Node's agent 1 s before). In-flight requests and idle
 * connections get 10 s at
 * most, then the connections left are cut; closing the store and Redis
 * 5 s more (a stalled database would hold its pool's end for ever).
 * And SIGTERM or SIGINT answered from the start-up on (serveUntilSignal);
 * a second one, of either kind, during the stop ends the process at once.
 */
import type { Server, ServerResponse } from 'node:http';
import net, { type Socket } from 'node:net';
import { constants } from 'node:os';
import type { Logger } from 'pino';

/**
 * Returns close(): stops accepting, lets in-flight requests finish and idle keep-alive connections end (see
 * above), `boundMs` at most, then runs `release` (store, Redis), waiting for it `releaseMs` at most.
 *
 * Idle connections are not closed at once (http.Server's close() does, through closeIdleConnections()): a
 * connection idle on the server's side may be one whose client is writing its next request at that very
 * moment, and closing it resets that request (the client sees ECONNRESET, "socket hang up" or "other side
 * closed" for a request it sent, and cannot tell whether it was handled). Measured with
 * bench/graceful-restart.js, 20 SIGTERMs under 8 keep-alive connections of GET /health: back to back,
 * 180 requests reset after being written with node:http's agent (every stop), 164 with fetch; with up to
 * 20 ms between a connection's requests, 35 (in 14 stops of 20) and 41 (in 19). None, in the same runs,
 * once an idle connection is left to its next request or its keep-alive timeout. HTTP/1.1 gives a server
 * no way to close an idle connection without that race; the keep-alive timeout is the one moment its
 * client was told of. A connection still idle at the bound (a keep-alive timeout over it, for a load
 * balancer) is cut there, the race left to that moment.
 */
export function gracefulClose(server: Server, release: () => Promise<void>, releaseMs = 5_000, boundMs = 10_000): () => Promise<void> {
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
  /** Says `Connection: close` on a response not sent yet: Node ends its connection once it is sent. */
  const lastOnItsConnection = (res: ServerResponse): void => {
    if (!res.headersSent) res.setHeader('Connection', 'close');
  };
  return () =>
    (closing ??= new Promise<void>((resolve) => {
      // before the app's listener: a route that answers at once (GET /health) has sent its headers when a later listener runs
      server.prependListener('request', (_req, res: ServerResponse) => lastOnItsConnection(res));
      const bound = setTimeout(() => server.closeAllConnections(), boundMs);
      bound.unref();
      // net.Server's close: no new connection, and 'close' once every connection has ended
      net.Server.prototype.close.call(server, () => {
        clearTimeout(bound);
        stopTimeoutChecks(server);
        resolve();
      });
      for (const socket of sockets) {
        // the response in flight on this connection: Node's own reference to it
        const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
        if (res) lastOnItsConnection(res);
      }
    }).then(() => within(releaseMs, release())));
}

/**
 * Stops the timer Node runs to enforce `requestTimeout` and `headersTimeout` (every
 * `connectionsCheckingInterval`), as http.Server's own close() does; left running during the stop, it keeps
 * enforcing them on the connections still open. Found by its symbol's name; none (another Node): nothing to
 * stop, it is unref'd anyway.
 */
function stopTimeoutChecks(server: Server): void {
  const key = Object.getOwnPropertySymbols(server).find((symbol) => symbol.description === 'http.server.connectionsCheckingInterval');
  if (key) clearInterval((server as unknown as Record<symbol, NodeJS.Timeout | undefined>)[key]);
}

/**
 * Closes a server whose requests are short (the metrics port's scrapes): no new connection, idle ones closed at
 * once, a request in flight given `ms` to end, then cut. Resolves once its connections are gone.
 */
export function closeNow(server: Server, ms = 1_000): Promise<void> {
  return new Promise<void>((resolve) => {
    const cut = setTimeout(() => server.closeAllConnections(), ms);
    cut.unref();
    server.close(() => {
      clearTimeout(cut);
      resolve();
    });
  });
}

/** `work`, or nothing more to wait for after `ms`; never rejects. */
export function within(ms: number, work: Promise<void>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const given = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
    timer.unref();
  });
  return Promise.race([work.catch(() => undefined), given]).finally(() => clearTimeout(timer));
}

export const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const;

/**
 * A second stop signal sooner than this after the first is taken for the same request, not as one to
 * stop at once: a terminal's Ctrl-C reaches every process of its group, the cluster primary and each
 * worker alike, and the primary then passes SIGTERM on to each worker (systemd, too, signals each
 * process of a service); a worker would take the primary's SIGTERM for a second signal and skip its
 * graceful close. A person's second Ctrl-C, or an orchestrator's second signal, comes later.
 */
export const SAME_STOP_MS = 1_000;

/** What a start-up stopped by SIGTERM or SIGINT rejects with, once it closed what it had opened: the entry points exit 0. */
export class StopSignal extends Error {
  constructor(readonly signal: NodeJS.Signals) {
    super(`stopped by ${signal}`);
    this.name = 'StopSignal';
  }
}

/**
 * Runs `start` with SIGTERM and SIGINT handled from before it opens
 * anything, and resolves once a signal stopped the server (then exit 0).
 *
 * Handlers installed only once the server listened left a signal that came
 * during the start-up (an orchestrator stopping a container that had just
 * started) to the default action: the process killed, nothing closed,
 * nothing said. Now the first signal, whenever it comes, is one
 * `server.stopping` line (`starting`: whether the server was still starting)
 * and then:
 * - the server up (`start` resolved with its close()): the graceful close;
 * - still starting: `start`'s AbortSignal is aborted (reason: a StopSignal).
 *   start lets the step in progress end (opening the store, a query: the
 *   store's own timeouts bound them), takes no further step, closes what it
 *   opened and rejects with the StopSignal, as does this promise. A start-up
 *   that fails meanwhile for a reason of its own rejects with that error.
 * A second signal, of either kind, ends a stop that takes too long (a second
 * Ctrl-C, or SIGTERM after SIGINT): one `server.stop_forced` line, then
 * exit at once with 128 + the signal's number (130 for SIGINT, 143 for
 * SIGTERM), as its default action would report it. (Each signal's handler
 * was once()'d: SIGINT after SIGTERM, or the reverse, found the other's
 * handler still there, which ignored it, and the stop went on.) One that
 * comes within SAME_STOP_MS of the first is taken for the same request (see
 * there). A start-up that fails (its own error, a StopSignal, or `start`
 * throwing at once) removes the handlers before this promise rejects, and a
 * stop removes them once it is complete: the process's SIGTERM and SIGINT
 * are what they were, so a caller that goes on (or logs and waits to exit)
 * can still be stopped by either.
 */
export async function serveUntilSignal(logger: Logger, start: (signal: AbortSignal) => Promise<() => Promise<void>>): Promise<void> {
  const stop = new AbortController();
  let up = false;
  const signalled = new Promise<void>((resolve) => stop.signal.addEventListener('abort', () => resolve()));
  let firstAt = 0;
  const onSecond = (signal: NodeJS.Signals): void => forceStop(logger, signal, firstAt);
  const onSignal = (signal: NodeJS.Signals): void => {
    firstAt = Date.now();
    for (const each of STOP_SIGNALS) {
      process.removeListener(each, onSignal);
      process.on(each, onSecond);
    }
    logger.info({ event: 'server.stopping', signal, starting: !up }, up ? `${signal}: closing` : `${signal} during start-up: stopping after the step in progress`);
    stop.abort(new StopSignal(signal));
  };
  for (const signal of STOP_SIGNALS) process.once(signal, onSignal);
  const removeHandlers = (): void => {
    for (const signal of STOP_SIGNALS) {
      process.removeListener(signal, onSignal);
      process.removeListener(signal, onSecond);
    }
  };
  let close: () => Promise<void>;
  try {
    close = await start(stop.signal);
  } catch (err) {
    removeHandlers();
    throw err;
  }
  up = true;
  await signalled;
  await close();
  removeHandlers();
}

/**
 * A stop signal that came after the first, at `firstAt` (Date.now()): within SAME_STOP_MS, taken for the same
 * request, nothing; later, it ends the stop: one `server.stop_forced` line (warn, `signal`), `beforeExit` (the
 * WORKERS primary passes SIGTERM on to each worker, its second), then exit at once with 128 + the signal's
 * number. serveUntilSignal's and the cluster primary's.
 */
export function forceStop(logger: Logger, signal: NodeJS.Signals, firstAt: number, beforeExit?: () => void): void {
  if (Date.now() - firstAt < SAME_STOP_MS) return;
  logger.warn({ event: 'server.stop_forced', signal }, `${signal} during the stop: exiting now`);
  beforeExit?.();
  process.exit(exitCodeOf(signal));
}

/** The exit status a shell or an orchestrator reports for a process its default action ended: 128 + the signal's number. */
export function exitCodeOf(signal: NodeJS.Signals): number {
  return 128 + constants.signals[signal];
}
