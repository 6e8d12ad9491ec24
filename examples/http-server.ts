/**
 * The HTTP server for an Express app, with its requests and responses built
 * on the app's own prototypes from the start.
 *
 * `app.listen()` gives Node plain request and response objects, and Express
 * then switches each one's prototype to the app's (Object.setPrototypeOf, on
 * every request). After that switch each property set on the object
 * (Express's own, `req.auth`, a body parser's `req.body`) takes V8's slow
 * path (about 1.5 µs each, measured), and under load much of every request
 * survives young-generation collections and is collected again by full ones
 * (`--trace-gc`: about 5 MB promoted per scavenge on a bare Express 5 app,
 * nothing on bare node:http). Built on the app's prototypes, the objects need
 * no switch: Express's call finds the prototype already there and changes
 * nothing.
 *
 * The objects are built by subclasses of Node's own, whose prototypes are put
 * in front of the app's and then serve as the app's `request` and `response`.
 * A subclass gets room in each object for the properties Node's constructors
 * set, so that the ones added later (by the router, the app, requireBearer())
 * stay fast properties. Function constructors whose `prototype` was the app's
 * own object gave the objects too little room: every response, and every
 * request that passed a middleware layer, was turned into a dictionary (the
 * router's `req[symbol] = ...`), and each property read after that was a hash
 * lookup. Measured (one core, wrk at 32 connections, server CPU per request):
 * the example's `/api/whoami` 74 → 50 µs, `/health` 55 → 39 µs (medians of
 * four alternating runs of two processes); under callgrind 200,000 → 133,000
 * and 150,000 → 107,000 instructions per request.
 * Behaviour unchanged (Express 4 and 5).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Express } from 'express';

interface Constructors {
  IncomingMessage: typeof http.IncomingMessage;
  ServerResponse: typeof http.ServerResponse;
}

/** One pair of classes per app: a second server for the same app (HTTP and HTTPS, say) builds on the same prototypes. */
const constructorsOf = new WeakMap<Express, Constructors>();

function appConstructors(app: Express): Constructors {
  let made = constructorsOf.get(app);
  if (!made) {
    class AppRequest extends http.IncomingMessage {}
    class AppResponse extends http.ServerResponse {}
    Object.setPrototypeOf(AppRequest.prototype, app.request);
    Object.setPrototypeOf(AppResponse.prototype, app.response);
    // Express sets each request's prototype to app.request: now the one it already has
    app.request = AppRequest.prototype as typeof app.request;
    app.response = AppResponse.prototype as typeof app.response;
    made = { IncomingMessage: AppRequest, ServerResponse: AppResponse as unknown as typeof http.ServerResponse };
    constructorsOf.set(app, made);
  }
  return made;
}

/**
 * How long a connection may take, in milliseconds (createHttpServer's defaults below, Node's in brackets):
 *
 * - `requestTimeout` 30 s (300 s): the whole request, body included, from its first byte. The example's
 *   bodies are small (a token form, an order of 16 kB at most): any working client sends them in well under a
 *   second. With Node's 300 s, a client sending a POST /oauth/token body a byte at a time held its
 *   connection (and a request in the issuer) about 317 s (an audit's figure); now it gets 408 and the
 *   connection is closed. Raise it for an API that takes large uploads.
 * - `headersTimeout` 10 s (60 s): the request line and headers, from the request's first byte, or from
 *   the connection's start for its first request (a connection opened and left silent gets 408 and is
 *   closed too). At most `requestTimeout` (unset: 10 s or `requestTimeout`, the shorter).
 * - `keepAliveTimeout` 5 s (5 s): how long an idle keep-alive connection is kept for the client's next
 *   request. Node says `Keep-Alive: timeout=5` on each response and closes the connection a second after
 *   the 5 s; undici (fetch) lets go of it 2 s before, Node's agent 1 s before. It is also the longest a
 *   graceful stop (shutdown.ts) waits for a connection left idle, within its 10 s bound. Behind a load
 *   balancer that keeps its connections to the server open (AWS ALB: 60 s idle timeout; nginx's upstream
 *   `keepalive_timeout`: 60 s; Google Cloud's load balancers: 600 s), set it above the balancer's (65 s
 *   behind an ALB, KEEP_ALIVE_TIMEOUT=65 in the example): balancers ignore the hint, and a server that
 *   closes an idle connection first may close it just as the balancer sends a request on it (a 502). A
 *   graceful stop then cuts the balancer's connections still idle at its 10 s bound.
 *
 * Node enforces the first two on a timer (`connectionsCheckingInterval`, by default every 30 s, so a 30 s
 * limit took up to 60 s): here every second, or every tenth of the shorter of the two when that is under
 * 10 s.
 */
export interface HttpTimeouts {
  requestTimeout?: number;
  headersTimeout?: number;
  keepAliveTimeout?: number;
}

export const DEFAULT_HTTP_TIMEOUTS: Required<HttpTimeouts> = { requestTimeout: 30_000, headersTimeout: 10_000, keepAliveTimeout: 5_000 };

