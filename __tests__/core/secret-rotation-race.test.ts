/**
 * `issuer.clients.rotateSecret()` from two places at once (two instances'
 * admin routes, or one and the CLI): the rotation holds only on the secrets
 * it read, so exactly one is stored; the other rejects with a
 * SecretRotationConflictError and changes nothing.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SecretRotationConflictError } from '../../lib';
import { ClientService } from '../../lib/core/clients';
import { authenticateClient } from '../../lib/core/client-auth';
import { silentLogger } from '../../lib/logger';
import { openEmbeddedStore, type EmbeddedStore } from '../../lib/stores/embedded';

let tmp: string;
const stores: EmbeddedStore[] = [];

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-rotation-race-'));
});

afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** A service on its own connection to the shared data dir, as an instance has. */
async function instance(): Promise<{ store: EmbeddedStore; clients: ClientService }> {
  const store = await openEmbeddedStore({ dataDir: tmp });
  stores.push(store);
  return { store, clients: new ClientService(async () => store, silentLogger) };
}

async function authenticates(store: EmbeddedStore, clientId: string, secret: string): Promise<boolean> {
  return authenticateClient((id) => store.findClient(id), { clientId, clientSecret: secret, method: 'client_secret_basic' }, new Date()).then(
    () => true,
    () => false,
  );
}

test('two rotations at once: one resolves with the secret that works, the other rejects with SecretRotationConflictError and changes nothing', async () => {
  const a = await instance();
  const b = await instance();
  const created = await a.clients.create({ name: 'svc' });
  // each holds in deliver (the client read, nothing stored) until both got there
  let arrived = 0;
  let release!: () => void;
  const both = new Promise<void>((resolve) => (release = resolve));
  const delivered: string[] = [];
  const deliver = async ({ clientSecret }: { clientSecret: string }): Promise<void> => {
    delivered.push(clientSecret);
    if (++arrived === 2) release();
    await both;
  };
  const results = await Promise.allSettled([a, b].map((i) => i.clients.rotateSecret(created.clientId, { keepOldFor: 3600, deliver })));

  const won = results.filter((r) => r.status === 'fulfilled');
  const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
  expect(won).toHaveLength(1);
  expect(lost).toHaveLength(1);
  expect(lost[0].reason).toBeInstanceOf(SecretRotationConflictError);
  expect(lost[0].reason).toMatchObject({ code: 'secret_rotation_conflict', clientId: created.clientId });
  const winner = (won[0] as PromiseFulfilledResult<{ clientSecret: string } | null>).value!.clientSecret;
  const loser = delivered.find((s) => s !== winner)!;
  expect(await authenticates(a.store, created.clientId, winner)).toBe(true);
  expect(await authenticates(a.store, created.clientId, loser)).toBe(false);
  expect(await authenticates(a.store, created.clientId, created.clientSecret)).toBe(true); // kept for the hour the winner asked
  expect((await a.store.findClient(created.clientId))!.secrets).toHaveLength(2);
});
