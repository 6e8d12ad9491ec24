import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import { revocationStoreContract } from '../core/revocation-store-contract';
import { describeStoreContract } from './contract';

// One temp dir for the suite; each test opens a fresh store in a new sub-directory.
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-embedded-'));
let counter = 0;

afterAll(() => {
  fs.rmSync(root, { recursive: true, force: true });
});

describeStoreContract('embedded', async () => {
  const dataDir = path.join(root, `store-${++counter}`);
  fs.mkdirSync(dataDir);
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
  const dataDir = path.join(root, `revocations-${++counter}`);
  fs.mkdirSync(dataDir);
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
    const dataDir = path.join(root, 'revocations-restart');
    fs.mkdirSync(dataDir);
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
    const dataDir = path.join(root, 'shared');
    fs.mkdirSync(dataDir);
    const server = await openEmbeddedStore({ dataDir });
    const cli = await openEmbeddedStore({ dataDir });
    try {
      const now = new Date('2030-01-01T00:00:00Z');
      const secret = { hash: 'h1', createdAt: now, expiresAt: null };
      await cli.createClient({ clientId: 'c', name: 'c', scopes: ['a'], grantTypes: ['client_credentials'], createdAt: now, secret });
      expect((await server.findClient('c'))!.revokedAt).toBeNull();
      expect((await server.findClient('c'))!.secrets.map((s) => s.hash)).toEqual(['h1']);

      const later = new Date('2030-01-01T00:01:00Z');
      await cli.rotateSecret('c', { hash: 'h2', createdAt: later, expiresAt: null }, null);
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

describe('embedded store migration', () => {
  it('migrates a version-1 database: existing clients become client_secret clients without keys', async () => {
    const dataDir = path.join(root, 'v1');
    fs.mkdirSync(dataDir);
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const Database = require('better-sqlite3') as typeof import('better-sqlite3');
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