export function createHttpServer(app: Express, timeouts: HttpTimeouts = {}): http.Server {
  const { requestTimeout, keepAliveTimeout } = { ...DEFAULT_HTTP_TIMEOUTS, ...definedOnly(timeouts) };
  const headersTimeout = timeouts.headersTimeout ?? Math.min(DEFAULT_HTTP_TIMEOUTS.headersTimeout, requestTimeout);
  const connectionsCheckingInterval = Math.max(10, Math.min(1_000, Math.floor(Math.min(requestTimeout, headersTimeout) / 10)));
  // Node checks headersTimeout <= requestTimeout here (a RangeError otherwise)
  // requireHostHeader: Node would answer an HTTP/1.1 request without Host itself, with no body; refuseMissingHost() does, in JSON
  const options = { ...appConstructors(app), requestTimeout, headersTimeout, keepAliveTimeout, connectionsCheckingInterval, requireHostHeader: false };
  const server = http.createServer(options, (req, res) => (missingHost(req) ? refuseMissingHost(res) : app(req, res)));
  // Node looks at Expect only after its Host check: with that check here, a request without Host is refused before
  // either answer to Expect; one with Host gets what Node gives it (100 Continue then the request, or 417)
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (missingHost(req)) return refuseMissingHost(res);
    res.writeContinue();
    server.emit('request', req, res);
  });
  server.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (missingHost(req)) return refuseMissingHost(res);
    res.writeHead(417);
    res.end();
  });
  server.on('clientError', answerClientError);
  return server;
}

const NO_HOST = JSON.stringify({ error: 'invalid_request', error_description: 'an HTTP/1.1 request needs a Host header' });

/** RFC 9112 §3.2: an HTTP/1.1 request must carry Host (HTTP/1.0 need not). */
function missingHost(req: http.IncomingMessage): boolean {
  return req.headers.host === undefined && req.httpVersionMajor === 1 && req.httpVersionMinor === 1;
}

/** The 400 Node answers such a request with (then the connection is closed), with the JSON body every other error has. */
function refuseMissingHost(res: http.ServerResponse): void {
  res.writeHead(400, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(NO_HOST),
    'Cache-Control': 'no-store',
    Connection: 'close',
  });
  res.end(NO_HOST);
}

/** Status, reason phrase, `error` and `error_description` for what Node's parser and timers refuse before the app sees a request. */
function clientErrorAnswer(err: NodeJS.ErrnoException & { reason?: unknown }): [number, string, string, string] {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return [431, 'Request Header Fields Too Large', 'invalid_request', `the request line and headers are larger than this server takes (${http.maxHeaderSize} bytes)`];
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return [413, 'Payload Too Large', 'invalid_request', 'the chunk extensions are larger than this server takes'];
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [408, 'Request Timeout', 'request_timeout', 'the request did not arrive in full within the time this server gives one'];
    default: {
      // the parser's own words ("Invalid header value char"), never the request's bytes
      const why = typeof err.reason === 'string' && /^[\x20-\x7e]{1,100}$/.test(err.reason) ? `: ${err.reason.toLowerCase()}` : '';
      return [400, 'Bad Request', 'invalid_request', `the request is not well-formed HTTP/1.1${why}`];
    }
  }
}

/**
 * Node's own answers to a request its parser refuses (malformed, headers over `maxHeaderSize`) or that does
 * not arrive in time (REQUEST_TIMEOUT, HEADERS_TIMEOUT) are a status line and no body. These say why, in the
 * JSON shape every other error of the server has (`error`, `error_description`), and are not cached. As Node
 * does: written only when no answer to a request on that connection has begun (a reset or a write error gets
 * none), then the connection is closed.
 */
function answerClientError(err: NodeJS.ErrnoException & { reason?: unknown }, socket: Duplex): void {
  const inFlight = (socket as Duplex & { _httpMessage?: http.ServerResponse | null })._httpMessage;
  if (err.code !== 'ECONNRESET' && socket.writable && (!inFlight || !inFlight.headersSent)) {
    const [status, phrase, error, description] = clientErrorAnswer(err);
    const body = JSON.stringify({ error, error_description: description });
    socket.write(
      `HTTP/1.1 ${status} ${phrase}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Cache-Control: no-store\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}

/** The options given a value: `{ requestTimeout: undefined }` keeps the default. */
function definedOnly(timeouts: HttpTimeouts): HttpTimeouts {
  return Object.fromEntries(Object.entries(timeouts).filter(([, value]) => value !== undefined));
}

/** Listens on `port` (and `host`, when given) through createHttpServer; the server and the URL it answers on. */
export function listen(app: Express, port: number, host?: string, timeouts?: HttpTimeouts): Promise<{ server: http.Server; url: string }> {
  return new Promise((resolve, reject) => {
    const server = createHttpServer(app, timeouts);
    server.once('error', reject);
    server.listen(port, host || undefined, () => {
      server.off('error', reject);
      const bound = server.address() as AddressInfo;
      resolve({ server, url: `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}` });
    });
  });
}
