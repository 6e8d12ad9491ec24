import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import type { AuthorizationServer } from '../core/authorization-server';
import { readClientCredentials } from '../core/client-auth';
import { gzipEtag, REVOCATION_LIST_MEDIA_TYPE } from '../core/revocation-list';
import { parseTokenManagementRequest } from '../core/token-management';
import { grantScope, parseTokenRequest } from '../core/token-request';
import type { ClientRecord } from '../stores/types';
import { InvalidClientError, InvalidRequestError, toOAuthError } from '../errors';
import { inactiveReason, managementCheck, tokenOutcome, type Counts, type ManagementCheck, type TokenOutcome } from '../metrics/counts';
import { clientCredentialsExchange, type GrantExchange } from './oauth2orize';
import { repeatedAuthorization } from './headers';
import { queryNames, readForm } from './read-form';
import { sendJson, sendTokenError } from './respond';
import { sendMetadata } from './well-known';

/** Token endpoint metrics: counts by outcome and a latency histogram. */
export interface TokenMetrics {
  tokenRequests: Counts<TokenOutcome>;
  tokenDuration: { observe(seconds: number): void };
  /** Revocation and introspection requests by outcome. */
  tokenManagement?: Counts<ManagementCheck>;
}

/** When a token request reached the router (performance.now()), set only when metrics are on. */
const STARTED = Symbol('startedAt');
/** The client_id once the client is authenticated, for the log line of a refusal that follows. */
const CLIENT = Symbol('clientId');
/** The token request's `resource`, for the log line of an invalid_target that follows. */
const RESOURCE = Symbol('resource');
type Timed = Request & { [STARTED]?: number; [CLIENT]?: string; [RESOURCE]?: string | string[] };

function startClock(req: Request, _res: Response, next: NextFunction): void {
  (req as Timed)[STARTED] = performance.now();
  next();
}

function record(metrics: TokenMetrics, outcome: TokenOutcome, startedAt: number): void {
  metrics.tokenRequests[outcome]++;
  metrics.tokenDuration.observe((performance.now() - startedAt) / 1000);
}

function noStore(_req: Request, res: Response, next: NextFunction): void {
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('Pragma', 'no-cache');
  next();
}

function onlyMethods(...methods: string[]) {
  const allow = methods.join(', ');
  return (req: Request, _res: Response, next: NextFunction): void => {
    if (methods.includes(req.method)) return next();
    next(new InvalidRequestError(`method ${req.method} is not allowed; use ${allow}`, { status: 405, headers: { Allow: allow }, detail: 'method_not_allowed' }));
  };
}

/** Client credentials, never taken from a URL (logged by every proxy on the way). */
const CREDENTIAL_PARAMS = ['client_id', 'client_secret', 'client_assertion', 'client_assertion_type'];
/** The same, and the token asked about, for /oauth/revoke and /oauth/introspect. */
const TOKEN_MANAGEMENT_PARAMS = [...CREDENTIAL_PARAMS, 'token'];

/**
 * What the token, revocation and introspection endpoints check before they
 * read the form: none of `secretParams` in the URL, and one Authorization
 * header (RFC 6749 §2.3: one client authentication per request; Node keeps
 * only the first of two).
 */
function checkRequestLine(req: Request, secretParams: readonly string[], inUrl: string): void {
  if (req.url.includes('?')) {
    const query = queryNames(req.url);
    if (secretParams.some((name) => query.has(name))) throw new InvalidRequestError(inUrl, { detail: 'credentials_in_url' });
  }
  if (req.headers.authorization !== undefined && repeatedAuthorization(req.rawHeaders)) {
    throw new InvalidRequestError('send one Authorization header', { detail: 'repeated_authorization' });
  }
}

/**
 * Validates the token request and authenticates the client, then hands the
 * grant to oauth2orize: form body only, no repeated parameters, no
 * credentials in the URL, one client authentication method.
 *
 * oauth2orize reads the grant from `body`, `user` and `authInfo`; it gets them
 * on an object of their own rather than as new properties of `req`, which
 * Express has given its own prototype (each property added to such an object
 * costs about a microsecond and a half, three of them here).
 */
