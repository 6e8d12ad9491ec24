import type { ClientAuthContext, ClientAuthentication } from './auth';
import { TokenEndpointError } from './errors';
import { deadline, readJsonObject, retryAfterSeconds, type FetchLike } from './http';
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
    if (settings.pop) await settings.pop.tokenRequest({ url, method: 'POST', headers });

    settings.onSend(attempt);
    const sentAt = settings.now();
    const limit = deadline(settings.timeoutMs, parent);
    let response: Response;
    let json: Record<string, unknown> | undefined;
    try {
      response = await settings.fetch(url, { method: 'POST', headers, body: body.toString(), redirect: 'error', signal: limit.signal });
      json = await readJsonObject(response);
    } catch (cause) {
      if (limit.timedOut()) throw new TokenEndpointError({ error: 'timeout', error_description: `no answer within ${settings.timeoutMs} ms`, cause });
      throw new TokenEndpointError({ error: 'network_error', error_description: 'the token endpoint could not be reached', cause });
    } finally {
      limit.done();
    }

    if (response.ok) {
      const accessToken = text(json?.access_token);
      const tokenType = text(json?.token_type) ?? 'Bearer';
      if (!json || !accessToken) throw new TokenEndpointError({ status: response.status, error: 'invalid_response', error_description: 'the answer has no access_token' });
      if (!settings.pop && tokenType.toLowerCase() === 'dpop') {
        throw new TokenEndpointError({ status: response.status, error: 'invalid_response', error_description: 'a DPoP-bound token needs a proof-of-possession plug-in' });
      }
      const raw = json.expires_in;
      const n = typeof raw === 'string' && /^\d+$/.test(raw) ? Number(raw) : raw;
      return {
        accessToken,
        tokenType,
        expiresIn: typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : undefined,
        scope: text(json.scope),
        sentAt,
      };
    }

    const error = text(json?.error) ?? (response.status >= 500 ? 'server_error' : 'invalid_response');
    if (settings.pop && attempt === 0 && settings.pop.retry({ kind: 'token', url, status: response.status, headers: response.headers, error })) {
      settings.onNonceRetry();
      continue;
    }
    throw new TokenEndpointError({
      status: response.status,
      error,
      error_description: text(json?.error_description),
      retryAfter: response.status === 429 || response.status === 503 ? retryAfterSeconds(response.headers.get('retry-after'), settings.now()) : undefined,
    });
  }
}
