import { Pool } from 'pg';
import { StoreUnavailableError } from '../../lib/errors';
import { createPostgresStore, isPostgresUnavailable, type PostgresStore } from '../../lib/stores/postgres';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';
import { startFaultProxy } from '../helpers/fault-proxy';
import { revocationStoreContract } from '../core/revocation-store-contract';
import { describeStoreContract } from './contract';
import { RevocationState } from '../../lib/core/revocation';
import type { RevocationStore } from '../../lib/stores/types';
import { StoreRevocationFeed } from '../../lib/core/revocation-feed';

/** The revocation methods of a store, as a plain object a test can override one of. */
function pickRevocationStore(s: PostgresStore): RevocationStore {
  return {
    revokeToken: (e) => s.revokeToken(e),
    bumpTokenGeneration: (id, at) => s.bumpTokenGeneration(id, at),
    listRevocations: (now, since) => s.listRevocations(now, since),
    purgeExpiredRevocations: (now) => s.purgeExpiredRevocations(now),
    revocationsVersion: () => s.revocationsVersion!(),
  };
}

describeIfPostgres('PostgreSQL store', () => {
  let admin: Pool;
  /** Every schema this run creates, dropped in afterAll even when a test fails midway. */
  const schemas: string[] = [];
  const freshSchema = (): string => {
    const schema = uniqueSchemaName();
    schemas.push(schema);
    return schema;
  };

  beforeAll(() => {
    admin = new Pool({ connectionString: postgresUrl(), max: 4 });
  });

  afterAll(async () => {
    for (const schema of schemas) await dropSchema(admin, schema);
    await admin.end();
  });

  // One new schema per test, through the store's own pool (the usual set-up).
  describeStoreContract('postgres', async () => {
    const schema = freshSchema();
    const store = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 8 });
    return {
      store,
      cleanup: async () => {
        await store.close();
        await dropSchema(admin, schema);
      },
    };
  });

  revocationStoreContract('postgres', async () => {
    const schema = freshSchema();
    const store = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 8 });
    return {
      store,
      async revokeClient(clientId, at) {
        // listRevocations reads revoked clients from the clients table: the client must exist
        await store.createClient({ clientId, name: clientId, scopes: [], grantTypes: ['client_credentials'], createdAt: new Date(at.getTime() - 1000), secret: null });
        await store.revokeClient(clientId, at);
      },
      close: async () => {
        await store.close();
        await dropSchema(admin, schema);
      },
    };
  });

  it('consumeJti, committed without waiting for the WAL flush, records once and leaves the pooled connection\'s synchronous_commit as it was', async () => {
    const pool = new Pool({ connectionString: postgresUrl(), max: 1 }); // one connection: the next query runs on it
    const store = await createPostgresStore({ pool, schema: freshSchema() });
    try {
      const until = new Date(Date.now() + 60_000);
      expect(await store.consumeJti('c1', 'h1', until)).toBe(true);
      expect(await store.consumeJti('c1', 'h1', until)).toBe(false);
      expect((await pool.query('SHOW synchronous_commit')).rows[0].synchronous_commit).toBe('on');
    } finally {
      await store.close();
      await pool.end();
    }
  });

  it('consumeJti: the calls of one turn share one INSERT, each with its own answer; a failed INSERT refuses each with StoreUnavailableError', async () => {
    const schema = freshSchema();
    const pool = new Pool({ connectionString: postgresUrl(), max: 4 });
    const store = await createPostgresStore({ pool, schema });
    const other = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 1 });
    const query = jest.spyOn(pool, 'query');
    try {
      const until = new Date(Date.now() + 60_000);
      const turn = await Promise.all([
        store.consumeJti('c1', 'a', until),
        store.consumeJti('c1', 'b', until),
        store.consumeJti('c2', 'a', until),
        store.consumeJti('c1', 'a', until), // the same jti twice in one turn: first only for the first caller
      ]);
      expect(turn).toEqual([true, true, true, false]);
      expect(query).toHaveBeenCalledTimes(1);
      // another instance on the same schema refuses them all
      expect(await Promise.all([other.consumeJti('c1', 'a', until), other.consumeJti('c1', 'b', until), other.consumeJti('c2', 'a', until), other.consumeJti('c2', 'b', until)])).toEqual([false, false, false, true]);

      query.mockImplementationOnce((() => Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }))) as never);
      const refused = await Promise.allSettled([store.consumeJti('c3', 'x', until), store.consumeJti('c3', 'y', until)]);
      for (const r of refused) expect(r).toMatchObject({ status: 'rejected', reason: expect.any(StoreUnavailableError) });
      expect(await store.consumeJti('c3', 'x', until)).toBe(true); // nothing was recorded by the failed turn

      // jtis of a turn still pending when the store closes are written before its pool ends
      const pending = store.consumeJti('c4', 'z', until);
      await store.close();
      expect(await pending).toBe(true);
      expect(await other.consumeJti('c4', 'z', until)).toBe(false);
      await expect(store.consumeJti('c4', 'w', until)).rejects.toThrow(/closed/);
    } finally {
      query.mockRestore();
      await store.close();
      await other.close();
      await pool.end();
    }
  });

  describe('revocations: persisted, shared, pushed', () => {
    it('two stores on one schema: the second sees the first one’s revocations, also after reopening', async () => {
      const schema = freshSchema();
      const a = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      const exp = new Date(Date.now() + 600_000);
      await a.revokeToken({ jti: 'j1', clientId: 'c1', exp });
      expect(await a.bumpTokenGeneration('c2', new Date())).toBe(1);
      await a.close();
      const b = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      try {
        expect(await b.listRevocations(new Date(), new Date(Date.now() - 3_600_000))).toEqual({
          tokens: [{ jti: 'j1', client_id: 'c1', exp: Math.floor(exp.getTime() / 1000) }],
          clients: [{ client_id: 'c2', generation: 1, revoked_at: null }],
        });
        expect(await b.bumpTokenGeneration('c2', new Date())).toBe(2);
      } finally {
        await b.close();
      }
    });

    it('listenRevocations on one store hears notifyRevocations of another within 1 s; a stopped listener hears nothing', async () => {
      const schema = freshSchema();
      const a = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      const b = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      const other = await createPostgresStore({ connectionString: postgresUrl(), schema: freshSchema(), max: 2 });
      try {
        let heard = 0;
        let heardOther = 0;
        const stop = await b.listenRevocations!(() => heard++);
        const stopOther = await other.listenRevocations!(() => heardOther++);
        const started = Date.now();
        await a.notifyRevocations!();
        while (heard === 0 && Date.now() - started < 2000) await new Promise((r) => setTimeout(r, 5));
        expect(heard).toBe(1);
        expect(Date.now() - started).toBeLessThan(1000);
        expect(heardOther).toBe(0); // another schema: another channel
        await stop();
        await a.notifyRevocations!();
        await new Promise((r) => setTimeout(r, 200));
        expect(heard).toBe(1);
        await stopOther();
      } finally {
        await Promise.all([a.close(), b.close(), other.close()]);
      }
    });

    it('a listener whose connection is killed reconnects and calls back once to catch up', async () => {
      const schema = freshSchema();
      const a = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      try {
        let heard = 0;
        await a.listenRevocations!(() => heard++);
        await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`, [`LISTEN "ecc_rev_${schema}"`]);
        const started = Date.now();
        while (heard === 0 && Date.now() - started < 5000) await new Promise((r) => setTimeout(r, 20));
        expect(heard).toBe(1); // the catch-up call after it listens again
        await a.notifyRevocations!();
        while (heard === 1 && Date.now() - started < 5000) await new Promise((r) => setTimeout(r, 20));
        expect(heard).toBe(2);
      } finally {
        await a.close();
      }
    });

    /** A store whose connections go through a fault proxy, and one that connects directly to notify it. */
    async function listenerBehindProxy(timeouts: { connectionTimeoutMillis: number; queryTimeoutMillis: number; listenCheckMillis?: number }) {
      const schema = freshSchema();
      const target = new URL(postgresUrl());
      const proxy = await startFaultProxy(Number(target.port || 5432), target.hostname);
      const viaProxy = new URL(postgresUrl());
      viaProxy.hostname = '127.0.0.1';
      viaProxy.port = String(proxy.port);
      const listening = await createPostgresStore({ connectionString: viaProxy.toString(), schema, max: 2, ...timeouts });
      const direct = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      let heard = 0;
      await listening.listenRevocations!(() => heard++);
      return {
        proxy,
        direct,
        /** After a fault: the catch-up call comes once it listens again (within 5 s), and a notification sent then arrives (within 2 s). */
        async listensAgain() {
          expect(await eventually(() => heard >= 1, 5000)).toBe(true);
          const before = heard;
          await direct.notifyRevocations!();
          expect(await eventually(() => heard > before, 2000)).toBe(true);
        },
        async close() {
          await Promise.all([listening.close(), direct.close()]);
          await proxy.close();
        },
      };
    }

    /** Waits until `check()` holds (at most `ms`), returning whether it did. */
    async function eventually(check: () => boolean, ms: number): Promise<boolean> {
      const end = Date.now() + ms;
      while (!check() && Date.now() < end) await new Promise((r) => setTimeout(r, 25));
      return check();
    }

    it('a listener whose new connection never completes gives up on it after connectionTimeoutMillis and listens again', async () => {
      const t = await listenerBehindProxy({ connectionTimeoutMillis: 500, queryTimeoutMillis: 1000 });
      try {
        // the LISTEN connection is dropped, and the next attempt (a second later) meets a network that answers nothing
        t.proxy.cut();
        t.proxy.blackHole();
        await new Promise((r) => setTimeout(r, 1300));
        // the network recovers; the stalled attempt stays stalled, as nobody resets it
        t.proxy.heal();
        await t.listensAgain();
      } finally {
        await t.close();
      }
    });

    it('a listening connection the network dropped without a word is found by its check and replaced', async () => {
      const t = await listenerBehindProxy({ connectionTimeoutMillis: 500, queryTimeoutMillis: 500, listenCheckMillis: 300 });
      try {
        t.proxy.blackHole();
        t.proxy.heal();
        // the old connection is open and silent: a notification sent now is lost on it, the catch-up call makes up for it
        await t.direct.notifyRevocations!();
        await t.listensAgain();
      } finally {
        await t.close();
      }
    });

    it('migrates a version-3 schema: existing clients get no resources, no permissions, DPoP not required', async () => {
      const schema = freshSchema();
      const v3 = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      await v3.createClient({ clientId: 'old', name: 'old', scopes: ['a'], grantTypes: ['client_credentials'], createdAt: new Date(), secret: null });
      await v3.close();
      // back to version 3: drop what versions 5 and 4 added
      await undoVersion5(schema);
      await admin.query(`ALTER TABLE "${schema}".clients DROP COLUMN resources, DROP COLUMN permissions, DROP COLUMN require_dpop`);
      await admin.query(`DROP TABLE "${schema}".revoked_tokens, "${schema}".token_generations`);
      await admin.query(`DELETE FROM "${schema}".schema_migrations WHERE version = 4`);
      const v4 = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      try {
        const old = await v4.findClient('old');
        expect({ resources: old!.resources, permissions: old!.permissions, requireDpop: old!.requireDpop }).toEqual({ resources: [], permissions: [], requireDpop: false });
        expect(await appliedVersions(schema)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      } finally {
        await v4.close();
      }
    });

    it('the revocations revision: moved by any instance’s revocation write, not by reads, purges or unrelated writes', async () => {
      const schema = freshSchema();
      const a = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      const b = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      try {
        const seen = () => a.revocationsVersion!();
        const past = new Date(Date.now() - 60_000);
        await b.revokeToken({ jti: 'old', clientId: 'c1', exp: past });
        await b.createClient({ clientId: 'c2', name: 'c2', scopes: [], grantTypes: ['client_credentials'], createdAt: new Date(), secret: null });
        let v = await seen();
        const moves = async (what: string, write: () => Promise<unknown>, expected: boolean): Promise<void> => {
          await write();
          const now = await seen();
          expect({ what, moved: now !== v }).toEqual({ what, moved: expected });
          v = now;
        };
        await moves('listRevocations', () => b.listRevocations(new Date(), past), false);
        await moves('purge of an expired entry', async () => expect(await b.purgeExpiredRevocations(new Date())).toBe(1), false);
        await moves('a new client', () => b.createClient({ clientId: 'c3', name: 'c3', scopes: [], grantTypes: ['client_credentials'], createdAt: new Date(), secret: null }), false);
        await moves('revokeToken', () => b.revokeToken({ jti: 'j1', clientId: 'c1', exp: new Date(Date.now() + 600_000) }), true);
        await moves('revokeToken of the same jti again', () => b.revokeToken({ jti: 'j1', clientId: 'c1', exp: new Date(Date.now() + 600_000) }), true);
        await moves('bumpTokenGeneration', () => b.bumpTokenGeneration('c1', new Date()), true);
        await moves('revokeClient', () => b.revokeClient('c2', new Date()), true);
        await moves('revokeClient of a revoked client (no row changed)', () => b.revokeClient('c2', new Date()), true);
        // written with plain SQL, as an operator or an older version of the package would
        await moves('an UPDATE outside the store', () => admin.query(`UPDATE "${schema}".clients SET revoked_at = now() WHERE client_id = 'c3'`), true);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    });

    it('a revocation feed over the store lists only when the revision moved: another instance’s write is loaded at the next resync', async () => {
      const schema = freshSchema();
      const a = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      const b = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      let lists = 0;
      const counted: RevocationStore = {
        ...pickRevocationStore(a),
        listRevocations: (now, since) => {
          lists++;
          return a.listRevocations(now, since);
        },
      };
      const state = new RevocationState({ maxTokenTtl: 600 });
      const feed = new StoreRevocationFeed({ state, store: counted, maxTokenTtl: 600 });
      try {
        await feed.start();
        expect(lists).toBe(1);
        await feed.resync();
        await feed.resync();
        expect(lists).toBe(1);
        await b.revokeToken({ jti: 'j1', clientId: 'c1', exp: new Date(Date.now() + 600_000) });
        expect(state.isRevoked({ jti: 'j1', client_id: 'c1' })).toBe(false);
        await feed.resync();
        expect(lists).toBe(2);
        expect(state.isRevoked({ jti: 'j1', client_id: 'c1' })).toBe('token_revoked');
        await b.bumpTokenGeneration('c2', new Date());
        await feed.resync();
        expect(lists).toBe(3);
        expect(state.generation('c2')).toBe(1);
      } finally {
        await feed.close();
        await Promise.all([a.close(), b.close()]);
      }
    });

    it('migrates a version-4 schema: revocations already there stay, and the revision moves from then on', async () => {
      const schema = freshSchema();
      const v4 = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      await v4.close();
      await undoVersion5(schema);
      await admin.query(`INSERT INTO "${schema}".revoked_tokens (jti, client_id, exp) VALUES ('j0', 'c0', now() + interval '10 minutes')`);
      const v5 = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 });
      try {
        expect(await appliedVersions(schema)).toEqual([1, 2, 3, 4, 5, 6, 7]);
        expect((await v5.listRevocations(new Date(), new Date())).tokens.map((t) => t.jti)).toEqual(['j0']);
        const before = await v5.revocationsVersion!();
        await v5.revokeToken({ jti: 'j1', clientId: 'c0', exp: new Date(Date.now() + 600_000) });
        expect(await v5.revocationsVersion!()).not.toBe(before);
      } finally {
        await v5.close();
      }
    });
  });

  /** Back to what version 4 left: the revision table, its function and the triggers (CASCADE) gone. */
  /** Back to what version 4 left: versions 6 (signing_keys.token_ttl) and 5 undone. */
  async function undoVersion5(schema: string): Promise<void> {
    await admin.query(`ALTER TABLE "${schema}".signing_keys DROP COLUMN token_ttl`);
    await admin.query(`DELETE FROM "${schema}".schema_migrations WHERE version = 6`);
    await admin.query(`DROP TABLE "${schema}".revocations_revision`);
    await admin.query(`DROP FUNCTION "${schema}".bump_revocations_revision() CASCADE`);
    await admin.query(`DELETE FROM "${schema}".schema_migrations WHERE version = 5`);
  }

  async function appliedVersions(schema: string): Promise<number[]> {
    const { rows } = await admin.query<{ version: number }>(
      `SELECT version FROM "${schema}".schema_migrations ORDER BY version`,
    );
    return rows.map((r) => r.version);
  }

  describe('schema and migrations', () => {
    it('migrates a new schema when several stores open on it at the same moment', async () => {
      const schema = freshSchema();
      const stores = await Promise.all(
        [0, 1, 2, 3, 4].map(() => createPostgresStore({ connectionString: postgresUrl(), schema, max: 2 })),
      );
      try {
        // They share the data.
        await stores[0].createClient({
          clientId: 'shared',
          name: 'Shared',
          scopes: [],
          grantTypes: ['client_credentials'],
          createdAt: new Date(),
          secret: { hash: 'h', createdAt: new Date(), expiresAt: null },
        });
        expect((await stores[4].findClient('shared'))?.name).toBe('Shared');
      } finally {
        await Promise.all(stores.map((s) => s.close()));
      }

      const versions = await appliedVersions(schema);
      expect(versions.length).toBeGreaterThan(0);
      expect(new Set(versions).size).toBe(versions.length);

      // Opening again later changes nothing.
      const again = await createPostgresStore({ connectionString: postgresUrl(), schema });
      await again.close();
      expect(await appliedVersions(schema)).toEqual(versions);
    });

    it('creates its tables in the given schema', async () => {
      const schema = freshSchema();
      const store = await createPostgresStore({ pool: admin, schema });
      await store.close();
      const { rows } = await admin.query<{ table_name: string }>(
        'SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name',
        [schema],
      );
      expect(rows.map((r) => r.table_name)).toEqual(['client_assertion_jtis', 'client_secrets', 'clients', 'revocations_revision', 'revoked_tokens', 'schema_migrations', 'signing_keys', 'token_generations']);
    });

    it('migrates a version-1 schema (versions 2 to 6): existing clients become client_secret clients without keys', async () => {
      const schema = freshSchema();
      const first = await createPostgresStore({ pool: admin, schema });
      await first.close();
      // back to what version 1 left, with one client in it
      await undoVersion5(schema);
      await admin.query(`DROP TABLE "${schema}".client_assertion_jtis, "${schema}".revoked_tokens, "${schema}".token_generations`);
      await admin.query(
        `ALTER TABLE "${schema}".clients DROP COLUMN auth_method, DROP COLUMN jwks, DROP COLUMN jwks_uri, DROP COLUMN resources, DROP COLUMN permissions, DROP COLUMN require_dpop`,
      );
      await admin.query(`DELETE FROM "${schema}".schema_migrations WHERE version > 1`);
      await admin.query(
        `INSERT INTO "${schema}".clients (client_id, name, scopes, grant_types, created_at) VALUES ('old', 'Old', '{}', '{client_credentials}', now())`,
      );
      const store = await createPostgresStore({ pool: admin, schema });
      try {
        expect(await store.findClient('old')).toMatchObject({ clientId: 'old', authMethod: 'client_secret', jwks: null, jwksUri: null, resources: [], requireDpop: false });
        expect(await store.consumeJti('old', 'h', new Date(Date.now() + 60_000))).toBe(true);
      } finally {
        await store.close();
      }
      expect(await appliedVersions(schema)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    });

    it('migrates a version-6 schema: keys whose token lifetime no version recorded get the longest there can be', async () => {
      const schema = freshSchema();
      const first = await createPostgresStore({ pool: admin, schema });
      await first.close();
      await admin.query(`DELETE FROM "${schema}".schema_migrations WHERE version > 6`);
      await admin.query(
        `INSERT INTO "${schema}".signing_keys (kid, alg, private_jwk, public_jwk, created_at, activates_at, retired_at, token_ttl)
         VALUES ('k1', 'ES256', '{}', '{}', now() - interval '2 days', now() - interval '2 days', now() - interval '1 hour', 0)`,
      );
      const store = await createPostgresStore({ pool: admin, schema });
      try {
        expect(await store.listKeys()).toEqual([expect.objectContaining({ kid: 'k1', tokenTtl: 86_700 })]);
        // retired an hour ago: a pruner with a 1 s lifetime keeps it, since a token it signed may still be valid
        expect(await store.pruneKeys(new Date(Date.now() - 1000), new Date())).toBe(0);
      } finally {
        await store.close();
      }
      expect(await appliedVersions(schema)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    });

    it.each(['Upper', 'with-dash', 'x"; DROP TABLE y; --', '1starts_with_digit', '', 'a'.repeat(64)])(
      'rejects the schema name %j',
      async (schema) => {
        await expect(createPostgresStore({ pool: admin, schema })).rejects.toThrow(/Invalid PostgreSQL schema name/);
      },
    );

    it('accepts a 63-character schema name', async () => {
      const schema = uniqueSchemaName().padEnd(63, '_');
      schemas.push(schema);
      const store = await createPostgresStore({ pool: admin, schema });
      await store.close();
      expect(await appliedVersions(schema)).not.toHaveLength(0);
    });

    it('rejects, without leaking its pool, when the server cannot be reached', async () => {
      await expect(
        createPostgresStore({ connectionString: 'postgres://postgres@127.0.0.1:1/test', schema: freshSchema() }),
      ).rejects.toThrow();
    });

    it('says StoreUnavailableError when the server cannot be reached, and not for a bad query', async () => {
      const err = await createPostgresStore({ connectionString: 'postgres://postgres@127.0.0.1:1/test', schema: freshSchema() }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toMatch(/^PostgreSQL is unavailable: .*ECONNREFUSED/);
      // a dropped schema is a broken set-up, not an outage
      const schema = freshSchema();
      const store = await createPostgresStore({ pool: admin, schema });
      await dropSchema(admin, schema);
      const missing = await store.listKeys().catch((e: unknown) => e);
      expect(missing).toBeInstanceOf(Error);
      expect(missing).not.toBeInstanceOf(StoreUnavailableError);
      await store.close();
    });
  });

  describe('pool ownership', () => {
    it('does not end a pool it was given', async () => {
      const pool = new Pool({ connectionString: postgresUrl(), max: 2 });
      try {
        const store: PostgresStore = await createPostgresStore({ pool, schema: freshSchema() });
        expect(store.kind).toBe('postgres');
        await store.close();
        expect(pool.ended).toBe(false);
        expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows[0].one).toBe(1);
      } finally {
        await pool.end();
      }
    });

    it('ends the pool it created; close() may be called twice', async () => {
      const store = await createPostgresStore({ connectionString: postgresUrl(), schema: freshSchema() });
      await store.close();
      await store.close();
      await expect(store.listKeys()).rejects.toThrow();
    });
  });

  it('reports a duplicate client id in the error message', async () => {
    const store = await createPostgresStore({ pool: admin, schema: freshSchema() });
    const client = {
      clientId: 'twice',
      name: 'Twice',
      scopes: [],
      grantTypes: ['client_credentials'],
      createdAt: new Date(),
      secret: { hash: 'h', createdAt: new Date(), expiresAt: null },
    };
    try {
      await store.createClient(client);
      await expect(store.createClient(client)).rejects.toThrow('client id "twice" exists already');
    } finally {
      await store.close();
    }
  });
});

describe('isPostgresUnavailable', () => {
  const coded = (code: string): Error => Object.assign(new Error('x'), { code });
  it.each([
    ['ECONNREFUSED', coded('ECONNREFUSED')],
    ['ECONNRESET', coded('ECONNRESET')],
    ['ETIMEDOUT', coded('ETIMEDOUT')],
    ['57P01 admin shutdown', coded('57P01')],
    ['57P03 cannot connect now', coded('57P03')],
    ['08006 connection failure', coded('08006')],
    ['53100 disk full', coded('53100')],
    ['25006 read-only transaction (a standby)', coded('25006')],
    ['lost connection', new Error('Connection terminated unexpectedly')],
    ['pool timeout', new Error('timeout exceeded when trying to connect')],
    ['query timeout', new Error('Query read timeout')],
    ['every address refused', new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')], '')],
  ])('counts %s as an outage', (_name, err) => {
    expect(isPostgresUnavailable(err)).toBe(true);
  });
  it.each([
    ['42P01 undefined table', coded('42P01')],
    ['23505 unique violation', coded('23505')],
    ['a plain bug', new TypeError('x is undefined')],
    ['not an error', 'ECONNREFUSED'],
  ])('does not count %s', (_name, err) => {
    expect(isPostgresUnavailable(err)).toBe(false);
  });
});
