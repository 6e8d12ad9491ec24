/**
 * SCOPES_SUPPORTED: the scopes the server offers, read by the example server
 * (its scopesSupported) and by the CLI, which refuses a client scope outside
 * it. The issuer grants a client the scopes registered with it, so without
 * the check a typo gives a client that never gets the scope meant.
 */
import path from 'node:path';
import express from 'express';
import pino from 'pino';
import request from 'supertest';
import { createIssuer } from '../../lib';
import { issuerFromEnv } from '../../examples/env';
import { cliPerTest, type Run } from '../helpers/cli';

const dirs = cliPerTest('ecc-cli-scopes-');
const { cli } = dirs;
const OFFERED = { SCOPES_SUPPORTED: 'orders:read orders:write' };

function expectUsage(r: Run, problem: string, command: string): void {
  expect(r).toEqual({ code: 2, stdout: '', stderr: `error: ${problem} (run 'client-credentials ${command} --help' for usage)\n` });
}

async function clients(): Promise<Array<{ client_id: string; scope: string }>> {
  const r = await cli(['list', '--json']);
  return r.code === 0 ? JSON.parse(r.stdout) : [];
}

describe('create and update with SCOPES_SUPPORTED set', () => {
  it('refuses a scope the server does not offer, with exit 2 and the offered scopes named; nothing is stored', async () => {
    expectUsage(
      await cli(['create', '--name', 'billing', '--scope', 'orders:raed orders:write'], OFFERED),
      '--scope "orders:raed" is not offered by the server: SCOPES_SUPPORTED is "orders:read orders:write"',
      'create',
    );
    expectUsage(
      await cli(['create', '--name', 'signer', '--scope', 'a', '--scope', 'b orders:read', '--auth', 'private_key_jwt', '--jwks-uri', 'https://client.example/jwks'], OFFERED),
      '--scope "a", "b" are not offered by the server: SCOPES_SUPPORTED is "orders:read orders:write"',
      'create',
    );
    expect(await clients()).toEqual([]);
  });

  it('takes the offered scopes, and update is held to them as create is', async () => {
    const r = await cli(['create', '--name', 'billing', '--scope', 'orders:read orders:write', '--json'], OFFERED);
    expect(r.code).toBe(0);
    const { client_id: id } = JSON.parse(r.stdout);
    expectUsage(await cli(['update', id, '--scope', 'orders:raed'], OFFERED), '--scope "orders:raed" is not offered by the server: SCOPES_SUPPORTED is "orders:read orders:write"', 'update');
    expect((await clients()).map((c) => c.scope)).toEqual(['orders:read orders:write']);
    expect((await cli(['update', id, '--scope', 'orders:read'], OFFERED)).code).toBe(0);
    // none at all is always allowed; so is a change of something else
    expect((await cli(['update', id, '--scope', ''], OFFERED)).code).toBe(0);
    expect((await cli(['update', id, '--name', 'renamed'], OFFERED)).code).toBe(0);
    expect((await clients()).map((c) => c.scope)).toEqual(['']);
  });

  it('without SCOPES_SUPPORTED (or empty) checks the form only, as before', async () => {
    for (const env of [{}, { SCOPES_SUPPORTED: '' }]) {
      const r = await cli(['create', '--name', 'billing', '--scope', 'orders:raed', '--json'], env);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout).scope).toBe('orders:raed');
    }
  });

  it('refuses a malformed SCOPES_SUPPORTED, and the example server refuses the same value at start', async () => {
    const bad = 'orders:read  orders:write'; // two spaces: the server's scopesSupported takes single spaces, as a scope parameter
    expectUsage(
      await cli(['create', '--name', 'billing'], { SCOPES_SUPPORTED: bad }),
      'SCOPES_SUPPORTED must be scope tokens separated by single spaces (RFC 6749 §3.3), as the server takes it, got "orders:read  orders:write"',
      'create',
    );
    await expect(issuerFromEnv({ DATA_DIR: path.join(dirs.tmp, 'server'), SCOPES_SUPPORTED: bad }, pino({ level: 'silent' }))).rejects.toThrow(
      'SCOPES_SUPPORTED must be scope tokens separated by single spaces (RFC 6749 §3.3), got "orders:read  orders:write"',
    );
  });
});

describe('the example server reads SCOPES_SUPPORTED', () => {
  it.each([
    [{}, ['orders:read', 'orders:write']],
    [{ SCOPES_SUPPORTED: 'reports:read orders:read' }, ['reports:read', 'orders:read']],
  ])('%j: scopes_supported is %j', async (env, advertised) => {
    const { issuer } = await issuerFromEnv({ DATA_DIR: path.join(dirs.tmp, 'server'), DEMO_CLIENT: '0', ...env }, pino({ level: 'silent' }));
    try {
      expect(issuer.metadata().scopes_supported).toEqual(advertised);
    } finally {
      await issuer.close();
    }
  });

  it('a scope outside it still reaches the token: the issuer grants what is registered (why the CLI checks)', async () => {
    const r = await cli(['create', '--name', 'billing', '--scope', 'orders:raed', '--json']);
    const { client_id: id, client_secret: secret } = JSON.parse(r.stdout);
    const issuer = createIssuer({ issuer: 'http://issuer.test', audience: 'http://api.test', dataDir: dirs.dataDir, scopesSupported: OFFERED.SCOPES_SUPPORTED, logger: false });
    try {
      const app = express().use(issuer.router());
      const token = await request(app).post('/oauth/token').auth(id, secret).type('form').send({ grant_type: 'client_credentials' });
      expect([token.status, token.body.scope]).toEqual([200, 'orders:raed']);
      const asked = await request(app).post('/oauth/token').auth(id, secret).type('form').send({ grant_type: 'client_credentials', scope: 'orders:read' });
      expect([asked.status, asked.body.error]).toEqual([400, 'invalid_scope']);
    } finally {
      await issuer.close();
    }
  });
});
