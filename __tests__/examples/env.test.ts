/**
 * The examples' environment (examples/env.ts), as an operator meets it: the
 * compiled server and resource server started as real processes. A bad
 * value is one line `error: …` on stderr and exit 1, never a stack trace.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { startServer } from '../../examples/server';
import { tempDir } from '../helpers/app';
import { compiledExamples, runUntil, type Exit } from '../helpers/compiled-example';

const examples = compiledExamples();
const SERVER_JS = examples.script('server');
const RESOURCE_SERVER_JS = examples.script('resource-server');
const LISTENING = /"event":"server.listening"[^\n]*"url":"(http:[^"]+)"/;
/**
 * For fetch: the connection closed after the answer. The graceful stop lets a keep-alive connection left
 * idle end by its keep-alive timeout (fetch lets go of it after 3 s), which each SIGTERM here would wait for.
 */
const ONCE: RequestInit = { headers: { connection: 'close' } };

/**
 * Runs a compiled example until it logs server.listening, then (after
 * `onListening`, by default one GET /health: once that is answered, the
 * resource server's signal handlers are in place too; the orders server's
 * are from its start) SIGTERM; or until it exits by itself.
 */
function run(script: string, env: NodeJS.ProcessEnv, onListening?: (url: string) => Promise<void>): Promise<Exit> {
  return runUntil(script, env, LISTENING, async (stdout) => {
    const url = LISTENING.exec(stdout)![1];
    await (onListening ? onListening(url) : fetch(`${url}/health`, ONCE).then(() => undefined));
  });
}

