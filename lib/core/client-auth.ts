import { InvalidClientError, InvalidRequestError } from '../errors';
import { CLIENT_ASSERTION_TYPE } from '../jwt/client-assertion';
import type { ClientRecord, ClientStore, StoredSecret } from '../stores/types';
import { parseAssertion, type ClientAssertionVerifier, type ParsedAssertion } from './client-assertion';
import { hasClientIdShape, loggedDigest, verifyNothing, verifySecret } from './secrets';

export type ClientAuthMethod = 'client_secret_basic' | 'client_secret_post' | 'private_key_jwt';

export interface SecretCredentials {
  clientId: string;
  clientSecret: string;
  method: 'client_secret_basic' | 'client_secret_post';
}

/** A client assertion (RFC 7523): `clientId` is its `sub` (else the body's client_id). */
export interface AssertionCredentials {
  clientId: string;
  method: 'private_key_jwt';
  /** The decoded assertion, or why it cannot be one (a 401 with that reason, after the brute-force check). */
  assertion: ParsedAssertion | string;
  /** The client_id sent in the body, if any: must name the assertion's client. */
  bodyClientId: string | undefined;
}

export type ClientCredentials = SecretCredentials | AssertionCredentials;

const BASIC = /^basic +([A-Za-z0-9+/]+={0,2}) *$/i;

/** application/x-www-form-urlencoded decoding of one Basic credential part (RFC 6749 §2.3.1, Appendix B). */
function formDecode(part: string): string {
  try {
    return decodeURIComponent(part.replace(/\+/g, ' '));
  } catch {
    throw new InvalidRequestError('malformed percent-encoding in the Basic authorization header', { detail: 'malformed_basic' });
  }
}

/**
 * Reads HTTP Basic credentials. `undefined` when the header is absent or uses
 * another scheme; a malformed Basic header is an `invalid_request`.
 */
export function parseBasic(authorization: string | undefined): { clientId: string; clientSecret: string } | undefined {
  if (!authorization || !/^basic(?:[ \t]|$)/i.test(authorization)) return undefined;
  const match = BASIC.exec(authorization);
  if (!match) throw new InvalidRequestError('malformed Basic authorization header', { detail: 'malformed_basic' });
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) throw new InvalidRequestError('malformed Basic authorization header', { detail: 'malformed_basic' });
  return { clientId: formDecode(decoded.slice(0, colon)), clientSecret: formDecode(decoded.slice(colon + 1)) };
}

/**
 * Who claims to be the client: Basic or body, never both; `null` when the
 * request carries no client credentials. The query string is never read.
 */
export function readClientCredentials(authorization: string | undefined, body: Readonly<Record<string, string>>): ClientCredentials | null {
  const basic = parseBasic(authorization);
  // the client a refused request named, for its log line (who sent it): Basic's, else the body's
  const named = (): Record<string, string> => {
    const id = basic?.clientId ?? body.client_id;
    return id === undefined ? {} : { claimed_client_id: loggedClientId(id) };
  };
  if (body.client_assertion !== undefined || body.client_assertion_type !== undefined) {
    if (basic || body.client_secret !== undefined) {
      throw new InvalidRequestError('client credentials must be sent by one method only: a client assertion, HTTP Basic or a client secret in the body', {
        detail: 'two_auth_methods',
        facts: named(),
      });
    }
    return readAssertion(body);
  }
  if (basic) {
    if (body.client_secret !== undefined) {
      throw new InvalidRequestError('client credentials must be sent by one method only: HTTP Basic or the request body', { detail: 'two_auth_methods', facts: named() });
    }
    if (body.client_id !== undefined && body.client_id !== basic.clientId) {
      throw new InvalidRequestError('client_id in the body does not match the Basic authorization header', { detail: 'basic_client_id_mismatch', facts: named() });
    }
    return { ...basic, method: 'client_secret_basic' };
  }
  if (body.client_id !== undefined && body.client_secret !== undefined) {
    return { clientId: body.client_id, clientSecret: body.client_secret, method: 'client_secret_post' };
  }
  return null;
}

/** The assertion's credentials; a wrong type or a malformed JWT is carried as the reason, refused as invalid_client later. */
function readAssertion(body: Readonly<Record<string, string>>): AssertionCredentials {
  const jwt = body.client_assertion;
  const bodyClientId = body.client_id;
  const fallbackId = bodyClientId ?? '';
  if (body.client_assertion_type !== CLIENT_ASSERTION_TYPE) {
    return { clientId: fallbackId, method: 'private_key_jwt', assertion: 'assertion_type_unsupported', bodyClientId };
  }
  if (jwt === undefined || jwt === '') return { clientId: fallbackId, method: 'private_key_jwt', assertion: 'assertion_missing', bodyClientId };
  const assertion = parseAssertion(jwt);
  const sub = typeof assertion === 'string' ? undefined : assertion.payload.sub;
  const clientId = typeof sub === 'string' && sub !== '' && sub.length <= 256 ? sub : fallbackId;
  return { clientId, method: 'private_key_jwt', assertion, bodyClientId };
}

/**
 * Whether a client_id could name a client, before any store is asked: no
 * control character (PostgreSQL refuses a NUL in text, which would be a 500)
 * and at most 256 characters. Others are unknown clients, counted as such.
 */
