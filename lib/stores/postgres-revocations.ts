/**
 * The PostgreSQL store's revocations: denylisted tokens until they expire,
 * per-client token generations, the revision counter the triggers move
 * (postgres-schema.ts, version 5), and the LISTEN/NOTIFY channel on which
 * instances tell each other to reload at once.
 */
import { Client, type ClientConfig, type Pool, type PoolClient } from 'pg';
import { inTransaction, toDate } from './postgres-query';
import type { RevocationNotifier, RevocationStore } from './types';

/** Raises the client's token generation by one (1 for its first) and answers it; on the pool or inside a transaction (`S`: the quoted schema). */
export async function bumpGeneration(db: Pool | PoolClient, S: string, clientId: string, at: Date): Promise<number> {
  // one statement: the client's denylisted tokens were all issued before the new generation, which refuses them, so
  // their entries go with the raise (a token of the new generation is issued, and revoked, only once it is committed)
  const { rows } = await db.query<{ generation: string }>(
    `WITH raised AS (
       INSERT INTO ${S}.token_generations (client_id, generation, updated_at) VALUES ($1, 1, $2)
       ON CONFLICT (client_id) DO UPDATE SET generation = ${S}.token_generations.generation + 1, updated_at = EXCLUDED.updated_at
       RETURNING generation
     ), dropped AS (DELETE FROM ${S}.revoked_tokens WHERE client_id = $1)
     SELECT generation FROM raised`,
    [clientId, at],
  );
  return Number(rows[0].generation);
}

export interface RevocationListenOptions {
  /** How each LISTEN connection (one of its own, not from the pool) connects. */
  clientConfig: ClientConfig;
  /** How often a LISTEN connection checks that it still reaches the database, in ms. */
  listenCheckMillis: number;
}

/**
 * The revocation methods on `pool`, in `schema` (`S`: quoted), with
 * `stopListening()` for the store's close(): it ends every LISTEN connection.
 */
export function postgresRevocations(
  pool: Pool,
  schema: string,
  S: string,
  { clientConfig, listenCheckMillis }: RevocationListenOptions,
): { methods: Required<RevocationStore> & RevocationNotifier; stopListening(): Promise<void> } {
  const channel = `ecc_rev_${schema}`.slice(0, 63);
  const listeners = new Set<() => Promise<void>>();

  return {
    methods: {
      async revokeToken({ jti, clientId, exp }) {
        await pool.query(
          `INSERT INTO ${S}.revoked_tokens (jti, client_id, exp) VALUES ($1, $2, $3)
           ON CONFLICT (jti) DO UPDATE SET exp = GREATEST(${S}.revoked_tokens.exp, EXCLUDED.exp)`,
          [jti, clientId, exp],
        );
      },

      bumpTokenGeneration(clientId, at) {
        return bumpGeneration(pool, S, clientId, at);
      },

      async listRevocations(now, revokedSince) {
        // one statement per list, in one read-only transaction: a consistent snapshot
        return inTransaction(pool, async (tx) => {
          await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY');
          const tokens = await tx.query<{ jti: string; client_id: string; exp: Date | string }>(
            `SELECT jti, client_id, exp FROM ${S}.revoked_tokens WHERE exp > $1`,
            [now],
          );
          const clients = await tx.query<{ client_id: string; generation: string | null; revoked_at: Date | string | null }>(
            `SELECT COALESCE(g.client_id, c.client_id) AS client_id, g.generation, c.revoked_at
               FROM (SELECT client_id, generation FROM ${S}.token_generations WHERE generation > 0) g
               FULL JOIN (SELECT client_id, revoked_at FROM ${S}.clients WHERE revoked_at IS NOT NULL AND revoked_at >= $1) c
                 ON c.client_id = g.client_id`,
            [revokedSince],
          );
          return {
            tokens: tokens.rows.map((r) => ({ jti: r.jti, client_id: r.client_id, exp: Math.floor(toDate(r.exp).getTime() / 1000) })),
            clients: clients.rows.map((r) => ({
              client_id: r.client_id,
              generation: r.generation === null ? 0 : Number(r.generation),
              revoked_at: r.revoked_at === null ? null : toDate(r.revoked_at).getTime(),
            })),
          };
        });
      },

      async revocationsVersion() {
        const { rows } = await pool.query<{ revision: string }>(`SELECT revision FROM ${S}.revocations_revision`);
        return rows[0]?.revision ?? '';
      },

      async purgeExpiredRevocations(now) {
        const result = await pool.query(`DELETE FROM ${S}.revoked_tokens WHERE exp <= $1`, [now]);
        return result.rowCount ?? 0;
      },

      async notifyRevocations() {
        await pool.query('SELECT pg_notify($1, $2)', [channel, '']);
      },

      /**
       * LISTEN on a connection of its own (not from the pool). When it is
       * lost, it is replaced after a second, and `onNotify` runs once the new
       * one listens, since notifications sent meanwhile are gone. Resolves
       * once listening or after the first failed attempt: the caller reloads
       * on a timer as well, so a database that is down now delays nothing.
       */
      async listenRevocations(onNotify) {
        let stopped = false;
        let current: Client | undefined;
        let retry: NodeJS.Timeout | undefined;
        let everListened = false;
        const listen = async (): Promise<void> => {
          if (stopped) return;
          const c = new Client({ ...clientConfig, keepAlive: true });
          let lost = false;
          let check: NodeJS.Timeout | undefined;
          const onLost = (): void => {
            if (lost) return;
            lost = true;
            clearInterval(check);
            if (current === c) current = undefined;
            c.end().catch(() => undefined);
            if (!stopped) {
              retry = setTimeout(() => void listen(), 1000);
              retry.unref();
            }
          };
          c.on('error', onLost);
          c.on('end', onLost);
          c.on('notification', (msg) => {
            if (msg.channel === channel) onNotify();
          });
          try {
            await c.connect();
            await c.query(`LISTEN "${channel}"`);
          } catch {
            onLost();
            return;
          }
          if (stopped) {
            await c.end().catch(() => undefined);
            return;
          }
          current = c;
          // an idle LISTEN connection hears nothing when the network drops it: ask now and then
          check = setInterval(() => void c.query('SELECT 1').catch(onLost), listenCheckMillis);
          check.unref();
          if (everListened) onNotify(); // catch up on what was sent while no connection listened
          everListened = true;
        };
        await listen();
        const stop = async (): Promise<void> => {
          stopped = true;
          clearTimeout(retry);
          listeners.delete(stop);
          const c = current;
          current = undefined;
          await c?.end().catch(() => undefined);
        };
        listeners.add(stop);
        return stop;
      },
    },

    async stopListening() {
      await Promise.all([...listeners].map((stop) => stop()));
    },
  };
}
