/**
 * The shared store on Redis (ioredis): a second client with its own connection
 * reuses the first one's token; the lock makes a cold start one token request;
 * with an encryption key Redis holds tokens sealed.
 */
import { execFile } from 'node:child_process';
import { createSecretKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Redis from 'ioredis';
import { createTokenClient, redisTokenStore, type RedisLike, type ReleaseLock, type StoredToken, type TokenClientEvent } from '../../lib/client';
import { describeIfRedis, redisUrl } from '../helpers/redis';
import { fakeTokenEndpoint, gate, until, type FakeServer } from './fakes';

describeIfRedis('redisTokenStore', () => {
  const prefix = `ecc-test:${randomBytes(6).toString('hex')}:`;
  let endpoint: FakeServer & { tokenUrl: string };
  const connections: Redis[] = [];
  const clients: Array<{ close(): Promise<void> }> = [];

  function connect(): Redis {
    const r = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
    connections.push(r);
    return r;
  }

  beforeEach(async () => {
    endpoint = await fakeTokenEndpoint(120);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
    await endpoint.close();
  });
  afterAll(async () => {
    const r = connect();
    const keys = await r.keys(`${prefix}*`);
    if (keys.length) await r.del(...keys);
    connections.forEach((c) => c.disconnect());
  });

  it("a second client (its own connection) reuses the first one's token; the key expires with the token", async () => {
    const first = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }) });
    const second = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }) });
    clients.push(first, second);
    expect((await first.getToken()).accessToken).toBe('tok-1');
    const r = connect();
    let keys: string[] = [];
    for (let i = 0; i < 100 && keys.length === 0; i++) {
      keys = await r.keys(`${prefix}*`);
      if (!keys.length) await new Promise((res) => setTimeout(res, 10));
    }
    expect(keys).toHaveLength(1);
    const ttl = await r.pttl(keys[0]);
    expect(ttl).toBeGreaterThan(100_000);
    expect(ttl).toBeLessThanOrEqual(120_000);
    expect(await r.get(keys[0])).not.toContain('svc'); // the key is a hash; the value is the token record only
    for (let i = 0; i < 100; i++) expect((await second.getToken()).accessToken).toBe('tok-1');
    expect(endpoint.requests).toHaveLength(1);
  });

  it("a second process reuses the first one's token", async () => {
    const store = redisTokenStore({ client: connect(), prefix });
    const first = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'proc', clientSecret: 'x', store });
    clients.push(first);
    const token = (await first.getToken()).accessToken;
    const r = connect();
    for (let i = 0; i < 100 && (await r.keys(`${prefix}*`)).length < 1; i++) await new Promise((res) => setTimeout(res, 10));
    const script = `
      const Redis = require('ioredis');
      const { createTokenClient, redisTokenStore } = require(${JSON.stringify(join(__dirname, '../../lib/client'))});
      const redis = new Redis(process.env.URL);
      const c = createTokenClient({ tokenEndpoint: process.env.EP, clientId: 'proc', clientSecret: 'x', store: redisTokenStore({ client: redis, prefix: process.env.PREFIX }) });
      c.getToken().then((t) => { process.stdout.write(t.accessToken); redis.disconnect(); }, (e) => { console.error(e); process.exit(1); });`;
    const { stdout } = await promisify(execFile)(process.execPath, ['-r', 'ts-node/register/transpile-only', '-e', script], {
      cwd: join(__dirname, '../..'),
      env: { ...process.env, URL: redisUrl(), EP: endpoint.tokenUrl, PREFIX: prefix },
      timeout: 60_000,
    });
    expect(stdout).toBe(token);
    expect(endpoint.requests).toHaveLength(1);
  }, 70_000);

  /** `n` clients, each on its own connection, starting at once with the token endpoint held for 200 ms; their tokens. */
  async function coldStart(n: number, clientId: string, lock?: boolean): Promise<string[]> {
    const held = gate();
    endpoint.gate = held.promise;
    const started = Array.from({ length: n }, () =>
      createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId, clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix, lock }) }),
    );
    clients.push(...started);
    const calls = started.map((c) => c.getToken().then((t) => t.accessToken));
    await until(() => endpoint.requests.length >= 1, 'a token request');
    await new Promise((r) => setTimeout(r, 200));
    held.open();
    return Promise.all(calls);
  }

  it('5 clients on their own connections starting at once make 1 token request (the lock); its key is gone afterwards', async () => {
    expect(await coldStart(5, 'cold')).toEqual(['tok-1', 'tok-1', 'tok-1', 'tok-1', 'tok-1']);
    expect(endpoint.requests).toHaveLength(1);
    expect(await connect().keys(`${prefix}lock:*`)).toEqual([]);
  });

  it('lock: false: each of them asks', async () => {
    expect((await coldStart(5, 'unlocked', false)).sort()).toEqual(['tok-1', 'tok-2', 'tok-3', 'tok-4', 'tok-5']);
    expect(endpoint.requests).toHaveLength(5);
  });

  it('a release ends only its own lock: one that expired and was taken since stays', async () => {
    const r = connect();
    const store = redisTokenStore({ client: r, prefix });
    const first = await store.lock!('k', 50);
    expect(typeof first).toBe('function');
    expect(await store.lock!('k', 5000)).toBeNull();
    await new Promise((res) => setTimeout(res, 120));
    const second = await store.lock!('k', 5000);
    expect(typeof second).toBe('function');
    await (first as ReleaseLock)(true);
    expect(await r.pttl(`${prefix}lock:k`)).toBeGreaterThan(4000);
    expect(await store.lock!('k', 5000)).toBeNull();
    await (second as ReleaseLock)();
    expect(await r.exists(`${prefix}lock:k`)).toBe(0);
  });

  it("a holder that failed: for a second the lock answers 'failed' (the others ask at once), then it can be taken again", async () => {
    const r = connect();
    const store = redisTokenStore({ client: r, prefix });
    const held = await store.lock!('f', 5000);
    await (held as ReleaseLock)(true);
    expect(await store.lock!('f', 5000)).toBe('failed');
    expect(await r.pttl(`${prefix}lock:f`)).toBeLessThanOrEqual(1000);
    await new Promise((res) => setTimeout(res, 1100));
    const again = await store.lock!('f', 5000);
    expect(typeof again).toBe('function');
    await (again as ReleaseLock)();
    expect(await r.exists(`${prefix}lock:f`)).toBe(0);
  });

  it('after a holder fails, the clients waiting on it ask side by side (8 clients, 503 after 600 ms)', async () => {
    endpoint.reply = async () => {
      await new Promise((res) => setTimeout(res, 600));
      return { status: 503, body: { error: 'temporarily_unavailable' } };
    };
    const started = Date.now();
    const finished: number[] = [];
    const calls = Array.from({ length: 8 }, () =>
      createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'failing', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }) })
        .getToken()
        .then(
          () => 'token',
          (e: { status?: number }) => (finished.push(Date.now() - started), e.status),
        ),
    );
    expect(await Promise.all(calls)).toEqual(Array(8).fill(503));
    expect(endpoint.requests).toHaveLength(8);
    finished.sort((a, b) => a - b);
    // the holder at about 600 ms, the 7 others together one request later (one after another: 250 ms apart, 1.5 s from first to last)
    expect(finished[7] - finished[1]).toBeLessThan(500);
  });

  it("get() reads the value and what is left of its key's life in one MULTI (GET, PTTL): ttlMs; no separate GET", async () => {
    const r = connect();
    const calls: string[] = [];
    const spy: RedisLike = {
      get: (k) => (calls.push('get'), r.get(k)),
      set: (k, v, mode, ttl) => (calls.push('set'), r.set(k, v, mode, ttl)),
      del: (k) => (calls.push('del'), r.del(k)),
      multi: () => (calls.push('multi'), r.multi()),
    };
    const store = redisTokenStore({ client: spy, prefix });
    const token: StoredToken = { accessToken: 'tok-m', tokenType: 'Bearer', scope: '', expiresAt: Date.now() + 3600_000, lifetime: 3600_000 };
    await store.set('multi', token, 600_000);
    const found = await store.get('multi');
    expect(calls).toEqual(['set', 'multi']);
    expect(found).toMatchObject(token);
    expect(found!.ttlMs).toBeGreaterThan(590_000);
    expect(found!.ttlMs).toBeLessThanOrEqual(600_000);
    expect(await store.get('absent')).toBeUndefined();
  });

  it("a stored token's expiry is bounded by its key's time to live: a key that Redis drops in 90 s serves for 90 s, not the 120 s its record says", async () => {
    const own = `${prefix}ttl:`;
    const first = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'ttl', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix: own }) });
    clients.push(first);
    await first.getToken();
    const r = connect();
    let keys: string[] = [];
    for (let i = 0; i < 100 && keys.length === 0; i++) {
      keys = (await r.keys(`${own}*`)).filter((k) => !k.startsWith(`${own}lock:`));
      if (keys.length === 0) await new Promise((res) => setTimeout(res, 10));
    }
    expect(keys).toHaveLength(1);
    expect(await r.pexpire(keys[0], 90_000)).toBe(1);
    const events: TokenClientEvent[] = [];
    const second = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'ttl', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix: own }), onEvent: (e) => events.push(e) });
    clients.push(second);
    const before = Date.now();
    const got = await second.getToken();
    expect(got.accessToken).toBe('tok-1');
    expect(got.expiresAt.getTime()).toBeGreaterThan(before + 85_000);
    expect(got.expiresAt.getTime()).toBeLessThanOrEqual(Date.now() + 90_000);
    expect(events.filter((e) => e.type === 'store.error')).toEqual([]);
    expect(endpoint.requests).toHaveLength(1);
  });

  it('an instance whose clock is a day ahead stores a 2-minute token: another instance keeps it for 2 minutes, not a day', async () => {
    const ahead = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'ahead', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }), now: () => Date.now() + 86_400_000 });
    clients.push(ahead);
    await ahead.getToken();
    let offset = 0;
    const reader = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'ahead', clientSecret: 'x', store: redisTokenStore({ client: connect(), prefix }), now: () => Date.now() + offset, refreshWindow: 0 });
    clients.push(reader);
    let got = await reader.getToken();
    for (let i = 0; i < 100 && got.accessToken !== 'tok-1'; i++) {
      await new Promise((res) => setTimeout(res, 10)); // (the write runs in the background)
      got = await reader.getToken();
    }
    expect(got.accessToken).toBe('tok-1');
    expect(got.expiresAt.getTime()).toBeLessThanOrEqual(Date.now() + 120_000);
    offset = 5 * 60_000;
    expect((await reader.getToken()).accessToken).not.toBe('tok-1');
  });

  it('a Redis that is down: calls go to the token endpoint, with store.error events', async () => {
    const down = new Redis({ port: 1, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
    connections.push(down);
    const events: TokenClientEvent[] = [];
    const c = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: down, prefix }), onEvent: (e) => events.push(e) });
    clients.push(c);
    expect((await c.getToken()).accessToken).toBe('tok-1');
    await new Promise((r) => setTimeout(r, 20));
    expect(events.filter((e) => e.type === 'store.error').length).toBeGreaterThanOrEqual(1);
  });
});

