/**
 * `keys rotate` (the CLI) while an earlier rotation is still pending, against
 * running issuers: the key that signs keeps signing until the newest key
 * activates, the pending key never signs, every key stays published while
 * tokens it signed may be valid, and those tokens keep verifying. On the
 * embedded store (one issuer) and on PostgreSQL (two issuers that learn of
 * the rotations by their key refresh). Only the clock is fake.
 */
import { rmSync } from 'node:fs';
import type { Express } from 'express';
import { Pool } from 'pg';
import request from 'supertest';
import { createIssuer, type Issuer } from '../../lib';
import { createPostgresStore } from '../../lib/stores/postgres';
import { apiApp, AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { runCli as cli } from '../helpers/cli';
import { describeIfPostgres, dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';
import { fetchToken, headerOf } from '../helpers/tokens';

const MIN = 60_000;

interface Instance {
  issuer: Issuer;
  app: Express;
}

const mount = (issuer: Issuer): Instance => ({ issuer, app: apiApp(issuer) });

const jwksKids = async (i: Instance): Promise<string[]> =>
  ((await request(i.app).get('/.well-known/jwks.json')).body.keys as { kid: string }[]).map((k) => k.kid).sort();

const advance = (ms: number) => jest.setSystemTime(Date.now() + ms);

/** Waits (real time) until every instance serves `kids` in its JWKS: a key refresh runs in the background. */
async function untilPublished(instances: Instance[], kids: string[]): Promise<void> {
  const want = [...kids].sort();
  for (let attempt = 0; ; attempt++) {
    const served = await Promise.all(instances.map(jwksKids));
    if (served.every((s) => JSON.stringify(s) === JSON.stringify(want)) || attempt === 100) {
      for (const s of served) expect(s).toEqual(want);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function scenario(instances: Instance[], env: NodeJS.ProcessEnv): Promise<void> {
  const client = await instances[0].issuer.clients.create({ name: 'svc' });
  const creds = { clientId: client.clientId, clientSecret: client.clientSecret! };
  const tokens = async (): Promise<string[]> => Promise.all(instances.map((i) => fetchToken(i.app, creds)));
  const kids = (list: string[]) => [...new Set(list.map((t) => headerOf(t).kid as string))];
  const verifiesEverywhere = async (token: string) => {
    for (const i of instances) expect((await request(i.app).get('/api').set('authorization', `Bearer ${token}`)).status).toBe(200);
  };

  const before = await tokens();
  const [first] = kids(before);
  expect(kids(before)).toEqual([first]);

  advance(1000);
  const pending = await cli(['keys', 'rotate', '--lead-time', '10m', '--json'], env);
  expect(pending.code).toBe(0);
  const second = JSON.parse(pending.stdout).kid as string;
  advance(1000);
  const again = await cli(['keys', 'rotate', '--lead-time', '5m'], env);
  expect(again.code).toBe(0);
  expect(again.stdout).toContain(`; ${first} signs until then.`);
  expect(again.stdout).toContain(`The pending key ${second} `);
  const third = /New signing key (\S+) /.exec(again.stdout)![1];

  // past the key refresh: every instance publishes the three keys, and the first still signs
  advance(31_000);
  await tokens(); // a use after the refresh interval starts the reload
  await untilPublished(instances, [first, second, third]);
  const stillFirst = await tokens();
  expect(kids(stillFirst)).toEqual([first]);

  // when the third key activates it signs everywhere; the tokens the first signed keep verifying
  advance(5 * MIN);
  const byThird = await tokens();
  expect(kids(byThird)).toEqual([third]);
  for (const t of [...before, ...stillFirst, ...byThird]) await verifiesEverywhere(t);

  // when the withdrawn key would have activated it does not sign; it stays published, like the first
  advance(5 * MIN);
  expect(kids(await tokens())).toEqual([third]);
  await untilPublished(instances, [first, second, third]);
  for (const t of [...before, ...stillFirst]) await verifiesEverywhere(t);
  for (const i of instances) {
    const listed = await i.issuer.keys.list();
    expect(listed.map((k) => [k.kid, k.status])).toEqual([
      [first, 'retired'],
      [second, 'retired'],
      [third, 'current'],
    ]);
    for (const k of listed) if (k.retiredAt) expect(k.retiredAt.getTime()).toBeGreaterThanOrEqual(k.activatesAt.getTime());
  }
}

/** Only the clock is fake: timers, sockets and PostgreSQL run as they do. */
beforeEach(() => {
  jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'clearImmediate', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'queueMicrotask', 'hrtime', 'performance'] });
});
afterEach(() => {
  jest.useRealTimers();
});

describe('keys rotate while a rotation is pending, embedded store', () => {
  it('the signing key signs until the newest key activates, the pending one never signs, old tokens keep verifying', async () => {
    const dataDir = tempDir();
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
    try {
      await issuer.ready();
      await scenario([mount(issuer)], { DATA_DIR: dataDir });
    } finally {
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describeIfPostgres('keys rotate while a rotation is pending, PostgreSQL with two issuers', () => {
  it('both instances sign with the signing key until the newest key activates, never with the pending one; old tokens keep verifying', async () => {
    const schema = uniqueSchemaName();
    const admin = new Pool({ connectionString: postgresUrl(), max: 1 });
    const issuers: Issuer[] = [];
    try {
      for (let n = 0; n < 2; n++) {
        const store = await createPostgresStore({ connectionString: postgresUrl(), schema, max: 4 });
        issuers.push(createIssuer({ issuer: ISSUER, audience: AUDIENCE, logger: false, store }));
      }
      await Promise.all(issuers.map((i) => i.ready()));
      await scenario(issuers.map(mount), { DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema });
    } finally {
      await Promise.all(issuers.map((i) => i.close()));
      await dropSchema(admin, schema);
      await admin.end();
    }
  });
});
