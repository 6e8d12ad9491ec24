/**
 * The example server's HTTP timeouts (examples/http-server.ts; REQUEST_TIMEOUT,
 * HEADERS_TIMEOUT and KEEP_ALIVE_TIMEOUT in examples/env.ts), as a slow
 * client meets them: with Node's defaults a POST /oauth/token whose body came
 * a byte at a time held its connection about 5 minutes.
 */
import net from 'node:net';
import express from 'express';
import { httpTimeoutsFromEnv } from '../../examples/env';
import { createHttpServer } from '../../examples/http-server';
import { startServer, type RunningServer } from '../../examples/server';
import { tempDir } from '../helpers/app';

/** A raw connection to `url`: what it received, and when it was closed (ms after it was opened). */
function rawClient(url: string) {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  const opened = Date.now();
  let received = '';
  socket.setEncoding('utf8').on('data', (d: string) => (received += d));
  socket.on('error', () => undefined);
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now() - opened)));
  /** Writes `text` one character every `everyMs`, until it is all sent or the connection is closed. */
  const dribble = (text: string, everyMs: number): void => {
    let i = 0;
    const timer = setInterval(() => {
      if (i < text.length && !socket.destroyed) socket.write(text[i++]);
      else clearInterval(timer);
    }, everyMs);
    socket.once('close', () => clearInterval(timer));
  };
  return { socket, closed, dribble, received: () => received };
}

/** A raw answer: status, headers (lower-case names), body parsed as JSON; the Content-Length matches the body. */
function parsed(raw: string): { status: number; headers: Record<string, string>; body: unknown } {
  const [head, body] = [raw.slice(0, raw.indexOf('\r\n\r\n')), raw.slice(raw.indexOf('\r\n\r\n') + 4)];
  const [statusLine, ...lines] = head.split('\r\n');
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  expect(Number(headers['content-length'])).toBe(Buffer.byteLength(body));
  return { status: Number(statusLine.split(' ')[1]), headers, body: JSON.parse(body) };
}

