/**
 * The embedded store's used assertion jtis (private_key_jwt).
 *
 * Assertion jtis, one written per private_key_jwt token request, go to
 * disk together: the calls of one event-loop turn (the requests that
 * arrived together) wait for the check phase, then share one transaction
 * and one WAL commit, each with its own answer. Its commit does not wait
 * for the disk (WAL with synchronous NORMAL: safe against a crash of the
 * process, durable at the next FULL commit or checkpoint; a power loss may
 * forget the last jtis); everything else stays synchronous FULL. No
 * trigger counts it (store_changes), so it leaves client caches and
 * revocation lists alone, this connection's and other connections'.
 */
import type Database from 'better-sqlite3';
import { classify } from './embedded-outage';
import { TurnBatch } from './turn-batch';
import type { JtiUse } from './types';

/** Rows of one purge step (about half a millisecond of SQLite here), plus those sharing the last one's expiry. */
const JTI_PURGE_CHUNK = 1000;

/**
 * consumeJti and purgeJtis on `db` (store file `path`, for outage errors).
 * Once `isOpen()` is false they are refused; `flush()` writes the calls
 * already accepted (the store's close() calls it first).
 */
export function embeddedJtis(db: Database.Database, path: string, isOpen: () => boolean) {
  const q = {
    consumeJti: db.prepare('INSERT OR IGNORE INTO client_assertion_jtis (expires_at, client_id, jti_hash) VALUES (?, ?, ?)'),
    syncNormal: db.prepare('PRAGMA synchronous = NORMAL'),
    syncFull: db.prepare('PRAGMA synchronous = FULL'),
    // the oldest JTI_PURGE_CHUNK rows expired before @before, and the others sharing the last one's expiry
    purgeJtis: db.prepare<{ before: number }>(
      // one upper bound, so that the scan of the key stops there (with two, SQLite scanned up to @before each time)
      'DELETE FROM client_assertion_jtis WHERE expires_at < min(@before, ' +
        `coalesce((SELECT expires_at FROM client_assertion_jtis ORDER BY expires_at LIMIT 1 OFFSET ${JTI_PURGE_CHUNK - 1}) + 1, @before))`,
    ),
  };

  /** Runs `write` with synchronous NORMAL (its commit does not wait for the disk), then FULL again: the jti writes and purges. */
  const withoutWaitingForDisk = <T>(write: () => T): T => {
    q.syncNormal.run();
    try {
      return write();
    } finally {
      q.syncFull.run();
    }
  };
  const insertJtis = db.transaction((batch: JtiUse[]): boolean[] => batch.map((j) => q.consumeJti.run(j.expiresAt.getTime(), j.clientId, j.jtiHash).changes === 1));
  // consumeJti() refuses calls once closed, and close() writes the pending turn first: the store is open here
  const jtis = new TurnBatch<JtiUse, boolean>((batch) => {
    try {
      return withoutWaitingForDisk(() => insertJtis.immediate(batch));
    } catch (err) {
      throw classify(err, path);
    }
  });

  return {
    // a jti is kept only until its assertion expires (at most 300 s); written with the turn's others (TurnBatch)
    consumeJti(clientId: string, jtiHash: string, expiresAt: Date): Promise<boolean> {
      if (!isOpen()) return Promise.reject(new Error('the embedded store is closed'));
      return jtis.add({ clientId, jtiHash, expiresAt });
    },
    // in chunks, the event loop served between them: at thousands of assertions a second, one
    // DELETE of a minute's expired jtis (350,000 rows) held every request for a quarter of a second
    async purgeJtis(before: Date): Promise<number> {
      let purged = 0;
      for (;;) {
        if (!isOpen()) throw new Error('the embedded store is closed');
        let n: number;
        try {
          // as for the writes: a purge lost in a power cut is done again
          n = withoutWaitingForDisk(() => q.purgeJtis.run({ before: before.getTime() }).changes);
        } catch (err) {
          throw classify(err, path);
        }
        purged += n;
        if (n < JTI_PURGE_CHUNK) return purged;
        await new Promise((resolve) => setImmediate(resolve));
      }
    },

    flush: () => jtis.flush(),
  };
}
