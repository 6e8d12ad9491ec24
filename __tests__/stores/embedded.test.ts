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
