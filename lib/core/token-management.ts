/**
 * The form of RFC 7009 revocation and RFC 7662 introspection requests:
 * `token`, an optional `token_type_hint`, and the client's credentials, read
 * the way the token endpoint reads its own (each parameter at most once,
 * empty values dropped, others ignored). What the endpoints then decide is
 * in core/introspection.ts.
 */
import { InvalidRequestError } from '../errors';

const KNOWN = new Set(['token', 'token_type_hint', 'client_id', 'client_secret', 'client_assertion', 'client_assertion_type']);

/** The request's own parameters, judged after the client is authenticated (RFC 7009 §2.1: the credentials first). */
const REQUEST_PARAMS = new Set(['token', 'token_type_hint']);

export interface TokenManagementRequest {
  /** Known parameters, each present at most once, empty values dropped. */
  params: Record<string, string>;
  /**
   * The token, or what is wrong with the request's own parameters (no
   * `token`, one repeated): to throw once the client is authenticated, so
   * wrong credentials are a 401 invalid_client whatever else was sent.
   */
  token: string | InvalidRequestError;
}

/**
 * Reads the form; throws InvalidRequestError at once only when the
 * credentials cannot be read (a credential parameter repeated).
 */
export function parseTokenManagementRequest(entries: Iterable<[string, string]>): TokenManagementRequest {
  const params: Record<string, string> = Object.create(null);
  const seen = new Set<string>();
  let problem: InvalidRequestError | undefined;
  for (const [name, value] of entries) {
    // a parameter sent without a value is one omitted (RFC 6749 §3.2): it neither counts nor repeats
    if (!KNOWN.has(name) || value === '') continue;
    if (seen.has(name)) {
      const repeated = new InvalidRequestError(`parameter ${name} is repeated`, { detail: 'repeated_parameter' });
      if (!REQUEST_PARAMS.has(name)) throw repeated;
      problem ??= repeated;
      continue;
    }
    seen.add(name);
    params[name] = value;
  }
  // token_type_hint is only a hint (RFC 7009 §2.1, RFC 7662 §2.1): this issuer has access tokens alone, so any value is read as one
  const token = params.token;
  return { params, token: problem ?? token ?? new InvalidRequestError('missing token', { detail: 'missing_token' }) };
}
