import { createHash, type KeyObject } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { InvalidClientError, TemporarilyUnavailableError } from '../errors';
import { verifyJws, type DpopAlgorithm } from '../jwt/algorithms';
import { checkPublicJwk } from '../jwt/public-jwk';
import { echoed } from '../shared/visible-text';
import type { ClientJwks, ClientRecord } from '../stores/types';
import { JwksUriUnavailableError, RemoteClientKeys } from './client-jwks-uri';

/** Longest accepted assertion lifetime (exp − iat, and exp − now), in seconds, unless `clientAssertionMaxLifetime` says otherwise. */
export const MAX_ASSERTION_LIFETIME = 300;
/** Longest accepted `jti`, in characters. */
export const MAX_JTI_LENGTH = 256;
/** Longest accepted assertion, in characters: a bound on what parsing a made-up one costs. */
const MAX_ASSERTION_LENGTH = 8192;

export type ClientAssertionAudience = 'issuer' | 'issuer-or-token-endpoint';

/** An assertion split and decoded, not yet verified. */
export interface ParsedAssertion {
  header: Record<string, unknown>;
  payload: Record<string, unknown>;
  signingInput: string;
  signature: Buffer;
}

/**
 * A refused assertion: 401 invalid_client on the wire; `detail` is the
 * reason for `client.auth_failed`, `facts` what the log adds (e.g. the `aud`
 * that arrived). Never the assertion itself.
 */
export class AssertionRejectedError extends InvalidClientError {
  constructor(
    reason: string,
    readonly facts: Record<string, unknown> = {},
    /**
     * False when the refusal says nothing of the caller: a kid its jwks_uri's
     * set did not have when it was fetched, less than a cooldown ago (a key
     * the client may have published since). Not counted by the brute-force
     * limits, so a client that rotates its key is not locked out by its own
     * retries; an assertion signs, it guesses nothing.
     */
    readonly countsAsFailure = true,
  ) {
    super({ detail: reason });
  }
}

function reject(reason: string, facts?: Record<string, unknown>): never {
  throw new AssertionRejectedError(reason, facts);
}

function decodeJson(part: string): Record<string, unknown> | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(part)) return undefined;
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Splits and decodes a compact JWS, or gives the reason it is not one. Verifies nothing. */
export function parseAssertion(jwt: string): ParsedAssertion | 'assertion_malformed' {
  if (jwt.length > MAX_ASSERTION_LENGTH) return 'assertion_malformed';
  const parts = jwt.split('.');
  if (parts.length !== 3 || parts[2] === '' || !/^[A-Za-z0-9_-]+$/.test(parts[2])) return 'assertion_malformed';
  const header = decodeJson(parts[0]);
  const payload = decodeJson(parts[1]);
  if (!header || !payload) return 'assertion_malformed';
  return { header, payload, signingInput: `${parts[0]}.${parts[1]}`, signature: Buffer.from(parts[2], 'base64url') };
}

/** The value to log for a claim an attacker chose: short (control and bidi characters escaped), and only when a string or number. */
function shown(value: unknown): unknown {
  if (typeof value === 'string') return echoed(value, 200, '');
  if (typeof value === 'number') return value;
  if (Array.isArray(value)) return value.slice(0, 4).map(shown);
  return typeof value;
}

interface ImportedClientKeys {
  /** The record's jwks object last seen, and its JSON, to tell a changed key set from the same one. */
  seen: ClientJwks;
  text: string;
  byKid: Map<string, { key: KeyObject; alg: DpopAlgorithm }>;
}

export interface ClientAssertionSettings {
  issuer: string;
  tokenEndpoint: string;
  /**
   * With `audience: 'issuer-or-token-endpoint'`, URLs an assertion may name
   * as `aud` besides the token endpoint's: those of the other endpoints that
   * take client authentication (revocation, introspection).
   */
  otherEndpoints?: readonly string[];
  audience: ClientAssertionAudience;
  /** Longest accepted lifetime in seconds (default MAX_ASSERTION_LIFETIME). */
  maxLifetime?: number;
  clockTolerance: number;
  /** The store's single-use record (consumeJti). */
  consumeJti: (clientId: string, jtiHash: string, expiresAt: Date) => Promise<boolean>;
  now: () => number;
  /** For clients registered with a jwks_uri. Default: fetched with the global fetch. */
  remoteKeys?: RemoteClientKeys;
  /** Told when a client's jwks_uri that was down can be fetched again (for the default remoteKeys). */
  onJwksUriRecovered?: (uri: string, downMs: number, failures: number) => void;
}

