/**
 * Several instances of the example server as real processes on one
 * PostgreSQL schema and one Redis, plus the DB-less resource server: what
 * README "Running several instances" promises, checked over HTTP.
 *
 * Needs PostgreSQL (TEST_DATABASE_URL) and Redis (TEST_REDIS_URL): skipped with
 * one line when either is unreachable, failed when REQUIRE_SERVICES=1.
 */
import http from 'node:http';
import net from 'node:net';
import Redis from 'ioredis';
import { Pool } from 'pg';
import { dropSchema, postgresUrl, uniqueSchemaName } from '../helpers/postgres';
import { redisUrl } from '../helpers/redis';
import {
  HOST,
  addressFailures,
  cli,
  cliJson,
  countedFailures,
  demoClient,
  describeIfPostgresAndRedis,
  freePort,
  getJson,
  getToken,
  getWithToken,
  giveBackAddressFailures,
  jwtClaims,
  jwtHeader,
  otherLoopbackAddress,
  sleep,
  spawnScript,
  startProcess,
  stopAll,
  stopProcess,
  tokenRequest,
  tokenRequestFrom,
  waitHealthy,
  type HttpResult,
  type Proc,
} from './helpers';

const SERVER = 'examples/server.ts';
const RESOURCE_SERVER = 'examples/resource-server.ts';
/** README: a found client is cached for `clientCacheTtl` (2 s), so a revoke reaches every instance within 2 s. */
const REVOKE_BOUND_MS = 2500;
/** Default brute-force limit per (client_id, address) (README "Brute-force protection"). */
const MAX_FAILURES_PER_CLIENT_ADDRESS = 10;

interface CreatedClient {
  client_id: string;
  client_secret: string;
  name: string;
  scope: string;
}

interface KeyListing {
  kid: string;
  alg: string;
  status: 'pending' | 'current' | 'retired';
  activates_at: string;
  retired_at: string | null;
}

function serverEnv(issuer: string, schema: string): Record<string, string> {
  return {
    ISSUER: issuer,
    DATABASE_URL: postgresUrl(),
    DATABASE_SCHEMA: schema,
    REDIS_URL: redisUrl(),
    LOG_LEVEL: 'warn',
    KEY_REFRESH_INTERVAL: '1',
    KEY_ROTATION_LEAD_TIME: '2',
  };
}

const cliEnv = (schema: string): NodeJS.ProcessEnv => ({ DATABASE_URL: postgresUrl(), DATABASE_SCHEMA: schema });

/** GET through a node:http agent; resolves with the status. */
function httpGet(agent: http.Agent, url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent, timeout: 5000 }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      })
      .on('error', reject);
  });
}

/** The process's exit, or `late` if it has not exited within `ms`; the timer is cleared as soon as it exits (nothing left running). */
async function exitWithin(proc: Proc, ms: number, late: string): Promise<{ code: number | null; signal: NodeJS.Signals | null } | string> {
  let timer: NodeJS.Timeout | undefined;
  const given = new Promise<string>((resolve) => {
    timer = setTimeout(() => resolve(late), ms);
  });
  try {
    return await Promise.race([proc.exited, given]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once nothing listens on `port` any more (a new connection is refused), polled every 20 ms for at most `ms`; rejects otherwise. */
async function untilRefused(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const refused = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, HOST);
      socket.once('connect', () => {
        socket.destroy();
        resolve(false);
      });
      socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'));
    });
    if (refused) return;
    if (Date.now() > deadline) throw new Error(`port ${port} still accepts connections ${ms} ms on`);
    await sleep(20);
  }
}

const show = (res: HttpResult): string => `${res.status} ${JSON.stringify(res.body)} www-authenticate=${res.headers.get('www-authenticate')}`;

