/**
 * The embedded store (SQLite through better-sqlite3, one file under
 * `dataDir`). This file opens it (folder, file mode, pragmas, migrations)
 * and composes its parts, one file each: embedded-schema.ts (migrations,
 * column decoding), embedded-clients.ts (with the client cache),
 * embedded-keys.ts, embedded-revocations.ts, embedded-jtis.ts;
 * embedded-outage.ts turns outages into StoreUnavailableError.
 */
import { chmodSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { embeddedClients } from './embedded-clients';
import { embeddedJtis } from './embedded-jtis';
import { embeddedKeys } from './embedded-keys';
import { classify } from './embedded-outage';
import { embeddedRevocations } from './embedded-revocations';
import { migrate } from './embedded-schema';
import type { Store } from './types';

export { isSqliteUnavailable } from './embedded-outage';

/**
 * The default store: one SQLite database (`store.sqlite`) under `dataDir`,
 * through better-sqlite3. WAL mode lets the server read while the CLI writes;
 * every write is a transaction and is on disk when the call returns.
 */
export interface EmbeddedStore extends Store {
  readonly kind: 'embedded';
  readonly path: string;
}

/**
 * mkdir -p with mode 0700, one level at a time: Node 20's recursive
 * mkdirSync loops forever where a folder cannot be made though its parent
 * exists (ENOENT under /proc, say); here that is one error.
 */
function makeDir(dir: string): void {
  try {
    mkdirSync(dir, { mode: 0o700 });
    return;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return;
    if (code !== 'ENOENT' || dirname(dir) === dir) throw err;
  }
  makeDir(dirname(dir));
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

export async function openEmbeddedStore(options: { dataDir: string }): Promise<EmbeddedStore> {
  const dir = resolve(options.dataDir);
  const path = join(dir, 'store.sqlite');
  let db: Database.Database | undefined;
  try {
    makeDir(dir);
    db = new Database(path);
    chmodSync(path, 0o600);
    db.pragma('busy_timeout = 5000');
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.pragma('foreign_keys = ON');
    migrate(db);
  } catch (err) {
    db?.close();
    throw classify(err, path);
  }
  return embeddedStore(db, path);
}

function embeddedStore(db: Database.Database, path: string): EmbeddedStore {
  let open = true;
  const keys = embeddedKeys(db);
  const revocations = embeddedRevocations(db);
  const clients = embeddedClients(db, revocations.bumpGeneration);
  const jtis = embeddedJtis(db, path, () => open);

  /** A store method: refused once closed; SQLite's outage errors become StoreUnavailableError. */
  const io =
    <A extends unknown[], R>(fn: (...args: A) => R) =>
    async (...args: A): Promise<R> => {
      if (!open) throw new Error('the embedded store is closed');
      try {
        return fn(...args);
      } catch (err) {
        throw classify(err, path);
      }
    };
  const ping = db.prepare('SELECT count(*) FROM signing_keys').pluck();

  return {
    kind: 'embedded',
    cachesClients: true,
    path,
    // written out rather than through io(): the token endpoint's hot path, no rest-argument array
    async findClient(clientId: string) {
      if (!open) throw new Error('the embedded store is closed');
      try {
        return clients.findClient(clientId);
      } catch (err) {
        throw classify(err, path);
      }
    },
    createClient: io(clients.createClient),
    listClients: io(clients.listClients),
    revokeClient: io(clients.revokeClient),
    rotateSecret: io(clients.rotateSecret),
    addClientKey: io(clients.addClientKey),
    removeClientKey: io(clients.removeClientKey),
    updateClient: io(clients.updateClient),
    consumeJti: jtis.consumeJti,
    purgeJtis: jtis.purgeJtis,
    listKeys: io(keys.listKeys),
    insertFirstKey: io(keys.insertFirstKey),
    rotateKey: io(keys.rotateKey),
    pruneKeys: io(keys.pruneKeys),
    raiseKeyTokenTtl: io(keys.raiseKeyTokenTtl),
    deleteKey: io(keys.deleteKey),
    keysVersion: io(keys.keysVersion),
    ping: io((): void => {
      ping.get();
    }),
    revokeToken: io(revocations.revokeToken),
    // found clients carry their generation: this connection's cache goes too (the trigger tells the others)
    bumpTokenGeneration: io((clientId: string, at: Date) => clients.wrote(() => revocations.bumpGeneration(clientId, at.getTime()))()),
    listRevocations: io(revocations.listRevocations),
    purgeExpiredRevocations: io(revocations.purgeExpiredRevocations),
    revocationsVersion: io(revocations.revocationsVersion),
    async close() {
      if (!open) return;
      // jtis already accepted by this store are written before it closes (the write runs at once, inside flush())
      const flushed = jtis.flush();
      open = false;
      await flushed;
      db.close();
    },
  };
}
