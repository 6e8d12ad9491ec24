/**
 * issuer.close() called while ready() is still opening the store (a SIGTERM
 * during start-up) stops every timer the issuer starts, those ready()
 * starts after close() was called included.
 */
import { rmSync } from 'node:fs';
import { createIssuer } from '../../lib';
import { tempDir } from '../helpers/app';

/** The intervals created and not cleared since track() was called, with the period of each. */
function track(): { live: Map<unknown, number>; restore(): void } {
  const live = new Map<unknown, number>();
  const setSpy = jest.spyOn(global, 'setInterval').mockImplementation(((fn: () => void, ms?: number) => {
    const timer = jest.requireActual<typeof import('node:timers')>('node:timers').setInterval(fn, ms);
    live.set(timer, ms ?? 0);
    return timer;
  }) as typeof setInterval);
  const realClear = global.clearInterval;
  const clearSpy = jest.spyOn(global, 'clearInterval').mockImplementation(((timer?: NodeJS.Timeout) => {
    live.delete(timer);
    realClear(timer);
  }) as typeof clearInterval);
  return {
    live,
    restore() {
      setSpy.mockRestore();
      clearSpy.mockRestore();
    },
  };
}

test('close() during ready(): no interval is left running', async () => {
  const dataDir = tempDir();
  const timers = track();
  try {
    const issuer = createIssuer({ issuer: 'http://issuer.test', audience: 'http://api.test', dataDir, logger: false });
    const ready = issuer.ready();
    await issuer.close(); // same tick: the embedded store is still opening
    await ready.catch(() => undefined);
    expect([...timers.live.values()]).toEqual([]);
  } finally {
    timers.restore();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('close() after ready(): the jti purge interval started by ready() is cleared', async () => {
  const dataDir = tempDir();
  const timers = track();
  try {
    const issuer = createIssuer({ issuer: 'http://issuer.test', audience: 'http://api.test', dataDir, logger: false });
    await issuer.ready();
    expect([...timers.live.values()]).toContain(60_000); // the control: ready() did start it
    await issuer.close();
    expect([...timers.live.values()]).toEqual([]);
  } finally {
    timers.restore();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
