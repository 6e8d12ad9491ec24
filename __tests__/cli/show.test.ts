/**
 * `client-credentials show CLIENT_ID`: everything an operator needs about one
 * client (status, how it authenticates, scope, resources, permissions, DPoP),
 * never a secret or a hash; `--json` is one element of `list --json`.
 */
import fs from 'node:fs';
import path from 'node:path';
import { cliPerTest } from '../helpers/cli';

const dirs = cliPerTest('ecc-cli-show-');
const { cli } = dirs;

async function createdJson(...args: string[]): Promise<Record<string, string>> {
  const r = await cli(['create', ...args, '--json']);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout);
}

describe('client-credentials show', () => {
  it('prints a secret client line by line, without its secret', async () => {
    const c = await createdJson('--name', 'billing', '--scope', 'orders:read orders:write', '--resource', 'https://billing.example', '--introspect', '--require-dpop');
    expect(c.auth).toBe('client_secret');
    const r = await cli(['show', c.client_id]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines).toEqual([
      `client_id:    ${c.client_id}`,
      'name:         billing',
      'status:       active',
      expect.stringMatching(/^created: {6}\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
      'auth:         client_secret (1 secret works)',
      'scope:        orders:read orders:write',
      'resources:    https://billing.example',
      'permissions:  introspect',
      'dpop:         required (every token request must carry a DPoP proof)',
    ]);
    expect(r.stdout).not.toContain(c.client_secret);
  });

  it('says when a rotation overlap leaves two secrets working, and when the client is revoked', async () => {
    const c = await createdJson('--name', 'svc');
    expect((await cli(['rotate-secret', c.client_id, '--keep-old', '1h'])).code).toBe(0);
    expect((await cli(['show', c.client_id])).stdout).toContain('auth:         client_secret (2 secrets work: a rotation\'s overlap)\n');
    expect((await cli(['revoke', c.client_id])).code).toBe(0);
    const r = await cli(['show', c.client_id]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^status: {7}revoked since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/m);
    expect(r.stdout).toContain('auth:         client_secret (no secret works)\n');
    expect(r.stdout).toContain('scope:        (none)\n');
    expect(r.stdout).toContain('resources:    (none: tokens for the default audience only)\n');
    expect(r.stdout).toContain('permissions:  (none)\n');
    expect(r.stdout).toContain('dpop:         optional\n');
  });

  it('shows a key-based client by its kids', async () => {
    const keyFile = path.join(dirs.tmp, 'k.json');
    const c = await createdJson('--name', 'keyed', '--auth', 'private_key_jwt', '--generate-key', '--out', keyFile);
    const r = await cli(['show', c.client_id]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('auth:         private_key_jwt (a signed assertion; no secret)\n');
    expect(r.stdout).toContain(`keys:         ${c.kid}\n`);
    const privateKey = JSON.parse(fs.readFileSync(keyFile, 'utf8')) as { d: string };
    expect(r.stdout).not.toContain(privateKey.d);
    const json = JSON.parse((await cli(['show', c.client_id, '--json'])).stdout);
    expect(json).toMatchObject({ client_id: c.client_id, auth: 'private_key_jwt', kids: [c.kid], active_secrets: 0 });
  });

  it('--json is the same object as the client in list --json', async () => {
    const a = await createdJson('--name', 'a', '--scope', 'orders:read', '--resource', 'https://x.example', '--introspect');
    await createdJson('--name', 'b');
    const shown = await cli(['show', a.client_id, '--json']);
    expect(shown.code).toBe(0);
    const listed = (JSON.parse((await cli(['list', '--json'])).stdout) as { client_id: string }[]).find((c) => c.client_id === a.client_id);
    expect(JSON.parse(shown.stdout)).toEqual(listed);
    expect(JSON.parse(shown.stdout)).toEqual({
      client_id: a.client_id,
      name: 'a',
      scope: 'orders:read',
      status: 'active',
      created_at: expect.any(String),
      revoked_at: null,
      active_secrets: 1,
      auth: 'client_secret',
      resources: ['https://x.example'],
      permissions: ['introspect'],
    });
  });

  it('exits 1 for an unknown client, 2 without a client id, and creates no store', async () => {
    await createdJson('--name', 'x');
    const unknown = await cli(['show', 'c_unknown0000000000000000']);
    expect(unknown).toEqual({ code: 1, stdout: '', stderr: "error: no client with id 'c_unknown0000000000000000'\n" });
    const missing = await cli(['show']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("client-credentials show --help");
    const elsewhere = path.join(dirs.tmp, 'nothing-here');
    const noStore = await cli(['show', 'c_unknown0000000000000000'], { DATA_DIR: elsewhere });
    expect(noStore.code).toBe(1);
    expect(fs.existsSync(elsewhere)).toBe(false);
  });

});