function prepareTokenRequest(server: AuthorizationServer, exchange: GrantExchange) {
  return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    try {
      checkRequestLine(req, CREDENTIAL_PARAMS, 'client credentials must be sent in the request body or the Authorization header, never in the URL');
      const { params, scope, resource } = parseTokenRequest(await readForm(req));
      const credentials = readClientCredentials(req.headers.authorization, params);
      if (!credentials) throw server.clientAuth.noCredentials({ ip: req.ip, endpoint: 'token', clientId: params.client_id });
      const client = await server.clientAuth.authenticate(credentials, { ip: req.ip, endpoint: 'token' });
      (req as Timed)[CLIENT] = client.clientId;
      const scopes = grantScope(client, scope);
      // RFC 8707: which API the token is for, checked once the client is known
      (req as Timed)[RESOURCE] = resource;
      const audience = server.audienceFor(client, resource);
      // DPoP (RFC 9449 §5): checked only once the client is authenticated
      const proof = req.headers.dpop;
      const jkt = proof === undefined ? undefined : (await server.checkDpopProof(proof)).jkt;
      // RFC 9449 §5.2 dpop_bound_access_tokens: this client's tokens are always sender-constrained
      if (jkt === undefined && client.requireDpop) throw new InvalidRequestError('this client must send a DPoP proof with every token request', { detail: 'dpop_required' });
      // keys older than the refresh interval (the process did not run meanwhile): reloaded before one signs
      const fresh = server.freshKeys();
      if (fresh) await fresh;
      exchange({ body: params, user: client, authInfo: { scopes, startedAt: (req as Timed)[STARTED], jkt, audience } }, res, next);
    } catch (err) {
      next(err);
    }
  };
}

/**
 * RFC 7009 / RFC 7662 endpoints: the form read as the token endpoint reads
 * its own, the client authenticated the same way (same brute-force limits),
 * then `answer` with the client and the token.
 */
function tokenManagement(server: AuthorizationServer, endpoint: 'revocation' | 'introspection', answer: (client: ClientRecord, token: string, res: Response) => Promise<void>) {
  return async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    try {
      checkRequestLine(req, TOKEN_MANAGEMENT_PARAMS, 'credentials and tokens must be sent in the request body, never in the URL');
      const { params, token } = parseTokenManagementRequest(await readForm(req));
      const credentials = readClientCredentials(req.headers.authorization, params);
      if (!credentials) throw server.clientAuth.noCredentials({ ip: req.ip, endpoint, clientId: params.client_id });
      const client = await server.clientAuth.authenticate(credentials, { ip: req.ip, endpoint });
      (req as Timed)[CLIENT] = client.clientId;
      if (token instanceof InvalidRequestError) throw token;
      await answer(client, token, res);
    } catch (err) {
      next(err);
    }
  };
}

