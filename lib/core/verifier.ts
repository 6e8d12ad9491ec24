import jwt from 'jsonwebtoken';
import { LRUCache } from 'lru-cache';
import { InvalidTokenError } from '../errors';
import type { AccessTokenClaims } from './issuer';
import { SIGNING_ALGORITHMS, type KeyResolver, type LoadedKey } from './keys';

/** What a verified access token tells the protected route; becomes `req.auth`. */
export interface AccessTokenAuth {
  clientId: string;
  scope: string[];
  token: string;
  claims: AccessTokenClaims & Record<string, unknown>;
}

export interface VerifierOptions {
  issuer: string;
  audience: string;
  keys: KeyResolver;
  /** Seconds of clock skew allowed on `exp`, `nbf` and `iat`. */
  clockTolerance: number;
  /** Most verified tokens kept in memory (0 turns the cache off). */
  cacheMax: number;
  now: () => number;
}

const ALLOWED_ALGORITHMS = new Set<string>(SIGNING_ALGORITHMS);
const REQUIRED_CLAIMS = ['iss', 'sub', 'client_id', 'aud', 'iat', 'exp', 'jti'] as const;

function invalid(detail: string, description?: string): never {
  throw new InvalidTokenError(description, { detail });
}

function decodeHeader(token: string): { alg?: unknown; typ?: unknown; kid?: unknown } {
  const dot = token.indexOf('.');
  if (dot < 1 || token.split('.').length !== 3) invalid('not a JWS compact serialization');
  try {
    const header: unknown = JSON.parse(Buffer.from(token.slice(0, dot), 'base64url').toString('utf8'));
    if (header && typeof header === 'object' && !Array.isArray(header)) return header;
  } catch {
    // fall through
  }
  return invalid('the JOSE header is not a JSON object');
}

/**
 * Verifies RFC 9068 access tokens: an allowlist of asymmetric algorithms, a
 * known `kid`, `typ: at+jwt`, issuer, audience, lifetime and the required
 * claims. Every failure is `invalid_token`; the reason stays in `detail`.
 *
 * Verified tokens are remembered (bounded LRU) until their own `exp`, so a
 * token used many times is checked cryptographically once. A remembered
 * token counts only while the key that signed it is still published.
 */
export class AccessTokenVerifier {
  private readonly cache: LRUCache<string, { auth: AccessTokenAuth; key: LoadedKey }> | undefined;

  constructor(private readonly options: VerifierOptions) {
    this.cache = options.cacheMax > 0 ? new LRUCache({ max: options.cacheMax }) : undefined;
  }

  verify(token: string): AccessTokenAuth | Promise<AccessTokenAuth> {
    const hit = this.cache?.get(token);
    if (hit) {
      // still unexpired, and its key still published: nothing else can have changed
      if (hit.auth.claims.exp * 1000 > this.options.now() && this.options.keys.peek(hit.key.kid) === hit.key) return hit.auth;
      this.cache!.delete(token);
    }
    const header = decodeHeader(token);
    if (typeof header.alg !== 'string' || !ALLOWED_ALGORITHMS.has(header.alg)) invalid(`algorithm ${String(header.alg)} is not allowed`);
    if (typeof header.typ !== 'string' || !/^(application\/)?at\+jwt$/i.test(header.typ)) invalid(`typ ${String(header.typ)} is not at+jwt`);
    if (typeof header.kid !== 'string') invalid('no kid in the header');
    const key = this.options.keys.resolve(header.kid);
    if (key instanceof Promise) return key.then((k) => this.check(token, header.alg as string, header.kid as string, k));
    return this.check(token, header.alg, header.kid, key);
  }

  private check(token: string, alg: string, kid: string, key: LoadedKey | undefined): AccessTokenAuth {
    if (!key) invalid(`unknown kid ${kid}`);
    if (key.alg !== alg) invalid(`kid ${kid} is a ${key.alg} key, the token says ${alg}`);
    let claims: AccessTokenClaims & Record<string, unknown>;
    try {
      claims = jwt.verify(token, key.publicKey, {
        algorithms: [key.alg as jwt.Algorithm],
        issuer: this.options.issuer,
        audience: this.options.audience,
        clockTolerance: this.options.clockTolerance,
        clockTimestamp: Math.floor(this.options.now() / 1000),
      }) as AccessTokenClaims & Record<string, unknown>;
    } catch (err) {
      if (err instanceof jwt.TokenExpiredError) invalid(err.message, 'the access token expired');
      return invalid(err instanceof Error ? err.message : 'verification failed');
    }
    for (const name of REQUIRED_CLAIMS) if (claims[name] === undefined) invalid(`claim ${name} is missing`);
    if (typeof claims.exp !== 'number' || typeof claims.iat !== 'number') invalid('exp and iat must be numbers');
    if (typeof claims.client_id !== 'string' || typeof claims.sub !== 'string') invalid('client_id and sub must be strings');
    if (claims.scope !== undefined && typeof claims.scope !== 'string') invalid('scope must be a string');
    const auth: AccessTokenAuth = {
      clientId: claims.client_id,
      scope: claims.scope ? claims.scope.split(' ') : [],
      token,
      claims,
    };
    const ttl = claims.exp * 1000 - this.options.now();
    if (this.cache && ttl > 0) this.cache.set(token, { auth, key }, { ttl });
    return auth;
  }

  /** Empties the verified-token cache (e.g. after keys were removed). */
  clear(): void {
    this.cache?.clear();
  }
}
