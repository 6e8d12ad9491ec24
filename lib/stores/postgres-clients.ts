/**
 * The PostgreSQL store's clients: a client with its secrets (one statement,
 * one snapshot), creation, revocation, secret rotation, settings, and the
 * key sets of key-based clients. Each change is one transaction, the
 * client's row locked where it reads before it writes.
 */
import type { Pool, PoolClient } from 'pg';
import { authMethodOf, jwksOf, keySetOf, permissionsOf, sameHashes, withKeyAdded, withKeyRemoved } from './client-fields';
import { inTransaction, isUniqueViolation, toDate, toDateOrNull } from './postgres-query';
import { bumpGeneration } from './postgres-revocations';
import type { AddClientKeyResult, ClientJwks, ClientRecord, ClientSettings, ClientStore, NewClient, StoredSecret } from './types';

/** One row of the clients ⟕ client_secrets join (secret columns null for a client without secrets). */
interface ClientSecretRow {
  client_id: string;
  name: string;
  scopes: string[];
  grant_types: string[];
  created_at: Date;
  revoked_at: Date | null;
  auth_method: string;
  jwks: string | null;
  jwks_uri: string | null;
  resources: string[];
  permissions: string[];
  require_dpop: boolean;
  /** bigint: a string. */
  token_generation: string | number;
  hash: string | null;
  secret_created_at: Date | null;
  expires_at: Date | null;
}

/** Groups join rows (already ordered by client, then secret newest first) into records. */
function toClientRecords(rows: ClientSecretRow[]): ClientRecord[] {
  const records: ClientRecord[] = [];
  let current: ClientRecord | undefined;
  for (const row of rows) {
    if (current === undefined || current.clientId !== row.client_id) {
      current = {
        clientId: row.client_id,
        name: row.name,
        scopes: [...row.scopes],
        grantTypes: [...row.grant_types],
        createdAt: toDate(row.created_at),
        revokedAt: toDateOrNull(row.revoked_at),
        secrets: [],
        authMethod: authMethodOf(row.auth_method),
        jwks: jwksOf(row.jwks),
        jwksUri: row.jwks_uri,
        resources: [...row.resources],
        permissions: permissionsOf(row.permissions),
        requireDpop: row.require_dpop,
        tokenGeneration: Number(row.token_generation),
      };
      records.push(current);
    }
    if (row.hash !== null && row.secret_created_at !== null) {
      current.secrets.push({
        hash: row.hash,
        createdAt: toDate(row.secret_created_at),
        expiresAt: toDateOrNull(row.expires_at),
      });
    }
  }
  return records;
}