/** RFC 9110 §13.1.2 If-None-Match: `*` or a list holding `etag` (weak comparison). */
function ifNoneMatch(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  if (header.trim() === '*') return true;
  const strong = etag.replace(/^W\//, '');
  return header.split(',').some((tag) => tag.trim().replace(/^W\//, '') === strong);
}

/** A request path as Express routes match it by default: case-insensitive, one trailing slash optional. */
function routeKey(path: string): string {
  const lower = path.toLowerCase();
  return lower.length > 1 && lower.endsWith('/') ? lower.slice(0, -1) : lower;
}

/**
 * Express leaves a nested router that matched nothing through setImmediate,
 * so every request of the app that passes the issuer's routes on its way
 * elsewhere (to /api, say) would wait one event-loop turn. The issuer's paths
 * are fixed: any other path goes on at once, without entering the router.
 */
function onlyOwnPaths(router: Router): RequestHandler {
  const paths = new Set<string>();
  for (const layer of router.stack as { route?: { path: unknown } }[]) {
    if (typeof layer.route?.path === 'string') paths.add(routeKey(layer.route.path));
  }
  return function issuerRoutes(req, res, next) {
    if (paths.has(routeKey(req.path))) router(req, res, next);
    else next();
  };
}

/** The endpoints whose refusals are logged, and the event's prefix. */
const REFUSAL_EVENTS: Record<string, 'token' | 'revocation' | 'introspection' | undefined> = {
  '/oauth/token': 'token',
  '/oauth/revoke': 'revocation',
  '/oauth/introspect': 'introspection',
};

/** Serves POST /oauth/token, /oauth/revoke, /oauth/introspect, the revocation list, the JWKS and the RFC 8414 metadata; ends in its own error handler. */
export function issuerRouter(server: AuthorizationServer, metrics?: TokenMetrics): RequestHandler {
  const router = express.Router();
  const realm = server.config.tokenRealm;

  // with metrics off, the route is exactly what it was: no clock, no counting
  const exchange = clientCredentialsExchange(server, metrics && ((startedAt: number) => record(metrics, 'issued', startedAt)));
  if (metrics) router.all('/oauth/token', startClock, noStore, onlyMethods('POST'), prepareTokenRequest(server, exchange));
  else router.all('/oauth/token', noStore, onlyMethods('POST'), prepareTokenRequest(server, exchange));

  router.all(
    '/oauth/revoke',
    noStore,
    onlyMethods('POST'),
    tokenManagement(server, 'revocation', async (client, token, res) => {
      await server.revoke(client, token);
      if (metrics?.tokenManagement) metrics.tokenManagement.revocation_ok++;
      res.statusCode = 200;
      res.setHeader('Content-Length', '0');
      res.end();
    }),
  );

  router.all(
    '/oauth/introspect',
    noStore,
    onlyMethods('POST'),
    tokenManagement(server, 'introspection', async (client, token, res) => {
      const { answer, inactive } = await server.introspect(client, token, res.req.ip);
      if (metrics?.tokenManagement) metrics.tokenManagement[answer.active ? 'introspection_active' : (`introspection_inactive:${inactiveReason(inactive?.reason)}` as const)]++;
      sendJson(res, 200, answer);
    }),
  );

  // revocations for verifiers that check tokens locally (standalone requireBearer({ revocationList }))
  router.all('/oauth/revocation-list', onlyMethods('GET', 'HEAD'), async (req, res, next) => {
    try {
      await server.ready();
      const { list } = server.revocations;
      const plain = list.current();
      // gzip when the caller asks for it (not merely when it sends no Accept-Encoding: curl without
      // --compressed would get bytes it does not expect) and the list is long enough to gain from it
      const gzip = req.headers['accept-encoding'] && req.acceptsEncodings('gzip', 'identity') === 'gzip' ? list.gzipped() : undefined;
      const { body, etag } = gzip ?? plain;
      res.setHeader('Cache-Control', 'no-cache');
      res.setHeader('Vary', 'Accept-Encoding');
      res.setHeader('ETag', etag);
      // either representation's ETag says the caller holds the current list
      const inm = req.headers['if-none-match'];
      if (ifNoneMatch(inm, plain.etag) || ifNoneMatch(inm, gzipEtag(plain.etag))) {
        res.statusCode = 304;
        res.end();
        return;
      }
      res.statusCode = 200;
      res.setHeader('Content-Type', REVOCATION_LIST_MEDIA_TYPE);
      if (gzip) res.setHeader('Content-Encoding', 'gzip');
      res.setHeader('Content-Length', Buffer.byteLength(body));
      res.end(req.method === 'HEAD' ? undefined : body);
    } catch (err) {
      next(err);
    }
  });

  router.all('/.well-known/jwks.json', onlyMethods('GET', 'HEAD'), async (_req, res, next) => {
    try {
      await server.ready();
      res.setHeader('Cache-Control', 'public, max-age=60');
      sendJson(res, 200, server.keys.jwks(), 'application/jwk-set+json; charset=utf-8');
    } catch (err) {
      next(err);
    }
  });

  router.all('/.well-known/oauth-authorization-server', onlyMethods('GET', 'HEAD'), (_req, res) => sendMetadata(server, res));

  router.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const error = toOAuthError(err);
    // a 503 is a store outage, logged once per outage as store.unavailable, not per request
    if (error.status >= 500 && error.status !== 503) server.logger.error({ event: 'error', err: error.cause ?? error, path: req.path }, error.detail ?? error.message);
    // refusals other than a failed client authentication (client.auth_failed) and a 429 (client.rate_limited)
    const endpoint = REFUSAL_EVENTS[routeKey(req.path)];
    if (metrics?.tokenManagement && (endpoint === 'revocation' || endpoint === 'introspection')) metrics.tokenManagement[managementCheck(endpoint, error)]++;
    if (endpoint && error.status < 500 && error.status !== 429 && !(error instanceof InvalidClientError)) {
      server.refused(endpoint, error, { clientId: (req as Timed)[CLIENT], ip: req.ip, resource: (req as Timed)[RESOURCE] });
    }
    sendTokenError(res, error, realm);
    const startedAt = (req as Timed)[STARTED];
    if (metrics && startedAt !== undefined) record(metrics, tokenOutcome(error), startedAt);
  });

  return onlyOwnPaths(router);
}
