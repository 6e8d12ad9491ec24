/**
 * Revocation across instances on one embedded store (an SQLite file) with a
 * Redis doorbell (revocationPush): the instance or CLI that revokes publishes,
 * the others reload at once. revocationResync is 30 s here, so only the push
 * can explain a refusal within a second; a control without the push shows it.
 */
import { randomUUID } from 'node:crypto';
import express from 'express';
import Redis from 'ioredis';
import { createIssuer, type Issuer } from '../../lib';
import { main } from '../../lib/cli/main';
import { cliRevocationsReachBoth, expectRefusedWithin1s, revokedAtAReachesB, status, token } from './revocation-helpers';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';
import { describeIfRedis, redisUrl } from '../helpers/redis';

interface Instance {
  issuer: Issuer;
  app: express.Express;
  redis: Redis;
}

async function instance(dataDir: string, channel: string, name: string): Promise<Instance> {
  // connectionName is copied to the subscriber connection (duplicate()): the test finds and cuts it by name
  const redis = new Redis(redisUrl(), { connectionName: name, maxRetriesPerRequest: 1 });
  const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, revocationResync: 30, revocationPush: { redis, channel } });
  await issuer.ready();
  const app = express();
  app.use(issuer.router());
  app.get('/api/orders', issuer.requireBearer(), (req, res) => res.json({ client: req.auth!.clientId }));
  return { issuer, app, redis };
}

describeIfRedis('revocation across instances on one SQLite file, pushed through Redis (revocationPush)', () => {
  const channel = `ecc-test:${randomUUID()}`;
  const nameB = `ecc-test-b-${randomUUID().slice(0, 8)}`;
  let dataDir: string;
  let a: Instance;
  let b: Instance;
  let admin: Redis;
  beforeAll(async () => {
    dataDir = tempDir();
    admin = new Redis(redisUrl());
    a = await instance(dataDir, channel, `ecc-test-a-${randomUUID().slice(0, 8)}`);
    b = await instance(dataDir, channel, nameB);
  });
  afterAll(async () => {
    await a?.issuer.close();
    await b?.issuer.close();
    await Promise.all([a?.redis.quit(), b?.redis.quit(), admin?.quit()]);
  });

  it('RV1 on two instances: a token revoked at A (POST /oauth/revoke) is refused by B within 1 s', async () => {
    await revokedAtAReachesB(a, b, 'r-c1');
  });

  it('control: the CLI without REDIS_URL rings nobody, so B (resync 30 s) still accepts a second later', async () => {
    const client = await a.issuer.clients.create({ name: 'r-c2', scopes: 'orders:read' });
    const at = await token(a.app, client);
    expect(await main(['revoke-tokens', client.clientId], { stdout: () => undefined, stderr: () => undefined, env: { DATA_DIR: dataDir } })).toBe(0);
    await new Promise((r) => setTimeout(r, 1000));
    expect(await status(b.app, at)).toBe(200);
  });

  it('RV7/RV8 from the CLI with REDIS_URL: revoke-tokens and revoke reach both instances within 1 s', async () => {
    await cliRevocationsReachBoth(a, b, 'r-c3', { DATA_DIR: dataDir, REDIS_URL: redisUrl(), REVOCATION_CHANNEL: channel });
  });

  it("B's subscription cut by Redis: it reconnects and the next revocation still reaches it within 1 s", async () => {
    const client = await a.issuer.clients.create({ name: 'r-c4', scopes: 'orders:read' });
    const at = await token(a.app, client);
    const list = (await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) as string;
    const ids = list
      .split('\n')
      .filter((line) => line.includes(` name=${nameB} `))
      .map((line) => /id=(\d+)/.exec(line)![1]);
    expect(ids).toHaveLength(1);
    await admin.call('CLIENT', 'KILL', 'ID', ids[0]);
    // wait until B's subscriber is back (ioredis reconnects and subscribes again)
    const deadline = Date.now() + 5000;
    for (;;) {
      const again = ((await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) as string).split('\n').filter((line) => line.includes(` name=${nameB} `));
      if (again.length === 1 && !again[0].includes(`id=${ids[0]} `)) break;
      if (Date.now() > deadline) throw new Error('B did not resubscribe within 5 s');
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, 50));
    await a.issuer.clients.revoke(client.clientId);
    await expectRefusedWithin1s([a.app, b.app], at);
  });

  it('a wrong revocationPush option is refused at start-up with a clear message', () => {
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, revocationPush: { redis: {} } })).toThrow(/revocationPush.redis must be an ioredis client/);
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, revocationPush: { redis: a.redis, nope: 1 } as never })).toThrow(/revocationPush/);
  });
});
