import { challengeError } from './challenge';
import { checkTransport } from './http';
import type { TokenCache, CachedToken, TokenParams } from './token-client';

type Input = string | URL | Request;

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

/**
 * `fetch` with the token attached. On a 401 that refuses the token: one
 * renewal shared by every call that sent the same token, and one retry when
 * the body can be sent again. Never sends a request without a token.
 */
export async function fetchWithToken(cache: TokenCache, input: Input, init: RequestInit | undefined, params: TokenParams | undefined): Promise<Response> {
  const config = cache.config;
  const url = urlOf(input);
  checkTransport(url, config.allowInsecureHttp, 'client.fetch()');
  const entry = cache.entry(params);
  const signal = init?.signal;
  const got = cache.token(entry, signal);
  let token = got instanceof Promise ? await got : got;

  let response = await send(cache, input, init, url, token);
  if (response.status !== 401) return response;

  const canReplay = replayable(input, init);
  const pop = config.pop;
  if (pop !== undefined && token.scheme === pop.scheme && canReplay) {
    const header = response.headers.get('www-authenticate');
    const error = header === null ? undefined : challengeError(header, pop.scheme) ?? undefined;
    if (pop.retry({ kind: 'api', url, status: 401, headers: response.headers, error })) {
      cache.emit({ type: 'dpop.nonce_retry', kind: 'api' });
      await response.body?.cancel();
      response = await send(cache, input, init, url, token);
      if (response.status !== 401) return response;
    }
  }
  if (!tokenRefused(response, token.scheme)) return response;
  const next = await cache.renewAfter401(entry, token, signal, canReplay);
  if (next === undefined) return response;
  await response.body?.cancel();
  cache.emit({ type: 'api.retry_401', method: (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase(), url: where(url) });
  token = next;
  return send(cache, input, init, url, token);
}

async function send(cache: TokenCache, input: Input, init: RequestInit | undefined, url: string, token: CachedToken): Promise<Response> {
  const authorization = `${token.scheme} ${token.value.accessToken}`;
  const pop = cache.config.pop;
  const prove = pop !== undefined && token.scheme === pop.scheme;
  let headers: Headers | Record<string, string>;
  if (!prove && init?.headers === undefined && !(input instanceof Request)) {
    headers = { authorization }; // the common case: no Headers object to build
  } else {
    const h = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    h.set('authorization', authorization);
    if (prove) {
      const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
      await pop.apiRequest({ url, method, headers: h, accessToken: token.value.accessToken });
    }
    headers = h;
  }
  return cache.fetchImpl(input, init === undefined ? { headers } : { ...init, headers });
}
