/**
 * RFC 8707 resource indicators: which API a token is for. A token request
 * names at most one `resource`; the token's `aud` is that resource (RFC 9068
 * §3), so a verifier for API A refuses a token for API B. Without `resource`
 * the token gets the default audience. Scopes are unchanged by the resource:
 * the client's allowed scopes apply to whichever resource it asks for.
 *
 * Decisions:
 * - One resource per token: several `resource` parameters → invalid_target
 *   (a token with several audiences can be replayed by one API at another).
 *   The token-request layer must let a repeated `resource` through to here
 *   instead of answering its generic repeated-parameter invalid_request.
 * - A resource is an absolute URI without fragment (MUST, RFC 8707 §2) and
 *   without query (SHOULD NOT there; refused here, so that matching is plain
 *   and no two spellings name one API). Whitespace, controls, characters
 *   outside ASCII (an RFC 3986 URI has none) and user information are refused.
 * - Matching compares the WHATWG-normalized form (`https://API.test` and
 *   `https://api.test/` are one resource); the token carries the resource as
 *   the operator configured it, which is what the API's verifier expects.
 * - A client may ask only for resources on its own allow-list, each of
 *   which must be one the issuer serves. A client with no list may use the
 *   default resource only.
 */
import { InvalidTargetError } from '../errors';

const MAX_LENGTH = 2048;

export interface ResourcePolicyOptions {
  /** Every resource the issuer issues tokens for (absolute URIs). */
  resources: readonly string[];
  /** The audience of tokens requested without `resource`; one of `resources`. */
  defaultResource: string;
}

/** Why a resource value is refused, or its normalized form. */
function normalize(value: unknown): { ok: true; key: string } | { ok: false; reason: string } {
  if (typeof value !== 'string' || value.length === 0) return { ok: false, reason: 'resource must be a non-empty string' };
  if (value.length > MAX_LENGTH) return { ok: false, reason: 'resource is too long' };
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x20\x7f]/.test(value)) return { ok: false, reason: 'resource must not contain spaces or control characters' };
  // RFC 3986 URIs are ASCII: an internationalized name is written in its xn-- (or %-encoded) form, and no bidi
  // override or look-alike letter can make an allow-list or a log line read as another API
  if (/[^\x21-\x7e]/.test(value)) return { ok: false, reason: 'resource must be ASCII (RFC 3986): write an internationalized host in its xn-- form, other characters %-encoded' };
  if (value.includes('#')) return { ok: false, reason: 'resource must not contain a fragment' };
  if (value.includes('?')) return { ok: false, reason: 'resource must not contain a query' };
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return { ok: false, reason: 'resource must be an absolute URI' };
  }
  // credentials in an API's name would be copied into every token's aud, and to every verifier's configuration
  if (url.username !== '' || url.password !== '') return { ok: false, reason: 'resource must not contain user information (user:password@)' };
  return { ok: true, key: url.href };
}

/** Checks one `resource` value; answers its normalized form or throws InvalidTargetError. */
export function parseResourceIndicator(value: unknown): string {
  const n = normalize(value);
  if (!n.ok) throw new InvalidTargetError(n.reason);
  return n.key;
}

/** The issuer's resources, checked once (configuration errors are TypeErrors), ready for per-request lookups. */
export class ResourcePolicy {
  /** normalized → as configured */
  private readonly known = new Map<string, string>();
  readonly defaultResource: string;

  constructor(options: ResourcePolicyOptions) {
    let defaultKey = '';
    for (const r of [options.defaultResource, ...options.resources]) {
      const n = normalize(r);
      if (!n.ok) throw new TypeError(`resource ${JSON.stringify(r)}: ${n.reason}`);
      if (!this.known.has(n.key)) this.known.set(n.key, r);
      if (r === options.defaultResource) defaultKey = n.key;
    }
    this.defaultResource = this.known.get(defaultKey)!;
  }

  /** Every resource, as configured. */
  list(): string[] {
    return [...this.known.values()];
  }

  /**
   * Checks a client's allow-list (e.g. `create --resource URL`, repeatable):
   * every entry must be a resource the issuer serves. Answers the entries as
   * the issuer spells them; throws TypeError naming the first bad one.
   */
  clientResources(values: readonly string[]): string[] {
    const out: string[] = [];
    for (const v of values) {
      const n = normalize(v);
      if (!n.ok) throw new TypeError(`resource ${JSON.stringify(v)}: ${n.reason}`);
      const configured = this.known.get(n.key);
      if (configured === undefined) throw new TypeError(`resource ${JSON.stringify(v)} is not one this issuer serves`);
      if (!out.includes(configured)) out.push(configured);
    }
    return out;
  }

  /**
   * The token's `aud` for a request: `requested` is the form's `resource`
   * (undefined when absent, an array when repeated); `allowed` the client's
   * allow-list (null or empty: the default resource only). Throws
   * InvalidTargetError (400 invalid_target) for several, malformed, unknown
   * or disallowed resources.
   */
  audienceFor(requested: string | readonly string[] | undefined, allowed: readonly string[] | null | undefined): string {
    const list = allowed ?? [];
    if (requested === undefined || (Array.isArray(requested) && requested.length === 0)) {
      if (list.length === 0 || this.allows(list, this.defaultResource)) return this.defaultResource;
      // the client's list as the issuer serves it now (an entry the issuer stopped serving is no choice)
      const served = new Set<string>();
      for (const v of list) {
        const configured = this.configured(v);
        if (configured !== undefined) served.add(configured);
      }
      if (served.size === 1) return served.values().next().value as string;
      if (served.size === 0) throw new InvalidTargetError('none of the resources this client may use is served by this issuer');
      throw new InvalidTargetError('resource is required: the client may use several resources and none is the default');
    }
    if (Array.isArray(requested)) {
      if (requested.length > 1) throw new InvalidTargetError('only one resource per token request');
      requested = requested[0] as string;
    }
    const key = parseResourceIndicator(requested);
    const configured = this.known.get(key);
    if (configured === undefined) return this.refuseUnknown();
    if (list.length === 0 ? configured !== this.defaultResource : !this.allows(list, configured)) {
      throw new InvalidTargetError('the client may not request this resource');
    }
    return configured;
  }

  private configured(value: string): string | undefined {
    const n = normalize(value);
    return n.ok ? this.known.get(n.key) : undefined;
  }

  private allows(list: readonly string[], configured: string): boolean {
    for (const v of list) if (v === configured || this.configured(v) === configured) return true;
    return false;
  }

  private refuseUnknown(): never {
    throw new InvalidTargetError('the requested resource is not served by this issuer');
  }
}
