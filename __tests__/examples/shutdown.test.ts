/**
 * The example's graceful stop (examples/shutdown.ts), over raw keep-alive
 * connections: what a client sees on the wire while the server closes; and
 * the signal handlers serveUntilSignal installs for a start-up.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { gracefulClose, SAME_STOP_MS, serveUntilSignal, STOP_SIGNALS, StopSignal } from '../../examples/shutdown';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A server whose GET /slow answers when the test calls `finish()`, and GET /fast at once. */
async function slowServer() {
  const waiting: (() => void)[] = [];
  const server = http.createServer((req, res) => {
    const answer = () => res.setHeader('Content-Type', 'text/plain').end(`done ${req.url}`);
    if (req.url === '/slow') waiting.push(answer);
    else answer();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const released: string[] = [];
  const close = gracefulClose(server, async () => {
    released.push('released');
  });
  const arrived = async (n: number) => {
    for (let i = 0; i < 200 && waiting.length < n; i++) await new Promise((r) => setTimeout(r, 5));
    expect(waiting.length).toBe(n);
  };
  return {
    server,
    close,
    released,
    arrived,
    finish: () => waiting.splice(0).forEach((answer) => answer()),
    port: (server.address() as AddressInfo).port,
  };
}

/** A raw client connection: what it received, whether the server ended it, and the error it got (a reset: ECONNRESET). */
function connect(port: number) {
  const socket = net.connect(port, '127.0.0.1');
  let received = '';
  let ended = false;
  let error: string | undefined;
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => (received += d));
  socket.on('error', (err: NodeJS.ErrnoException) => (error = err.code ?? err.message));
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('end', () => (ended = true));
  return {
    send: (path: string) => socket.write(`GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`),
    received: () => received,
    ended: () => ended,
    error: () => error,
    /** The responses received so far. */
    responses: () => received.split(/(?=HTTP\/1\.1 )/).filter((r) => r !== ''),
    closed,
    /** Resolves once `text` has arrived. */
    async waitFor(text: string) {
      for (let i = 0; i < 200 && !received.includes(text); i++) await new Promise((r) => setTimeout(r, 5));
      expect(received).toContain(text);
    },
    destroy: () => socket.destroy(),
  };
}

describe('gracefulClose (examples/shutdown.ts)', () => {
  it('waits for a release that never ends (a stalled database holding its pool) no longer than releaseMs', async () => {
    const server = http.createServer((_req, res) => res.end('ok'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const close = gracefulClose(server, () => new Promise<void>(() => undefined), 300);
    const started = Date.now();
    await close();
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(server.listening).toBe(false);
  });

  it('lets an in-flight request finish with Connection: close, then ends its connection and releases', async () => {
    const s = await slowServer();
    const client = connect(s.port);
    try {
      client.send('/slow');
      await s.arrived(1);
      const closed = s.close();
      expect(s.released).toEqual([]); // not before the request is answered
      s.finish();
      await client.waitFor('done /slow');
      await closed;
      await client.closed;
      expect(client.ended()).toBe(true);
      expect(client.received()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(client.received()).toMatch(/\r\nConnection: close\r\n/i);
      expect(s.released).toEqual(['released']);
      expect(s.server.listening).toBe(false);
    } finally {
      client.destroy();
    }
  });

  it('answers a request written on an idle keep-alive connection just as the close begins (Connection: close), instead of resetting it', async () => {
    // The race a graceful restart under load lost requests to: the server saw the connection idle (its
    // response sent), closed it at once, and the client's next request, already on the wire, got a reset.
    const s = await slowServer();
    const client = connect(s.port);
    try {
      client.send('/fast');
      await client.waitFor('done /fast');
      client.send('/fast'); // the client reuses its connection...
      const closed = s.close(); // ...as the server starts to close, before it has read that request
      await client.closed;
      expect(client.error()).toBeUndefined(); // not ECONNRESET
      expect(client.responses()).toHaveLength(2);
      expect(client.responses()[1]).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(client.responses()[1]).toMatch(/\r\nConnection: close\r\n/i);
      expect(client.ended()).toBe(true);
      await closed;
      expect(s.released).toEqual(['released']);
    } finally {
      client.destroy();
    }
  });

  it('leaves an idle keep-alive connection open for its next request, which is answered with Connection: close; refuses new connections; the same close() answers every caller', async () => {
    const s = await slowServer();
    const client = connect(s.port);
    try {
      client.send('/fast');
      await client.waitFor('done /fast');
      expect(client.received()).toMatch(/\r\nConnection: keep-alive\r\n/i); // before closing: kept alive
      const [a, b] = [s.close(), s.close()];
      expect(a).toBe(b);
      await sleep(200);
      expect(client.ended()).toBe(false);
      expect(s.released).toEqual([]);
      // a new connection is refused cleanly, before anything is sent
      const late = net.connect(s.port, '127.0.0.1');
      expect(await new Promise((resolve) => late.once('error', (err: NodeJS.ErrnoException) => resolve(err.code)).once('connect', () => resolve('connected')))).toBe('ECONNREFUSED');
      client.send('/fast');
      await client.closed;
      expect(client.error()).toBeUndefined();
      expect(client.responses()).toHaveLength(2);
      expect(client.responses()[1]).toMatch(/\r\nConnection: close\r\n/i);
      await a;
      expect(s.released).toEqual(['released']);
      expect(s.server.listening).toBe(false);
    } finally {
      client.destroy();
    }
  });

  it('ends a connection left idle at its keep-alive timeout (the Keep-Alive: timeout=N its client was told), not before', async () => {
    const s = await slowServer();
    s.server.keepAliveTimeout = 1_000;
    const client = connect(s.port);
    try {
      client.send('/fast');
      await client.waitFor('done /fast');
      expect(client.received()).toMatch(/\r\nKeep-Alive: timeout=1\r\n/i);
      const answered = Date.now();
      const closed = s.close();
      await sleep(500);
      expect(client.ended()).toBe(false);
      await client.closed;
      // Node closes it a second after the timeout it announced (clients stop reusing it a second before)
      expect(Date.now() - answered).toBeGreaterThanOrEqual(1_000);
      expect(Date.now() - answered).toBeLessThan(4_000);
      expect(client.error()).toBeUndefined();
      await closed;
      expect(s.released).toEqual(['released']);
    } finally {
      client.destroy();
    }
  });

  it('cuts the connections still open at its bound (10 s; here 300 ms), then releases', async () => {
    const s = await slowServer();
    const close = gracefulClose(s.server, async () => undefined, 5_000, 300);
    const client = connect(s.port);
    try {
      client.send('/slow');
      await s.arrived(1);
      const started = Date.now();
      await close();
      await client.closed;
      expect(Date.now() - started).toBeGreaterThanOrEqual(250);
      expect(Date.now() - started).toBeLessThan(2_000);
      expect(client.received()).toBe('');
    } finally {
      s.finish();
      client.destroy();
    }
  });

  it('says Connection: close on each of several in-flight requests on different connections, and closes each once answered', async () => {
    const s = await slowServer();
    s.server.keepAliveTimeout = 300; // the idle one ends by its keep-alive timeout
    const clients = [connect(s.port), connect(s.port), connect(s.port)];
    const idle = connect(s.port);
    try {
      idle.send('/fast');
      await idle.waitFor('done /fast');
      for (const c of clients) c.send('/slow');
      await s.arrived(3);
      const closed = s.close();
      s.finish();
      await closed;
      await idle.closed;
      expect(idle.error()).toBeUndefined();
      for (const c of clients) {
        await c.closed;
        expect(c.received()).toContain('done /slow');
        expect(c.received()).toMatch(/\r\nConnection: close\r\n/i);
      }
    } finally {
      for (const c of [...clients, idle]) c.destroy();
    }
  });
});

describe('serveUntilSignal (examples/shutdown.ts)', () => {
  const logger = { info: () => undefined } as unknown as Logger;
  const handlers = () => STOP_SIGNALS.map((signal) => process.listenerCount(signal));
  /** Delivers `signal` to the handler serveUntilSignal installed last, as the process would (its once-wrapper included). */
  const deliver = (signal: NodeJS.Signals) => (process.rawListeners(signal).at(-1) as (s: NodeJS.Signals) => void)(signal);

  it('a start-up that fails leaves SIGTERM and SIGINT as they were: its own error, a throw at once, a stop by SIGTERM', async () => {
    const before = handlers();
    await expect(serveUntilSignal(logger, async () => Promise.reject(new Error('listen EADDRINUSE')))).rejects.toThrow('listen EADDRINUSE');
    expect(handlers()).toEqual(before);

    await expect(
      serveUntilSignal(logger, () => {
        throw new Error('bad PORT');
      }),
    ).rejects.toThrow('bad PORT');
    expect(handlers()).toEqual(before);

    // SIGTERM during the start-up: its handler was used up, and SIGINT's goes too
    const stopped = serveUntilSignal(logger, (signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))));
    expect(handlers()).toEqual(before.map((n) => n + 1));
    deliver('SIGTERM');
    await expect(stopped).rejects.toBeInstanceOf(StopSignal);
    expect(handlers()).toEqual(before);
  });

  it('a second signal, of either kind, a second or more after the first: one server.stop_forced line, exit 128 + its number; sooner, the same stop', async () => {
    const before = handlers();
    const lines: [string, Record<string, unknown>][] = [];
    const log = { info: (o: Record<string, unknown>) => lines.push(['info', o]), warn: (o: Record<string, unknown>) => lines.push(['warn', o]) } as unknown as Logger;
    const exit = jest.spyOn(process, 'exit').mockImplementation((() => undefined) as never);
    let now = Date.now();
    const clock = jest.spyOn(Date, 'now').mockImplementation(() => now);
    let closed!: () => void;
    try {
      // a stop that does not end until the test says so (a slow request, a stalled store)
      const served = serveUntilSignal(log, async () => () => new Promise<void>((resolve) => (closed = resolve)));
      await new Promise((r) => setImmediate(r));
      deliver('SIGTERM');
      expect(lines).toEqual([['info', expect.objectContaining({ event: 'server.stopping', signal: 'SIGTERM', starting: false })]]);
      // SIGINT within SAME_STOP_MS: the same request (a terminal's Ctrl-C, then the cluster primary's SIGTERM)
      now += SAME_STOP_MS - 1;
      deliver('SIGINT');
      expect(exit).not.toHaveBeenCalled();
      expect(lines).toHaveLength(1);
      // SIGINT later: the stop is ended (it was ignored: SIGTERM had used its handler, SIGINT's still said "stopping already")
      now += 1;
      deliver('SIGINT');
      expect(lines).toHaveLength(2);
      expect(lines[1]).toEqual(['warn', expect.objectContaining({ event: 'server.stop_forced', signal: 'SIGINT' })]);
      expect(exit).toHaveBeenCalledWith(130);
      // SIGTERM as well (exit is a mock here: the process goes on)
      deliver('SIGTERM');
      expect(exit).toHaveBeenLastCalledWith(143);
      await new Promise((r) => setImmediate(r));
      closed();
      await served;
      // once stopped, the handlers are gone
      expect(handlers()).toEqual(before);
    } finally {
      exit.mockRestore();
      clock.mockRestore();
    }
  });
});
