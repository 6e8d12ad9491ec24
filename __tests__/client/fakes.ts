/**
 * Fakes for the token client tests: a token endpoint that counts requests and
 * answers as told, an API that records the Authorization header of each
 * request, a clock, and a way to wait for background work.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTokenClient, TokenEndpointError, type ProofOfPossession, type ReleaseLock, type StoredToken, type TokenClient, type TokenClientEvent, type TokenClientOptions, type TokenStore } from '../../lib/client';

export interface Reply {
  status?: number;
  headers?: Record<string, string>;
  body?: unknown;
}

export interface SeenRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  form: URLSearchParams;
  body: string;
}

export interface FakeServer {
  url: string;
  requests: SeenRequest[];
  /** Answer for each request (after `gate`, when set). */
  reply: (req: SeenRequest, n: number) => Reply | Promise<Reply>;
  /** While set, answers wait for it. */
  gate: Promise<void> | undefined;
  close(): Promise<void>;
}

async function listen(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; url: string }> {
  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

export async function fakeServer(reply: FakeServer['reply']): Promise<FakeServer> {
  const fake: FakeServer = {
    url: '',
    requests: [],
    reply,
    gate: undefined,
    close: async () => undefined,
  };
  const { server, url } = await listen((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const seen: SeenRequest = { method: req.method!, path: req.url!, headers: req.headers, form: new URLSearchParams(body), body };
      fake.requests.push(seen);
      const n = fake.requests.length;
      try {
        if (fake.gate) await fake.gate;
        const r = await fake.reply(seen, n);
        res.writeHead(r.status ?? 200, { 'content-type': 'application/json', ...r.headers });
        res.end(r.body === undefined ? '' : typeof r.body === 'string' ? r.body : JSON.stringify(r.body));
      } catch {
        res.destroy();
      }
    });
  });
  fake.url = url;
  fake.close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return fake;
}

/** A token endpoint at /token: `tok-N` with the asked scope, expires_in 3600 unless told otherwise. */
export async function fakeTokenEndpoint(expiresIn: number | undefined = 3600): Promise<FakeServer & { tokenUrl: string }> {
  const fake = await fakeServer((req, n) => ({
    body: {
      access_token: `tok-${n}`,
      token_type: 'Bearer',
      ...(expiresIn === undefined ? {} : { expires_in: expiresIn }),
      ...(req.form.get('scope') ? { scope: req.form.get('scope') } : {}),
    },
  }));
  return Object.assign(fake, { tokenUrl: `${fake.url}/token` });
}

/** An API answering 200 with the token it saw, unless `reply` says otherwise. */
export async function fakeApi(reply?: FakeServer['reply']): Promise<FakeServer> {
  return fakeServer(reply ?? ((req) => ({ body: { authorization: req.headers.authorization ?? null } })));
}

/** A gate: `open()` lets held answers go. */
export function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

export interface Clock {
  now: () => number;
  t: number;
  advance(seconds: number): void;
}

export function clock(start = 1_800_000_000_000): Clock {
  const c: Clock = {
    t: start,
    now: () => c.t,
    advance(seconds) {
      c.t += seconds * 1000;
    },
  };
  return c;
}

/** Waits (in real time, at most 5 s) until `check()` is true. */
export { until } from '../helpers/until';

export const bearerOf = (req: SeenRequest): string | undefined => req.headers.authorization?.replace(/^Bearer /, '');

export interface ClientFixture {
  /** A fresh counting token endpoint for each test. */
  endpoint: FakeServer & { tokenUrl: string };
  /** A fresh fake API for each test. */
  api: FakeServer;
  time: Clock;
  /** Every event of every client made with `client()` in this test. */
  events: TokenClientEvent[];
  /** A client of `endpoint` on the fake clock, recording its events; closed after the test. */
  client(options?: Partial<TokenClientOptions>): TokenClient;
  count(type: TokenClientEvent['type']): number;
  tokenRequests(): number;
}

/**
 * Registers the per-test setup of the token client tests (a fresh token
 * endpoint, API, clock and event list; clients closed afterwards) and returns
 * the fixture, whose fields are replaced before each test.
 */
export function useClientFixture(credentials: { clientId: string; clientSecret: string }): ClientFixture {
  const clients: TokenClient[] = [];
  const fx = {
    client(options: Partial<TokenClientOptions> = {}) {
      const c = createTokenClient({ tokenEndpoint: fx.endpoint.tokenUrl, ...credentials, now: fx.time.now, onEvent: (e) => fx.events.push(e), ...options });
      clients.push(c);
      return c;
    },
    count: (type: TokenClientEvent['type']) => fx.events.filter((e) => e.type === type).length,
    tokenRequests: () => fx.endpoint.requests.length,
  } as ClientFixture;
  beforeEach(async () => {
    fx.endpoint = await fakeTokenEndpoint();
    fx.api = await fakeApi();
    fx.time = clock();
    fx.events = [];
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
    await fx.endpoint.close();
    await fx.api.close();
  });
  return fx;
}

/** A shared store in memory, recording each entry's time to live. */
export class MemoryStore implements TokenStore {
  readonly data = new Map<string, { token: StoredToken; ttl: number }>();
  async get(key: string) {
    return this.data.get(key)?.token;
  }
  async set(key: string, token: StoredToken, ttl: number) {
    this.data.set(key, { token, ttl });
  }
  async delete(key: string) {
    this.data.delete(key);
  }
}

/**
 * A MemoryStore that locks as the TokenStore interface asks: a lock ends
 * after its ttl, a release only ends its own, and `release(true)` leaves a
 * 'failed' mark for a second (unless `marksFailures` is false).
 */
export class LockingStore extends MemoryStore {
  readonly locks = new Map<string, { holder: number; until: number; failed?: boolean }>();
  /** Locks taken (not refused) so far. */
  taken = 0;
  marksFailures = true;
  private holders = 0;
  async lock(key: string, ttlMs: number): Promise<ReleaseLock | null | 'failed'> {
    const now = Date.now();
    const held = this.locks.get(key);
    if (held !== undefined && held.until > now) return held.failed ? 'failed' : null;
    const holder = ++this.holders;
    this.locks.set(key, { holder, until: now + ttlMs });
    this.taken++;
    return async (failed?: boolean) => {
      if (this.locks.get(key)?.holder !== holder) return;
      if (failed && this.marksFailures) this.locks.set(key, { holder: 0, until: Date.now() + 1000, failed: true });
      else this.locks.delete(key);
    };
  }
}

/** What `p` rejects with, which must be a TokenEndpointError (the test fails otherwise). */
export async function endpointFailure(p: Promise<unknown>): Promise<TokenEndpointError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TokenEndpointError);
  return err as TokenEndpointError;
}

/**
 * A DPoP-like proof-of-possession plug-in whose API proof is `p-<nonce>`: it
 * starts with `p-none` and takes the nonce of a `use_dpop_nonce` challenge.
 */
export function nonceKeepingPlugin(): ProofOfPossession {
  let nonce = 'none';
  return {
    scheme: 'DPoP',
    tokenRequest: () => undefined,
    apiRequest: (r) => void r.headers.set('dpop', `p-${nonce}`),
    retry: (a) => (a.error === 'use_dpop_nonce' ? ((nonce = a.headers.get('dpop-nonce')!), true) : false),
  };
}
