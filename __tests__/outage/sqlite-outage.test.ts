/**
 * The embedded store on a file the process cannot write: the issuer answers
 * 503 (not 500) until the file is writable again, then recovers without a
 * restart. As root, chmod does not stop writes, so the data folder is made
 * read-only with a read-only bind mount instead (skipped, with one line, when
 * mounting is not allowed).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, closeSync, openSync, readdirSync, rmSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import express from 'express';
import request from 'supertest';
import { createIssuer, StoreUnavailableError, type IssuedCredentials } from '../../lib';
import { tempDir } from '../helpers/app';
import { recorder } from '../helpers/log-recorder';

const ISSUER = 'http://issuer.test';
const AUDIENCE = 'http://api.test';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Makes `dir` read-only for this process; returns how, and how to undo it, or `undefined` when it cannot. */
function makeReadOnly(dir: string): { how: string; undo: () => void } | undefined {
  if (process.getuid?.() !== 0) {
    for (const f of readdirSync(dir)) chmodSync(join(dir, f), 0o444);
    chmodSync(dir, 0o555);
    return {
      how: 'chmod 0555 folder, 0444 files',
      undo: () => {
        chmodSync(dir, 0o700);
        for (const f of readdirSync(dir)) chmodSync(join(dir, f), 0o600);
      },
    };
  }
  const run = (...args: string[]) => spawnSync('mount', args, { stdio: 'ignore', timeout: 10_000 }).status === 0;
  if (!run('--bind', dir, dir)) return undefined;
  if (!run('-o', 'remount,ro,bind', dir)) {
    spawnSync('umount', [dir], { stdio: 'ignore' });
    return undefined;
  }
  return { how: 'read-only bind mount (running as root)', undo: () => void spawnSync('umount', [dir], { stdio: 'ignore', timeout: 10_000 }) };
}

describe('embedded store on a read-only file', () => {
  const dataDir = tempDir();
  let client: IssuedCredentials;
  let token: string;

  beforeAll(async () => {
    // a first instance creates the database, a client and the key, and stops
    const first = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false });
    await first.ready();
    client = await first.clients.create({ name: 'svc', scopes: 'orders:read' });
    const app = express().use(first.router());
    token = (await request(app).post('/oauth/token').auth(client.clientId, client.clientSecret).type('form').send({ grant_type: 'client_credentials' })).body.access_token;
    await first.close();
  });

  afterAll(() => {
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('answers 503 while the store cannot be opened, logs it once, and recovers once it can', async () => {
    const readOnly = makeReadOnly(dataDir);
    if (!readOnly) {
      process.stderr.write('cannot make a folder read-only here (root without mount): skipping the read-only SQLite test\n');
      return;
    }
    const { events, logger } = recorder();
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger });
    const app = express();
    app.use(issuer.router());
    app.get('/api/me', issuer.requireBearer(), (req, res) => {
      res.json({ client_id: req.auth!.clientId });
    });
    const tokenRequest = (id: string, secret: string) =>
      request(app).post('/oauth/token').auth(id, secret).type('form').send({ grant_type: 'client_credentials' });
    try {
      for (let i = 0; i < 5; i++) {
        for (const res of [await tokenRequest(client.clientId, client.clientSecret), await tokenRequest('unknown', 'x')]) {
          expect(res.status).toBe(503);
          expect(res.headers['retry-after']).toBe('5');
          expect(res.headers['cache-control']).toBe('no-store');
          expect(res.body).toEqual({ error: 'temporarily_unavailable', error_description: 'the service is temporarily unavailable' });
        }
        await sleep(250); // across the one-second retry of ready()
      }
      // no key could be loaded yet: the protected route cannot check a token either, and says so with 503
      const me = await request(app).get('/api/me').set('Authorization', `Bearer ${token}`);
      expect(me.status).toBe(503);
      expect(events.filter((e) => e.event === 'store.unavailable')).toHaveLength(1);
      expect(events.find((e) => e.event === 'store.unavailable')!.reason).toMatch(/embedded store .* is unavailable: .*\((EROFS|EACCES|SQLITE_[A-Z_]+)\)$/);
      expect(events.filter((e) => e.event === 'error')).toEqual([]);
      expect(await issuer.health()).toEqual({ ok: false, store: 'down', signingKid: null });
    } finally {
      readOnly.undo();
    }
    try {
      await sleep(1100);
      const res = await tokenRequest(client.clientId, client.clientSecret);
      expect(res.status).toBe(200);
      expect((await request(app).get('/api/me').set('Authorization', `Bearer ${token}`)).status).toBe(200);
      expect(events.filter((e) => e.event === 'store.recovered')).toHaveLength(1);
      expect(events.filter((e) => e.event === 'store.unavailable')).toHaveLength(1);
      await sleep(1100);
      expect(await issuer.health()).toEqual({ ok: true, store: 'up', signingKid: expect.any(String) });
    } finally {
      await issuer.close();
    }
  }, 30_000);
});

describe('embedded store on a full disk (a 2 MiB tmpfs, root only)', () => {
  it('keeps issuing tokens (reads only), refuses writes as unavailable, and writes again once there is room', async () => {
    const mountPoint = tempDir();
    const mounted = process.getuid?.() === 0 && spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mountPoint], { stdio: 'ignore', timeout: 10_000 }).status === 0;
    if (!mounted) {
      rmSync(mountPoint, { recursive: true, force: true });
      process.stderr.write('cannot mount a tmpfs here (needs root): skipping the full-disk SQLite test\n');
      return;
    }
    const { events, logger } = recorder();
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir: join(mountPoint, 'data'), logger });
    try {
      await issuer.ready();
      const client = await issuer.clients.create({ name: 'svc' });
      const app = express().use(issuer.router());
      const tokenRequest = () => request(app).post('/oauth/token').auth(client.clientId, client.clientSecret).type('form').send({ grant_type: 'client_credentials' });
      expect((await tokenRequest()).status).toBe(200);

      // fill the file system to the last byte
      const filler = join(mountPoint, 'filler');
      const fd = openSync(filler, 'w');
      try {
        const chunk = Buffer.alloc(64 * 1024, 1);
        for (let i = 0; i < 64; i++) {
          try {
            writeSync(fd, chunk);
          } catch {
            break;
          }
        }
        for (let i = 0; i < 64; i++) {
          try {
            writeSync(fd, Buffer.alloc(1024, 1));
          } catch {
            break;
          }
        }
      } finally {
        closeSync(fd);
      }

      const created = issuer.clients.create({ name: 'too-late' }).catch((err: unknown) => err);
      const err = await created;
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toMatch(/\((SQLITE_FULL|SQLITE_IOERR[A-Z_]*)\)$/);
      expect(events.filter((e) => e.event === 'store.unavailable')).toHaveLength(1);
      // the token endpoint only reads: it keeps answering
      expect((await tokenRequest()).status).toBe(200);

      unlinkSync(filler);
      await expect(issuer.clients.create({ name: 'room-again' })).resolves.toMatchObject({ name: 'room-again' });
      expect(events.filter((e) => e.event === 'store.recovered')).toHaveLength(1);
    } finally {
      await issuer.close();
      spawnSync('umount', [mountPoint], { stdio: 'ignore', timeout: 10_000 });
      rmSync(mountPoint, { recursive: true, force: true });
    }
  }, 30_000);
});
