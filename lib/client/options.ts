import { clientSecretBasic, clientSecretPost, privateKeyJwt, type ClientAuthentication, type PrivateKeyJwtOptions } from './auth';
import { checkTransport, type FetchLike } from './http';
import { DpopProof, type DpopClientOptions } from './dpop';
import type { ProofOfPossession } from './proof-of-possession';
import type { TokenStore } from './store';

export type AuthMethod = 'client_secret_basic' | 'client_secret_post' | 'private_key_jwt';

export interface TokenClientOptions {
  /** Issuer URL: the token endpoint is read from its RFC 8414 metadata, whose `issuer` must be this exact string. */
  issuer?: string;
  /**
   * Token endpoint URL: no discovery. Instead of `issuer`, or with it: then the
   * issuer is not looked up, and names the `aud` of private_key_jwt assertions
   * (without it, `aud` is this URL, which an issuer following RFC 7523bis refuses).
   */
  tokenEndpoint?: string;
  clientId: string;
  clientSecret?: string;
  /** private_key_jwt instead of a secret: the client's private key (a private JWK or KeyObject); a fresh assertion signs every token request. */
  privateKey?: PrivateKeyJwtOptions['privateKey'];
  /** With `privateKey`: the `kid` of its registered public key (default the JWK's `kid`). */
  kid?: string;
  /** `client_secret_basic` (default, unless the metadata lists only `client_secret_post`), `client_secret_post`, or a plug-in. */
  authMethod?: AuthMethod | ClientAuthentication;
  /** Scopes asked for when a call names none ("a b" or ["a", "b"]). */
  scope?: string | string[];
  /** RFC 8707 resource indicator(s) asked for when a call names none. */
  resource?: string | string[];
  /** Seconds before expiry a token is no longer used (60), at most half its lifetime. */
  skew?: number;
  /** Seconds a token whose answer had no `expires_in` is used (300). */
  defaultTtl?: number;
  /** Seconds before expiry from which a token is renewed in the background while still in use (300), at most half its lifetime. */
  refreshWindow?: number;
  /** Seconds between two renewals caused by a 401 from an API (5). */
  minRenewalInterval?: number;
  /** Token and metadata request timeout in seconds (10). */
  timeout?: number;
  /** Most keys (scope set + resource) cached at once (1000). */
  maxEntries?: number;
  /** The fetch used for token, metadata and API requests (global fetch). */
  fetch?: FetchLike;
  /** A store shared by processes, under the in-process cache. */
  store?: TokenStore;
  onEvent?: (event: TokenClientEvent) => void;
  /** Proof-of-possession plug-in (DPoP). */
  proofOfPossession?: ProofOfPossession;
  /** DPoP-bound tokens (RFC 9449) with this private key: `{ privateKey, alg? }`. Not with proofOfPossession. */
  dpop?: DpopClientOptions;
  /** Allow tokens and secrets over http: to hosts other than loopback. */
  allowInsecureHttp?: boolean;
  /**
   * An API request refused with 401 (`invalid_token`, or no error) is sent
   * once more with a new token when its body can be sent again (true). False:
   * no request is ever sent twice, the 401 goes back to the caller (the token
   * is renewed all the same for the next call). `fetch()` may say otherwise
   * for one call.
   */
  retry401?: boolean;
  /** Clock in epoch milliseconds (tests). */
  now?: () => number;
}

export type TokenRequestReason = 'initial' | 'expired' | 'refresh' | 'renew_401';

/** What the client does, for logs and metrics. Never carries a token or a secret. */
export type TokenClientEvent =
  | { type: 'token.requested'; scope: string; resource: string[]; reason: TokenRequestReason; attempt: number }
  | { type: 'token.cache_hit'; scope: string; resource: string[]; source: 'memory' | 'store' }
  | { type: 'token.refresh_failed'; scope: string; resource: string[]; status: number | undefined; error: string; retryAfter: number; tokenStillValid: boolean }
  | { type: 'api.retry_401'; method: string; url: string }
  | { type: 'dpop.nonce_retry'; kind: 'token' | 'api' }
  /** `message`: why, on one line; a store's own error message in it is cut to 200 characters, its control characters escaped (`\n`, `\u202e`). */
  | { type: 'store.error'; operation: StoreOperation; message: string };

