import { rmSync } from 'node:fs';
import { parseIssuerOptions } from '../../lib/config';
import { AuthorizationServer } from '../../lib/core/authorization-server';
import { StoreUnavailableError } from '../../lib/errors';
import { silentLogger } from '../../lib/logger';
import { openEmbeddedStore } from '../../lib/stores/embedded';
import type { Store } from '../../lib/stores/types';
import { tempDir } from '../helpers/app';

describe('AuthorizationServer.ready()', () => {
  const dir = tempDir();
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const config = parseIssuerOptions({ issuer: 'http://issuer.test', audience: 'http://api.test', logger: false });

  it('opens the store once however many callers wait; after a failure it tries again a second later, not before', async () => {
    let now = 1_000_000;
    let opened = 0;
    let failing = true;
    const open = async (): Promise<Store> => {
      opened++;
      if (failing) throw new StoreUnavailableError('not yet');
      return openEmbeddedStore({ dataDir: dir });
    };
    const server = new AuthorizationServer(config, open, silentLogger, undefined, () => now);

    const first = await Promise.allSettled([server.ready(), server.ready(), server.ready()]);
    expect(first.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(opened).toBe(1);
    now += 500;
    await expect(server.ready()).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(opened).toBe(1); // within the second: the same failure, no new attempt

    failing = false;
    now += 600;
    await Promise.all([server.ready(), server.ready(), server.ready()]);
    expect(opened).toBe(2);
    expect(server.pending()).toBeNull();
    expect(server.keys.current().kid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await server.close();
  });

  it('after close() a failed start is not tried again: requests get 503, and no store is opened that nothing would close', async () => {
    let now = 1_000_000;
    let opened = 0;
    const open = async (): Promise<Store> => {
      opened++;
      throw new StoreUnavailableError('down');
    };
    const server = new AuthorizationServer(config, open, silentLogger, undefined, () => now);
    await expect(server.ready()).rejects.toBeInstanceOf(StoreUnavailableError);
    await server.close();
    now += 5_000;
    const after = server.ready();
    await expect(after).rejects.toMatchObject({ status: 503, code: 'temporarily_unavailable' });
    // what requireBearer() and the token routes wait on
    await expect(server.pending()).rejects.toMatchObject({ status: 503 });
    expect(opened).toBe(1);
  });
});
