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

export function createHttpServer(app: Express): http.Server {
  return http.createServer(appConstructors(app), app);
}

/** Listens on `port` (and `host`, when given) through createHttpServer; the server and the URL it answers on. */
export function listen(app: Express, port: number, host?: string): Promise<{ server: http.Server; url: string }> {
  return new Promise((resolve, reject) => {
    const server = createHttpServer(app);
    server.once('error', reject);
    server.listen(port, host || undefined, () => {
      server.off('error', reject);
      const bound = server.address() as AddressInfo;
      resolve({ server, url: `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}` });
    });
  });
}