/** The ClientStore methods for clients on `pool`, in the schema `S` (quoted). */
export function postgresClients(
  pool: Pool,
  S: string,
): Pick<ClientStore, 'findClient' | 'createClient' | 'listClients' | 'revokeClient' | 'rotateSecret' | 'addClientKey' | 'updateClient' | 'removeClientKey'> {
  // One statement (hence one snapshot) for a client and its secrets.
  const selectClients = `
    SELECT c.client_id, c.name, c.scopes, c.grant_types, c.created_at, c.revoked_at, c.auth_method, c.jwks, c.jwks_uri,
           c.resources, c.permissions, c.require_dpop, coalesce(g.generation, 0) AS token_generation,
           s.hash, s.created_at AS secret_created_at, s.expires_at
      FROM ${S}.clients c
      LEFT JOIN ${S}.token_generations g ON g.client_id = c.client_id
      LEFT JOIN ${S}.client_secrets s ON s.client_id = c.client_id`;
  const secretOrder = 's.created_at DESC NULLS LAST, s.id DESC NULLS LAST';

  async function insertSecret(client: PoolClient, clientId: string, secret: StoredSecret): Promise<void> {
    await client.query(
      `INSERT INTO ${S}.client_secrets (client_id, hash, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
      [clientId, secret.hash, secret.createdAt, secret.expiresAt],
    );
  }

  /** A live key-based client's key set, its row locked until the transaction ends; null otherwise. */
  async function lockedKeys(tx: PoolClient, clientId: string): Promise<ClientJwks | null> {
    const { rows } = await tx.query<{ jwks: string | null }>(
      `SELECT jwks FROM ${S}.clients WHERE client_id = $1 AND revoked_at IS NULL AND auth_method = 'private_key_jwt' AND jwks_uri IS NULL FOR UPDATE`,
      [clientId],
    );
    if (rows.length === 0) return null;
    return keySetOf(rows[0].jwks);
  }

  return {
    async findClient(clientId) {
      const { rows } = await pool.query<ClientSecretRow>(
        `${selectClients} WHERE c.client_id = $1 ORDER BY ${secretOrder}`,
        [clientId],
      );
      return toClientRecords(rows)[0] ?? null;
    },

    async createClient(client: NewClient) {
      await inTransaction(pool, async (tx) => {
        try {
          await tx.query(
            `INSERT INTO ${S}.clients (client_id, name, scopes, grant_types, created_at, revoked_at, auth_method, jwks, jwks_uri, resources, permissions, require_dpop)
             VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8, $9, $10, $11)`,
            [
              client.clientId,
              client.name,
              client.scopes,
              client.grantTypes,
              client.createdAt,
              client.authMethod ?? 'client_secret',
              client.jwks ? JSON.stringify(client.jwks) : null,
              client.jwksUri ?? null,
              client.resources ?? [],
              client.permissions ?? [],
              client.requireDpop ?? false,
            ],
          );
        } catch (err) {
          if (isUniqueViolation(err)) {
            throw new Error(`client id ${JSON.stringify(client.clientId)} exists already`, { cause: err });
          }
          throw err;
        }
        if (client.secret) await insertSecret(tx, client.clientId, client.secret);
      });
    },

    async listClients() {
      const { rows } = await pool.query<ClientSecretRow>(
        `${selectClients} ORDER BY c.created_at, c.client_id, ${secretOrder}`,
      );
      return toClientRecords(rows);
    },

    async revokeClient(clientId, at) {
      return inTransaction(pool, async (tx) => {
        const revoked = await tx.query(
          `UPDATE ${S}.clients SET revoked_at = $2 WHERE client_id = $1 AND revoked_at IS NULL`,
          [clientId, at],
        );
        if (revoked.rowCount !== 1) return false;
        await tx.query(
          `UPDATE ${S}.client_secrets SET expires_at = $2
            WHERE client_id = $1 AND (expires_at IS NULL OR expires_at > $2)`,
          [clientId, at],
        );
        return true;
      });
    },

    async rotateSecret(clientId, secret, keepOldUntil, expectedSecrets) {
      // "End at once" uses the application's clock, the one tokens are checked against.
      const cap = keepOldUntil ?? secret.createdAt;
      return inTransaction(pool, async (tx) => {
        // The row lock serialises this with a concurrent revoke or rotation.
        const live = await tx.query(
          `SELECT 1 FROM ${S}.clients WHERE client_id = $1 AND revoked_at IS NULL FOR UPDATE`,
          [clientId],
        );
        if (live.rowCount !== 1) return false;
        // read under the lock: a rotation committed since the caller read is seen here, and refused
        const current = await tx.query<{ hash: string }>(`SELECT hash FROM ${S}.client_secrets WHERE client_id = $1`, [clientId]);
        if (!sameHashes(current.rows.map((r) => r.hash), expectedSecrets)) return false;
        // LEAST ignores NULL, so a never-expiring secret gets `cap`; earlier expiries stay.
        await tx.query(
          `UPDATE ${S}.client_secrets SET expires_at = LEAST(expires_at, $2::timestamptz) WHERE client_id = $1`,
          [clientId, cap],
        );
        await insertSecret(tx, clientId, secret);
        return true;
      });
    },

    async addClientKey(clientId, jwk, maxKeys): Promise<AddClientKeyResult> {
      return inTransaction(pool, async (tx) => {
        const jwks = await lockedKeys(tx, clientId);
        if (!jwks) return 'unknown_client';
        const added = withKeyAdded(jwks, jwk, maxKeys);
        if (typeof added === 'string') return added;
        await tx.query(`UPDATE ${S}.clients SET jwks = $2 WHERE client_id = $1`, [clientId, JSON.stringify(added)]);
        return 'added';
      });
    },

    async updateClient(clientId, decide, at) {
      return inTransaction(pool, async (tx) => {
        const { rows } = await tx.query<{ name: string; scopes: string[]; resources: string[]; permissions: string[]; require_dpop: boolean }>(
          `SELECT name, scopes, resources, permissions, require_dpop FROM ${S}.clients WHERE client_id = $1 AND revoked_at IS NULL FOR UPDATE`,
          [clientId],
        );
        if (rows.length === 0) return null;
        const row = rows[0];
        const before: ClientSettings = {
          name: row.name,
          scopes: [...row.scopes],
          resources: [...row.resources],
          permissions: permissionsOf(row.permissions),
          requireDpop: row.require_dpop,
        };
        const written = decide(before);
        if (!written) return { before, written, generation: null };
        const c = written.changes;
        // a NULL leaves the column as it is
        await tx.query(
          `UPDATE ${S}.clients SET name = coalesce($2, name), scopes = coalesce($3::text[], scopes), resources = coalesce($4::text[], resources),
             permissions = coalesce($5::text[], permissions), require_dpop = coalesce($6::boolean, require_dpop)
           WHERE client_id = $1`,
          [clientId, c.name ?? null, c.scopes ?? null, c.resources ?? null, c.permissions ?? null, c.requireDpop ?? null],
        );
        return { before, written, generation: written.revokeTokens ? await bumpGeneration(tx, S, clientId, at) : null };
      });
    },

    async removeClientKey(clientId, kid) {
      return inTransaction(pool, async (tx) => {
        const jwks = await lockedKeys(tx, clientId);
        const remaining = jwks && withKeyRemoved(jwks, kid);
        if (!remaining) return false;
        await tx.query(`UPDATE ${S}.clients SET jwks = $2 WHERE client_id = $1`, [clientId, JSON.stringify(remaining)]);
        return true;
      });
    },
  };
}
