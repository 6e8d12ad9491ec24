/**
 * The embedded store's signing keys: listing, the first key, rotation,
 * pruning. The first key and a rotation are immediate transactions, so two
 * processes on one file never race to two active keys.
 */
import type Database from 'better-sqlite3';
import { date } from './embedded-schema';
import type { StoredKey } from './types';

interface KeyRow {
  kid: string;
  alg: string;
  private_jwk: string;
  public_jwk: string;
  created_at: number;
  activates_at: number;
  retired_at: number | null;
  token_ttl: number;
}

function toKey(row: KeyRow): StoredKey {
  return {
    kid: row.kid,
    alg: row.alg,
    privateJwk: row.private_jwk,
    publicJwk: row.public_jwk,
    createdAt: new Date(row.created_at),
    activatesAt: new Date(row.activates_at),
    retiredAt: date(row.retired_at),
    tokenTtl: row.token_ttl,
  };
}

/** The KeyStore methods on `db`, synchronous (the store wraps each one). */
export function embeddedKeys(db: Database.Database) {
  const q = {
    keys: db.prepare<[], KeyRow>('SELECT * FROM signing_keys ORDER BY created_at, rowid'),
    currentKids: db.prepare<[], { kid: string }>('SELECT kid FROM signing_keys WHERE retired_at IS NULL'),
    insertKey: db.prepare(
      'INSERT INTO signing_keys (kid, alg, private_jwk, public_jwk, created_at, activates_at, retired_at, token_ttl) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    // as of @now: the active keys not yet retired sign until @at; the pending ones are withdrawn (retire as they would activate)
    retireActive: db.prepare<{ now: number; at: number }>(
      'UPDATE signing_keys SET retired_at = @at WHERE activates_at <= @now AND (retired_at IS NULL OR retired_at > @now)',
    ),
    withdrawPending: db.prepare<{ now: number }>(
      'UPDATE signing_keys SET retired_at = activates_at WHERE activates_at > @now AND (retired_at IS NULL OR retired_at > @now)',
    ),
    prune: db.prepare('DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < ?'),
    pruneExpired: db.prepare('DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < ? AND retired_at + token_ttl * 1000 < ?'),
    raiseTokenTtl: db.prepare('UPDATE signing_keys SET token_ttl = ? WHERE kid = ? AND token_ttl < ?'),
    // only a key that signs no more: retired by now, or withdrawn (retired as it would activate)
    changes: db.prepare<[string], number>('SELECT n FROM store_changes WHERE name = ?').pluck(),
    deleteRetired: db.prepare<{ kid: string; now: number }>(
      'DELETE FROM signing_keys WHERE kid = @kid AND retired_at IS NOT NULL AND (retired_at <= @now OR retired_at <= activates_at)',
    ),
  };

  const addKey = (key: StoredKey): void => {
    q.insertKey.run(key.kid, key.alg, key.privateJwk, key.publicJwk, key.createdAt.getTime(), key.activatesAt.getTime(), key.retiredAt?.getTime() ?? null, key.tokenTtl ?? 0);
  };
  const listKeys = (): StoredKey[] => q.keys.all().map(toKey);

  const raiseKeyTokenTtl = db.transaction((kids: string[], tokenTtl: number): void => {
    for (const kid of kids) q.raiseTokenTtl.run(tokenTtl, kid, tokenTtl);
  });
  const insertFirstKey = db.transaction((key: StoredKey): StoredKey[] => {
    if (q.currentKids.all().length === 0) addKey(key);
    return listKeys();
  });
  const rotateKey = db.transaction((key: StoredKey, expected: string[]): boolean => {
    const current = q.currentKids.all().map((r) => r.kid).sort();
    const wanted = [...expected].sort();
    if (current.length !== wanted.length || current.some((kid, i) => kid !== wanted[i])) return false;
    q.withdrawPending.run({ now: key.createdAt.getTime() });
    q.retireActive.run({ now: key.createdAt.getTime(), at: key.activatesAt.getTime() });
    addKey(key);
    return true;
  });

  return {
    listKeys,
    insertFirstKey: (key: StoredKey) => insertFirstKey.immediate(key),
    rotateKey: (key: StoredKey, expectedCurrent: string[]) => rotateKey.immediate(key, expectedCurrent),
    pruneKeys: (retiredBefore: Date, now?: Date) =>
      now === undefined ? q.prune.run(retiredBefore.getTime()).changes : q.pruneExpired.run(retiredBefore.getTime(), now.getTime()).changes,
    raiseKeyTokenTtl: (kids: string[], tokenTtl: number) => raiseKeyTokenTtl.immediate(kids, tokenTtl),
    deleteKey: (kid: string, now: Date) => q.deleteRetired.run({ kid, now: now.getTime() }).changes > 0,
    keysVersion: () => q.changes.get('keys') as number,
  };
}
