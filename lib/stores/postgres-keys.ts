/**
 * The PostgreSQL store's signing keys: listing, the first key, rotation,
 * pruning. Key-set changes are serialised by an advisory lock, so two
 * instances never race to two active keys.
 */
import type { Pool, PoolClient } from 'pg';
import { inTransaction, toDate, toDateOrNull } from './postgres-query';
import type { KeyStore, StoredKey } from './types';

/** Advisory-lock key (a bigint, passed as text) that serialises key-set changes; distinct from MIGRATION_LOCK (postgres-schema.ts), which serialises migrations. */
const KEY_LOCK = '7310293881530437002';

interface KeyRow {
  kid: string;
  alg: string;
  private_jwk: string;
  public_jwk: string;
  created_at: Date;
  activates_at: Date;
  retired_at: Date | null;
  token_ttl: number;
}

function toStoredKey(row: KeyRow): StoredKey {
  return {
      kid: row.kid,
      alg: row.alg,
      privateJwk: row.private_jwk,
      publicJwk: row.public_jwk,
      createdAt: toDate(row.created_at),
      activatesAt: toDate(row.activates_at),
      retiredAt: toDateOrNull(row.retired_at),
      tokenTtl: Number(row.token_ttl),
    };
  }

  /** The KeyStore methods on `pool`, in the schema `S` (quoted). */
  export function postgresKeys(pool: Pool, S: string): Pick<KeyStore, 'listKeys' | 'insertFirstKey' | 'rotateKey' | 'pruneKeys' | 'raiseKeyTokenTtl' | 'deleteKey'> {
    const selectKeys = `
      SELECT kid, alg, private_jwk, public_jwk, created_at, activates_at, retired_at, token_ttl
        FROM ${S}.signing_keys
       ORDER BY created_at, activates_at, kid`;

    async function insertKey(client: PoolClient, key: StoredKey): Promise<void> {
      await client.query(
        `INSERT INTO ${S}.signing_keys (kid, alg, private_jwk, public_jwk, created_at, activates_at, retired_at, token_ttl)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
        [key.kid, key.alg, key.privateJwk, key.publicJwk, key.createdAt, key.activatesAt, key.retiredAt, key.tokenTtl ?? 0],
      );
    }

    return {
    async listKeys() {
      const { rows } = await pool.query<KeyRow>(selectKeys);
      return rows.map(toStoredKey);
    },

    async insertFirstKey(key) {
      return inTransaction(pool, async (tx) => {
        await tx.query('SELECT pg_advisory_xact_lock($1::bigint)', [KEY_LOCK]);
        const current = await tx.query(`SELECT 1 FROM ${S}.signing_keys WHERE retired_at IS NULL LIMIT 1`);
        if (current.rowCount === 0) await insertKey(tx, key);
        const { rows } = await tx.query<KeyRow>(selectKeys);
        return rows.map(toStoredKey);
      });
    },

    async rotateKey(key, expectedCurrent) {
      return inTransaction(pool, async (tx) => {
        await tx.query('SELECT pg_advisory_xact_lock($1::bigint)', [KEY_LOCK]);
        const { rows } = await tx.query<{ kid: string }>(
          `SELECT kid FROM ${S}.signing_keys WHERE retired_at IS NULL`,
        );
        const actual = new Set(rows.map((r) => r.kid));
        const expected = new Set(expectedCurrent);
        const same = actual.size === expected.size && [...expected].every((kid) => actual.has(kid));
        if (!same) return false;
        // as of key.createdAt: a pending key is withdrawn (retires as it would activate), the active ones sign until the new key does
        await tx.query(
          `UPDATE ${S}.signing_keys SET retired_at = activates_at WHERE activates_at > $1 AND (retired_at IS NULL OR retired_at > $1)`,
          [key.createdAt],
        );
        await tx.query(
          `UPDATE ${S}.signing_keys SET retired_at = $2 WHERE activates_at <= $1 AND (retired_at IS NULL OR retired_at > $1)`,
          [key.createdAt, key.activatesAt],
        );
        await insertKey(tx, key);
        return true;
      });
    },

    async pruneKeys(retiredBefore, now) {
      const result =
        now === undefined
          ? await pool.query(`DELETE FROM ${S}.signing_keys WHERE retired_at < $1`, [retiredBefore])
          : await pool.query(`DELETE FROM ${S}.signing_keys WHERE retired_at < $1 AND retired_at + token_ttl * interval '1 second' < $2`, [retiredBefore, now]);
      return result.rowCount ?? 0;
    },

    async raiseKeyTokenTtl(kids, tokenTtl) {
      if (kids.length === 0) return;
      await pool.query(`UPDATE ${S}.signing_keys SET token_ttl = $2 WHERE kid = ANY($1) AND token_ttl < $2`, [kids, tokenTtl]);
    },

    async deleteKey(kid, now) {
      // only a key that signs no more: retired by now, or withdrawn (retired as it would activate)
      const result = await pool.query(
        `DELETE FROM ${S}.signing_keys WHERE kid = $1 AND retired_at IS NOT NULL AND (retired_at <= $2 OR retired_at <= activates_at)`,
        [kid, now],
      );
      return (result.rowCount ?? 0) > 0;
    },
  };
}
