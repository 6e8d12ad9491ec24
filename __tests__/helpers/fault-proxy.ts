/**
 * A TCP proxy on 127.0.0.1:<random> that a test owns and can break: `cut()`
 * destroys every open connection and resets new ones (a stopped server),
 * `blackHole()` keeps connections open but forwards nothing (a server or
 * network that stopped answering), `restore()` forwards again. The service
 * behind it is never touched.
 */
import net from 'node:net';

export interface FaultProxy {
  readonly port: number;
  cut(): void;
  blackHole(): void;
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
    upstream.pipe(client);
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
    restore() {
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
