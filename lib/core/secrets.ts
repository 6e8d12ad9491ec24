import * as crypto from 'node:crypto';
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Client ids and secrets.
 *
 * A generated secret carries 256 bits from the CSPRNG, so nobody can guess
 * it, whatever the hash. It is stored as HMAC-SHA-256 keyed with a random
 * 128-bit salt of its own: one-way, unique per secret, and about a
 * microsecond to check, which keeps the token endpoint fast. Slow password
 * hashes (bcrypt, scrypt, argon2) exist to protect low-entropy human
 * passwords and would add tens of milliseconds to every token request
 * without making a 256-bit secret any harder to find.
 */

const SECRET_BYTES = 32;
const SALT_BYTES = 16;
const SCHEME = 'hmac-sha256';

/** 128 random bits, base64url; never starting with "-", so an id is never mistaken for a command-line flag. */
export function generateClientId(): string {
  for (;;) {
    const id = randomBytes(16).toString('base64url');
    if (id[0] !== '-') return id;
  }
}

/**
 * What may be shown as it is, in a log line or a Redis key name: a value
 * sent as a client_id with the shape of a client id (generated ids are 22
 * base64url characters; a store of one's own may have other short ids), at
 * most 32 letters, digits and `-._~`. A secret of this package (43
 * characters) never has it, so one sent in the client_id's place (id and
 * secret swapped) is shown only as a digest.
 */
const CLIENT_ID_SHAPE = /^[A-Za-z0-9._~-]{0,32}$/;

export function hasClientIdShape(value: string): boolean {
  return CLIENT_ID_SHAPE.test(value);
}

/** node:crypto's one-shot hash (Node 20.12+), cheaper than a Hash object; createHash before. */
const oneShot = (crypto as { hash?: (algorithm: string, data: string, encoding: 'base64url') => string }).hash;

/**
 * A value sent as a client_id, in a bounded form: `h.` and 22 characters of
 * its SHA-256. For the brute-force counters' keys, which every instance
 * sharing a Redis must compute alike; never for a log line (see
 * loggedDigest()): a deterministic hash of a secret sent in the client_id's
 * place would let anyone holding a candidate secret confirm it from the log.
 */
export function clientIdDigest(value: string): string {
  const digest = oneShot ? oneShot('sha256', value, 'base64url') : createHash('sha256').update(value).digest('base64url');
  return `h.${digest.slice(0, 22)}`;
}

/** The key of loggedDigest(): random per process, never stored or logged. */
const LOG_DIGEST_KEY = randomBytes(32);

/**
 * A value sent as a client_id, as a log line may show it: `h.` and 22
 * characters of its HMAC-SHA-256 under a key drawn at random when the
 * process starts. The same value gives the same text within one process's
 * log (a flood of one made-up id reads as one), but not across instances or
 * restarts, and nobody can tell from the log whether it was a given secret.
 */
export function loggedDigest(value: string): string {
  return `h.${createHmac('sha256', LOG_DIGEST_KEY).update(value, 'utf8').digest('base64url').slice(0, 22)}`;
}

export function generateSecret(): string {
  return randomBytes(SECRET_BYTES).toString('base64url');
}

/** `hmac-sha256$<salt>$<mac>`, both base64url. */
export function hashSecret(secret: string): string {
  const salt = randomBytes(SALT_BYTES);
  return `${SCHEME}$${salt.toString('base64url')}$${mac(salt, secret).toString('base64url')}`;
}

function mac(salt: Buffer, secret: string): Buffer {
  return createHmac('sha256', salt).update(secret, 'utf8').digest();
}

const DUMMY_HASH = hashSecret(generateSecret());

/** Constant-time check of `secret` against a stored hash; `false` for any malformed hash. */
export function verifySecret(secret: string, stored: string): boolean {
  const [scheme, saltText, macText] = stored.split('$');
  if (scheme !== SCHEME || saltText === undefined || macText === undefined) return false;
  const expected = Buffer.from(macText, 'base64url');
  const actual = mac(Buffer.from(saltText, 'base64url'), secret);
  return expected.length === actual.length && timingSafeEqual(expected, actual);
}

/** Spends the same work as one `verifySecret`, so an unknown client costs what a known one does. */
export function verifyNothing(secret: string): false {
  verifySecret(secret, DUMMY_HASH);
  return false;
}