/** What a `store.error` event was doing: `lock` and `unlock` only with a store that locks. */
export type StoreOperation = 'get' | 'set' | 'delete' | 'lock' | 'unlock';

export interface ClientConfig {
  issuer: string | undefined;
  tokenEndpoint: string | undefined;
  clientId: string;
  auth: ClientAuthentication | undefined;
  clientSecret: string | undefined;
  scope: string;
  resource: string[];
  skewMs: number;
  defaultTtlMs: number;
  refreshWindowMs: number;
  minRenewalIntervalMs: number;
  timeoutMs: number;
  maxEntries: number;
  fetch: FetchLike | undefined;
  store: TokenStore | undefined;
  onEvent: ((event: TokenClientEvent) => void) | undefined;
  pop: ProofOfPossession | undefined;
  allowInsecureHttp: boolean;
  retry401: boolean;
  now: () => number;
}

const KNOWN = new Set([
  'issuer', 'tokenEndpoint', 'clientId', 'clientSecret', 'privateKey', 'kid', 'authMethod', 'scope', 'resource', 'skew', 'defaultTtl', 'refreshWindow',
  'minRenewalInterval', 'timeout', 'maxEntries', 'fetch', 'store', 'onEvent', 'proofOfPossession', 'dpop', 'allowInsecureHttp', 'retry401', 'now',
]);

/** Scope set as one string: distinct tokens, sorted, so "b a" and "a b" are one key. */
export function normaliseScope(value: unknown, name = 'scope'): string {
  if (value === undefined) return '';
  const list = typeof value === 'string' ? value.split(' ') : value;
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string' && /^[\x21\x23-\x5b\x5d-\x7e]*$/.test(s))) {
    throw new TypeError(`${name} must be a space-separated string or an array of scope tokens (RFC 6749 §3.3)`);
  }
  return [...new Set((list as string[]).filter((s) => s !== ''))].sort().join(' ');
}

/** Resource indicators: absolute URIs without fragment (RFC 8707 §2), distinct and sorted. */
export function normaliseResource(value: unknown, name = 'resource'): string[] {
  if (value === undefined) return [];
  const list = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(list)) throw new TypeError(`${name} must be a URI or an array of URIs`);
  for (const r of list) {
    let ok = typeof r === 'string';
    if (ok) {
      try {
        ok = !new URL(r as string).hash;
      } catch {
        ok = false;
      }
    }
    if (!ok) throw new TypeError(`${name} must be absolute URIs without a fragment (RFC 8707)`);
  }
  return [...new Set(list as string[])].sort();
}

function seconds(options: TokenClientOptions, name: keyof TokenClientOptions, dflt: number, min = 0): number {
  const v = options[name];
  if (v === undefined) return dflt * 1000;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < min) throw new TypeError(`option ${name} must be a number of seconds ≥ ${min}`);
  return v * 1000;
}

function url(value: unknown, name: string, allowInsecureHttp: boolean): string {
  if (typeof value !== 'string') throw new TypeError(`option ${name} must be a URL string`);
  checkTransport(value, allowInsecureHttp, `option ${name}`);
  return value;
}

