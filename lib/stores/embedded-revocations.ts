/**
 * The embedded store's revocations: denylisted tokens until they expire,
 * per-client token generations, and the counter (store_changes
 * 'revocations', moved by triggers) that says whether anything changed.
 */
import type Database from 'better-sqlite3';
import type { RevocationSnapshot } from './types';

/** The RevocationStore methods on `db`, synchronous (the store wraps each one), and bumpGeneration for the store's own transactions. */
export function embeddedRevocations(db: Database.Database) {
  const q = {
    changes: db.prepare<[string], number>('SELECT n FROM store_changes WHERE name = ?').pluck(),
    revokeToken: db.prepare('INSERT INTO revoked_tokens (jti, client_id, exp) VALUES (?, ?, ?) ON CONFLICT (jti) DO UPDATE SET exp = max(exp, excluded.exp)'),
    bumpGeneration: db.prepare<[string, number], { generation: number }>(
      'INSERT INTO token_generations (client_id, generation, updated_at) VALUES (?, 1, ?) ' +
        'ON CONFLICT (client_id) DO UPDATE SET generation = generation + 1, updated_at = excluded.updated_at RETURNING generation',
    ),
    dropClientTokens: db.prepare('DELETE FROM revoked_tokens WHERE client_id = ?'),
    liveRevokedTokens: db.prepare<[number], { jti: string; client_id: string; exp: number }>('SELECT jti, client_id, exp FROM revoked_tokens WHERE exp > ?'),
    generations: db.prepare<[], { client_id: string; generation: number }>('SELECT client_id, generation FROM token_generations WHERE generation > 0'),
    revokedClients: db.prepare<[number], { client_id: string; revoked_at: number }>('SELECT client_id, revoked_at FROM clients WHERE revoked_at IS NOT NULL AND revoked_at >= ?'),
    purgeRevokedTokens: db.prepare('DELETE FROM revoked_tokens WHERE exp <= ?'),
  };

  // one read transaction: the three lists as of one moment
  const listRevocations = db.transaction((nowMs: number, revokedSinceMs: number): RevocationSnapshot => {
    const tokens = q.liveRevokedTokens.all(nowMs).map((r) => ({ jti: r.jti, client_id: r.client_id, exp: Math.floor(r.exp / 1000) }));
    const clients = new Map<string, { client_id: string; generation: number; revoked_at: number | null }>();
    for (const g of q.generations.all()) clients.set(g.client_id, { client_id: g.client_id, generation: g.generation, revoked_at: null });
    for (const r of q.revokedClients.all(revokedSinceMs)) {
      const c = clients.get(r.client_id);
      if (c) c.revoked_at = r.revoked_at;
      else clients.set(r.client_id, { client_id: r.client_id, generation: 0, revoked_at: r.revoked_at });
    }
    return { tokens, clients: [...clients.values()] };
  });

  // the client's denylisted tokens were all issued before the new generation, which refuses them: their entries go in
  // the same transaction (a token of the new generation is issued, and revoked, only once it is committed)
  const bumpGeneration = db.transaction((clientId: string, at: number): number => {
    const { generation } = q.bumpGeneration.get(clientId, at)!;
    q.dropClientTokens.run(clientId);
    return generation;
  });

  return {
    revokeToken: ({ jti, clientId, exp }: { jti: string; clientId: string; exp: Date }) => {
      q.revokeToken.run(jti, clientId, exp.getTime());
    },
    /** Raises the client's token generation by one (1 for its first), deletes its denylisted tokens, and answers it; inside the caller's transaction, if any. */
    bumpGeneration: (clientId: string, at: number): number => bumpGeneration(clientId, at),
    listRevocations: (now: Date, revokedSince: Date) => listRevocations(now.getTime(), revokedSince.getTime()),
    purgeExpiredRevocations: (now: Date) => {
      return q.purgeRevokedTokens.run(now.getTime()).changes;
    },
    // every change to a revoked token, a token generation or a client's revoked_at, by any connection
    // (this one's too), moves the counter; other writes (assertion jtis, secrets, keys) leave it
    revocationsVersion: () => q.changes.get('revocations') as number,
  };
}