const serverEnv = (extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({
  PORT: '0',
  HOST: '127.0.0.1',
  ISSUER: 'http://localhost:3000',
  DATA_DIR: tempDir(),
  DEMO_CLIENT: '0',
  ...extra,
});

const resourceEnv = (extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({
  PORT: '0',
  HOST: '127.0.0.1',
  ISSUER: 'http://localhost:3000',
  REVOCATION_LIST: 'off',
  ...extra,
});

/** Exit 1 with exactly one line on stderr, and no stack trace anywhere. */
function expectOneLineError(exit: Exit, message: RegExp): void {
  expect(exit.stderr).toMatch(new RegExp(`^error: ${message.source}\\n$`));
  expect(`${exit.stdout}${exit.stderr}`).not.toMatch(/^\s+at /m);
  expect(exit.code).toBe(1);
}

describe('the examples refuse a bad environment value with one line (compiled, as real processes)', () => {
  const aFile = path.join(tempDir(), 'a-file');

  beforeAll(() => {
    writeFileSync(aFile, '');
    return examples.build();
  }, 130_000);

  const serverCases: [string, NodeJS.ProcessEnv, RegExp][] = [
    ['WORKERS=abc', { WORKERS: 'abc' }, /WORKERS must be a whole number from 0 to 256, got "abc"/],
    ['WORKERS=-1', { WORKERS: '-1' }, /WORKERS must be a whole number from 0 to 256, got "-1"/],
    ['WORKERS=1.5', { WORKERS: '1.5' }, /WORKERS must be a whole number from 0 to 256, got "1.5"/],
    ['PORT=99999', { PORT: '99999' }, /PORT must be a whole number from 0 to 65535, got "99999"/],
    ['PORT=abc', { PORT: 'abc' }, /PORT must be a whole number from 0 to 65535, got "abc"/],
    ['LOG_LEVEL=loud', { LOG_LEVEL: 'loud' }, /LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent \(any case\), got "loud"/],
    ['ACCESS_TOKEN_TTL=1e3', { ACCESS_TOKEN_TTL: '1e3' }, /ACCESS_TOKEN_TTL must be a whole number of seconds from 1 to 86400, got "1e3"/],
    ['ACCESS_TOKEN_TTL=0', { ACCESS_TOKEN_TTL: '0' }, /ACCESS_TOKEN_TTL must be a whole number of seconds from 1 to 86400, got "0"/],
    ['KEY_ROTATION_LEAD_TIME=1e3', { KEY_ROTATION_LEAD_TIME: '1e3' }, /KEY_ROTATION_LEAD_TIME must be a whole number of seconds from 0 to 86400, got "1e3"/],
    ['KEY_ROTATION_LEAD_TIME=86401', { KEY_ROTATION_LEAD_TIME: '86401' }, /KEY_ROTATION_LEAD_TIME must be a whole number of seconds from 0 to 86400, got "86401"/],
    ['CLOCK_TOLERANCE=301', { CLOCK_TOLERANCE: '301' }, /CLOCK_TOLERANCE must be a whole number of seconds from 0 to 300, got "301"/],
    ['CLOCK_TOLERANCE=0x10', { CLOCK_TOLERANCE: '0x10' }, /CLOCK_TOLERANCE must be a whole number of seconds from 0 to 300, got "0x10"/],
    ['KEY_REFRESH_INTERVAL=abc', { KEY_REFRESH_INTERVAL: 'abc' }, /KEY_REFRESH_INTERVAL must be a number of seconds from 0.1 to 3600, got "abc"/],
    ['KEY_REFRESH_INTERVAL=1e1', { KEY_REFRESH_INTERVAL: '1e1' }, /KEY_REFRESH_INTERVAL must be a number of seconds from 0.1 to 3600, got "1e1"/],
    ['DEMO_CLIENT=maybe', { DEMO_CLIENT: 'maybe' }, /DEMO_CLIENT must be 0 or 1 \(or false\/true, no\/yes, off\/on\), got "maybe"/],
    ['DEMO_CLIENT=maybe WORKERS=1', { DEMO_CLIENT: 'maybe', WORKERS: '1' }, /DEMO_CLIENT must be 0 or 1 \(or false\/true, no\/yes, off\/on\), got "maybe"/],
    ['METRICS=2', { METRICS: '2' }, /METRICS must be 0 or 1 \(or false\/true, no\/yes, off\/on\), got "2"/],
    ['METRICS_PORT=abc', { METRICS_PORT: 'abc' }, /METRICS_PORT must be a whole number from 0 to 65535, got "abc"/],
    ['METRICS_PORT=9464 METRICS=0', { METRICS_PORT: '9464', METRICS: '0' }, /METRICS_PORT is set \(9464\) but METRICS is off \("0"\): unset one of them/],
    ['METRICS_PORT=PORT', { METRICS_PORT: '47391', PORT: '47391' }, /METRICS_PORT must differ from PORT \(or METRICS_HOST from HOST\), got 47391 for both/],
    ['METRICS_PORT=PORT WORKERS=1', { METRICS_PORT: '47391', PORT: '47391', WORKERS: '1' }, /METRICS_PORT must differ from PORT \(or METRICS_HOST from HOST\), got 47391 for both/],
    // it looked as if /metrics had moved to that address, while it stayed on PORT
    ['METRICS_HOST without METRICS_PORT', { METRICS: '1', METRICS_HOST: '127.0.0.2' }, /METRICS_HOST is set \("127.0.0.2"\) but METRICS_PORT is not: \/metrics would stay on PORT; set METRICS_PORT too/],
    ['REQUEST_TIMEOUT=0', { REQUEST_TIMEOUT: '0' }, /REQUEST_TIMEOUT must be a whole number of seconds from 1 to 3600, got "0"/],
    ['KEEP_ALIVE_TIMEOUT=5s', { KEEP_ALIVE_TIMEOUT: '5s' }, /KEEP_ALIVE_TIMEOUT must be a whole number of seconds from 1 to 3600, got "5s"/],
    ['HEADERS_TIMEOUT=40', { HEADERS_TIMEOUT: '40' }, /HEADERS_TIMEOUT must be at most REQUEST_TIMEOUT \(30 s, its default\), got "40"/],
    ['HEADERS_TIMEOUT=20 REQUEST_TIMEOUT=10 WORKERS=1', { HEADERS_TIMEOUT: '20', REQUEST_TIMEOUT: '10', WORKERS: '1' }, /HEADERS_TIMEOUT must be at most REQUEST_TIMEOUT \(10 s\), got "20"/],
    ['REDIS_KEY_PREFIX of 91 characters', { REDIS_KEY_PREFIX: 'p'.repeat(91) }, /REDIS_KEY_PREFIX must be at most 90 characters, got 91/],
    ['REDIS_URL=notaurl', { REDIS_URL: 'notaurl' }, /REDIS_URL must be redis:\/\/… or rediss:\/\/… \(or a unix socket's absolute path\), got "notaurl"/],
    ['REDIS_URL=http://…', { REDIS_URL: 'http://127.0.0.1:6379' }, /REDIS_URL must be redis:\/\/… or rediss:\/\/… \(or a unix socket's absolute path\), got "http:\/\/127.0.0.1:6379"/],
    ['REDIS_URL=redis://[::1', { REDIS_URL: 'redis://[::1' }, /REDIS_URL must be .*, got "redis:\/\/\[::1"/],
    // the password is not repeated
    ['REDIS_URL=http://u:secret@…', { REDIS_URL: 'http://u:secret@127.0.0.1:6379' }, /REDIS_URL must be .*, got "http:\/\/…@127.0.0.1:6379"/],
    ['TRUST_PROXY=10.0.0.300', { TRUST_PROXY: '10.0.0.300' }, /TRUST_PROXY must be a number of hops, true, false, or addresses, CIDRs, loopback, linklocal, uniquelocal separated by commas, got "10.0.0.300" \(invalid IP address: 10.0.0.300\)/],
    ['TRUST_PROXY=maybe WORKERS=1', { TRUST_PROXY: 'maybe', WORKERS: '1' }, /TRUST_PROXY must be .*, got "maybe" \(invalid IP address: maybe\)/],
    ['TRUST_PROXY=-1', { TRUST_PROXY: '-1' }, /TRUST_PROXY must be .*, got "-1" \(invalid IP address: -1\)/],
    ['TRUST_PROXY=loopback,,10.0.0.1', { TRUST_PROXY: 'loopback,,10.0.0.1' }, /TRUST_PROXY must be .*, got "loopback,,10.0.0.1" \(invalid IP address: \)/],
    // these four named the library's option before ("option issuer must be…"), not the variable the operator set
    ['ISSUER=notaurl', { ISSUER: 'notaurl' }, /ISSUER must be an absolute URL, got "notaurl"/],
    ['ISSUER with a query', { ISSUER: 'http://127.0.0.1/?tenant=a' }, /ISSUER must not have a query or fragment/],
    // "ISSUER is required" before, though it was set
    ['ISSUER=/', { ISSUER: '/' }, /ISSUER must be an absolute URL, got "\/"/],
    ['SIGNING_ALG=HS256', { SIGNING_ALG: 'HS256' }, /SIGNING_ALG must be one of ES256, RS256, got "HS256"/],
    ['RESOURCES=notaurl', { RESOURCES: 'notaurl' }, /RESOURCES: resource "notaurl": resource must be an absolute URI/],
    // named RESOURCES before ("RESOURCES needs an audience that is…"), whatever was wrong with AUDIENCE
    ['AUDIENCE with a fragment, and RESOURCES', { AUDIENCE: 'https://a.test/#f', RESOURCES: 'https://b.test' }, /AUDIENCE must be a resource indicator when there are resources \(the audience is the default one\): must not contain a fragment/],
    // named "option scopesSupported" before, not the variable the operator set
    ['SCOPES_SUPPORTED="orders:read  orders:write"', { SCOPES_SUPPORTED: 'orders:read  orders:write' }, /SCOPES_SUPPORTED must be scope tokens separated by single spaces \(RFC 6749 §3\.3\), got "orders:read  orders:write"/],
    ['SCOPES_SUPPORTED=a "b"', { SCOPES_SUPPORTED: 'a "b"' }, /SCOPES_SUPPORTED must be scope tokens separated by single spaces \(RFC 6749 §3\.3\), got "a \\"b\\""/],
    ['DATABASE_URL=notaurl', { DATABASE_URL: 'notaurl' }, /DATABASE_URL must be a postgres:\/\/ URL/],
    ['DATABASE_SCHEMA="bad schema;"', { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/test', DATABASE_SCHEMA: 'bad schema;' }, /Invalid PostgreSQL schema name "bad schema;" .*/],
    ['HOST=nosuch.invalid', { HOST: 'nosuch.invalid' }, /getaddrinfo \w+ nosuch\.invalid/],
  ];
  it.each(serverCases)('server.ts, %s', async (_name, extra, message) => {
    expectOneLineError(await run(SERVER_JS, serverEnv(extra)), message);
  }, 20_000);

  it('server.ts, DATA_DIR under a file', async () => {
    expectOneLineError(await run(SERVER_JS, serverEnv({ DATA_DIR: path.join(aFile, 'data') })), /ENOTDIR: .*/);
  }, 20_000);

  const resourceCases: [string, NodeJS.ProcessEnv, RegExp][] = [
    ['PORT=99999', { PORT: '99999' }, /PORT must be a whole number from 0 to 65535, got "99999"/],
    ['PORT=-1', { PORT: '-1' }, /PORT must be a whole number from 0 to 65535, got "-1"/],
    ['LOG_LEVEL=loud', { LOG_LEVEL: 'loud' }, /LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent \(any case\), got "loud"/],
    ['CLOCK_TOLERANCE=1e2', { CLOCK_TOLERANCE: '1e2' }, /CLOCK_TOLERANCE must be a whole number of seconds from 0 to 300, got "1e2"/],
    ['REVOCATION_LIST_INTERVAL=abc', { REVOCATION_LIST_INTERVAL: 'abc' }, /REVOCATION_LIST_INTERVAL must be a number of seconds from 0.05 to 300, got "abc"/],
    ['REVOCATION_LIST_INTERVAL=600', { REVOCATION_LIST_INTERVAL: '600' }, /REVOCATION_LIST_INTERVAL must be a number of seconds from 0.05 to 300, got "600"/],
    ['ISSUER=notaurl', { ISSUER: 'notaurl' }, /ISSUER must be an absolute URL, got "notaurl"/],
    ['ISSUER=//', { ISSUER: '//' }, /ISSUER must be an absolute URL, got "\/\/"/],
    ['JWKS_URI=notaurl', { JWKS_URI: 'notaurl' }, /JWKS_URI must be an absolute URL, got "notaurl"/],
    ['PUBLIC_URL=notaurl', { PUBLIC_URL: 'notaurl' }, /PUBLIC_URL must be an absolute URL, got "notaurl"/],
    ['REVOCATION_LIST=notaurl', { REVOCATION_LIST: 'notaurl' }, /REVOCATION_LIST must be an absolute URL, got "notaurl"/],
    ['HOST=nosuch.invalid', { HOST: 'nosuch.invalid' }, /getaddrinfo \w+ nosuch\.invalid/],
    ['REDIS_URL=localhost:6379', { REDIS_URL: 'localhost:6379' }, /REDIS_URL must be redis:\/\/… or rediss:\/\/… \(or a unix socket's absolute path\), got "localhost:6379"/],
    ['REDIS_KEY_PREFIX of 91 characters', { REDIS_URL: 'redis://127.0.0.1:1', REDIS_KEY_PREFIX: 'p'.repeat(91) }, /REDIS_KEY_PREFIX must be at most 90 characters, got 91/],
  ];
  it.each(resourceCases)('resource-server.ts, %s', async (_name, extra, message) => {
    expectOneLineError(await run(RESOURCE_SERVER_JS, resourceEnv(extra)), message);
  }, 20_000);

  it.each(['no', 'false', 'OFF'])('DEMO_CLIENT=%s: no demo client and no secret on stdout, with WORKERS=1 too', async (value) => {
    for (const workers of ['0', '1']) {
      const exit = await run(SERVER_JS, serverEnv({ DEMO_CLIENT: value, WORKERS: workers }));
      expect(exit.stdout).not.toMatch(/demo client|client_secret/i);
      expect({ code: exit.code, stderr: exit.stderr }).toEqual({ code: 0, stderr: '' });
    }
  }, 30_000);

  it.each(['redis://127.0.0.1:1', '/nonexistent/redis.sock'])('REDIS_URL=%s, well-formed but unreachable: starts and runs degraded, with a redis.unavailable warning', async (url) => {
    const exit = await run(SERVER_JS, serverEnv({ REDIS_URL: url }), async (base) => {
      expect((await fetch(`${base}/health`, ONCE)).status).toBe(200);
      await new Promise((r) => setTimeout(r, 500));
    });
    expect(exit.stdout).toContain('"event":"redis.unavailable"');
    expect({ code: exit.code, stderr: exit.stderr }).toEqual({ code: 0, stderr: '' });
  }, 30_000);

  it('a good environment still starts both (LOG_LEVEL in any case)', async () => {
    const served = await run(SERVER_JS, serverEnv({ WORKERS: '0', LOG_LEVEL: 'INFO', ACCESS_TOKEN_TTL: '60', CLOCK_TOLERANCE: '0', KEY_REFRESH_INTERVAL: '0.5' }), async (url) => {
      expect((await fetch(`${url}/health`, ONCE)).status).toBe(200);
    });
    expect({ code: served.code, stderr: served.stderr }).toEqual({ code: 0, stderr: '' });
    const api = await run(RESOURCE_SERVER_JS, resourceEnv({ LOG_LEVEL: 'Info', CLOCK_TOLERANCE: '10', REVOCATION_LIST_INTERVAL: '0.5' }), async (url) => {
      expect((await fetch(`${url}/health`, ONCE)).status).toBe(200);
    });
    expect({ code: api.code, stderr: api.stderr }).toEqual({ code: 0, stderr: '' });
  }, 30_000);
});

describe('switches (DEMO_CLIENT, METRICS) take 1/true/yes/on and 0/false/no/off in any case', () => {
  const start = (extra: NodeJS.ProcessEnv, lines: string[] = []) =>
    startServer({ PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DATA_DIR: tempDir(), LOG_LEVEL: 'silent', ...extra }, (l) => lines.push(l));

  it.each([
    ['yes', true], ['TRUE', true], ['on', true], ['1', true],
    ['no', false], ['False', false], ['off', false], ['0', false],
  ])('DEMO_CLIENT and METRICS = %s: on is %s', async (value, on) => {
    const lines: string[] = [];
    const running = await start({ DEMO_CLIENT: value as string, METRICS: value as string }, lines);
    try {
      expect(lines.some((l) => l.includes('client_secret'))).toBe(on);
      expect((await request(running.url).get('/metrics')).status).toBe(on ? 200 : 404);
    } finally {
      await running.close();
    }
  });
});
