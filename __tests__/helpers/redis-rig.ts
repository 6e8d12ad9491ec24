/**
 * An issuer whose Redis parts (brute-force counters, DPoP replay store, and
 * optionally the revocation push) are on one ioredis client reaching Redis
 * through a fault proxy the test owns, with a client and a DPoP-bound token
 * got before any fault: what the Redis outage tests start from.
 */
import Redis, { type RedisOptions } from 'ioredis';
import request from 'supertest';
import { ISSUER, setup, type TestSetup } from './app';
import { newDpopKey } from './dpop';
import { startFaultProxy, type FaultProxy } from './fault-proxy';
import { redisUrl } from './redis';

export type Logged = Record<string, unknown>;
export const TOKEN_URL = `${ISSUER}/oauth/token`;

export interface RedisRig {
  proxy: FaultProxy;
  redis: Redis;
  t: TestSetup;
  /** Every log line, with its level. */
  lines: Logged[];
  client: { clientId: string; clientSecret: string };
  key: ReturnType<typeof newDpopKey>;
  /** A DPoP-bound token got before the fault. */
  at: string;
  close(): Promise<void>;
}

let rigs = 0;

/** `name` keeps the keys apart; `options` are the ioredis client's; `parts` turns the counters or the push off or on. */
export async function redisRig(name: string, options: RedisOptions = {}, parts: { bruteForce?: boolean; revocationPush?: boolean } = {}): Promise<RedisRig> {
  const target = new URL(redisUrl());
  const proxy = await startFaultProxy(Number(target.port || 6379), target.hostname);
  const redis = new Redis({ host: '127.0.0.1', port: proxy.port, ...options });
  redis.on('error', () => undefined);
  const prefix = `ecc:test:${name}:${process.pid}:${Date.now()}:${rigs++}`;
  const lines: Logged[] = [];
  const log = (level: string) => (o: Logged) => void lines.push({ level, ...o });
  const t = await setup(
    {
      bruteForce: parts.bruteForce === false ? false : { redis, keyPrefix: `${prefix}:bf` },
      dpop: { redis, keyPrefix: `${prefix}:dpop:` },
      ...(parts.revocationPush === true && { revocationPush: { redis, channel: `${prefix}:revocations` } }),
      logger: { info: log('info'), warn: log('warn'), error: log('error') },
    },
    (app, issuer) => {
      app.use(issuer.router());
      app.get('/api/orders', issuer.requireBearer(), (req, res) => res.json({ client_id: req.auth!.clientId }));
    },
  );
  await redis.ping();
  const client = await t.issuer.clients.create({ name, scopes: 'orders:read' });
  const key = newDpopKey();
  const first = await request(t.app)
    .post('/oauth/token')
    .set('DPoP', key.proof({ htm: 'POST', htu: TOKEN_URL }))
    .type('form')
    .send({ grant_type: 'client_credentials', client_id: client.clientId, client_secret: client.clientSecret });
  expect(first.status).toBe(200);
  return {
    proxy,
    redis,
    t,
    lines,
    client,
    key,
    at: first.body.access_token as string,
    async close() {
      await t.close();
      proxy.restore();
      redis.disconnect();
      await proxy.close();
    },
  };
}
