/**
 * `issuer.clients.rotateSecret()` from two places at once (two instances'
 * admin routes, or one and the CLI): the rotation holds only on the secrets
 * it read, so exactly one is stored; the other rejects with a
 * SecretRotationConflictError and changes nothing.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createIssuer, SecretRotationConflictError, type Store } from '../../lib';
import { ClientService } from '../../lib/core/clients';
import { authenticateClient } from '../../lib/core/client-auth';
import { silentLogger } from '../../lib/logger';
import { openEmbeddedStore, type EmbeddedStore } from '../../lib/stores/embedded';
import { recorder } from '../helpers/log-recorder';

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

/**
 * The embedded store behind a `rotateSecret` written for the older interface:
 * three parameters, and it rotates whatever the client's secrets are now (its
 * read and write one step, as an UPDATE without a condition is). `close` is
 * left to the test: the issuers sharing it close it each.
 */
function olderStore(inner: EmbeddedStore): Store {
  let turn = Promise.resolve(true);
  return {
    ...inner,
    close: async () => undefined,
    rotateSecret(clientId: string, secret: Parameters<Store['rotateSecret']>[1], keepOldUntil: Date | null): Promise<boolean> {
      turn = turn.then(async () => {
        const now = await inner.findClient(clientId);
        return inner.rotateSecret(clientId, secret, keepOldUntil, now?.secrets.map((s) => s.hash) ?? []);
      });
      return turn;
    },
  };
}

test('a store whose rotateSecret takes the older three parameters: createIssuer() warns once that rotations are unconditional; the built-in and a four-parameter store get no word', async () => {
  const inner = await openEmbeddedStore({ dataDir: tmp });
  stores.push(inner);
  const older = olderStore(inner);
  const log = recorder();
  const options = { issuer: 'http://issuer.test', audience: 'http://api.test', logger: log.logger };
  const issuers = [createIssuer({ ...options, store: older }), createIssuer({ ...options, store: older })];
  try {
    expect(log.events.filter((e) => e.event === 'store.rotate_secret_unconditional')).toEqual([
      { level: 'warn', event: 'store.rotate_secret_unconditional', parameters: 3 },
    ]);

    // what it warns of: two rotations at once both succeed, and the secret the earlier handed out no longer works
    const created = await issuers[0].clients.create({ name: 'svc' });
    let arrived = 0;
    let release!: () => void;
    const both = new Promise<void>((resolve) => (release = resolve));
    const deliver = async (): Promise<void> => {
      if (++arrived === 2) release();
      await both;
    };
    const results = await Promise.all(issuers.map((i) => i.clients.rotateSecret(created.clientId, { deliver })));
    const working: boolean[] = [];
    for (const r of results) working.push(await authenticates(inner, created.clientId, r!.clientSecret));
    expect(working.sort()).toEqual([false, true]);

    // the embedded store (its methods are (...args) wrappers: length 0) and one declaring all four: no warning
    const quiet = recorder();
    const four: Store = { ...inner, close: async () => undefined, rotateSecret: (id, secret, keepOldUntil, expected) => inner.rotateSecret(id, secret, keepOldUntil, expected) };
    const wrapped: Store = { ...inner, close: async () => undefined };
    for (const store of [wrapped, four]) issuers.push(createIssuer({ ...options, logger: quiet.logger, store }));
    expect(quiet.events.filter((e) => e.event === 'store.rotate_secret_unconditional')).toEqual([]);
  } finally {
    for (const i of issuers) await i.close();
  }
});
