import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openEmbeddedStore } from '../../lib/stores/embedded';
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
