/**
 * What both stores do alike with a client's stored fields: read the auth
 * method, key set and permissions columns back, and apply the rules for
 * adding and removing one key of a key-based client, so that either store
 * gives the same answer. Plain values only: no SQL, no driver.
 */
import { samePublicKey } from '../jwt/thumbprint';
import type { AddClientKeyResult, ClientAuthKind, ClientJwks, ClientPermission, ClientPublicJwk } from './types';

/** The stored auth method: anything but `private_key_jwt` is a secret client. */
export function authMethodOf(stored: string): ClientAuthKind {
  return stored === 'private_key_jwt' ? 'private_key_jwt' : 'client_secret';
}

/** The stored key set (JSON text) as a ClientRecord has it: null when none is stored. */
export function jwksOf(stored: string | null): ClientJwks | null {
  return stored === null ? null : (JSON.parse(stored) as ClientJwks);
}

/** The stored key set of a key-based client about to be edited: empty when none is stored. */
export function keySetOf(stored: string | null): ClientJwks {
  return stored === null ? { keys: [] } : (JSON.parse(stored) as ClientJwks);
}

/** The permissions this package knows, from a stored list; any other is dropped. */
export function permissionsOf(stored: readonly string[]): ClientPermission[] {
  return stored.filter((p): p is ClientPermission => p === 'introspect');
}

/** `jwks` with `jwk` added, or why not: its kid or its public key is there already, or `maxKeys` is reached. */
export function withKeyAdded(jwks: ClientJwks, jwk: ClientPublicJwk, maxKeys: number): ClientJwks | Exclude<AddClientKeyResult, 'added' | 'unknown_client'> {
  if (jwks.keys.some((k) => k.kid === jwk.kid)) return 'duplicate_kid';
  if (jwks.keys.some((k) => samePublicKey(k, jwk))) return 'duplicate_key';
  if (jwks.keys.length >= maxKeys) return 'too_many_keys';
  return { keys: [...jwks.keys, jwk] };
}

/** `jwks` without the key `kid`, or null when it has no such key or that key is its last. */
export function withKeyRemoved(jwks: ClientJwks, kid: string): ClientJwks | null {
  if (jwks.keys.length <= 1 || !jwks.keys.some((k) => k.kid === kid)) return null;
  return { keys: jwks.keys.filter((k) => k.kid !== kid) };
}

/**
 * Whether a client's stored secret hashes are `expected` (any order): the
 * condition of a secret rotation. TypeError when `expected` is not a list
 * (a caller that read nothing would otherwise rotate unconditionally).
 */
export function sameHashes(stored: readonly string[], expected: readonly string[]): boolean {
  if (!Array.isArray(expected)) throw new TypeError('rotateSecret needs the hashes of the secrets the caller read (expectedSecrets)');
  if (stored.length !== expected.length) return false;
  const want = [...expected].sort();
  return [...stored].sort().every((h, i) => h === want[i]);
}
