import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { StoreUnavailableError } from '../../lib/errors';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { revocationStoreContract } from '../core/revocation-store-contract';
import { describeStoreContract } from './contract';

// One temp dir for the suite; each test opens a fresh store in a new sub-directory.
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-embedded-'));
let counter = 0;

afterAll(() => {
  fs.rmSync(root, { recursive: true, force: true });
});

/** A new, empty data directory under the suite's temp dir. */
function freshDir(name: string): string {
  const dataDir = path.join(root, name);
  fs.mkdirSync(dataDir);
  return dataDir;
}

describeStoreContract('embedded', async () => {
  const dataDir = freshDir(`store-${++counter}`);
  const store = await openEmbeddedStore({ dataDir });
  return {
    store,
    cleanup: async () => {
      await store.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
});

revocationStoreContract('embedded', async () => {
  const dataDir = freshDir(`revocations-${++counter}`);
  const store = await openEmbeddedStore({ dataDir });
  return {
    store,
    async revokeClient(clientId, at) {
      // listRevocations reads revoked clients from the clients table: the client must exist
      await store.createClient({ clientId, name: clientId, scopes: [], grantTypes: ['client_credentials'], createdAt: new Date(at.getTime() - 1000), secret: null });
      await store.revokeClient(clientId, at);
    },
    close: () => store.close(),
  };
});

describe('embedded store: revocations survive a restart', () => {
  it('reopening the file gives the same denylist and generations', async () => {
    const dataDir = freshDir('revocations-restart');
    const exp = new Date(Date.now() + 600_000);
    const first = await openEmbeddedStore({ dataDir });
    await first.revokeToken({ jti: 'j1', clientId: 'c1', exp });
    expect(await first.bumpTokenGeneration('c2', new Date())).toBe(1);
    await first.close();
    const second = await openEmbeddedStore({ dataDir });
    try {
      const snapshot = await second.listRevocations(new Date(), new Date(Date.now() - 3_600_000));
      expect(snapshot).toEqual({ tokens: [{ jti: 'j1', client_id: 'c1', exp: Math.floor(exp.getTime() / 1000) }], clients: [{ client_id: 'c2', generation: 1, revoked_at: null }] });
      expect(await second.bumpTokenGeneration('c2', new Date())).toBe(2);
    } finally {
      await second.close();
    }
  });
});

describe('embedded store shared by two connections (server and CLI)', () => {
  it('sees the other connection’s writes on the next lookup, though it keeps found clients in memory', async () => {
    const dataDir = freshDir('shared');
    const server = await openEmbeddedStore({ dataDir });
    const cli = await openEmbeddedStore({ dataDir });
    try {
      const now = new Date('2030-01-01T00:00:00Z');
      const secret = { hash: 'h1', createdAt: now, expiresAt: null };
      await cli.createClient({ clientId: 'c', name: 'c', scopes: ['a'], grantTypes: ['client_credentials'], createdAt: now, secret });
      expect((await server.findClient('c'))!.revokedAt).toBeNull();
      expect((await server.findClient('c'))!.secrets.map((s) => s.hash)).toEqual(['h1']);

      const later = new Date('2030-01-01T00:01:00Z');
      await cli.rotateSecret('c', { hash: 'h2', createdAt: later, expiresAt: null }, null, ['h1']);
      expect((await server.findClient('c'))!.secrets.map((s) => s.hash)).toEqual(['h2', 'h1']);

      await cli.revokeClient('c', later);
      expect((await server.findClient('c'))!.revokedAt).toEqual(later);

      // and its own writes too
      await server.createClient({ clientId: 'd', name: 'd', scopes: [], grantTypes: ['client_credentials'], createdAt: now, secret });
      expect(await server.findClient('d')).not.toBeNull();
      await server.revokeClient('d', later);
      expect((await server.findClient('d'))!.revokedAt).toEqual(later);
    } finally {
      await server.close();
      await cli.close();
    }
  });
});

describe('embedded store shared by cluster workers: what moves the others’ caches', () => {

  it('another connection’s assertion jtis neither reload its revocations nor re-read its clients; revocations and client writes do', async () => {
    const dataDir = freshDir('cluster');
    const worker1 = await openEmbeddedStore({ dataDir });
    const worker2 = await openEmbeddedStore({ dataDir });
    // an operator's own SQL, on a connection of its own
    const sql = new Database(path.join(dataDir, 'store.sqlite'));
    try {
      const revocationsVersion = () => worker2.revocationsVersion!();
      const now = new Date();
      await worker1.createClient({ clientId: 'c', name: 'c', scopes: ['a'], grantTypes: ['client_credentials'], createdAt: now, secret: null });
      expect((await worker2.findClient('c'))!.name).toBe('c');
      const version = await revocationsVersion();

      // a change worker2 could only see by reading the row again: made without the triggers that count it
      const trigger = sql.prepare("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'clients_update_changes'").pluck().get() as string;
      sql.exec("DROP TRIGGER clients_update_changes; UPDATE clients SET name = 'renamed' WHERE client_id = 'c'");
      sql.exec(trigger);
      for (let i = 0; i < 5; i++) expect(await worker1.consumeJti('c', `jti-${i}`, new Date(Date.now() + 60_000))).toBe(true);
      expect(await revocationsVersion()).toBe(version);
      expect((await worker2.findClient('c'))!.name).toBe('c'); // still the record found before

      // counted changes, by any connection, reach it
      await worker1.revokeToken({ jti: 'j1', clientId: 'c', exp: new Date(Date.now() + 60_000) });
      const afterToken = await revocationsVersion();
      expect(afterToken).not.toBe(version);
      await worker1.bumpTokenGeneration('c', new Date());
      const afterGeneration = await revocationsVersion();
      expect(afterGeneration).not.toBe(afterToken);
      sql.exec(`UPDATE clients SET revoked_at = ${Date.now()} WHERE client_id = 'c'`);
      expect(await revocationsVersion()).not.toBe(afterGeneration);
      expect(await worker2.findClient('c')).toMatchObject({ name: 'renamed', revokedAt: expect.any(Date) });
      sql.exec("INSERT INTO client_secrets (client_id, hash, created_at, expires_at) VALUES ('c', 'h9', 1, NULL)");
      expect((await worker2.findClient('c'))!.secrets.map((s) => s.hash)).toEqual(['h9']);
    } finally {
      sql.close();
      await worker1.close();
      await worker2.close();
    }
  });
});

describe('embedded store: the key version running issuers read', () => {
  it('moves with every key written by any connection (insert, rotation, a lifetime raised, delete), not with client or jti writes', async () => {
    const dataDir = freshDir('keys-version');
    const cli = await openEmbeddedStore({ dataDir });
    const server = await openEmbeddedStore({ dataDir });
    try {
      const version = () => server.keysVersion!();
      const at = new Date();
      const v0 = await version();
      const key = (kid: string, activatesAt = at) => ({ kid, alg: 'ES256', privateJwk: '{}', publicJwk: '{}', createdAt: at, activatesAt, retiredAt: null });
      await cli.insertFirstKey(key('k1'));
      const v1 = await version();
      expect(v1).not.toBe(v0);
      await cli.createClient({ clientId: 'c', name: 'c', scopes: [], grantTypes: ['client_credentials'], createdAt: at, secret: null });
      expect(await cli.consumeJti('c', 'j', new Date(Date.now() + 60_000))).toBe(true);
      expect(await version()).toBe(v1);
      expect(await cli.rotateKey(key('k2'), ['k1'])).toBe(true);
      const v2 = await version();
      expect(v2).not.toBe(v1);
      await cli.raiseKeyTokenTtl!(['k2'], 7200);
      const v3 = await version();
      expect(v3).not.toBe(v2);
      expect(await cli.deleteKey!('k1', new Date(Date.now() + 1))).toBe(true);
      expect(await version()).not.toBe(v3);
      expect((await server.listKeys()).map((k) => k.kid)).toEqual(['k2']);
    } finally {
      await cli.close();
      await server.close();
    }
  });
});

describe('embedded store migration', () => {
  it('migrates a version-1 database: existing clients become client_secret clients without keys', async () => {
    const dataDir = freshDir('v1');
    const db = new Database(path.join(dataDir, 'store.sqlite'));
    db.exec(`CREATE TABLE clients (client_id TEXT PRIMARY KEY, name TEXT NOT NULL, scopes TEXT NOT NULL, grant_types TEXT NOT NULL,
               created_at INTEGER NOT NULL, revoked_at INTEGER);
             CREATE TABLE client_secrets (id INTEGER PRIMARY KEY AUTOINCREMENT, client_id TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
               hash TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER);
             CREATE INDEX client_secrets_client ON client_secrets(client_id);
             CREATE TABLE signing_keys (kid TEXT PRIMARY KEY, alg TEXT NOT NULL, private_jwk TEXT NOT NULL, public_jwk TEXT NOT NULL,
               created_at INTEGER NOT NULL, activates_at INTEGER NOT NULL, retired_at INTEGER);
             INSERT INTO clients VALUES ('old', 'Old', 'a', 'client_credentials', 1, NULL);
             INSERT INTO client_secrets (client_id, hash, created_at, expires_at) VALUES ('old', 'h', 1, NULL);
             PRAGMA user_version = 1;`);
    db.close();
    const store = await openEmbeddedStore({ dataDir });
    try {
      expect(await store.findClient('old')).toMatchObject({ clientId: 'old', authMethod: 'client_secret', jwks: null, jwksUri: null, secrets: [{ hash: 'h' }] });
      expect(await store.consumeJti('old', 'h', new Date(Date.now() + 60_000))).toBe(true);
    } finally {
      await store.close();
    }
  });
});

describe('embedded store migration from development versions', () => {
  /** A version-1 database as above, with one signing key whose token lifetime no version recorded. */
  function v1Database(dataDir: string, extra = ''): void {
    const db = new Database(path.join(dataDir, 'store.sqlite'));
    db.exec(`CREATE TABLE clients (client_id TEXT PRIMARY KEY, name TEXT NOT NULL, scopes TEXT NOT NULL, grant_types TEXT NOT NULL,
               created_at INTEGER NOT NULL, revoked_at INTEGER);
             CREATE TABLE client_secrets (id INTEGER PRIMARY KEY AUTOINCREMENT, client_id TEXT NOT NULL REFERENCES clients(client_id) ON DELETE CASCADE,
               hash TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER);
             CREATE TABLE signing_keys (kid TEXT PRIMARY KEY, alg TEXT NOT NULL, private_jwk TEXT NOT NULL, public_jwk TEXT NOT NULL,
               created_at INTEGER NOT NULL, activates_at INTEGER NOT NULL, retired_at INTEGER);
             INSERT INTO clients VALUES ('old', 'Old', 'a', 'client_credentials', 1, NULL);
             INSERT INTO client_secrets (client_id, hash, created_at, expires_at) VALUES ('old', 'h', 1, NULL);
             INSERT INTO signing_keys VALUES ('k1', 'ES256', '{}', '{}', 1, 1, 2);
             ${extra}`);
    db.close();
  }

  it('opens a version-2 database whose migration 2 already added jwks_uri (a development version did), keeping its clients', async () => {
    const dataDir = freshDir('v2-jwks-uri');
    v1Database(
      dataDir,
      `ALTER TABLE clients ADD COLUMN auth_method TEXT NOT NULL DEFAULT 'client_secret';
       ALTER TABLE clients ADD COLUMN jwks TEXT;
       ALTER TABLE clients ADD COLUMN jwks_uri TEXT;
       CREATE TABLE client_assertion_jtis (client_id TEXT NOT NULL, jti_hash TEXT NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY (client_id, jti_hash)) WITHOUT ROWID;
       CREATE INDEX client_assertion_jtis_expiry ON client_assertion_jtis(expires_at);
       INSERT INTO clients (client_id, name, scopes, grant_types, created_at, auth_method, jwks_uri) VALUES ('byuri', 'U', 'a', 'client_credentials', 1, 'private_key_jwt', 'https://keys.test/jwks');
       PRAGMA user_version = 2;`,
    );
    const store = await openEmbeddedStore({ dataDir });
    try {
      expect(await store.findClient('old')).toMatchObject({ clientId: 'old', authMethod: 'client_secret', secrets: [{ hash: 'h' }] });
      expect(await store.findClient('byuri')).toMatchObject({ authMethod: 'private_key_jwt', jwksUri: 'https://keys.test/jwks' });
    } finally {
      await store.close();
    }
  });

  it('records the longest token lifetime there can be on keys written before lifetimes were recorded', async () => {
    const dataDir = freshDir('v8-token-ttl');
    v1Database(dataDir, 'PRAGMA user_version = 1;');
    const store = await openEmbeddedStore({ dataDir });
    try {
      expect(await store.listKeys()).toEqual([expect.objectContaining({ kid: 'k1', tokenTtl: 86_700 })]);
      // retired long ago by the clock, but a token it signed may live 86,700 s from then: a prune by "now" keeps it until that
      expect(await store.pruneKeys(new Date(), new Date(2 + 86_699_000))).toBe(0);
      expect(await store.pruneKeys(new Date(), new Date(2 + 86_701_000))).toBe(1);
    } finally {
      await store.close();
    }
  });
});

describe('embedded store: assertion jtis', () => {
  const until = () => new Date(Date.now() + 60_000);

  it('answers each of the calls made in one turn on its own, and another connection sees them at once', async () => {
    const dataDir = path.join(root, 'jti-batch');
    const a = await openEmbeddedStore({ dataDir });
    const b = await openEmbeddedStore({ dataDir });
    try {
      const at = until();
      const answers = await Promise.all([
        a.consumeJti('c1', 'h1', at),
        a.consumeJti('c1', 'h2', at),
        a.consumeJti('c1', 'h1', at), // the same assertion twice in one turn: the second is a replay
        a.consumeJti('c2', 'h1', at),
      ]);
      expect(answers).toEqual([true, true, false, true]);
      // another process on the same file: every one of them is a replay there
      expect(await Promise.all([b.consumeJti('c1', 'h1', at), b.consumeJti('c1', 'h2', at), b.consumeJti('c2', 'h1', at)])).toEqual([false, false, false]);
      expect(await b.consumeJti('c1', 'h3', at)).toBe(true);
      expect(await a.consumeJti('c1', 'h3', at)).toBe(false);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('writes the jtis of a pending turn before closing, and refuses calls once closed', async () => {
    const dataDir = path.join(root, 'jti-close');
    const store = await openEmbeddedStore({ dataDir });
    const at = until();
    const pending = store.consumeJti('c1', 'h1', at);
    await store.close();
    await expect(pending).resolves.toBe(true);
    await expect(store.consumeJti('c1', 'h2', at)).rejects.toThrow('closed');
    const reopened = await openEmbeddedStore({ dataDir });
    try {
      expect(await reopened.consumeJti('c1', 'h1', at)).toBe(false);
    } finally {
      await reopened.close();
    }
  });

  it('rejects every call of a turn with StoreUnavailableError when the file stays locked, records none, and works once the lock is gone', async () => {
    const dataDir = path.join(root, 'jti-locked');
    const store = await openEmbeddedStore({ dataDir });
    const other = new Database(path.join(dataDir, 'store.sqlite'));
    try {
      const at = until();
      other.exec('BEGIN IMMEDIATE'); // another writer holds the lock past busy_timeout (5 s)
      const results = await Promise.allSettled([store.consumeJti('c1', 'h1', at), store.consumeJti('c1', 'h2', at)]);
      for (const r of results) {
        expect(r.status).toBe('rejected');
        expect((r as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
      }
      other.exec('ROLLBACK');
      expect(await Promise.all([store.consumeJti('c1', 'h1', at), store.consumeJti('c1', 'h2', at)])).toEqual([true, true]);
    } finally {
      other.close();
      await store.close();
    }
  }, 15_000);

  it('purges a large backlog in steps, answering other calls between them, and only what expired', async () => {
    const dataDir = path.join(root, 'jti-purge');
    const store = await openEmbeddedStore({ dataDir });
    try {
      const now = Date.now();
      // 5,000 expired over 50 distinct seconds (100 share each expiry), and 10 live
      const expired = Array.from({ length: 5_000 }, (_, i) => store.consumeJti('c1', `old-${i}`, new Date(now - 60_000 + Math.floor(i / 100) * 1000)));
      const live = Array.from({ length: 10 }, (_, i) => store.consumeJti('c1', `live-${i}`, new Date(now + 60_000)));
      expect(new Set(await Promise.all([...expired, ...live]))).toEqual(new Set([true]));
      const order: string[] = [];
      const purge = store.purgeJtis(new Date(now)).then((n) => {
        order.push('purge');
        return n;
      });
      const during = store.consumeJti('c2', 'during', new Date(now + 60_000)).then((first) => {
        order.push('jti');
        return first;
      });
      expect(await Promise.all([purge, during])).toEqual([5_000, true]);
      expect(order).toEqual(['jti', 'purge']); // answered while the purge was under way
      expect(await store.consumeJti('c1', 'live-3', new Date(now + 60_000))).toBe(false);
      expect(await store.consumeJti('c1', 'old-7', new Date(now - 60_000))).toBe(true); // gone: recorded anew
      expect(await store.purgeJtis(new Date(now))).toBe(1);
    } finally {
      await store.close();
    }
  });

  it('migrates a version-4 database: jtis used before stay used, and expired ones are purged', async () => {
    const dataDir = path.join(root, 'jti-v4');
    await (await openEmbeddedStore({ dataDir })).close();
    // the jti table as version 4 had it, one live and one expired entry in it
    const db = new Database(path.join(dataDir, 'store.sqlite'));
    const live = Date.now() + 60_000;
    const triggers = db.prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'").pluck().all() as string[];
    db.exec(`${triggers.map((name) => `DROP TRIGGER ${name};`).join(' ')}
             DROP TABLE store_changes;
             ALTER TABLE signing_keys DROP COLUMN token_ttl;
             DROP TABLE client_assertion_jtis;
             CREATE TABLE client_assertion_jtis (client_id TEXT NOT NULL, jti_hash TEXT NOT NULL, expires_at INTEGER NOT NULL,
               PRIMARY KEY (client_id, jti_hash)) WITHOUT ROWID;
             CREATE INDEX client_assertion_jtis_expiry ON client_assertion_jtis(expires_at);
             INSERT INTO client_assertion_jtis VALUES ('c1', 'used', ${live}), ('c1', 'gone', 1000);
             PRAGMA user_version = 4;`);
    db.close();
    const store = await openEmbeddedStore({ dataDir });
    try {
      expect(await store.consumeJti('c1', 'used', new Date(live))).toBe(false);
      expect(await store.purgeJtis(new Date())).toBe(1);
      expect(await store.consumeJti('c1', 'fresh', new Date(live))).toBe(true);
    } finally {
      await store.close();
    }
    const check = new Database(path.join(dataDir, 'store.sqlite'), { readonly: true });
    try {
      expect(check.pragma('user_version', { simple: true })).toBe(10);
      expect(check.prepare("SELECT name FROM sqlite_master WHERE tbl_name = 'client_assertion_jtis' ORDER BY name").pluck().all()).toEqual(['client_assertion_jtis']);
    } finally {
      check.close();
    }
  });
});
