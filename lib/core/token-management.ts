/**
 * The form of RFC 7009 revocation and RFC 7662 introspection requests:
 * `token`, an optional `token_type_hint`, and the client's credentials, read
 * the way the token endpoint reads its own (each parameter at most once,
 * empty values dropped, others ignored). What the endpoints then decide is
 * in core/introspection.ts.
 */
import { InvalidRequestError } from '../errors';

const KNOWN = new Set(['token', 'token_type_hint', 'client_id', 'client_secret', 'client_assertion', 'client_assertion_type']);

export interface TokenManagementRequest {
  /** Known parameters, each present at most once, empty values dropped. */
  params: Record<string, string>;
  token: string;
}

export function parseTokenManagementRequest(entries: Iterable<[string, string]>): TokenManagementRequest {
  const params: Record<string, string> = Object.create(null);
  const seen = new Set<string>();
  for (const [name, value] of entries) {
    if (!KNOWN.has(name)) continue;
    if (seen.has(name)) throw new InvalidRequestError(`parameter ${name} is repeated`);
    seen.add(name);
    if (value !== '') params[name] = value;
  }
  // token_type_hint is only a hint (RFC 7009 §2.1, RFC 7662 §2.1): this issuer has access tokens alone, so any value is read as one
  const token = params.token;
  if (token === undefined) throw new InvalidRequestError('missing token');
  return { params, token };
}