/** Options → complete configuration; a wrong option is a TypeError here, at start-up. */
export function parseOptions(options: TokenClientOptions): ClientConfig {
  if (typeof options !== 'object' || options === null) throw new TypeError('createTokenClient() needs an options object');
  for (const key of Object.keys(options)) {
    if (!KNOWN.has(key)) throw new TypeError(`createTokenClient(): unknown option ${key}`);
  }
  const allowInsecureHttp = options.allowInsecureHttp === true;
  if (options.issuer === undefined && options.tokenEndpoint === undefined) {
    throw new TypeError('createTokenClient() needs issuer or tokenEndpoint (both: the token endpoint without discovery, the issuer as a client assertion\'s aud)');
  }
  if (typeof options.clientId !== 'string' || options.clientId === '') throw new TypeError('option clientId must be a non-empty string');

  let auth: ClientAuthentication | undefined;
  const method = options.authMethod;
  if (options.privateKey !== undefined && options.clientSecret !== undefined) {
    throw new TypeError('createTokenClient() takes clientSecret or privateKey, not both');
  }
  if (typeof method === 'object' && method !== null) {
    if (typeof method.apply !== 'function' || typeof method.method !== 'string') throw new TypeError('option authMethod must have method and apply()');
    auth = method;
  } else if (options.privateKey !== undefined || method === 'private_key_jwt') {
    if (method !== undefined && method !== 'private_key_jwt') throw new TypeError(`option privateKey goes with authMethod private_key_jwt, not ${String(method)}`);
    if (options.privateKey === undefined) throw new TypeError('authMethod private_key_jwt needs option privateKey');
    auth = privateKeyJwt({ privateKey: options.privateKey, kid: options.kid });
  } else if (method === undefined || method === 'client_secret_basic' || method === 'client_secret_post') {
    if (typeof options.clientSecret !== 'string' || options.clientSecret === '') throw new TypeError('option clientSecret must be a non-empty string');
    if (method === 'client_secret_post') auth = clientSecretPost(options.clientSecret);
    else if (method === 'client_secret_basic' || options.tokenEndpoint !== undefined) auth = clientSecretBasic(options.clientSecret);
    // else: chosen from the issuer's metadata
  } else {
    throw new TypeError('option authMethod must be client_secret_basic, client_secret_post, private_key_jwt or a ClientAuthentication');
  }

  if (options.dpop !== undefined && options.proofOfPossession !== undefined) throw new TypeError('give either dpop or proofOfPossession, not both');
  const pop = options.dpop !== undefined ? new DpopProof(options.dpop) : options.proofOfPossession;
  if (pop !== undefined && (typeof pop.scheme !== 'string' || typeof pop.tokenRequest !== 'function' || typeof pop.apiRequest !== 'function' || typeof pop.retry !== 'function')) {
    throw new TypeError('option proofOfPossession must have scheme, tokenRequest(), apiRequest() and retry()');
  }
  const store = options.store;
  if (store !== undefined && (typeof store.get !== 'function' || typeof store.set !== 'function' || typeof store.delete !== 'function')) {
    throw new TypeError('option store must implement get(), set() and delete()');
  }
  if (store !== undefined && store.lock !== undefined && typeof store.lock !== 'function') {
    throw new TypeError('option store: lock, when present, must be a function');
  }
  for (const fn of ['fetch', 'onEvent', 'now'] as const) {
    if (options[fn] !== undefined && typeof options[fn] !== 'function') throw new TypeError(`option ${fn} must be a function`);
  }
  if (options.retry401 !== undefined && typeof options.retry401 !== 'boolean') throw new TypeError('option retry401 must be true or false');
  const maxEntries = options.maxEntries ?? 1000;
  if (!Number.isInteger(maxEntries) || maxEntries < 1) throw new TypeError('option maxEntries must be a positive integer');

  return {
    issuer: options.issuer === undefined ? undefined : url(options.issuer, 'issuer', allowInsecureHttp),
    tokenEndpoint: options.tokenEndpoint === undefined ? undefined : url(options.tokenEndpoint, 'tokenEndpoint', allowInsecureHttp),
    clientId: options.clientId,
    auth,
    clientSecret: options.clientSecret,
    scope: normaliseScope(options.scope, 'option scope'),
    resource: normaliseResource(options.resource, 'option resource'),
    skewMs: seconds(options, 'skew', 60),
    defaultTtlMs: seconds(options, 'defaultTtl', 300, 1),
    refreshWindowMs: seconds(options, 'refreshWindow', 300),
    minRenewalIntervalMs: seconds(options, 'minRenewalInterval', 5),
    timeoutMs: seconds(options, 'timeout', 10, 0.001),
    maxEntries,
    fetch: options.fetch,
    store,
    onEvent: options.onEvent,
    pop,
    allowInsecureHttp,
    retry401: options.retry401 ?? true,
    now: options.now ?? Date.now,
  };
}
