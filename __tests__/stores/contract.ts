/**
 * The storage contract of lib/stores/types.ts as a jest suite that every
 * store runs. Tests only call the Store interface and check what it returns.
 * `open` is called before each test and must give an empty store.
 */
import type { ClientPublicJwk, ClientSettings, NewClient, Store, StoredClientChanges, StoredKey, StoredSecret } from '../../lib/stores/types';

export interface OpenedStore {
  store: Store;
  cleanup: () => Promise<void>;
}

const HOUR = 3_600_000;

/** Fixed instants with non-zero milliseconds, so that precision loss shows. */
const t = (iso: string): Date => new Date(iso);
const T0 = t('2024-03-01T10:00:00.123Z');
const T1 = t('2024-03-02T10:00:00.456Z');
const T2 = t('2024-03-03T10:00:00.789Z');
const T3 = t('2024-03-04T10:00:00.001Z');

function secret(hash: string, createdAt: Date, expiresAt: Date | null = null): StoredSecret {
  return { hash, createdAt, expiresAt };
}

function newClient(clientId: string, overrides: Partial<NewClient> = {}): NewClient {
  return {
    clientId,
    name: `Client ${clientId}`,
    scopes: ['read:items', 'write:items'],
    grantTypes: ['client_credentials'],
    createdAt: T0,
    secret: secret(`hash-${clientId}-1`, T0),
    ...overrides,
  };
}

function key(kid: string, createdAt: Date, activatesAt: Date = createdAt, tokenTtl = 3605): StoredKey {
  return {
    kid,
    alg: 'ES256',
    privateJwk: JSON.stringify({ kty: 'EC', crv: 'P-256', x: `x-${kid}`, y: `y-${kid}`, d: `d-${kid}` }),
    publicJwk: JSON.stringify({ kty: 'EC', crv: 'P-256', x: `x-${kid}`, y: `y-${kid}` }),
    createdAt,
    activatesAt,
    retiredAt: null,
    tokenTtl,
  };
}

