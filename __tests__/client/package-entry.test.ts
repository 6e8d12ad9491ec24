/**
 * The built package as an importer sees it: `express-client-credentials/client`
 * through package.json `exports`, from ESM and CommonJS, loading nothing of
 * Express, the stores, Redis or pino; and a script making one call exits by itself.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { fakeApi, fakeTokenEndpoint, type FakeServer } from './fakes';

const run = promisify(execFile);
const ROOT = resolve(__dirname, '../..');
let dir: string;

const FORBIDDEN = String.raw`/node_modules/(express|express4|better-sqlite3|pg|pg-[a-z-]+|ioredis|pino|passport|oauth2orize|jsonwebtoken)/`;
const REPORT = `
  const loaded = Object.keys(cache);
  const forbidden = loaded.filter((f) => new RegExp(${JSON.stringify(FORBIDDEN)}).test(f));
  // lib/jwt holds the JOSE helpers both sides share (node:crypto only; a core test checks its imports), lib/shared the plain HTTP ones
  const shared = ['/dist/lib/client/', '/dist/lib/jwt/', '/dist/lib/shared/'];
  const serverSide = loaded.filter((f) => f.includes('/dist/lib/') && !shared.some((s) => f.includes(s)));
  process.stdout.write(JSON.stringify({ type: typeof createTokenClient, error: typeof TokenEndpointError, forbidden, serverSide, count: loaded.length }));
`;

beforeAll(async () => {
  await run('npm', ['run', 'build'], { cwd: ROOT, timeout: 180_000 });
  dir = mkdtempSync(join(tmpdir(), 'ecc-entry-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(ROOT, join(dir, 'node_modules', 'express-client-credentials'), 'dir');
  writeFileSync(
    join(dir, 'esm.mjs'),
    `import { createRequire } from 'node:module';
     import { createTokenClient, TokenEndpointError } from 'express-client-credentials/client';
     const cache = createRequire(import.meta.url).cache;${REPORT}`,
  );
  writeFileSync(join(dir, 'cjs.cjs'), `const { createTokenClient, TokenEndpointError } = require('express-client-credentials/client'); const cache = require.cache;${REPORT}`);
  writeFileSync(
    join(dir, 'main.cjs'),
    `const m = require('express-client-credentials'); const p = require('express-client-credentials/package.json');
     process.stdout.write(JSON.stringify({ createIssuer: typeof m.createIssuer, requireBearer: typeof m.requireBearer, name: p.name }));`,
  );
  writeFileSync(
    join(dir, 'one-call.mjs'),
    `import { createTokenClient } from 'express-client-credentials/client';
     const [tokenEndpoint, api] = process.argv.slice(2);
     const client = createTokenClient({ tokenEndpoint, clientId: 'svc', clientSecret: 'secret' });
     const res = await client.fetch(api);
     process.stdout.write(String(res.status));`,
  );
}, 200_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

it.each([['esm.mjs'], ['cjs.cjs']])('%s imports createTokenClient by the package name, loading no Express, store, Redis, pino or server-side module', async (file) => {
  const { stdout } = await run(process.execPath, [join(dir, file)], { cwd: dir, timeout: 30_000 });
  const report = JSON.parse(stdout);
  expect(report).toMatchObject({ type: 'function', error: 'function', forbidden: [], serverSide: [] });
  expect(report.count).toBeGreaterThan(3); // the client's own modules were seen
});

// TypeScript finds the /client types under every module resolution a project may use: node10 (what
// "module": "commonjs" implies) reads no "exports", so package.json's typesVersions points it there
it.each([
  ['commonjs', 'node10'],
  ['node16', 'node16'],
  ['esnext', 'bundler'],
])('TypeScript (module %s, moduleResolution %s, strict, exactOptionalPropertyTypes, library checks on) compiles a caller of /client and of the main entry', async (module, resolution) => {
  const ext = module === 'node16' ? 'mts' : 'ts';
  const file = join(dir, `caller-${resolution}.${ext}`);
  writeFileSync(
    file,
    `import { createTokenClient, TokenEndpointError, type AccessToken } from 'express-client-credentials/client';
     import { createIssuer, openStore, requireBearer } from 'express-client-credentials';
     export const opening = () => openStore({ databaseUrl: process.env.DATABASE_URL });
     const api = createTokenClient({ issuer: 'https://auth.example.com', clientId: 'svc', clientSecret: 's' });
     export const token: Promise<AccessToken> = api.getToken({ scope: 'orders:read' });
     export const kinds = [typeof createIssuer, typeof requireBearer, TokenEndpointError.name];`,
  );
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const args = ['--noEmit', '--strict', '--exactOptionalPropertyTypes', '--skipLibCheck', 'false', '--module', module, '--moduleResolution', resolution, '--target', 'es2022'];
  args.push('--esModuleInterop', '--typeRoots', join(ROOT, 'node_modules', '@types'), '--types', 'node', file);
  const result = await run(process.execPath, [tsc, ...args], { cwd: dir, timeout: 120_000 }).catch((err: { stdout?: string }) => ({ stdout: `failed: ${err.stdout}` }));
  expect(result.stdout).toBe('');
}, 120_000);

it('the main entry and package.json stay importable', async () => {
  const { stdout } = await run(process.execPath, [join(dir, 'main.cjs')], { cwd: dir, timeout: 30_000 });
  expect(JSON.parse(stdout)).toEqual({ createIssuer: 'function', requireBearer: 'function', name: 'express-client-credentials' });
});

describe('a script that makes one call', () => {
  let endpoint: FakeServer & { tokenUrl: string };
  let api: FakeServer;
  beforeAll(async () => {
    endpoint = await fakeTokenEndpoint();
    api = await fakeApi();
  });
  afterAll(async () => {
    await endpoint.close();
    await api.close();
  });

  it('exits by itself without close(): no timer or refresh keeps it alive', async () => {
    const started = Date.now();
    const path = `/one-call-${process.pid}-${Date.now()}`;
    const { stdout } = await run(process.execPath, [join(dir, 'one-call.mjs'), endpoint.tokenUrl, `${api.url}${path}`], { cwd: dir, timeout: 20_000 });
    expect(stdout).toBe('200');
    // by path: a port is anyone's once freed, so a stray request from elsewhere may reach the fakes too
    const calls = api.requests.filter((r) => r.path === path);
    const tokenRequests = endpoint.requests.filter((r) => r.path === '/token');
    expect(calls).toHaveLength(1);
    expect(tokenRequests).toHaveLength(1);
    expect(calls[0].headers.authorization).toBe(`Bearer tok-${endpoint.requests.indexOf(tokenRequests[0]) + 1}`);
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});