describe('HTTP timeouts of the example server', () => {
  let running: RunningServer;

  beforeAll(async () => {
    running = await startServer(
      { PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DATA_DIR: tempDir(), LOG_LEVEL: 'silent', REQUEST_TIMEOUT: '2', HEADERS_TIMEOUT: '1', KEEP_ALIVE_TIMEOUT: '3' },
      () => undefined,
      { demoClient: false },
    );
  });
  afterAll(() => running.close());

  it('a POST /oauth/token whose body comes a byte at a time: 408 and the connection closed at REQUEST_TIMEOUT (here 2 s; 30 s by default)', async () => {
    const client = rawClient(running.url);
    const body = 'grant_type=client_credentials';
    client.socket.write(`POST /oauth/token HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\n\r\n`);
    client.dribble(body, 150); // 29 bytes: 4.35 s
    const after = await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    // a body that says why (Node's own answer had none)
    expect(parsed(client.received())).toEqual({
      status: 408,
      headers: expect.objectContaining({ 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', connection: 'close' }),
      body: { error: 'request_timeout', error_description: 'the request did not arrive in full within the time this server gives one' },
    });
    expect(after).toBeGreaterThanOrEqual(1_900);
    expect(after).toBeLessThan(3_500);
  });

  it('headers that come a character at a time: 408 at HEADERS_TIMEOUT (here 1 s; 10 s by default)', async () => {
    const client = rawClient(running.url);
    client.dribble('GET /health HTTP/1.1\r\nHost: test\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n', 100);
    const after = await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(after).toBeGreaterThanOrEqual(900);
    expect(after).toBeLessThan(1_900);
  });

  it('a connection opened and left silent is closed at HEADERS_TIMEOUT too', async () => {
    const client = rawClient(running.url);
    const after = await client.closed;
    expect(after).toBeGreaterThanOrEqual(900);
    expect(after).toBeLessThan(1_900);
  });

  it('an answered request on a kept-alive connection is not cut by those timeouts: Keep-Alive: timeout= says KEEP_ALIVE_TIMEOUT', async () => {
    const client = rawClient(running.url);
    client.socket.write('GET /health HTTP/1.1\r\nHost: test\r\n\r\n');
    for (let i = 0; i < 100 && !client.received().includes('"ok"'); i++) await new Promise((r) => setTimeout(r, 10));
    expect(client.received()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(client.received()).toMatch(/\r\nKeep-Alive: timeout=3\r\n/i);
    // idle past HEADERS_TIMEOUT and REQUEST_TIMEOUT, the connection still serves its next request
    await new Promise((r) => setTimeout(r, 2_200));
    client.socket.write('GET /health HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n');
    await client.closed;
    expect(client.received().match(/HTTP\/1\.1 200 OK/g)).toHaveLength(2);
  });
});

describe("what Node refuses before the app sees a request: the status Node gives, with a JSON body that says why", () => {
  let running: RunningServer;
  beforeAll(async () => {
    running = await startServer({ PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DATA_DIR: tempDir(), LOG_LEVEL: 'silent' }, () => undefined, { demoClient: false });
  });
  afterAll(() => running.close());

  const send = async (raw: string): Promise<string> => {
    const client = rawClient(running.url);
    client.socket.write(raw);
    await client.closed;
    return client.received();
  };

  it('headers over the limit: 431 invalid_request, the limit named', async () => {
    const answer = parsed(await send(`POST /oauth/token HTTP/1.1\r\nHost: test\r\nCookie: ${'a'.repeat(20_000)}\r\n\r\n`));
    expect(answer).toEqual({
      status: 431,
      headers: expect.objectContaining({ 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', connection: 'close' }),
      body: { error: 'invalid_request', error_description: expect.stringMatching(/^the request line and headers are larger than this server takes \(\d+ bytes\)$/) },
    });
  });

  it.each([
    ['a header name with a space', 'GET /health HTTP/1.1\r\nHost: test\r\nBad Header: x\r\n\r\n'],
    ['not HTTP at all', 'HELLO\r\n\r\n'],
    ['a bad Content-Length', 'POST /oauth/token HTTP/1.1\r\nHost: test\r\nContent-Length: abc\r\n\r\n'],
  ])('%s: 400 invalid_request, the parser\'s reason and none of the request', async (_name, raw) => {
    const answer = parsed(await send(raw));
    expect(answer).toMatchObject({ status: 400, headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', connection: 'close' } });
    expect(answer.body).toEqual({ error: 'invalid_request', error_description: expect.stringMatching(/^the request is not well-formed HTTP\/1\.1(: [a-z -]+)?$/) });
    expect(JSON.stringify(answer.body)).not.toMatch(/HELLO|Bad Header|abc/);
  });

  it('an HTTP/1.1 request without Host (RFC 9112 §3.2): 400 invalid_request in JSON, the connection closed; HTTP/1.0 needs none', async () => {
    const answer = parsed(await send('GET /health HTTP/1.1\r\n\r\n'));
    expect(answer).toEqual({
      status: 400,
      headers: expect.objectContaining({ 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', connection: 'close' }),
      body: { error: 'invalid_request', error_description: 'an HTTP/1.1 request needs a Host header' },
    });
    const old = await send('GET /health HTTP/1.0\r\n\r\n');
    expect(old).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(old).toContain('{"status":"ok"}');
  });

  it('Expect without Host gets the same 400 and nothing else (no 100 Continue, no 417); with Host, Expect is answered as Node answers it', async () => {
    for (const expect100 of ['100-continue', 'something-else']) {
      const raw = await send(`POST /oauth/token HTTP/1.1\r\nExpect: ${expect100}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 5\r\n\r\n`);
      expect(raw.match(/HTTP\/1\.1 \d{3}/g)).toEqual(['HTTP/1.1 400']);
      expect(parsed(raw)).toMatchObject({ status: 400, body: { error: 'invalid_request', error_description: 'an HTTP/1.1 request needs a Host header' } });
    }
    const unknown = await send('GET /health HTTP/1.1\r\nHost: test\r\nExpect: something-else\r\nConnection: close\r\n\r\n');
    expect(unknown).toMatch(/^HTTP\/1\.1 417 Expectation Failed\r\n/);
    const client = rawClient(running.url);
    client.socket.write('POST /health HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n');
    for (let i = 0; i < 200 && !client.received().includes('100 Continue'); i++) await new Promise((r) => setTimeout(r, 10));
    client.socket.write('{}');
    await client.closed;
    expect(client.received()).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 404 /);
  });

  it('a malformed request on a kept-alive connection, after an answered one: the first answer intact, then a 400', async () => {
    const client = rawClient(running.url);
    client.socket.write('GET /health HTTP/1.1\r\nHost: test\r\n\r\n');
    for (let i = 0; i < 200 && !client.received().includes('"ok"'); i++) await new Promise((r) => setTimeout(r, 10));
    client.socket.write('GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n');
    await client.closed;
    const raw = client.received();
    expect(raw.match(/HTTP\/1\.1 \d{3}/g)).toEqual(['HTTP/1.1 200', 'HTTP/1.1 400']);
    expect(parsed(raw.slice(raw.lastIndexOf('HTTP/1.1 400')))).toMatchObject({ status: 400, body: { error: 'invalid_request' } });
  });

  it('a malformed request pipelined behind one being answered gets no second status line inside that answer (the connection is closed)', async () => {
    const raw = await send('GET /health HTTP/1.1\r\nHost: test\r\n\r\nGET /health HTTP/1.1\r\nBad Header: x\r\n\r\n');
    expect(raw.match(/HTTP\/1\.1 \d{3}/g)).toEqual(['HTTP/1.1 200']);
  });
});

describe('createHttpServer and httpTimeoutsFromEnv', () => {
  it('defaults: request 30 s, headers 10 s, keep-alive 5 s, checked every second; a request timeout alone under 10 s bounds the headers too', () => {
    // Node's own check interval (by default 30 s: a 30 s limit took up to 60 s), not typed by @types/node
    const timeouts = (server: ReturnType<typeof createHttpServer>) => [server.requestTimeout, server.headersTimeout, server.keepAliveTimeout, (server as unknown as { connectionsCheckingInterval: number }).connectionsCheckingInterval];
    expect(timeouts(createHttpServer(express()))).toEqual([30_000, 10_000, 5_000, 1_000]);
    expect(timeouts(createHttpServer(express(), { requestTimeout: 4_000, keepAliveTimeout: undefined }))).toEqual([4_000, 4_000, 5_000, 400]);
  });

  it('reads whole seconds from 1 to 3600, unset ones left to the defaults', () => {
    expect(httpTimeoutsFromEnv({})).toEqual({ requestTimeout: undefined, headersTimeout: undefined, keepAliveTimeout: undefined });
    expect(httpTimeoutsFromEnv({ REQUEST_TIMEOUT: '60', HEADERS_TIMEOUT: '20', KEEP_ALIVE_TIMEOUT: '65' })).toEqual({ requestTimeout: 60_000, headersTimeout: 20_000, keepAliveTimeout: 65_000 });
    expect(() => httpTimeoutsFromEnv({ REQUEST_TIMEOUT: '0' })).toThrow('REQUEST_TIMEOUT must be a whole number of seconds from 1 to 3600, got "0"');
    expect(() => httpTimeoutsFromEnv({ KEEP_ALIVE_TIMEOUT: '1.5' })).toThrow('KEEP_ALIVE_TIMEOUT must be a whole number of seconds from 1 to 3600, got "1.5"');
    expect(() => httpTimeoutsFromEnv({ HEADERS_TIMEOUT: '40' })).toThrow('HEADERS_TIMEOUT must be at most REQUEST_TIMEOUT (30 s, its default), got "40"');
    expect(() => httpTimeoutsFromEnv({ REQUEST_TIMEOUT: '5', HEADERS_TIMEOUT: '6' })).toThrow('HEADERS_TIMEOUT must be at most REQUEST_TIMEOUT (5 s), got "6"');
  });
});