export function describeStoreContract(name: string, open: () => Promise<OpenedStore>): void {
  describe(`store contract: ${name}`, () => {
    let store: Store;
    let cleanup: (() => Promise<void>) | undefined;

    beforeEach(async () => {
      ({ store, cleanup } = await open());
    });

    afterEach(async () => {
      await cleanup?.();
      cleanup = undefined;
    });

    /** A rotation on the secrets the client has now (as core reads them first). */
    const rotate = async (clientId: string, s: StoredSecret, keepOldUntil: Date | null): Promise<boolean> =>
      store.rotateSecret(clientId, s, keepOldUntil, ((await store.findClient(clientId))?.secrets ?? []).map((x) => x.hash));

    describe('clients', () => {
      it('keeps resources, permissions and requireDpop; a client created without them has none', async () => {
      await store.createClient(newClient('plain'));
      await store.createClient(
        newClient('rich', { resources: ['https://api-a.test', 'https://api-b.test/v1'], permissions: ['introspect'], requireDpop: true }),
      );
      const plain = await store.findClient('plain');
      expect({ resources: plain!.resources, permissions: plain!.permissions, requireDpop: plain!.requireDpop }).toEqual({ resources: [], permissions: [], requireDpop: false });
      const rich = await store.findClient('rich');
      expect({ resources: rich!.resources, permissions: rich!.permissions, requireDpop: rich!.requireDpop }).toEqual({
        resources: ['https://api-a.test', 'https://api-b.test/v1'],
        permissions: ['introspect'],
        requireDpop: true,
      });
      const listed = (await store.listClients()).find((c) => c.clientId === 'rich');
      expect(listed!.resources).toEqual(['https://api-a.test', 'https://api-b.test/v1']);
      expect(listed!.requireDpop).toBe(true);
    });

    it('round-trips a created client with every field, Dates to the millisecond', async () => {
        const expires = t('2030-01-01T00:00:00.999Z');
        const input = newClient('alpha', {
          name: 'Alpha ünïcödé "quoted", {braced}',
          // Valid RFC 6749 scope tokens (core/scope.ts rejects others) that stress array encodings.
          scopes: ['read:items', 'a,b', '{}', "it's", 'NULL', 'https://api.example.com/x.read'],
          grantTypes: ['client_credentials'],
          createdAt: T1,
          secret: secret('hmac-sha256$salt$mac', T1, expires),
        });
        await store.createClient(input);

        const found = await store.findClient('alpha');
        expect(found).toEqual({
          clientId: 'alpha',
          name: input.name,
          scopes: input.scopes,
          grantTypes: ['client_credentials'],
          createdAt: T1,
          revokedAt: null,
          secrets: [{ hash: 'hmac-sha256$salt$mac', createdAt: T1, expiresAt: expires }],
          authMethod: 'client_secret',
          jwks: null,
          jwksUri: null,
          resources: [],
          permissions: [],
          requireDpop: false,
          tokenGeneration: 0,
        });
        expect(found!.createdAt).toBeInstanceOf(Date);
        expect(found!.createdAt.getTime()).toBe(T1.getTime());
        expect(found!.secrets[0].createdAt).toBeInstanceOf(Date);
        expect(found!.secrets[0].expiresAt!.getTime()).toBe(expires.getTime());
        expect(Array.isArray(found!.scopes)).toBe(true);
      });

      it('keeps empty scope and grant-type lists as empty arrays', async () => {
        await store.createClient(newClient('empty', { scopes: [], grantTypes: [] }));
        const found = await store.findClient('empty');
        expect(found!.scopes).toEqual([]);
        expect(found!.grantTypes).toEqual([]);
      });

      it('returns null for an unknown client', async () => {
        expect(await store.findClient('nobody')).toBeNull();
        await store.createClient(newClient('somebody'));
        expect(await store.findClient('nobody')).toBeNull();
      });

      it('rejects a duplicate client id and leaves the existing client unchanged', async () => {
        await store.createClient(newClient('dup'));
        const before = await store.findClient('dup');

        await expect(
          store.createClient(newClient('dup', { name: 'Impostor', secret: secret('hash-impostor', T2) })),
        ).rejects.toThrow('client id "dup" exists already'); // one message, whichever the store

        expect(await store.findClient('dup')).toEqual(before);
        expect(await store.listClients()).toHaveLength(1);
      });

      it('lists every client oldest first, each with its secrets', async () => {
        expect(await store.listClients()).toEqual([]);
        // Inserted out of chronological order, with ids whose alphabetical order is a third one.
        await store.createClient(newClient('mike', { createdAt: T2, secret: secret('hash-mike', T2) }));
        await store.createClient(newClient('zulu', { createdAt: T0, secret: secret('hash-zulu', T0) }));
        await store.createClient(newClient('alpha', { createdAt: T1, secret: secret('hash-alpha', T1) }));

        const list = await store.listClients();
        expect(list.map((c) => c.clientId)).toEqual(['zulu', 'alpha', 'mike']);
        expect(list.map((c) => c.secrets.map((s) => s.hash))).toEqual([['hash-zulu'], ['hash-alpha'], ['hash-mike']]);
        expect(list[1]).toEqual(await store.findClient('alpha'));
      });

      it('lists a client’s secrets newest first', async () => {
        await store.createClient(newClient('multi'));
        await rotate('multi', secret('hash-multi-2', T1), t('2099-01-01T00:00:00.000Z'));
        const [listed] = await store.listClients();
        expect(listed.secrets.map((s) => s.hash)).toEqual(['hash-multi-2', 'hash-multi-1']);
      });
    });

    describe('revokeClient', () => {
      it('revokes once, ends the secrets still valid at that moment, and reports false afterwards', async () => {
        const at = T2;
        const later = t('2099-01-01T00:00:00.000Z');
        // Four secrets with different expiries relative to `at`:
        await store.createClient(newClient('rev', { secret: secret('s1', T0, T1) })); // s1: T1, before `at`
        await rotate('rev', secret('s2', T1), later); // s1 keeps T1
        await rotate('rev', secret('s3', T1), later); // s2: `later`
        await rotate('rev', secret('s4', T2), later); // s3: `later`; s4: null

        expect(await store.revokeClient('rev', at)).toBe(true);

        const found = (await store.findClient('rev'))!;
        expect(found.revokedAt).toEqual(at);
        const byHash = new Map(found.secrets.map((s) => [s.hash, s.expiresAt]));
        expect(byHash.get('s4')).toEqual(at); // was null
        expect(byHash.get('s3')).toEqual(at); // was `later`
        expect(byHash.get('s2')).toEqual(at); // was `later`
        expect(byHash.get('s1')).toEqual(T1); // was before `at`: unchanged
        expect(found.secrets.map((s) => s.hash)).toEqual(['s4', 's3', 's2', 's1']);

        // Second revoke: false, and the first revocation time stays.
        expect(await store.revokeClient('rev', T3)).toBe(false);
        expect((await store.findClient('rev'))!.revokedAt).toEqual(at);
        expect((await store.findClient('rev'))!.secrets).toEqual(found.secrets);
      });

      it('returns false for an unknown client', async () => {
        expect(await store.revokeClient('ghost', T1)).toBe(false);
        expect(await store.findClient('ghost')).toBeNull();
      });

      it('only touches the revoked client', async () => {
        await store.createClient(newClient('x'));
        await store.createClient(newClient('y'));
        await store.revokeClient('x', T1);
        const y = (await store.findClient('y'))!;
        expect(y.revokedAt).toBeNull();
        expect(y.secrets[0].expiresAt).toBeNull();
      });
    });

    describe('updateClient', () => {
      /** Writes `changes` whatever the client has; `revokeTokens` as given. */
      const always = (changes: StoredClientChanges, revokeTokens = false) => () => ({ changes, revokeTokens });

      it('changes what is given in one write, keeps the rest, and findClient sees it at once', async () => {
        await store.createClient(newClient('up', { resources: ['https://a.test'] }));
        await store.findClient('up'); // warm any cache
        const first = await store.updateClient('up', always({ scopes: ['read:items'], permissions: ['introspect'] }), T1);
        expect(first).toEqual({
          before: { name: 'Client up', scopes: ['read:items', 'write:items'], resources: ['https://a.test'], permissions: [], requireDpop: false },
          written: { changes: { scopes: ['read:items'], permissions: ['introspect'] }, revokeTokens: false },
          generation: null,
        });
        expect(await store.findClient('up')).toMatchObject({
          name: 'Client up',
          scopes: ['read:items'],
          resources: ['https://a.test'],
          permissions: ['introspect'],
          requireDpop: false,
          secrets: [expect.objectContaining({ hash: 'hash-up-1' })],
        });
        await store.updateClient('up', always({ name: 'renamed', scopes: [], resources: [], permissions: [], requireDpop: true }), T1);
        const after = await store.findClient('up');
        expect(after).toMatchObject({ name: 'renamed', scopes: [], resources: [], permissions: [], requireDpop: true });
        expect((await store.listClients()).find((c) => c.clientId === 'up')).toEqual(after);
      });

      it('asks decide() with the settings inside the transaction; null writes nothing', async () => {
        await store.createClient(newClient('same'));
        const seen: ClientSettings[] = [];
        const done = await store.updateClient('same', (current) => (seen.push(current), null), T1);
        expect(done).toEqual({ before: seen[0], written: null, generation: null });
        expect(seen).toEqual([{ name: 'Client same', scopes: ['read:items', 'write:items'], resources: [], permissions: [], requireDpop: false }]);
        expect(await store.findClient('same')).toMatchObject({ scopes: ['read:items', 'write:items'], tokenGeneration: 0 });
      });

      it('with revokeTokens, raises the token generation in the same transaction and answers it', async () => {
        await store.createClient(newClient('narrow'));
        expect((await store.updateClient('narrow', always({ scopes: ['read:items'] }, true), T1))!.generation).toBe(1);
        expect(await store.bumpTokenGeneration('narrow', T1)).toBe(2);
        expect((await store.updateClient('narrow', always({ scopes: [] }, true), T1))!.generation).toBe(3);
        const { clients } = await store.listRevocations(T1, T0);
        expect(clients.find((c) => c.client_id === 'narrow')).toMatchObject({ generation: 3, revoked_at: null });
        // a found client carries the generation its new tokens need
        expect((await store.findClient('narrow'))!.tokenGeneration).toBe(3);
        expect((await store.listClients()).find((c) => c.clientId === 'narrow')!.tokenGeneration).toBe(3);
      });

      it('a decide() that throws leaves everything as it was', async () => {
        await store.createClient(newClient('boom'));
        await expect(store.updateClient('boom', () => {
          throw new Error('no');
        }, T1)).rejects.toThrow('no');
        expect(await store.findClient('boom')).toMatchObject({ scopes: ['read:items', 'write:items'], tokenGeneration: 0 });
      });

      it('null for an unknown or revoked client, which stays as it was, its generation too, without asking decide()', async () => {
        const decide = jest.fn(always({ scopes: ['x'] }, true));
        expect(await store.updateClient('nobody', decide, T1)).toBeNull();
        await store.createClient(newClient('gone'));
        await store.revokeClient('gone', T1);
        expect(await store.updateClient('gone', decide, T1)).toBeNull();
        expect(decide).not.toHaveBeenCalled();
        expect((await store.findClient('gone'))!.scopes).toEqual(['read:items', 'write:items']);
        const { clients } = await store.listRevocations(T1, T0);
        expect(clients.find((c) => c.client_id === 'gone')).toMatchObject({ generation: 0 });
      });
    });

    describe('rotateSecret', () => {
      it('with keepOldUntil: adds the new secret first and caps older ones at min(expiresAt, keepOldUntil)', async () => {
        const keep1 = t('2099-01-01T00:00:00.111Z');
        const keep2 = t('2099-06-01T00:00:00.222Z');
        const keepEarlier = t('2098-01-01T00:00:00.333Z');
        await store.createClient(newClient('rot', { secret: secret('h1', T0) }));

        expect(await rotate('rot', secret('h2', T1), keep1)).toBe(true);
        let found = (await store.findClient('rot'))!;
        expect(found.secrets).toEqual([secret('h2', T1, null), secret('h1', T0, keep1)]);

        // A later keepOldUntil never extends an earlier expiry.
        expect(await rotate('rot', secret('h3', T2), keep2)).toBe(true);
        found = (await store.findClient('rot'))!;
        expect(found.secrets).toEqual([secret('h3', T2, null), secret('h2', T1, keep2), secret('h1', T0, keep1)]);

        // An earlier keepOldUntil shortens every older secret.
        expect(await rotate('rot', secret('h4', T3), keepEarlier)).toBe(true);
        found = (await store.findClient('rot'))!;
        expect(found.secrets).toEqual([
          secret('h4', T3, null),
          secret('h3', T2, keepEarlier),
          secret('h2', T1, keepEarlier),
          secret('h1', T0, keepEarlier),
        ]);
        expect(found.revokedAt).toBeNull();
      });

      it('with keepOldUntil null: older secrets end at once', async () => {
        await store.createClient(newClient('now', { secret: secret('old', T0) }));
        expect(await rotate('now', secret('new', T1), null)).toBe(true);

        const found = (await store.findClient('now'))!;
        expect(found.secrets).toEqual([secret('new', T1, null), secret('old', T0, T1)]);
      });

      it('with keepOldUntil in the past: older secrets end at once', async () => {
        await store.createClient(newClient('past', { secret: secret('old', T0) }));
        const past = new Date(Date.now() - HOUR);
        expect(await rotate('past', secret('new', T1), past)).toBe(true);

        const found = (await store.findClient('past'))!;
        expect(found.secrets).toEqual([secret('new', T1, null), secret('old', T0, past)]);
      });

      it('orders a secret created in the same millisecond as the current one first (insertion breaks ties)', async () => {
        await store.createClient(newClient('tie', { secret: secret('first', T1) }));
        await rotate('tie', secret('second', T1), t('2099-01-01T00:00:00.000Z'));
        await rotate('tie', secret('third', T1), t('2099-01-01T00:00:00.000Z'));
        const found = (await store.findClient('tie'))!;
        expect(found.secrets.map((s) => s.hash)).toEqual(['third', 'second', 'first']);
      });

      it('refuses (false, no change) a rotation decided on secrets that another rotation changed since', async () => {
        const keep = t('2099-01-01T00:00:00.000Z');
        await store.createClient(newClient('race', { secret: secret('h1', T0) }));
        const seen = (await store.findClient('race'))!.secrets.map((s) => s.hash);
        expect(await store.rotateSecret('race', secret('first', T1), keep, seen)).toBe(true);
        const after = await store.findClient('race');

        expect(await store.rotateSecret('race', secret('second', T2), null, seen)).toBe(false);
        expect(await store.rotateSecret('race', secret('second', T2), null, [])).toBe(false);
        expect(await store.rotateSecret('race', secret('second', T2), null, ['first', 'h1', 'other'])).toBe(false);
        expect(await store.findClient('race')).toEqual(after);
        expect(after!.secrets).toEqual([secret('first', T1, null), secret('h1', T0, keep)]);
        // the secrets as they are now, in any order: accepted
        expect(await store.rotateSecret('race', secret('second', T2), null, ['h1', 'first'])).toBe(true);
      });

      it('two rotations at once on the secrets both read: exactly one is stored, and its secret stays current', async () => {
        for (let round = 0; round < 5; round++) {
          const id = `both-${round}`;
          await store.createClient(newClient(id, { secret: secret('old', T0) }));
          const seen = (await store.findClient(id))!.secrets.map((s) => s.hash);
          const done = await Promise.all(['a', 'b'].map((h) => store.rotateSecret(id, secret(h, T1), null, seen)));
          expect(done.filter(Boolean)).toHaveLength(1);
          const winner = done[0] ? 'a' : 'b';
          expect((await store.findClient(id))!.secrets).toEqual([secret(winner, T1, null), secret('old', T0, T1)]);
        }
      });

      it('returns false and changes nothing for a revoked client', async () => {
        await store.createClient(newClient('gone'));
        await store.revokeClient('gone', T1);
        const before = await store.findClient('gone');
        expect(await rotate('gone', secret('new', T2), null)).toBe(false);
        expect(await store.findClient('gone')).toEqual(before);
      });

      it('returns false for an unknown client and creates nothing', async () => {
        expect(await rotate('ghost', secret('new', T2), null)).toBe(false);
        expect(await store.findClient('ghost')).toBeNull();
        expect(await store.listClients()).toEqual([]);
      });
    });

    describe('keys', () => {
      it('starts empty', async () => {
        expect(await store.listKeys()).toEqual([]);
      });

      it('insertFirstKey inserts into an empty store and round-trips every field', async () => {
        const k1 = key('k1', T0, T1);
        expect(await store.insertFirstKey(k1)).toEqual([k1]);
        const listed = await store.listKeys();
        expect(listed).toEqual([k1]);
        expect(listed[0].createdAt).toBeInstanceOf(Date);
        expect(listed[0].activatesAt.getTime()).toBe(T1.getTime());
      });

      it('insertFirstKey does nothing while an unretired key exists', async () => {
        const k1 = key('k1', T0);
        await store.insertFirstKey(k1);
        expect(await store.insertFirstKey(key('k2', T1))).toEqual([k1]);
        expect(await store.listKeys()).toEqual([k1]);
      });

      it('insertFirstKey does nothing after a rotation (the new key is current)', async () => {
        await store.insertFirstKey(key('k1', T0));
        await store.rotateKey(key('k2', T1), ['k1']);
        await store.pruneKeys(t('2099-01-01T00:00:00.000Z')); // removes retired k1 only
        expect((await store.insertFirstKey(key('k3', T2))).map((k) => k.kid)).toEqual(['k2']);
      });

      it('insertFirstKey called concurrently ends with exactly one key', async () => {
        const candidates = [0, 1, 2, 3, 4].map((i) => key(`race-${i}`, T0));
        const results = await Promise.all(candidates.map((k) => store.insertFirstKey(k)));

        const listed = await store.listKeys();
        expect(listed).toHaveLength(1);
        expect(listed[0].retiredAt).toBeNull();
        expect(candidates).toContainEqual(listed[0]);
        for (const result of results) {
          expect(result.filter((k) => k.retiredAt === null)).toHaveLength(1);
          expect(result).toEqual(listed);
        }
      });

      it('rotateKey with the right expectedCurrent retires the current key at the new key’s activatesAt', async () => {
        const k1 = key('k1', T0);
        await store.insertFirstKey(k1);
        const k2 = key('k2', T1, T2);
        expect(await store.rotateKey(k2, ['k1'])).toBe(true);
        expect(await store.listKeys()).toEqual([{ ...k1, retiredAt: T2 }, k2]);

        const k3 = key('k3', T3);
        expect(await store.rotateKey(k3, ['k2'])).toBe(true);
        expect(await store.listKeys()).toEqual([{ ...k1, retiredAt: T2 }, { ...k2, retiredAt: T3 }, k3]);
      });

      it('rotateKey while an earlier rotation is pending: the active key signs until the new key does, the pending one is withdrawn', async () => {
        const at = (ms: number) => new Date(T0.getTime() + ms);
        const k1 = key('k1', T0);
        await store.insertFirstKey(k1);
        const k2 = key('k2', at(1000), at(1000 + 600_000)); // rotate --lead-time 10m
        expect(await store.rotateKey(k2, ['k1'])).toBe(true);
        const k3 = key('k3', at(2000), at(2000 + 300_000)); // then rotate --lead-time 5m, before k2 activates
        expect(await store.rotateKey(k3, ['k2'])).toBe(true);
        // k1 signs until k3 activates; k2 never signs (it retires as it would activate) and stays published
        expect(await store.listKeys()).toEqual([{ ...k1, retiredAt: k3.activatesAt }, { ...k2, retiredAt: k2.activatesAt }, k3]);

        // a third rotation, with a longer lead time than k3's: k1 signs until k4 does, k3 is withdrawn as well
        const k4 = key('k4', at(3000), at(3000 + 3_600_000));
        expect(await store.rotateKey(k4, ['k3'])).toBe(true);
        const listed = await store.listKeys();
        expect(listed).toEqual([{ ...k1, retiredAt: k4.activatesAt }, { ...k2, retiredAt: k2.activatesAt }, { ...k3, retiredAt: k3.activatesAt }, k4]);
        for (const k of listed) if (k.retiredAt) expect(k.retiredAt.getTime()).toBeGreaterThanOrEqual(k.activatesAt.getTime());
      });

      it('rotateKey after a pending key has activated retires it (not the key it replaced) at the new activation', async () => {
        const at = (ms: number) => new Date(T0.getTime() + ms);
        await store.insertFirstKey(key('k1', T0));
        const k2 = key('k2', at(1000), at(61_000));
        await store.rotateKey(k2, ['k1']); // k1 retires at k2's activation
        const k3 = key('k3', at(120_000), at(420_000)); // k2 signs by now
        expect(await store.rotateKey(k3, ['k2'])).toBe(true);
        expect((await store.listKeys()).map((k) => [k.kid, k.retiredAt])).toEqual([
          ['k1', k2.activatesAt],
          ['k2', k3.activatesAt],
          ['k3', null],
        ]);
      });

      it('rotateKey on an empty store succeeds with expectedCurrent []', async () => {
        const k1 = key('k1', T0);
        expect(await store.rotateKey(k1, [])).toBe(true);
        expect(await store.listKeys()).toEqual([k1]);
      });

      it('rotateKey with a wrong expectedCurrent returns false and changes nothing', async () => {
        await store.insertFirstKey(key('k1', T0));
        await store.rotateKey(key('k2', T1), ['k1']);
        const before = await store.listKeys();

        expect(await store.rotateKey(key('k3', T2), ['k1'])).toBe(false); // stale
        expect(await store.rotateKey(key('k3', T2), [])).toBe(false); // too few
        expect(await store.rotateKey(key('k3', T2), ['k2', 'k1'])).toBe(false); // too many
        expect(await store.rotateKey(key('k3', T2), ['nope'])).toBe(false);
        expect(await store.listKeys()).toEqual(before);
      });

      it('rotateKey called concurrently with the same expectedCurrent lets exactly one win', async () => {
        await store.insertFirstKey(key('k1', T0));
        const results = await Promise.all(
          [0, 1, 2, 3, 4].map((i) => store.rotateKey(key(`next-${i}`, T1), ['k1'])),
        );
        expect(results.filter(Boolean)).toHaveLength(1);
        const listed = await store.listKeys();
        expect(listed).toHaveLength(2);
        expect(listed.filter((k) => k.retiredAt === null)).toHaveLength(1);
        expect(listed.find((k) => k.kid === 'k1')!.retiredAt).toEqual(T1);
      });

      it('pruneKeys with now keeps a key retired before the given time whose recorded token lifetime has not run out; raiseKeyTokenTtl only raises', async () => {
        const k1 = key('k1', T0, T0, 60); // signed tokens valid 60 s
        const k2 = key('k2', T1, T1, 60);
        await store.insertFirstKey(k1);
        await store.rotateKey(k2, ['k1']); // k1 retired at T1
        // another instance signs with k2 for an hour: it records that, and a lower value changes nothing
        await store.raiseKeyTokenTtl!(['k2'], 3600);
        await store.raiseKeyTokenTtl!(['k1', 'k2'], 30);
        expect((await store.listKeys()).map((k) => [k.kid, k.tokenTtl])).toEqual([['k1', 60], ['k2', 3600]]);
        const k3 = key('k3', T2, T2, 60);
        await store.rotateKey(k3, ['k2']); // k2 retired at T2
        const at = (ms: number) => new Date(T2.getTime() + ms);
        // an instance with a 60 s lifetime, 120 s after T2: both retired before its cut-off, but k2's tokens live an hour
        expect(await store.pruneKeys(at(120_000 - 60_000), at(120_000))).toBe(1);
        expect((await store.listKeys()).map((k) => k.kid)).toEqual(['k2', 'k3']);
        expect(await store.pruneKeys(at(3_600_001 - 60_000), at(3_600_001))).toBe(1);
        expect((await store.listKeys()).map((k) => k.kid)).toEqual(['k3']);
      });

      it('deleteKey deletes a key that signs no more (retired by now, or withdrawn), whatever its tokens; never one that signs now or will', async () => {
        const k1 = key('k1', T0);
        const k2 = key('k2', T1, new Date(T2.getTime() + 60_000)); // published at T1, signs from T2 + 60 s; k1 signs until then
        await store.insertFirstKey(k1);
        await store.rotateKey(k2, ['k1']);
        // at T2 k1 still signs (it retires at T2 + 60 s) and k2 is pending: neither goes
        expect(await store.deleteKey!('k1', T2)).toBe(false);
        expect(await store.deleteKey!('k2', T2)).toBe(false);
        expect(await store.deleteKey!('nope', T2)).toBe(false);
        expect((await store.listKeys()).map((k) => k.kid)).toEqual(['k1', 'k2']);
        // a rotation at T2 with no lead time: k1 retires at T2, k2 is withdrawn; both may go, however long their tokens live
        await store.rotateKey(key('k3', T2), ['k2']);
        expect(await store.deleteKey!('k2', T2)).toBe(true);
        expect(await store.deleteKey!('k1', T2)).toBe(true);
        expect(await store.deleteKey!('k1', T2)).toBe(false);
        expect(await store.deleteKey!('k3', new Date(T2.getTime() + 86_400_000))).toBe(false);
        expect((await store.listKeys()).map((k) => k.kid)).toEqual(['k3']);
      });

      it('pruneKeys deletes only keys retired strictly before the given time and returns the count', async () => {
        const k1 = key('k1', T0);
        const k2 = key('k2', T1); // retires k1 at T1
        const k3 = key('k3', T2); // retires k2 at T2
        await store.insertFirstKey(k1);
        await store.rotateKey(k2, ['k1']);
        await store.rotateKey(k3, ['k2']);

        expect(await store.pruneKeys(T0)).toBe(0);
        expect(await store.pruneKeys(T1)).toBe(0); // retired exactly at T1: not before it
        expect(await store.pruneKeys(new Date(T1.getTime() + 1))).toBe(1);
        expect(await store.listKeys()).toEqual([{ ...k2, retiredAt: T2 }, k3]);

        // The current key is never pruned, however late the cut-off.
        expect(await store.pruneKeys(t('2099-01-01T00:00:00.000Z'))).toBe(1);
        expect(await store.listKeys()).toEqual([k3]);
        expect(await store.pruneKeys(t('2099-01-01T00:00:00.000Z'))).toBe(0);
      });
    });

    describe('key-based clients', () => {
      const jwk = (kid: string): ClientPublicJwk => ({ kty: 'EC', crv: 'P-256', x: `x-${kid}`, y: `y-${kid}`, kid, alg: 'ES256' });
      const keyClient = (clientId: string, kids: string[]): NewClient =>
        newClient(clientId, { secret: null, authMethod: 'private_key_jwt', jwks: { keys: kids.map(jwk) } });

      it('round-trips a key-based client without secrets, its key set as given', async () => {
        await store.createClient(keyClient('pk', ['a', 'b']));
        const found = await store.findClient('pk');
        expect(found).toMatchObject({ clientId: 'pk', authMethod: 'private_key_jwt', secrets: [], jwks: { keys: [jwk('a'), jwk('b')] } });
        expect((await store.listClients())[0]).toEqual(found);
      });

      it('addClientKey appends, refusing a duplicate kid or key and more than maxKeys, and is seen by findClient at once', async () => {
        await store.createClient(keyClient('pk', ['a']));
        await store.findClient('pk'); // warm any cache
        expect(await store.addClientKey('pk', jwk('b'), 2)).toBe('added');
        expect((await store.findClient('pk'))!.jwks!.keys.map((k) => k.kid)).toEqual(['a', 'b']);
        expect(await store.addClientKey('pk', jwk('b'), 8)).toBe('duplicate_kid');
        // b's public key under another kid
        expect(await store.addClientKey('pk', { ...jwk('b'), kid: 'b2' }, 8)).toBe('duplicate_key');
        expect(await store.addClientKey('pk', jwk('c'), 2)).toBe('too_many_keys');
        expect((await store.findClient('pk'))!.jwks!.keys.map((k) => k.kid)).toEqual(['a', 'b']);
      });

      it('round-trips a client whose keys are at a jwks_uri; addClientKey refuses it', async () => {
        await store.createClient(newClient('remote', { secret: null, authMethod: 'private_key_jwt', jwksUri: 'https://client.example/jwks' }));
        expect(await store.findClient('remote')).toMatchObject({ authMethod: 'private_key_jwt', jwks: null, jwksUri: 'https://client.example/jwks', secrets: [] });
        expect(await store.addClientKey('remote', jwk('a'), 8)).toBe('unknown_client');
      });

      it('addClientKey refuses unknown, revoked and secret-based clients', async () => {
        expect(await store.addClientKey('nobody', jwk('a'), 8)).toBe('unknown_client');
        await store.createClient(newClient('secret-based'));
        expect(await store.addClientKey('secret-based', jwk('a'), 8)).toBe('unknown_client');
        expect((await store.findClient('secret-based'))!.jwks).toBeNull();
        await store.createClient(keyClient('gone', ['a']));
        await store.revokeClient('gone', T1);
        expect(await store.addClientKey('gone', jwk('b'), 8)).toBe('unknown_client');
      });

      it('removeClientKey removes one key, never the last one, and false for an unknown kid', async () => {
        await store.createClient(keyClient('pk', ['a', 'b']));
        await store.findClient('pk');
        expect(await store.removeClientKey('pk', 'zz')).toBe(false);
        expect(await store.removeClientKey('pk', 'a')).toBe(true);
        expect((await store.findClient('pk'))!.jwks!.keys.map((k) => k.kid)).toEqual(['b']);
        expect(await store.removeClientKey('pk', 'b')).toBe(false);
        expect((await store.findClient('pk'))!.jwks!.keys.map((k) => k.kid)).toEqual(['b']);
        expect(await store.removeClientKey('nobody', 'b')).toBe(false);
      });

      it('concurrent addClientKey calls never exceed maxKeys', async () => {
        await store.createClient(keyClient('pk', ['a']));
        const results = await Promise.all(['b', 'c', 'd', 'e'].map((kid) => store.addClientKey('pk', jwk(kid), 3)));
        expect(results.filter((r) => r === 'added')).toHaveLength(2);
        expect((await store.findClient('pk'))!.jwks!.keys).toHaveLength(3);
      });
    });

    describe('assertion jtis', () => {
      it('consumeJti is true once per (client, jti hash), false on every replay', async () => {
        const until = new Date(Date.now() + 60_000);
        expect(await store.consumeJti('c1', 'h1', until)).toBe(true);
        expect(await store.consumeJti('c1', 'h1', until)).toBe(false);
        expect(await store.consumeJti('c2', 'h1', until)).toBe(true); // another client's jti space
        expect(await store.consumeJti('c1', 'h2', until)).toBe(true);
      });

      it('consumeJti called 20 times at once lets exactly one win', async () => {
        const until = new Date(Date.now() + 60_000);
        const results = await Promise.all(Array.from({ length: 20 }, () => store.consumeJti('c1', 'race', until)));
        expect(results.filter(Boolean)).toHaveLength(1);
      });

      it('purgeJtis deletes only entries expired strictly before the cut-off, after which the jti is free again', async () => {
        expect(await store.consumeJti('c1', 'old', T0)).toBe(true);
        expect(await store.consumeJti('c1', 'new', T2)).toBe(true);
        expect(await store.purgeJtis(T0)).toBe(0);
        expect(await store.purgeJtis(T1)).toBe(1);
        expect(await store.consumeJti('c1', 'new', T2)).toBe(false);
        expect(await store.consumeJti('c1', 'old', T2)).toBe(true);
      });
    });

    describe('ping', () => {
      it('resolves on an open store, on an empty one too, and rejects once closed', async () => {
        expect(typeof store.ping).toBe('function');
        await expect(store.ping!()).resolves.toBeUndefined();
        await store.insertFirstKey(key('k1', T0));
        await expect(store.ping!()).resolves.toBeUndefined();
        await store.close();
        await expect(store.ping!()).rejects.toThrow();
      });
    });
  });
}