/**
 * 503 for an assertion whose client's jwks_uri cannot be fetched now
 * (detail `assertion_jwks_uri_unavailable`, the fetch error as its cause),
 * with Retry-After until the next fetch may be tried.
 */
export function jwksUriUnavailable(err: JwksUriUnavailableError): TemporarilyUnavailableError {
  return new TemporarilyUnavailableError("the client's key set (jwks_uri) cannot be fetched; retry later", {
    detail: 'assertion_jwks_uri_unavailable',
    retryAfter: err.retryAfterMs / 1000,
    cause: err,
  });
}

/** `typ` values an assertion may carry, compared as media types are (RFC 7515 §4.1.9): any case, `application/` optional. */
const TYPES = new Set(['jwt', 'client-authentication+jwt']);

function typeAccepted(typ: unknown): boolean {
  if (typeof typ !== 'string') return false;
  const lower = typ.toLowerCase();
  return TYPES.has(lower.startsWith('application/') ? lower.slice('application/'.length) : lower);
}

/**
 * Verifies private_key_jwt client assertions (RFC 7523 §3) for a found
 * client. Public keys are imported once per client key set and kept (an LRU
 * over clients); a changed key set is imported again, never per request.
 */
export class ClientAssertionVerifier {
  private readonly imported = new LRUCache<string, ImportedClientKeys>({ max: 10_000 });

  private readonly remote: RemoteClientKeys;

  constructor(private readonly settings: ClientAssertionSettings) {
    this.remote = settings.remoteKeys ?? new RemoteClientKeys({ now: settings.now, onRecovered: settings.onJwksUriRecovered });
  }

  /** The client's keys by kid: registered ones, imported once; or its jwks_uri's, fetched and cached. */
  private async keyMap(client: ClientRecord, kid: unknown): Promise<{ byKid: Map<string, { key: KeyObject; alg: DpopAlgorithm }>; heldBackMs: number }> {
    if (client.jwksUri === null) return { byKid: this.keysOf(client).byKid, heldBackMs: 0 };
    try {
      return await this.remote.keys(client.jwksUri, typeof kid === 'string' ? kid : undefined);
    } catch (err) {
      // the client's key host is down: 503, not a failed authentication (the assertion was not judged)
      if (err instanceof JwksUriUnavailableError) throw jwksUriUnavailable(err);
      return reject('assertion_jwks_uri_failed', { jwks_uri: client.jwksUri, error: err instanceof Error ? err.message.slice(0, 200) : 'error' });
    }
  }

  private keysOf(client: ClientRecord): ImportedClientKeys {
    const jwks = client.jwks ?? { keys: [] };
    const hit = this.imported.get(client.clientId);
    if (hit && hit.seen === jwks) return hit;
    const text = JSON.stringify(jwks);
    if (hit && hit.text === text) {
      hit.seen = jwks;
      return hit;
    }
    const byKid = new Map<string, { key: KeyObject; alg: DpopAlgorithm }>();
    for (const jwk of jwks.keys) {
      const checked = checkPublicJwk(jwk);
      if (typeof checked !== 'string') byKid.set(jwk.kid, { key: checked.key, alg: checked.alg });
    }
    const entry = { seen: jwks, text, byKid };
    this.imported.set(client.clientId, entry);
    return entry;
  }

  /**
   * `aud` (RFC 7523 §3, draft-ietf-oauth-rfc7523bis §4): the issuer
   * identifier as the only value, a string or a one-element array. With
   * `issuer-or-token-endpoint`, for older clients, also the URL of an
   * endpoint that takes client authentication (token, revocation,
   * introspection), and an array of these (of nothing else: an assertion
   * also made for another server could be replayed here).
   */
  private checkAudience(aud: unknown): void {
    const { issuer, tokenEndpoint, otherEndpoints = [], audience } = this.settings;
    const values = typeof aud === 'string' ? [aud] : Array.isArray(aud) && aud.every((a) => typeof a === 'string') ? (aud as string[]) : [];
    if (values.length === 1 && values[0] === issuer) return;
    const endpoint = (v: string): boolean => v === tokenEndpoint || otherEndpoints.includes(v);
    // an array only of this server's own identifiers: one naming another server too could have been given to it, and replayed here
    if (audience === 'issuer-or-token-endpoint' && values.length > 0 && values.every((v) => v === issuer || endpoint(v))) return;
    const which = values.length !== 1 ? 'not_one_value' : values[0] === tokenEndpoint ? 'token_endpoint' : endpoint(values[0]) ? 'endpoint' : 'other';
    reject('assertion_wrong_audience', { aud: shown(aud), aud_kind: which });
  }

