/**
 * A TCP proxy on 127.0.0.1:<random> that a test owns and can break: `cut()`
 * destroys every open connection and resets new ones (a stopped server),
 * `blackHole()` keeps connections open but forwards nothing (a server or
 * network that stopped answering), `slow(ms)` forwards every answer `ms`
 * late (a loaded server, a fork pause), `restore()` forwards again. The
 * service behind it is never touched.
 */
import net from 'node:net';

export interface FaultProxy {
  readonly port: number;
  cut(): void;
  blackHole(): void;
  /** Forwards what the service answers `ms` late, in order, on open and new connections (`slow(0)`: at once again). */
  slow(ms: number): void;
  restore(): void;
  /**
   * Forwards new connections again but leaves the black-holed ones open and
   * silent, as a network that recovers does: nobody tells their ends they
   * are dead, so only the ends' own timeouts can find out.
   */
  heal(): void;
  close(): Promise<void>;
}

export async function startFaultProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<FaultProxy> {
  let mode: 'up' | 'cut' | 'black-hole' = 'up';
  let delayMs = 0;
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket | undefined }>();

  const server = net.createServer((client) => {
    if (mode === 'cut') {
      client.resetAndDestroy();
      return;
    }
    const pair = { client, upstream: undefined as net.Socket | undefined };
    pairs.add(pair);
    const drop = (): void => {
      client.destroy();
      pair.upstream?.destroy();
      pairs.delete(pair);
    };
    client.on('error', drop).on('close', drop);
    if (mode === 'black-hole') {
      client.resume(); // swallow whatever it sends, answer nothing
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    pair.upstream = upstream;
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    // answers go through a queue, so that they keep their order when the delay changes
    const late: { due: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const flush = (): void => {
      timer = undefined;
      if (mode === 'black-hole') late.length = 0; // nothing passes any more
      while (late.length > 0 && late[0].due <= Date.now()) client.write(late.shift()!.chunk);
      if (late.length > 0) timer = setTimeout(flush, late[0].due - Date.now());
    };
    upstream.on('data', (chunk: Buffer) => {
      if (delayMs === 0 && late.length === 0) {
        client.write(chunk);
        return;
      }
      late.push({ due: Date.now() + delayMs, chunk });
      timer ??= setTimeout(flush, Math.max(0, late[0].due - Date.now()));
    });
    upstream.on('close', () => clearTimeout(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;

  return {
    port,
    cut() {
      mode = 'cut';
      for (const { client, upstream } of [...pairs]) {
        client.resetAndDestroy();
        upstream?.destroy();
      }
      pairs.clear();
    },
    blackHole() {
      mode = 'black-hole';
      // open connections stay open but nothing passes any more, in either direction
      for (const { client, upstream } of pairs) {
        client.unpipe();
        upstream?.unpipe();
        client.resume();
        upstream?.resume();
        client.removeAllListeners('data');
        upstream?.removeAllListeners('data');
        client.on('data', () => undefined);
        upstream?.on('data', () => undefined);
      }
    },
    slow(ms: number) {
      delayMs = ms;
    },
    restore() {
      delayMs = 0;
      // black-holed connections are dead for good: drop them, as a network would time them out
      if (mode === 'black-hole') {
        for (const { client, upstream } of [...pairs]) {
          client.destroy();
          upstream?.destroy();
        }
        pairs.clear();
      }
      mode = 'up';
    },
    heal() {
      mode = 'up';
    },
    close() {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream?.destroy();
      }
      pairs.clear();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
