import type { ClientAuthContext, ClientAuthentication } from './auth';
import { clip, endpointError, TokenEndpointError } from './errors';
import { AnswerTooLargeError, deadline, networkReason, readJsonObject, retryAfterSeconds, type FetchLike } from './http';
import type { ProofOfPossession } from './proof-of-possession';

export interface TokenResponse {
  accessToken: string;
  tokenType: string;
  /** Seconds; `undefined` when the answer had no usable `expires_in`. */
  expiresIn: number | undefined;
  scope: string | undefined;
  /** When the request that got it was sent (epoch ms): expiry counts from here. */
  sentAt: number;
}

export interface TokenRequestSettings {
  fetch: FetchLike;
  auth: ClientAuthentication;
  context: ClientAuthContext;
  pop: ProofOfPossession | undefined;
  timeoutMs: number;
  now: () => number;
  /** Called just before each POST (for the `token.requested` event). */
  onSend(attempt: number): void;
  onNonceRetry(): void;
}

function text(v: unknown): string | undefined {
  return typeof v === 'string' ? v : undefined;
}

/** The longest lifetime counted (24 h, the issuer's own cap): a later expiry is renewed after it all the same. */
export const MAX_LIFETIME_SECONDS = 86_400;

/**
 * Visible ASCII without spaces (RFC 6749 A.12 VSCHAR, less the space the
 * Authorization header could not carry): anything else would be refused by
 * every request it is put in, or split the header.
 */
export const ACCESS_TOKEN_CHARS = /^[\x21-\x7e]+$/;

/** The code of a failed answer without an OAuth error in its body, from its status. */
function codeOfStatus(status: number): string {
  if (status === 401) return 'invalid_client';
  if (status === 429) return 'temporarily_unavailable';
  return status >= 500 ? 'server_error' : 'invalid_response';
}

/** A JSON number as text (RFC 8259 §6), leading zeros allowed: what a string `expires_in` may hold. */
const NUMBER_TEXT = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

/**
 * `expires_in` in seconds: a number, or a string holding one (RFC 6749 §5.1
 * says a number; many servers send a string), read alike; a later one is
 * counted as MAX_LIFETIME_SECONDS. `undefined` when absent or not a number
 * (the default lifetime applies). Under 1 s (0 or less: expired already) is
 * returned as is, for the answer to be refused.
 */
function lifetimeOf(raw: unknown): number | undefined {
  const n = typeof raw === 'string' && NUMBER_TEXT.test(raw.trim()) ? Number(raw) : raw;
  if (typeof n !== 'number' || Number.isNaN(n)) return undefined;
  return Math.min(n, MAX_LIFETIME_SECONDS);
}

/**
 * One client_credentials grant (RFC 6749 §4.4.2): a POST of the form, with
 * client authentication and proof added for each attempt. A second attempt is
 * made only when the proof-of-possession plug-in asks for it.
 */
