import { safeJson } from '../shared/safe-json';
import { clip, TokenEndpointError } from './errors';
import { AnswerTooLargeError, checkTransport, deadline, networkReason, readJsonObject, type FetchLike } from './http';

export interface Discovered {
  tokenEndpoint: string;
  authMethods: string[] | undefined;
}

/**
 * Where RFC 8414 §3.1 puts the metadata of `issuer`, then the OpenID Connect
 * Discovery location; for an issuer with a path, then also the well-known
 * segment after the path, where many servers (and an issuer router mounted at
 * that path) serve it. The document must name `issuer` wherever it is found.
 */
function metadataUrls(issuer: string): string[] {
  const url = new URL(issuer);
  const path = url.pathname.replace(/\/+$/, '');
  const urls = [`${url.origin}/.well-known/oauth-authorization-server${path}`, `${url.origin}${path}/.well-known/openid-configuration`];
  if (path) urls.push(`${url.origin}${path}/.well-known/oauth-authorization-server`);
  return urls;
}

/** Reads the authorization server metadata and checks that it names `issuer` (RFC 8414 §3.3) and a token endpoint credentials may be sent to. */
export async function discover(issuer: string, fetchImpl: FetchLike, timeoutMs: number, parent: AbortSignal, allowInsecureHttp: boolean): Promise<Discovered> {
  /** The first location's answer that held no document (not a 404), told if no location has one. */
  let missed: TokenEndpointError | undefined;
  for (const url of metadataUrls(issuer)) {
    const limit = deadline(timeoutMs, parent);
    let response: Response;
    let doc: Record<string, unknown> | undefined;
    try {
      // a redirect is not followed: the document (and the token endpoint it names) comes from the issuer's own origin
      response = await fetchImpl(url, { headers: { accept: 'application/json' }, redirect: 'manual', signal: limit.signal });
      if (!response.ok) {
        await response.body?.cancel().catch(() => undefined);
        if (response.status !== 404) {
          const redirect = response.status >= 300 && response.status < 400 ? ' (a redirect, not followed)' : '';
          missed ??= new TokenEndpointError({ status: response.status, error: 'discovery_failed', error_description: `no metadata document at ${url}${redirect}` });
        }
        continue;
      }
      doc = await readJsonObject(response);
    } catch (cause) {
      const reason = cause instanceof AnswerTooLargeError ? cause.message : limit.timedOut() ? `no answer within ${timeoutMs} ms` : networkReason(cause);
      const why = reason ? `: ${reason}` : '';
      throw new TokenEndpointError({ error: limit.timedOut() ? 'timeout' : 'discovery_failed', error_description: `metadata request to ${url} failed${why}`, cause });
    } finally {
      limit.done();
    }
    if (doc === undefined) {
      // not JSON (a web app answering every path, say): the next location may have it
      missed ??= new TokenEndpointError({ status: response.status, error: 'discovery_failed', error_description: `no metadata document at ${url} (the answer is not a JSON object)` });
      continue;
    }
    if (doc.issuer !== issuer) {
      const named = clip(doc.issuer === undefined ? 'nothing' : safeJson(doc.issuer, '(a value nested too deep to show)'));
      throw new TokenEndpointError({
        status: response.status,
        error: 'invalid_metadata',
        error_description: `the metadata at ${url} names issuer ${named}, not ${JSON.stringify(issuer)}: the issuer option must be exactly the issuer the server announces (RFC 8414 §3.3)`,
      });
    }
    if (typeof doc.token_endpoint !== 'string') {
      throw new TokenEndpointError({ status: response.status, error: 'invalid_metadata', error_description: `the metadata at ${url} has no token_endpoint` });
    }
    try {
      checkTransport(doc.token_endpoint, allowInsecureHttp, 'its token_endpoint');
    } catch (err) {
      // the metadata names an endpoint the credentials must not go to: a configuration error on the server's side, said as such
      throw new TokenEndpointError({ status: response.status, error: 'invalid_metadata', error_description: `the metadata at ${url}: ${(err as Error).message}` });
    }
    const methods = doc.token_endpoint_auth_methods_supported;
    return {
      tokenEndpoint: doc.token_endpoint,
      authMethods: Array.isArray(methods) && methods.every((m) => typeof m === 'string') ? (methods as string[]) : undefined,
    };
  }
  throw missed ?? new TokenEndpointError({ status: 404, error: 'discovery_failed', error_description: `no metadata document for ${issuer}` });
}
