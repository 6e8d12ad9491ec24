import { challengeError } from './challenge';
import type { ApiProofRequest, ProofOfPossession } from './proof-of-possession';
import type { CachedToken, Entry, TokenParams } from './cache-entry';
import type { TokenCache } from './token-client';

type Input = string | URL | Request;

/** The third argument of `client.fetch()`. */
export interface FetchParams extends TokenParams {
  /** This call only: send the request again after a 401 that refuses the token (see the client option `retry401`). */
  retry401?: boolean;
}

/** Whether the request can be sent a second time: no body, or one held in memory (not a stream). */
function replayable(input: Input, init: RequestInit | undefined): boolean {
  const body = init?.body;
  if (body === undefined || body === null) return !(input instanceof Request) || input.body === null || init?.body === null;
  if (typeof body === 'string' || body instanceof URLSearchParams || body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return true;
  if (typeof Blob !== 'undefined' && body instanceof Blob) return true;
  if (typeof FormData !== 'undefined' && body instanceof FormData) return true;
  return false;
}

function urlOf(input: Input): string {
  return typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
}

/** Origin and path only: a query string may carry anything. */
function where(url: string): string {
  try {
    const u = new URL(url);
    return u.origin + u.pathname;
  } catch {
    return '';
  }
}

/** Whether a 401 says the token itself was refused: `invalid_token` or no error at all (RFC 6750 §3.1). */
function tokenRefused(response: Response, scheme: string): boolean {
  const header = response.headers.get('www-authenticate');
  if (header === null) return true;
  const error = challengeError(header, scheme);
  return error === undefined || error === 'invalid_token';
}

/** One call of `fetchWithToken`: what every step of it (send, the 401 handling, the retry) needs. */
interface Call {
  cache: TokenCache;
  input: Input;
  init: RequestInit | undefined;
  url: string;
  entry: Entry;
  signal: AbortSignal | null | undefined;
  /** Whether a 401 may lead to sending the request again (the body permitting). */
  retry: boolean;
}

function methodOf(call: Call): string {
  return (call.init?.method ?? (call.input instanceof Request ? call.input.method : 'GET')).toUpperCase();
}

/**
 * `fetch` with the token attached. On a 401 that refuses the token: one
 * renewal shared by every call that sent the same token, and one retry when
 * the body can be sent again and `retry401` allows it. Never sends a request
 * without a token.
 *
 * Not an async function: with the token cached, the call is the fetch itself
 * and one `then` (a look at the status), no further promise hops; anything
 * thrown on the way is a rejection all the same.
 */
export function fetchWithToken(cache: TokenCache, input: Input, init: RequestInit | undefined, params: FetchParams | undefined): Promise<Response> {
  try {
    const url = urlOf(input);
    cache.checkApiUrl(url);
    let retry = cache.config.retry401;
    if (params !== undefined && params.retry401 !== undefined) {
      if (typeof params.retry401 !== 'boolean') throw new TypeError('fetch(): retry401 must be true or false');
      retry = params.retry401;
    }
    const call: Call = { cache, input, init, url, entry: cache.entry(params), signal: init?.signal ?? (input instanceof Request ? input.signal : undefined), retry };
    const got = cache.token(call.entry, call.signal);
    if (got instanceof Promise) return got.then((token) => sendChecked(call, token));
    return sendChecked(call, got);
  } catch (err) {
    return Promise.reject(err);
  }
}

function sendChecked(call: Call, token: CachedToken): Promise<Response> {
  return send(call, token).then((response) => (response.status === 401 ? after401(call, token, response) : response));
}

/**
 * A 401 from the API: the proof-of-possession retry (a nonce), or else one
 * renewal and one retry when the token was refused. One retry in all: a
 * request sent again for a nonce and refused for its token goes back to the
 * caller (the token is renewed for the next call), never a third time.
 */
async function after401(call: Call, token: CachedToken, response: Response): Promise<Response> {
  const { cache, url } = call;
  let canReplay = call.retry && replayable(call.input, call.init);
  const pop = cache.config.pop;
  if (pop !== undefined && token.scheme === pop.scheme) {
    const header = response.headers.get('www-authenticate');
    const error = header === null ? undefined : challengeError(header, pop.scheme) ?? undefined;
    // shown even when the request cannot be sent again: the plug-in keeps the nonce for the next call
    if (pop.retry({ kind: 'api', url, status: 401, headers: response.headers, error, request: proofRequests.get(response) }) && canReplay) {
      cache.emit({ type: 'dpop.nonce_retry', kind: 'api' });
      await response.body?.cancel();
      response = await send(call, token);
      if (response.status !== 401) return response;
      // refused again: not retried a second time, but a nonce it brought (the server's next) goes into the next call's proof
      pop.answered?.({ kind: 'api', url, status: 401, headers: response.headers });
      // sent twice already: a refused token is renewed below for the next call, this one is not sent again
      canReplay = false;
    }
  }
  if (!tokenRefused(response, token.scheme)) return response;
  const next = await cache.renewAfter401(call.entry, token, call.signal, canReplay);
  if (next === undefined) return response;
  await response.body?.cancel();
  cache.emit({ type: 'api.retry_401', method: methodOf(call), url: where(url) });
  return send(call, next);
}

/** The request with the token attached (and a proof when the token is bound to a key). A rejection for anything thrown. */
function send(call: Call, token: CachedToken): Promise<Response> {
  const { cache, input, init } = call;
  try {
    const authorization = `${token.scheme} ${token.value.accessToken}`;
    const pop = cache.config.pop;
    if (pop !== undefined && token.scheme === pop.scheme) return sendWithProof(call, pop, token, authorization);
    if (init?.headers === undefined && !(input instanceof Request)) {
      // the common case: no Headers object to build
      return cache.fetchImpl(input, init === undefined ? { headers: { authorization } } : { ...init, headers: { authorization } });
    }
    return cache.fetchImpl(input, { ...init, headers: headersWith(call, authorization) });
  } catch (err) {
    return Promise.reject(err);
  }
}

/** The caller's headers (from `init`, else from the Request) with this Authorization. */
function headersWith(call: Call, authorization: string): Headers {
  const headers = new Headers(call.init?.headers ?? (call.input instanceof Request ? call.input.headers : undefined));
  headers.set('authorization', authorization);
  return headers;
}

/** The proof request behind each 401 answer to a request with a proof, for retry() (what that proof carried). */
const proofRequests = new WeakMap<Response, ApiProofRequest>();

async function sendWithProof(call: Call, pop: ProofOfPossession, token: CachedToken, authorization: string): Promise<Response> {
  const headers = headersWith(call, authorization);
  const request: ApiProofRequest = { url: call.url, method: methodOf(call), headers, accessToken: token.value.accessToken };
  await pop.apiRequest(request);
  const response = await call.cache.fetchImpl(call.input, { ...call.init, headers });
  // a 401 goes to retry(), which keeps its nonce; any other answer may carry the next one (RFC 9449 §9)
  if (response.status === 401) proofRequests.set(response, request);
  else pop.answered?.({ kind: 'api', url: call.url, status: response.status, headers: response.headers });
  return response;
}