  /**
   * Checks everything but the jti, then records the jti as used (the last
   * step, so a failed check never burns it). Throws AssertionRejectedError.
   */
  async verify(client: ClientRecord, assertion: ParsedAssertion, bodyClientId: string | undefined): Promise<void> {
    const { header, payload } = assertion;
    const { clockTolerance: tolerance } = this.settings;
    const clientId = client.clientId;

    // header: the algorithm comes from the registered key, never from the token
    if (header.jwk !== undefined || header.jku !== undefined || header.x5u !== undefined || header.x5c !== undefined) {
      reject('assertion_embedded_key', { header_keys: Object.keys(header).filter((k) => ['jwk', 'jku', 'x5u', 'x5c'].includes(k)) });
    }
    if (header.typ !== undefined && !typeAccepted(header.typ)) reject('assertion_wrong_type', { typ: shown(header.typ) });
    if (header.crit !== undefined) reject('assertion_crit_header');
    const { byKid, heldBackMs } = await this.keyMap(client, header.kid);
    if (header.kid === undefined) {
      // no kid: each registered key pinned to the header's alg (at most MAX_CLIENT_KEYS)
      let candidates = 0;
      let verified = false;
      for (const entry of byKid.values()) {
        if (entry.alg !== header.alg) continue;
        candidates++;
        if (verifyJws(entry.alg, entry.key, assertion.signingInput, assertion.signature)) {
          verified = true;
          break;
        }
      }
      if (candidates === 0) reject('assertion_wrong_algorithm', { alg: shown(header.alg) });
      // no kid to name: the algorithm, and how many registered keys of it were tried
      if (!verified) reject('assertion_bad_signature', { alg: shown(header.alg), keys_tried: candidates });
    } else {
      const entry = typeof header.kid === 'string' ? byKid.get(header.kid) : undefined;
      if (!entry) {
        if (heldBackMs > 0) {
          // the set is fetched again for an unknown kid at most once per cooldown: not the caller's failure until then
          throw new AssertionRejectedError('assertion_unknown_key', { kid: shown(header.kid), jwks_uri: client.jwksUri, refetch_in_s: Math.ceil(heldBackMs / 1000) }, false);
        }
        reject('assertion_unknown_key', { kid: shown(header.kid) });
      }
      if (header.alg !== entry.alg) reject('assertion_wrong_algorithm', { alg: shown(header.alg), expected: entry.alg });
      if (!verifyJws(entry.alg, entry.key, assertion.signingInput, assertion.signature)) reject('assertion_bad_signature', { kid: header.kid, alg: entry.alg });
    }

    // claims
    if (payload.iss !== clientId) reject('assertion_wrong_issuer', { iss: shown(payload.iss) });
    if (payload.sub !== clientId) reject('assertion_wrong_subject', { sub: shown(payload.sub) });
    if (bodyClientId !== undefined && bodyClientId !== clientId) reject('assertion_client_id_mismatch');
    this.checkAudience(payload.aud);
    const now = this.settings.now() / 1000;
    const { exp, iat, nbf, jti } = payload;
    const maxLifetime = this.settings.maxLifetime ?? MAX_ASSERTION_LIFETIME;
    if (typeof exp !== 'number' || !Number.isFinite(exp)) reject('assertion_no_exp');
    if (exp <= now - tolerance) reject('assertion_expired', { exp });
    if (exp - now > maxLifetime + tolerance) reject('assertion_lifetime_too_long', { exp, lifetime_s: Math.round(exp - now), max_lifetime_s: maxLifetime });
    if (iat !== undefined) {
      if (typeof iat !== 'number' || !Number.isFinite(iat)) reject('assertion_bad_iat');
      if (iat > now + tolerance) reject('assertion_issued_in_future', { iat });
      if (exp - iat > maxLifetime) reject('assertion_lifetime_too_long', { exp, iat, lifetime_s: exp - iat, max_lifetime_s: maxLifetime });
    }
    if (nbf !== undefined && (typeof nbf !== 'number' || nbf > now + tolerance)) reject('assertion_not_yet_valid', { nbf: shown(nbf) });
    if (typeof jti !== 'string' || jti === '') reject('assertion_no_jti');
    if (jti.length > MAX_JTI_LENGTH) reject('assertion_jti_too_long');

    // single use, across every instance on the store; kept until it could no longer pass the exp check
    const jtiHash = createHash('sha256').update(jti).digest('base64url');
    if (!(await this.settings.consumeJti(clientId, jtiHash, new Date((exp + tolerance) * 1000 + 1000)))) reject('assertion_replayed');
  }
}