/** A RedisLike in memory (no expiry): what the store writes, as Redis would hold it. */
function memoryRedis(): RedisLike & { data: Map<string, string> } {
  const data = new Map<string, string>();
  return {
    data,
    async get(key: string) {
      return data.get(key) ?? null;
    },
    async set(key: string, value: string) {
      data.set(key, value);
      return 'OK';
    },
    async del(key: string) {
      return data.delete(key) ? 1 : 0;
    },
  };
}

describe('redisTokenStore({ encryptionKey })', () => {
  const keyA = randomBytes(32);
  const keyB = randomBytes(32);
  const token: StoredToken = { accessToken: 'eyJ.secret-token.sig', tokenType: 'Bearer', scope: 'orders:read', expiresAt: Date.now() + 60_000, lifetime: 60_000 };

  it('Redis holds the token sealed (AES-256-GCM), not in clear; the same key opens it', async () => {
    const redis = memoryRedis();
    await redisTokenStore({ client: redis, encryptionKey: keyA }).set('k', token, 60_000);
    const [raw] = [...redis.data.values()];
    expect(raw).toMatch(/^v1\.[A-Za-z0-9_-]+$/);
    expect(raw).not.toContain('secret-token');
    expect(Buffer.from(raw.slice(3), 'base64url').toString('latin1')).not.toContain('secret-token');
    expect(await redisTokenStore({ client: redis, encryptionKey: keyA.toString('base64') }).get('k')).toEqual(token);
    expect(await redisTokenStore({ client: redis, encryptionKey: keyA.toString('hex') }).get('k')).toEqual(token);
    // each write has its own IV: the same token twice is two different values
    await redisTokenStore({ client: redis, encryptionKey: keyA }).set('k2', token, 60_000);
    expect(redis.data.get('ecc:token:k2')).not.toBe(raw);
  });

  it('another key, a value in clear or a value moved under another name do not open: an error, never a token', async () => {
    const redis = memoryRedis();
    await redisTokenStore({ client: redis, encryptionKey: keyA }).set('k', token, 60_000);
    await expect(redisTokenStore({ client: redis, encryptionKey: keyB }).get('k')).rejects.toThrow(/could not be decrypted/);
    redis.data.set('ecc:token:moved', redis.data.get('ecc:token:k')!);
    await expect(redisTokenStore({ client: redis, encryptionKey: keyA }).get('moved')).rejects.toThrow(/could not be decrypted/);
    await redisTokenStore({ client: redis }).set('clear', token, 60_000);
    await expect(redisTokenStore({ client: redis, encryptionKey: keyA }).get('clear')).rejects.toThrow(/could not be decrypted/);
  });

  it('a list of keys: the first seals, every one opens (a key change keeps the stored tokens)', async () => {
    const redis = memoryRedis();
    await redisTokenStore({ client: redis, encryptionKey: keyA }).set('old', token, 60_000);
    const rotated = redisTokenStore({ client: redis, encryptionKey: [keyB, keyA] });
    expect(await rotated.get('old')).toEqual(token);
    await rotated.set('new', token, 60_000);
    expect(await redisTokenStore({ client: redis, encryptionKey: keyB }).get('new')).toEqual(token);
    await expect(redisTokenStore({ client: redis, encryptionKey: keyA }).get('new')).rejects.toThrow(/could not be decrypted/);
  });

  it('a client whose key does not open the stored token asks the token endpoint, with a store.error event saying why', async () => {
    const redis = memoryRedis();
    const endpoint = await fakeTokenEndpoint(120);
    try {
      const events: TokenClientEvent[] = [];
      const make = (encryptionKey: Buffer) =>
        createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: redisTokenStore({ client: redis, encryptionKey }), onEvent: (e) => events.push(e) });
      const first = make(keyA);
      expect((await first.getToken()).accessToken).toBe('tok-1');
      await until(() => redis.data.size === 1, 'the stored token');
      expect((await make(keyA).getToken()).accessToken).toBe('tok-1');
      expect((await make(keyB).getToken()).accessToken).toBe('tok-2');
      expect(events.filter((e) => e.type === 'store.error')).toEqual([
        { type: 'store.error', operation: 'get', message: expect.stringMatching(/could not be decrypted/) },
      ]);
      expect(endpoint.requests).toHaveLength(2);
    } finally {
      await endpoint.close();
    }
  });

  it('a store without a key reports a sealed value (store.error), never takes it for a miss', async () => {
    const redis = memoryRedis();
    await redisTokenStore({ client: redis, encryptionKey: keyA }).set('k', token, 60_000);
    await expect(redisTokenStore({ client: redis }).get('k')).rejects.toThrow('a stored token is sealed and this store has no encryptionKey');
  });

  it('a secret KeyObject is a key', async () => {
    const redis = memoryRedis();
    await redisTokenStore({ client: redis, encryptionKey: createSecretKey(keyA) }).set('k', token, 60_000);
    expect(await redisTokenStore({ client: redis, encryptionKey: keyA.toString('base64url') }).get('k')).toEqual(token);
  });

  it.each([
    [randomBytes(16), /32 bytes.*got 16/],
    ['too-short', /32 bytes/],
    [[], /empty/],
    [[keyA, randomBytes(31)], /encryptionKey\[1\] must be 32 bytes/],
    [`${keyA.toString('base64')}###`, /encryptionKey must be 32 bytes: as text/],
    [`${keyA.toString('base64').slice(0, 20)} ${keyA.toString('base64').slice(20)}`, /encryptionKey must be 32 bytes: as text/],
    [undefined, /encryptionKey is undefined; leave the option out/],
    [null, /encryptionKey is null/],
    [[keyA, undefined], /encryptionKey\[1\] must be 32 bytes.*got undefined/],
    [generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey, /secret key/],
  ])('a wrong key is a TypeError at creation (%#)', (encryptionKey, message) => {
    expect(() => redisTokenStore({ client: memoryRedis(), encryptionKey: encryptionKey as Buffer })).toThrow(TypeError);
    expect(() => redisTokenStore({ client: memoryRedis(), encryptionKey: encryptionKey as Buffer })).toThrow(message);
  });
});

