import { InvalidRequestError, InvalidScopeError, UnauthorizedClientError, UnsupportedGrantTypeError } from '../errors';
import type { ClientRecord } from '../stores/types';
import { parseScope } from './scope';

export const GRANT_TYPE = 'client_credentials';

/** Parameters of the token request that are read; any other parameter is ignored. */
const KNOWN = new Set(['grant_type', 'client_id', 'client_secret', 'client_assertion', 'client_assertion_type', 'scope', 'resource']);

export interface TokenRequest {
  /** Known parameters, each present at most once, empty values dropped (RFC 6749 §3.2). */
  params: Record<string, string>;
  /** Requested scopes, `undefined` when `scope` was omitted. */
  scope: string[] | undefined;
  /**
   * RFC 8707 `resource`: `undefined` when absent, a list when repeated (the
   * resource policy answers invalid_target for that, not the generic
   * repeated-parameter error). Checked after client authentication.
   */
  resource: string | string[] | undefined;
}

/**
 * Checks the form of a token request (RFC 6749 §3.2, §4.4.2) before anyone is
 * authenticated: repeated parameters, grant_type, scope syntax.
 */
export function parseTokenRequest(entries: Iterable<[string, string]>): TokenRequest {
  const params: Record<string, string> = Object.create(null);
  const seen = new Set<string>();
  let resource: string | string[] | undefined;
  for (const [name, value] of entries) {
    // a parameter sent without a value is one omitted (RFC 6749 §3.2): it neither counts nor repeats
    if (!KNOWN.has(name) || value === '') continue;
    if (name === 'resource') {
      resource = resource === undefined ? value : [...(Array.isArray(resource) ? resource : [resource]), value];
      continue;
    }
    if (seen.has(name)) throw new InvalidRequestError(`parameter ${name} is repeated`, { detail: 'repeated_parameter' });
    seen.add(name);
    params[name] = value;
  }
  const grantType = params.grant_type;
  if (grantType === undefined) throw new InvalidRequestError('missing grant_type', { detail: 'missing_grant_type' });
  if (grantType !== GRANT_TYPE) throw new UnsupportedGrantTypeError();
  let scope: string[] | undefined;
  if (params.scope !== undefined) {
    const parsed = parseScope(params.scope);
    if (!parsed) throw new InvalidScopeError('scope is malformed: use scope tokens separated by single spaces');
    scope = parsed;
  }
  return { params, scope, resource };
}

/**
 * The scopes to grant: all the client's scopes when none were requested,
 * exactly the requested ones when they are a subset, an error otherwise.
 */
export function grantScope(client: ClientRecord, requested: string[] | undefined): string[] {
  if (!client.grantTypes.includes(GRANT_TYPE)) throw new UnauthorizedClientError();
  if (requested === undefined) return client.scopes;
  const extra = requested.filter((s) => !client.scopes.includes(s));
  if (extra.length > 0) {
    throw new InvalidScopeError(`scope not allowed for this client: ${extra.join(' ')}`);
  }
  return requested;
}