describeIfPostgresAndRedis('several instances of examples/server.ts on one PostgreSQL schema and one Redis', () => {
  const pool = new Pool({ connectionString: postgresUrl(), max: 2 });
  const redis = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 });
  const schemas: string[] = [];

  beforeAll(async () => {
    await redis.connect();
    // every request here comes from 127.0.0.1, which the servers limit to 100 failures per 15 min
    const { count, ttlMs } = await addressFailures(redis);
    if (count > 60) {
      throw new Error(
        `Redis already counts ${count} failed client authentications from ${HOST} (limit 100; the count expires in ${Math.ceil(ttlMs / 1000)} s); ` +
          'this file adds about 15. Wait for the window to pass.',
      );
    }
  });

  afterAll(async () => {
    await stopAll();
    for (const schema of schemas) await dropSchema(pool, schema).catch(() => undefined);
    await pool.end();
    await giveBackAddressFailures(redis, countedFailures()).catch(() => undefined);
    await redis.quit().catch(() => undefined);
  });

  describe('A and B (one issuer behind a load balancer) and a DB-less resource server', () => {
    const schema = uniqueSchemaName();
    schemas.push(schema);
    const env = cliEnv(schema);
    let a: Proc;
    let b: Proc;
    let rs: Proc;
    let demo: { id: string; secret: string };

    beforeAll(async () => {
      const [portA, portB, portRs] = [await freePort(), await freePort(), await freePort()];
      const issuer = `http://${HOST}:${portA}`;
      a = await startProcess('A', SERVER, portA, serverEnv(issuer, schema));
      b = await startProcess('B', SERVER, portB, serverEnv(issuer, schema));
      rs = await startProcess('resource server', RESOURCE_SERVER, portRs, { ISSUER: issuer, LOG_LEVEL: 'warn', REVOCATION_LIST_INTERVAL: '0.5' });
      process.stderr.write(`multi-instance: start-up with ts-node: A ${a.startupMs} ms, B ${b.startupMs} ms, resource server ${rs.startupMs} ms\n`);
      const printed = demoClient(a.stdout());
      if (!printed) throw new Error(`A printed no demo client on an empty schema:\n${a.stdout()}`);
      demo = printed;
    }, 70_000);

    afterAll(async () => {
      await Promise.all([a, b, rs].filter(Boolean).map((p) => stopProcess(p)));
    });

    it('1. a token from A works on B and on the resource server, and one from B works on A', async () => {
      expect(demoClient(b.stdout())).toBeUndefined(); // B started on a schema that has clients

      const fromA = await getToken(a.url, demo.id, demo.secret);
      const fromB = await getToken(b.url, demo.id, demo.secret);
      // one issuer: same iss and the same signing key on both
      expect(jwtClaims(fromA).iss).toBe(a.url);
      expect(jwtClaims(fromB).iss).toBe(a.url);
      expect(jwtHeader(fromB).kid).toBe(jwtHeader(fromA).kid);

      const onB = await getWithToken(`${b.url}/api/whoami`, fromA);
      expect({ status: onB.status, body: onB.body }).toEqual({ status: 200, body: { client_id: demo.id, scope: 'orders:read orders:write' } });
      const rsWho = await getWithToken(`${rs.url}/api/whoami`, fromA);
      expect({ status: rsWho.status, body: rsWho.body }).toEqual({ status: 200, body: { client_id: demo.id, scope: 'orders:read orders:write' } });
      const rsReports = await getWithToken(`${rs.url}/api/reports`, fromA);
      expect({ status: rsReports.status, body: rsReports.body }).toEqual({ status: 200, body: { reports: [], for: demo.id } });

      const onA = await getWithToken(`${a.url}/api/whoami`, fromB);
      expect({ status: onA.status, body: onA.body }).toEqual({ status: 200, body: { client_id: demo.id, scope: 'orders:read orders:write' } });
      expect((await getWithToken(`${rs.url}/api/whoami`, fromB)).status).toBe(200);
    });

    it('2. a client created with the CLI works on A and B at once', async () => {
      const created = await cliJson<CreatedClient>(['create', '--name', 'x', '--scope', 'orders:read', '--json'], env);
      expect(created).toMatchObject({ name: 'x', scope: 'orders:read' });
      const [onA, onB] = await Promise.all([
        tokenRequest(a.url, created.client_id, created.client_secret),
        tokenRequest(b.url, created.client_id, created.client_secret),
      ]);
      expect(onA.status).toBe(200);
      expect(onB.status).toBe(200);
      expect(onA.body.scope).toBe('orders:read');
      expect(onB.body.scope).toBe('orders:read');
      const who = await getWithToken(`${a.url}/api/whoami`, onB.body.access_token as string);
      expect(who.body).toEqual({ client_id: created.client_id, scope: 'orders:read' });
    });

    it(`3. after a revoke, A and B refuse the client and the tokens it holds within ${REVOKE_BOUND_MS} ms`, async () => {
      const c = await cliJson<CreatedClient>(['create', '--name', 'to-revoke', '--scope', 'orders:read', '--json'], env);
      // both instances have just found (and cached) the client
      const before = await getToken(a.url, c.client_id, c.client_secret);
      await getToken(b.url, c.client_id, c.client_secret);

      const t0 = Date.now();
      const revoked = await cli(['revoke', c.client_id], env);
      expect(revoked).toMatchObject({ code: 0, stderr: '' });

      const poll = async (p: Proc): Promise<{ refusedAfterMs?: number; other: string[] }> => {
        const other: string[] = [];
        while (Date.now() - t0 < 5000) {
          const res = await tokenRequest(p.url, c.client_id, c.client_secret);
          if (res.status === 401 && res.body.error === 'invalid_client') return { refusedAfterMs: Date.now() - t0, other };
          if (res.status !== 200) other.push(show(res));
          await sleep(200);
        }
        return { other };
      };
      const [onA, onB] = await Promise.all([poll(a), poll(b)]);
      expect(onA.other).toEqual([]);
      expect(onB.other).toEqual([]);
      expect(onA.refusedAfterMs).toBeDefined();
      expect(onB.refusedAfterMs).toBeDefined();
      expect(onA.refusedAfterMs!).toBeLessThanOrEqual(REVOKE_BOUND_MS);
      expect(onB.refusedAfterMs!).toBeLessThanOrEqual(REVOKE_BOUND_MS);

      // the tokens it already holds are refused by both instances too (README: Revocation), within the same bound,
      // and by the DB-less resource server within its poll of the revocation list (0.5 s here)
      for (const url of [`${a.url}/api/whoami`, `${b.url}/api/whoami`, `${rs.url}/api/whoami`]) {
        let status = 0;
        while (Date.now() - t0 < REVOKE_BOUND_MS) {
          status = (await getWithToken(url, before)).status;
          if (status === 401) break;
          await sleep(100);
        }
        expect({ url, status }).toEqual({ url, status: 401 });
      }
    }, 15_000);

    it(`4. ${MAX_FAILURES_PER_CLIENT_ADDRESS} wrong secrets from one address spread over A and B lock the client from that address on both; it works from another address, other clients from that one`, async () => {
      const victim = await cliJson<CreatedClient>(['create', '--name', 'victim', '--scope', 'orders:read', '--json'], env);
      const bystander = await cliJson<CreatedClient>(['create', '--name', 'bystander', '--scope', 'orders:read', '--json'], env);

      const statuses: string[] = [];
      for (let i = 0; i < MAX_FAILURES_PER_CLIENT_ADDRESS; i++) {
        const res = await tokenRequest(i % 2 === 0 ? a.url : b.url, victim.client_id, `wrong-${i}`);
        statuses.push(`${res.status} ${String(res.body.error)}`);
      }
      expect(statuses).toEqual(Array(MAX_FAILURES_PER_CLIENT_ADDRESS).fill('401 invalid_client'));

      for (const p of [a, b]) {
        const res = await tokenRequest(p.url, victim.client_id, victim.client_secret); // the right secret, from the failing address
        expect({ instance: p.name, status: res.status }).toEqual({ instance: p.name, status: 429 });
        const retryAfter = Number(res.headers.get('retry-after'));
        expect(Number.isInteger(retryAfter)).toBe(true);
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        expect(retryAfter).toBeLessThanOrEqual(900);
        expect(res.headers.get('content-type')).toMatch(/^application\/json/);
        expect(res.body).toEqual({ error: 'invalid_request', error_description: expect.stringMatching(/too many failed client authentication/) });
      }

      // failures from one address never lock the client out elsewhere (issue 7)
      const elsewhere = otherLoopbackAddress();
      for (const p of [a, b]) {
        const res = await tokenRequestFrom(elsewhere, p.url, victim.client_id, victim.client_secret);
        expect({ instance: p.name, from: elsewhere, status: res.status }).toEqual({ instance: p.name, from: elsewhere, status: 200 });
      }

      for (const p of [a, b]) {
        const res = await tokenRequest(p.url, bystander.client_id, bystander.client_secret);
        expect({ instance: p.name, status: res.status }).toEqual({ instance: p.name, status: 200 });
      }
    }, 15_000);

    it('5. rotate-secret --keep-old 5s: both secrets work on A and B at once, then only the new one', async () => {
      const c = await cliJson<CreatedClient>(['create', '--name', 'rotating', '--scope', 'orders:read', '--json'], env);
      const old = c.client_secret;
      await getToken(a.url, c.client_id, old);
      await getToken(b.url, c.client_id, old);

      const t0 = Date.now();
      const rotated = await cliJson<{ client_id: string; client_secret: string }>(['rotate-secret', c.client_id, '--keep-old', '5s', '--json'], env);
      expect(rotated.client_id).toBe(c.client_id);
      expect(rotated.client_secret).not.toBe(old);

      for (const p of [a, b]) {
        for (const [which, secret] of [['new', rotated.client_secret], ['old', old]] as const) {
          const res = await tokenRequest(p.url, c.client_id, secret);
          expect({ instance: p.name, secret: which, status: res.status }).toEqual({ instance: p.name, secret: which, status: 200 });
        }
      }

      // the old secret until it is refused: never before 5 s, at the latest at 6 s
      const poll = async (p: Proc): Promise<{ refusedAfterMs?: number; other: string[] }> => {
        const other: string[] = [];
        while (Date.now() - t0 < 7500) {
          const res = await tokenRequest(p.url, c.client_id, old);
          if (res.status === 401 && res.body.error === 'invalid_client') return { refusedAfterMs: Date.now() - t0, other };
          if (res.status !== 200) other.push(show(res));
          await sleep(250);
        }
        return { other };
      };
      const [onA, onB] = await Promise.all([poll(a), poll(b)]);
      for (const r of [onA, onB]) {
        expect(r.other).toEqual([]);
        expect(r.refusedAfterMs).toBeDefined();
        expect(r.refusedAfterMs!).toBeGreaterThanOrEqual(5000);
        expect(r.refusedAfterMs!).toBeLessThanOrEqual(6000);
      }
      for (const p of [a, b]) {
        const res = await tokenRequest(p.url, c.client_id, rotated.client_secret);
        expect({ instance: p.name, status: res.status }).toEqual({ instance: p.name, status: 200 });
      }
    }, 20_000);

    it('6. key rotation under load: no failed request on A, B or the resource server', async () => {
      const LOOP_MS = 7000;
      let rotated: { kid: string; activates_at: string } | undefined;
      const CONCURRENCY = 8;
      const start = Date.now();
      const end = start + LOOP_MS;
      const failures: string[] = [];
      /** Failed requests by "where, kid old|new". */
      const failedBy = new Map<string, number>();
      const fail = (where: string, kid: string | undefined, text: string): void => {
        failures.push(text);
        const key = `${where}, ${kid === undefined ? 'no token' : kid === rotated?.kid ? 'new kid' : 'old kid'}`;
        failedBy.set(key, (failedBy.get(key) ?? 0) + 1);
      };
      const issued: { kid: string; iat: number; by: string }[] = [];
      let requests = 0;
      const jwksSeen: { instance: string; at: number; kids: string[] }[] = [];

      const worker = async (w: number): Promise<void> => {
        for (let i = w; Date.now() < end; i++) {
          const [issuer, other] = i % 2 === 0 ? [a, b] : [b, a];
          try {
            requests++;
            const t = await tokenRequest(issuer.url, demo.id, demo.secret);
            if (t.status !== 200) {
              fail(`token request to ${issuer.name}`, undefined, `token from ${issuer.name} at +${Date.now() - start} ms: ${show(t)}`);
              continue;
            }
            const token = t.body.access_token as string;
            issued.push({ kid: jwtHeader(token).kid!, iat: jwtClaims(token).iat as number, by: issuer.name });
            requests += 2;
            const [onOther, onRs] = await Promise.all([getWithToken(`${other.url}/api/whoami`, token), getWithToken(`${rs.url}/api/whoami`, token)]);
            const kid = jwtHeader(token).kid;
            if (onOther.status !== 200) fail(`whoami on ${other.name}`, kid, `whoami on ${other.name} (kid ${kid}) at +${Date.now() - start} ms: ${show(onOther)}`);
            if (onRs.status !== 200) fail('whoami on the resource server', kid, `whoami on the resource server (kid ${kid}) at +${Date.now() - start} ms: ${show(onRs)}`);
          } catch (err) {
            fail(`worker ${w}`, undefined, `worker ${w} at +${Date.now() - start} ms: ${(err as Error).message}`);
          }
        }
      };
      const watchJwks = async (): Promise<void> => {
        while (Date.now() < end) {
          for (const p of [a, b]) {
            const res = await getJson(`${p.url}/.well-known/jwks.json`);
            jwksSeen.push({ instance: p.name, at: Date.now(), kids: (res.body.keys as { kid: string }[]).map((k) => k.kid) });
          }
          await sleep(200);
        }
      };
      const rotate = async (): Promise<void> => {
        await sleep(1000);
        rotated = await cliJson<{ kid: string; activates_at: string }>(['keys', 'rotate', '--lead-time', '3s', '--json'], env);
      };

      await Promise.all([...Array.from({ length: CONCURRENCY }, (_, w) => worker(w)), watchJwks(), rotate()]);

      expect(rotated).toBeDefined();
      const newKid = rotated!.kid;
      const activatesAt = Date.parse(rotated!.activates_at);
      const oldKids = [...new Set(issued.filter((t) => t.kid !== newKid).map((t) => t.kid))];
      process.stderr.write(
        `multi-instance: key rotation under load: ${requests} requests in ${LOOP_MS} ms, ${failures.length} failed, ` +
          `${issued.filter((t) => t.kid === newKid).length}/${issued.length} tokens with the new kid\n`,
      );

      expect(requests).toBeGreaterThan(50);
      expect(oldKids).toHaveLength(1);
      const oldKid = oldKids[0];

      // the new key signs, on both instances, and never before its lead time has passed
      const withNew = issued.filter((t) => t.kid === newKid);
      expect(new Set(withNew.map((t) => t.by))).toEqual(new Set(['A', 'B']));
      for (const t of withNew) expect(t.iat).toBeGreaterThanOrEqual(Math.floor(activatesAt / 1000));
      // the replaced key stops signing at that moment
      for (const t of issued.filter((x) => x.kid === oldKid)) expect(t.iat).toBeLessThanOrEqual(Math.floor(activatesAt / 1000));

      // during the overlap A (and B) publish both keys
      const both = (instance: string) => jwksSeen.filter((s) => s.instance === instance && s.kids.includes(oldKid) && s.kids.includes(newKid));
      expect(both('A').length).toBeGreaterThan(0);
      expect(both('B').length).toBeGreaterThan(0);
      expect(both('A').some((s) => s.at < activatesAt)).toBe(true); // published before it signs

      // and not one request failed: no token request, no whoami on the other instance or on the resource server
      const rotatedAt = `rotation at +1000 ms, new key signs from +${activatesAt - start} ms`;
      expect({ [rotatedAt]: Object.fromEntries(failedBy), first: failures.slice(0, 3) }).toEqual({ [rotatedAt]: {}, first: [] });
    }, 20_000);
  });

  describe('start-up and shutdown', () => {
    const schema = uniqueSchemaName();
    schemas.push(schema);
    const env = cliEnv(schema);
    let demoClients: number | undefined;
    let printedDemo: string[] = [];

    afterAll(async () => {
      await stopAll();
    });

    it('7. A and B started at the same moment on a fresh schema create one signing key between them', async () => {
      const [portA, portB] = [await freePort(), await freePort()];
      const issuer = `http://${HOST}:${portA}`;
      const t = Date.now();
      const spawnedA = spawnScript('A2', SERVER, portA, serverEnv(issuer, schema));
      const spawnedB = spawnScript('B2', SERVER, portB, serverEnv(issuer, schema));
      const [a, b] = await Promise.all([waitHealthy(spawnedA, t), waitHealthy(spawnedB, t)]);

      const keys = await cliJson<KeyListing[]>(['keys', 'list', '--json'], env);
      expect(keys.filter((k) => k.status !== 'retired')).toHaveLength(1);
      expect(keys).toHaveLength(1);

      const [jwksA, jwksB] = await Promise.all([getJson(`${a.url}/.well-known/jwks.json`), getJson(`${b.url}/.well-known/jwks.json`)]);
      expect(jwksA.status).toBe(200);
      expect(jwksA.body).toEqual(jwksB.body);
      expect((jwksA.body.keys as { kid: string }[]).map((k) => k.kid)).toEqual([keys[0].kid]);

      // and a token of one verifies on the other
      const created = await cliJson<CreatedClient>(['create', '--name', 'fresh', '--scope', 'orders:read', '--json'], env);
      const token = await getToken(b.url, created.client_id, created.client_secret);
      expect((await getWithToken(`${a.url}/api/whoami`, token)).status).toBe(200);

      const clients = await cliJson<{ name: string }[]>(['list', '--json'], env);
      demoClients = clients.filter((x) => x.name === 'demo').length;
      printedDemo = [a, b].filter((p) => demoClient(p.stdout()) !== undefined).map((p) => p.name);

      await Promise.all([stopProcess(a), stopProcess(b)]);
    }, 40_000);

    it('7b. ...and one demo client between them (README: the first start creates a demo client and prints it, once)', () => {
      expect(demoClients).toBeDefined(); // set by test 7
      expect({ demoClients, printedBy: printedDemo.length }).toEqual({ demoClients: 1, printedBy: 1 });
    });

    /** Starts C on the (already migrated) schema, with a client of its own. */
    async function startC(): Promise<{ c: Proc; client: CreatedClient }> {
      const port = await freePort();
      // an idle keep-alive connection is left to its next request or its keep-alive timeout (closing it at once
      // resets a request its client may be writing): 2 s here, so the stop's wait for idle clients stays short
      const c = await startProcess('C', SERVER, port, { ...serverEnv(`http://${HOST}:${port}`, schema), KEEP_ALIVE_TIMEOUT: '2' });
      const client = await cliJson<CreatedClient>(['create', '--name', 'sigterm', '--scope', 'orders:read', '--json'], env);
      return { c, client };
    }

    /** What a request to /health gets once the process is gone: ECONNREFUSED, or what it answered. */
    const healthAfterExit = (c: Proc): Promise<string> =>
      fetch(`${c.url}/health`, { signal: AbortSignal.timeout(2000) }).then(
        (r) => `answered ${r.status}`,
        (err: Error & { cause?: { code?: string } }) => err.cause?.code ?? err.message,
      );

    it('8a. SIGTERM with idle keep-alive connections open: exit code 0 within 5 s, then /health is refused', async () => {
      const { c, client } = await startC();
      const agent = new http.Agent({ keepAlive: true });
      try {
        // idle keep-alive connections (undici's fetch and node:http's agent, which has no timeout of its own) hold
        // the shutdown up no longer than the keep-alive timeout (2 s) and Node's second after it
        expect((await getJson(`${c.url}/health`)).status).toBe(200);
        expect((await tokenRequest(c.url, client.client_id, client.client_secret)).status).toBe(200);
        expect(await httpGet(agent, `${c.url}/health`)).toBe(200);

        const signalledAt = Date.now();
        c.child.kill('SIGTERM');
        const exit = await exitWithin(c, 5000, 'still running 5 s after SIGTERM');
        expect(exit).toEqual({ code: 0, signal: null });
        expect(Date.now() - signalledAt).toBeLessThanOrEqual(5000);
        expect(await healthAfterExit(c)).toBe('ECONNREFUSED');
      } finally {
        agent.destroy();
        await stopProcess(c);
      }
    }, 30_000);

    it('8b. SIGTERM during a request on a keep-alive connection: the request finishes, then the process exits 0 at once', async () => {
      const { c, client } = await startC();
      const agent = new http.Agent({ keepAlive: true }); // as a load balancer or an HTTP client pool keeps connections
      try {
        // a slow request: headers and the start of the body now, the rest once the server has begun to shut down
        const body = 'grant_type=client_credentials';
        let sendRest: () => void = () => undefined;
        let inFlight: () => void = () => undefined;
        // the server's 100 Continue says it has read the headers: the request is in flight (was: a fixed 300 ms)
        const received = new Promise<void>((resolve) => (inFlight = resolve));
        const response = new Promise<{ status: number; body: string; at: number }>((resolve, reject) => {
          const req = http.request(
            `${c.url}/oauth/token`,
            {
              method: 'POST',
              agent,
              auth: `${client.client_id}:${client.client_secret}`,
              headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body), expect: '100-continue' },
              timeout: 10_000,
            },
            (res) => {
              let text = '';
              res.setEncoding('utf8').on('data', (d: string) => (text += d));
              res.on('end', () => resolve({ status: res.statusCode!, body: text, at: Date.now() }));
              res.on('error', reject);
            },
          );
          req.on('error', reject);
          req.on('timeout', () => req.destroy(new Error('slow request timed out')));
          req.on('continue', () => inFlight());
          req.write(body.slice(0, 5));
          sendRest = () => req.end(body.slice(5));
        });
        await Promise.race([received, response.then(() => Promise.reject(new Error('answered before its body was sent')))]);

        const signalledAt = Date.now();
        c.child.kill('SIGTERM');
        // the rest of the body once the server has stopped listening (SIGTERM handled, closing), was: 800 ms after the start
        await untilRefused(c.port, 5000);
        sendRest();
        const res = await response;
        expect(res.status).toBe(200); // README: requests in flight finish
        expect(JSON.parse(res.body)).toMatchObject({ token_type: 'Bearer' });

        const exit = await exitWithin(c, 5000, 'still running 5 s after SIGTERM');
        expect(exit).toEqual({ code: 0, signal: null });
        const exitedAt = Date.now();
        expect(exitedAt - signalledAt).toBeLessThanOrEqual(5000);
        // nothing left to wait for once the request is done but the idle connections of earlier requests (the
        // readiness checks' fetch): the keep-alive timeout (2 s) and Node's second after it, at most
        expect(exitedAt - res.at).toBeLessThanOrEqual(3500);
        expect(await healthAfterExit(c)).toBe('ECONNREFUSED');
      } finally {
        agent.destroy();
        await stopProcess(c);
      }
    }, 30_000);
  });
});