describe('redisTokenStore: a value in Redis that is not a token record', () => {
  const keyA = randomBytes(32);

  /** A client on `redis` that stored its token, then `garble` replaced the value; a second client reads it. Its token and events. */
  async function readGarbled(garble: string, encryptionKey?: Buffer): Promise<{ token: string; events: TokenClientEvent[]; requests: number }> {
    const redis = memoryRedis();
    const endpoint = await fakeTokenEndpoint(120);
    try {
      const store = () => redisTokenStore({ client: redis, ...(encryptionKey ? { encryptionKey } : {}) });
      const first = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: store() });
      await first.getToken();
      await until(() => redis.data.size === 1, 'the stored token');
      const [name] = [...redis.data.keys()];
      redis.data.set(name, garble);
      const events: TokenClientEvent[] = [];
      const second = createTokenClient({ tokenEndpoint: endpoint.tokenUrl, clientId: 'svc', clientSecret: 'x', store: store(), onEvent: (e) => events.push(e) });
      const token = (await second.getToken()).accessToken;
      await Promise.all([first.close(), second.close()]);
      return { token, events, requests: endpoint.requests.length };
    } finally {
      await endpoint.close();
    }
  }

  it.each([
    ['not JSON', '{not json', undefined],
    ['JSON but not a token record', JSON.stringify({ accessToken: 42 }), undefined],
    ['JSON null', 'null', undefined],
  ])('%s: a store.error (get) saying so, without the value, and the token endpoint is asked', async (_what, garble) => {
    const { token, events, requests } = await readGarbled(garble);
    expect(token).toBe('tok-2');
    expect(requests).toBe(2);
    const errors = events.filter((e) => e.type === 'store.error');
    expect(errors).toEqual([{ type: 'store.error', operation: 'get', message: expect.stringMatching(/not a token record/) }]);
    expect(JSON.stringify(errors)).not.toContain(garble);
  });

  it('a sealed value that opens to something other than a token record: a store.error (get)', async () => {
    const redis = memoryRedis();
    // sealed with the right key under the right name, but its content is not a token record
    await redisTokenStore({ client: redis, encryptionKey: keyA }).set('k', { not: 'a token' } as unknown as StoredToken, 60_000);
    await expect(redisTokenStore({ client: redis, encryptionKey: keyA }).get('k')).rejects.toThrow(/not a token record/);
    redis.data.set('ecc:token:k', redis.data.get('ecc:token:k')!.slice(0, -4) + 'AAAA');
    await expect(redisTokenStore({ client: redis, encryptionKey: keyA }).get('k')).rejects.toThrow(/could not be decrypted/);
  });

  it('garbled under an encryptionKey (a value that looks sealed but does not open): a store.error (get)', async () => {
    const { token, events } = await readGarbled('v1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', keyA);
    expect(token).toBe('tok-2');
    expect(events.filter((e) => e.type === 'store.error')).toEqual([{ type: 'store.error', operation: 'get', message: expect.stringMatching(/could not be decrypted/) }]);
  });
});