export async function requestToken(settings: TokenRequestSettings, scope: string, resource: readonly string[], parent: AbortSignal): Promise<TokenResponse> {
  const url = settings.context.tokenEndpoint;
  for (let attempt = 0; ; attempt++) {
    const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' };
    const body = new URLSearchParams({ grant_type: 'client_credentials' });
    if (scope !== '') body.set('scope', scope);
    for (const r of resource) body.append('resource', r);
    await settings.auth.apply({ url, headers, body }, settings.context);
    const proofRequest = settings.pop ? ({ url, method: 'POST', headers } as const) : undefined;
    if (settings.pop) await settings.pop.tokenRequest(proofRequest!);

    settings.onSend(attempt);
    const sentAt = settings.now();
    const limit = deadline(settings.timeoutMs, parent);
    let response: Response | undefined;
    let json: Record<string, unknown> | undefined;
    try {
      // a redirect is not followed: the credentials go to the configured endpoint only
      const answer = await settings.fetch(url, { method: 'POST', headers, body: body.toString(), redirect: 'manual', signal: limit.signal });
      response = answer;
      if (answer.status < 300 || answer.status >= 400) {
        json = await readJsonObject(answer).catch((err: unknown) => {
          // an error answer whose body broke off still says what its status says (and its Retry-After)
          if (answer.ok || err instanceof AnswerTooLargeError || limit.signal.aborted) throw err;
          return undefined;
        });
      }
    } catch (cause) {
      if (limit.timedOut()) throw new TokenEndpointError({ error: 'timeout', error_description: `no answer within ${settings.timeoutMs} ms`, cause });
      if (cause instanceof AnswerTooLargeError) throw new TokenEndpointError({ status: response!.status, error: 'invalid_response', error_description: cause.message });
      const why = networkReason(cause);
      // a token answer that broke off (a reset connection) is a network failure, not an answer without a token
      const what = response === undefined ? 'the token endpoint could not be reached' : 'the answer broke off';
      throw new TokenEndpointError({ status: response?.status, error: 'network_error', error_description: `${what}${why ? ` (${why})` : ''}`, cause });
    } finally {
      limit.done();
    }

    if (response.status >= 300 && response.status < 400) {
      await response.body?.cancel().catch(() => undefined);
      throw new TokenEndpointError({
        status: response.status,
        error: 'invalid_response',
        error_description: 'the token endpoint answered with a redirect, which is not followed (credentials go to the configured endpoint only)',
      });
    }

    if (response.ok) {
      // a nonce for the next proofs may come with a token too (RFC 9449 §8.2)
      settings.pop?.answered?.({ kind: 'token', url, status: response.status, headers: response.headers });
      return tokenResponse(response.status, json, settings.pop, sentAt, settings.now());
    }

    const error = text(json?.error) ?? codeOfStatus(response.status);
    if (settings.pop && attempt === 0 && settings.pop.retry({ kind: 'token', url, status: response.status, headers: response.headers, error, request: proofRequest })) {
      settings.onNonceRetry();
      continue;
    }
    throw endpointError({
      status: response.status,
      error,
      error_description: text(json?.error_description),
      retryAfter: response.status === 429 || response.status === 503 ? retryAfterSeconds(response.headers.get('retry-after'), settings.now(), response.headers.get('date')) : undefined,
    });
  }
}

/**
 * A successful answer checked (RFC 6749 §5.1, §7.1): a token this client can
 * send, of a type it knows, not expired already, also when it arrived (its
 * lifetime counts from `sentAt`: an endpoint slower than `expires_in` hands
 * out a token that expired on the way).
 */
function tokenResponse(status: number, json: Record<string, unknown> | undefined, pop: ProofOfPossession | undefined, sentAt: number, arrivedAt: number): TokenResponse {
  const refuse = (description: string): never => {
    throw new TokenEndpointError({ status, error: 'invalid_response', error_description: description });
  };
  const accessToken = text(json?.access_token);
  if (!json || !accessToken) return refuse('the answer has no access_token');
  // the token itself is never put in the message: errors end up in logs
  if (!ACCESS_TOKEN_CHARS.test(accessToken)) return refuse('the access_token holds characters an Authorization header cannot carry');
  // REQUIRED (RFC 6749 §5.1): without it the client cannot tell a DPoP-bound token from a Bearer one
  const tokenType = text(json.token_type);
  if (!tokenType) return refuse('the answer has no token_type (RFC 6749 §5.1)');
  const type = tokenType.toLowerCase();
  if (type === 'dpop' && !pop) return refuse('a DPoP-bound token needs a proof-of-possession plug-in');
  if (type !== 'bearer' && type !== pop?.scheme.toLowerCase()) {
    return refuse(`token_type ${JSON.stringify(tokenType.slice(0, 40))} is not one this client can use (RFC 6749 §7.1): Bearer${pop ? ` or ${pop.scheme}` : ''}`);
  }
  const expiresIn = lifetimeOf(json.expires_in);
  if (expiresIn !== undefined && expiresIn < 1) {
    // under 1 s the token would expire before it is used, and each call would ask for another
    const why = expiresIn <= 0 ? 'the token has expired already' : 'a lifetime under 1 s is too short to use';
    return refuse(`expires_in ${clip(JSON.stringify(json.expires_in), 40)}: ${why}`);
  }
  if (expiresIn !== undefined && arrivedAt >= sentAt + expiresIn * 1000) {
    return refuse(`the token expired before the answer arrived (expires_in ${expiresIn} s, the answer took ${((arrivedAt - sentAt) / 1000).toFixed(1)} s)`);
  }
  return { accessToken, tokenType, expiresIn, scope: text(json.scope), sentAt };
}