function couldBeClientId(clientId: string): boolean {
  // eslint-disable-next-line no-control-regex
  return clientId.length <= 256 && !/[\x00-\x1f\x7f]/.test(clientId);
}

/**
 * A client_id as the audit log shows it: as it is when it has the shape of a
 * client id, else `h.` and 22 characters of an HMAC keyed per process
 * (loggedDigest()). A request's client_id may be anything: a secret sent in
 * its place (43 characters), or a stranger's megabyte; neither reaches the
 * log, nor a hash anyone could check a guessed secret against.
 */
export function loggedClientId(clientId: string): string {
  return hasClientIdShape(clientId) ? clientId : loggedDigest(clientId);
}

export type ClientAuthFailure =
  | 'no_credentials'
  | 'unknown_client'
  | 'revoked_client'
  | 'wrong_secret'
  | 'expired_secret'
  | 'revoked_secret'
  | 'wrong_auth_method';

/** How many of a client's ended secrets (the most recently ended first) a failed secret is compared with, to log `expired_secret` or `revoked_secret`. */
const ENDED_SECRETS_CHECKED = 5;

/**
 * A secret of the client that has ended: `expired_secret` when it ended
 * after an overlap (rotated out with `--keep-old`, the overlap over: a
 * caller that missed the rotation), `revoked_secret` when it was ended at
 * once (rotated out without `--keep-old`, the response to a leaked secret:
 * whoever still sends it may hold the leak). `facts.ended_ago_s`: seconds
 * since it ended.
 */
export class EndedSecretError extends InvalidClientError {
  constructor(
    reason: 'expired_secret' | 'revoked_secret',
    readonly facts: { ended_ago_s: number },
  ) {
    super({ detail: reason });
  }
}

/**
 * Which of the client's ended secrets `secret` is, if any (one rotated out,
 * its `expiresAt` reached): only on the failure path, so a working secret
 * costs nothing more; always ENDED_SECRETS_CHECKED compares at most, none
 * cut short by a match. The stores keep an ended secret's hash (rotation
 * and revocation only cap `expiresAt`), so this is the same check as for a
 * live one.
 */
function endedSecret(client: ClientRecord, secret: string, now: Date): StoredSecret | undefined {
  const ended = client.secrets.filter((s) => s.expiresAt !== null && s.expiresAt <= now);
  ended.sort((a, b) => b.expiresAt!.getTime() - a.expiresAt!.getTime());
  let matched: StoredSecret | undefined;
  for (const s of ended.slice(0, ENDED_SECRETS_CHECKED)) if (verifySecret(secret, s.hash) && !matched) matched = s;
  return matched;
}

/**
 * Whether an ended secret was ended at once: a rotation without an overlap
 * ends the old secrets at the very instant the new one is created (the
 * stores cap `expiresAt` at the new secret's `createdAt`), one with
 * `--keep-old` that long after it.
 */
function endedAtOnce(client: ClientRecord, ended: StoredSecret): boolean {
  const at = ended.expiresAt!.getTime();
  return client.secrets.some((s) => s !== ended && s.createdAt.getTime() === at);
}

function endedSecretError(client: ClientRecord, ended: StoredSecret, now: Date): EndedSecretError {
  const facts = { ended_ago_s: Math.floor((now.getTime() - ended.expiresAt!.getTime()) / 1000) };
  return new EndedSecretError(endedAtOnce(client, ended) ? 'revoked_secret' : 'expired_secret', facts);
}

/**
 * Finds the client and checks its secret in constant time. Every failure is
 * the same `invalid_client` on the wire; `detail` keeps the reason for logs.
 */
export async function authenticateClient(
  find: ClientStore['findClient'],
  credentials: ClientCredentials,
  now: Date,
  assertions?: ClientAssertionVerifier,
): Promise<ClientRecord> {
  const fail = (reason: ClientAuthFailure | string): never => {
    throw new InvalidClientError({ detail: reason });
  };
  if (credentials.method === 'private_key_jwt') {
    if (typeof credentials.assertion === 'string') return fail(credentials.assertion);
    if (credentials.clientId === '') return fail('assertion_wrong_subject');
    if (!couldBeClientId(credentials.clientId)) return fail('unknown_client');
    const client = await find(credentials.clientId);
    if (!client) return fail('unknown_client');
    if (client.revokedAt !== null) return fail('revoked_client');
    if (client.authMethod !== 'private_key_jwt' || !assertions) return fail('wrong_auth_method');
    await assertions.verify(client, credentials.assertion, credentials.bodyClientId);
    return client;
  }
  const client = couldBeClientId(credentials.clientId) ? await find(credentials.clientId) : null;
  if (!client) {
    verifyNothing(credentials.clientSecret);
    return fail('unknown_client');
  }
  let ok = false;
  for (const secret of client.secrets) {
    if (secret.expiresAt !== null && secret.expiresAt <= now) continue;
    // no early exit: the time taken does not tell which secret matched
    if (verifySecret(credentials.clientSecret, secret.hash)) ok = true;
  }
  if (client.secrets.length === 0) verifyNothing(credentials.clientSecret);
  if (client.revokedAt !== null) return fail('revoked_client');
  if (client.authMethod === 'private_key_jwt') return fail('wrong_auth_method');
  if (!ok) {
    const ended = endedSecret(client, credentials.clientSecret, now);
    if (ended) throw endedSecretError(client, ended, now);
    return fail('wrong_secret');
  }
  return client;
}
