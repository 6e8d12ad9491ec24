/**
 * The key-based client commands: create --auth private_key_jwt, client-key
 * add|remove|list. End to end: a generated key gets a token from an issuer
 * on the same data dir.
 */
import { generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { createIssuer } from '../../lib';
import { cliPerTest, type Run } from '../helpers/cli';
import { CLIENT_ASSERTION_TYPE, signClientAssertion } from '../../lib/jwt/client-assertion';

const ISSUER = 'http://issuer.test';
const dirs = cliPerTest('ecc-cli-keys-');
const { cli } = dirs;

function expectRefused(r: Run, problem: string | RegExp): void {
  expect(r.code).toBe(2);
  expect(r.stdout).toBe('');
  const lines = r.stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  if (typeof problem === 'string') expect(lines[0]).toContain(problem);
  else expect(lines[0]).toMatch(problem);
}

/** A refusal that depends on stored state: exit 1, one line, no pointer to the help. */
function expectStateError(r: Run, line: string): void {
  expect(r.code).toBe(1);
  expect(r.stdout).toBe('');
  expect(r.stderr).toBe(`${line}\n`);
}

function writeJson(name: string, value: unknown): string {
  const file = path.join(dirs.tmp, name);
  fs.writeFileSync(file, JSON.stringify(value));
  return file;
}

function ecPair(kid?: string): { pub: JsonWebKey; priv: JsonWebKey } {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const extra = kid ? { kid } : {};
  return { pub: { ...publicKey.export({ format: 'jwk' }), ...extra }, priv: { ...privateKey.export({ format: 'jwk' }), ...extra } };
}

async function tokenStatus(clientId: string, privateKey: JsonWebKey): Promise<number> {
  const issuer = createIssuer({ issuer: ISSUER, audience: 'http://api.test', dataDir: dirs.dataDir, logger: false });
  try {
    const app = express();
    app.use(issuer.router());
    const assertion = signClientAssertion({ clientId, audience: ISSUER, privateKey });
    const res = await request(app)
      .post('/oauth/token')
      .type('form')
      .send({ grant_type: 'client_credentials', client_assertion_type: CLIENT_ASSERTION_TYPE, client_assertion: assertion });
    return res.status;
  } finally {
    await issuer.close();
  }
}

describe('create --auth private_key_jwt --generate-key', () => {
  it('writes the private JWK to a 0600 file, registers only the public key, and the key gets a token', async () => {
    const out = path.join(dirs.tmp, 'client.key.json');
    const r = await cli(['create', '--name', 'svc', '--scope', 'a', '--auth', 'private_key_jwt', '--generate-key', '--out', out, '--json']);
    expect(r.code).toBe(0);
    const printed = JSON.parse(r.stdout);
    expect(Object.keys(printed).sort()).toEqual(['auth', 'client_id', 'kid', 'name', 'scope']);
    expect(printed).toMatchObject({ name: 'svc', scope: 'a', auth: 'private_key_jwt' });
    expect(fs.statSync(out).mode & 0o777).toBe(0o600);
    const priv = JSON.parse(fs.readFileSync(out, 'utf8'));
    expect(priv).toMatchObject({ kty: 'EC', crv: 'P-256', kid: printed.kid, alg: 'ES256' });
    expect(typeof priv.d).toBe('string');
    expect(r.stdout).not.toContain(priv.d);

    const listed = await cli(['client-key', 'list', printed.client_id, '--json']);
    expect(JSON.parse(listed.stdout)).toEqual([{ kid: printed.kid, kty: 'EC', alg: 'ES256', crv: 'P-256' }]);
    const store = fs.readFileSync(path.join(dirs.dataDir, 'store.sqlite'));
    expect(store.includes(Buffer.from(priv.d))).toBe(false);

    expect(await tokenStatus(printed.client_id, priv)).toBe(200);
    const list = JSON.parse((await cli(['list', '--json'])).stdout);
    expect(list[0]).toMatchObject({ client_id: printed.client_id, auth: 'private_key_jwt', active_secrets: 0 });
  });

  it('refuses to overwrite an existing file and creates no client', async () => {
    const out = writeJson('exists.json', { keep: true });
    expectRefused(await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--generate-key', '--out', out]), 'exists already');
    expect(JSON.parse(fs.readFileSync(out, 'utf8'))).toEqual({ keep: true });
    expect(fs.existsSync(dirs.dataDir)).toBe(false); // no client, not even a store
  });

  it('refuses --out - (not stdout: the private key would be mixed with the output) and an empty --out, and creates nothing', async () => {
    const cwd = process.cwd();
    process.chdir(dirs.tmp); // the code before wrote a file named '-' here
    try {
      for (const out of ['-', '']) {
        const r = await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--generate-key', '--out', out]);
        expect(r.code).toBe(2);
        expect(r.stdout).toBe('');
        expect(r.stderr).toBe(`error: --out needs a file name for the private key, got '${out}' (it is never written to stdout) (run 'client-credentials create --help' for usage)\n`);
      }
      expect(fs.readdirSync(dirs.tmp)).toEqual([]);
    } finally {
      process.chdir(cwd);
    }
  });
});

describe('create --auth private_key_jwt --jwks', () => {
  it('registers a JWK Set and the matching private key gets a token; a secret is never printed', async () => {
    const k = ecPair('mine');
    const r = await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', writeJson('jwks.json', { keys: [k.pub] })]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('auth:       private_key_jwt');
    expect(r.stdout).not.toContain('client_secret');
    const clientId = /client_id:\s+(\S+)/.exec(r.stdout)![1];
    expect(await tokenStatus(clientId, k.priv)).toBe(200);
  });

  it('registers the signing key of a set that also holds an encryption key and an Ed25519 key, with a note on stderr for each skipped one', async () => {
    const k = ecPair('mine');
    const enc = { ...ecPair('enc').pub, use: 'enc' };
    const ed = { ...generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }), kid: 'ed' };
    const r = await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', writeJson('mixed.json', { keys: [enc, ed, k.pub] }), '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).kids).toEqual(['mine']);
    expect(r.stderr.trimEnd().split('\n')).toEqual([
      'note: key 1 of the set is not registered: use enc: not a signing key',
      'note: key 2 of the set is not registered: kty OKP: this issuer verifies EC (P-256, P-384) and RSA keys',
    ]);
    expect(await tokenStatus(JSON.parse(r.stdout).client_id, k.priv)).toBe(200);
  });

  it.each([
    ['a set with no signing key', () => ({ keys: [{ ...ecPair('enc').pub, use: 'enc' }] }), 'no key that signs client assertions: use enc: not a signing key'],
    ['private members', () => ecPair('a').priv, 'private member "d"'],
    ['a symmetric key', () => ({ kty: 'oct', k: 'c2VjcmV0', kid: 'a' }), 'symmetric keys are refused'],
    ['RSA under 2048 bits', () => ({ ...generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'jwk' }), kid: 'r' }), 'at least 2048 bits'],
    ['duplicate kids', () => ({ keys: [ecPair('same').pub, ecPair('same').pub] }), 'duplicate kid'],
    ['one key under two kids', () => {
      const { pub } = ecPair();
      return { keys: [{ ...pub, kid: 'first' }, { ...pub, kid: 'second' }] };
    }, 'key 2 is the same public key as key 1 (kid "first")'],
    ['more than 8 keys', () => ({ keys: Array.from({ length: 9 }, (_, i) => ecPair(`k${i}`).pub) }), 'at most 8 keys'],
  ])('refuses %s with one line and exit 2', async (_name, make, problem) => {
    expectRefused(await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', writeJson('k.json', make())]), problem);
    expect(fs.existsSync(dirs.dataDir)).toBe(false); // no client, not even a store
  });

  it('refuses both --jwks and --jwks-uri, and key flags without --auth private_key_jwt', async () => {
    const file = writeJson('k.json', ecPair('a').pub);
    expectRefused(await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', file, '--jwks-uri', 'https://x.example/jwks']), 'not both');
    expectRefused(await cli(['create', '--name', 'svc', '--jwks', file]), '--jwks goes with --auth private_key_jwt');
    expectRefused(await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt']), 'needs --jwks FILE, --jwks-uri URL or --generate-key');
    expectRefused(await cli(['create', '--name', 'svc', '--auth', 'magic']), '--auth must be client_secret or private_key_jwt');
  });
});

describe('create --auth private_key_jwt --jwks-uri', () => {
  it('registers the URI (https, or http on loopback) and refuses others; client-key add points there', async () => {
    const r = await cli(['create', '--name', 'remote', '--auth', 'private_key_jwt', '--jwks-uri', 'https://client.example/jwks', '--json']);
    expect(r.code).toBe(0);
    const printed = JSON.parse(r.stdout);
    expect(printed).toMatchObject({ auth: 'private_key_jwt', jwks_uri: 'https://client.example/jwks' });
    expectRefused(await cli(['create', '--name', 'x', '--auth', 'private_key_jwt', '--jwks-uri', 'http://client.example/jwks']), 'https');
    // --out writes a generated key only: with a remote key set it is refused, and nothing is created
    const out = path.join(dirs.tmp, 'never.json');
    expectRefused(await cli(['create', '--name', 'y', '--auth', 'private_key_jwt', '--jwks-uri', 'https://client.example/jwks', '--out', out]), '--out goes with --generate-key');
    expect(fs.existsSync(out)).toBe(false);
    expect(JSON.parse((await cli(['list', '--json'])).stdout).map((c: { name: string }) => c.name)).toEqual(['remote']);
    const add = await cli(['client-key', 'add', printed.client_id, writeJson('k.json', ecPair('k').pub)]);
    expect(add.code).toBe(1);
    expect(add.stderr).toContain('publishes its keys at');
    // client-key list says where its keys are, not that it uses a secret
    const list = await cli(['client-key', 'list', printed.client_id]);
    expect(list).toMatchObject({ code: 0, stdout: `Client ${printed.client_id} publishes its keys at https://client.example/jwks: the issuer fetches them from there, none are stored.\n` });
  });

  // any length was stored (and logged whole in client.created): a 100 KB URI exited 0; --resource stops at 2048 characters
  it('refuses a jwks_uri over 2048 characters (also once percent-encoded) with one line and exit 2, and creates nothing', async () => {
    const base = 'https://client.example/';
    const longest = `${base}${'a'.repeat(2048 - base.length)}`;
    for (const uri of [`${longest}a`, `${base}${'a'.repeat(100_000)}`, `${base}${'é'.repeat(400)}`]) {
      const r = await cli(['create', '--name', 'long', '--auth', 'private_key_jwt', '--jwks-uri', uri]);
      expectRefused(r, 'jwks_uri is too long (at most 2048 characters)');
      expect(r.stderr.length).toBeLessThan(200);
    }
    const r = await cli(['create', '--name', 'longest', '--auth', 'private_key_jwt', '--jwks-uri', longest, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).jwks_uri).toBe(longest);
    expect(JSON.parse((await cli(['list', '--json'])).stdout).map((c: { name: string }) => c.name)).toEqual(['longest']);
  });

  // client-key list --json printed an array for most clients but an object {client_id, jwks_uri} for a --jwks-uri
  // client: a script doing `jq length` or `.[].kid` broke on it. The array stays; the URI is on stderr and in list --json.
  it('client-key list --json prints an array for every client ([] for a jwks_uri client, with a note: line naming the URI); list --json and update --json carry jwks_uri', async () => {
    const remote = JSON.parse((await cli(['create', '--name', 'remote', '--auth', 'private_key_jwt', '--jwks-uri', 'https://client.example/jwks', '--json'])).stdout).client_id;
    const plain = JSON.parse((await cli(['create', '--name', 'plain', '--json'])).stdout).client_id;
    const keyed = JSON.parse((await cli(['create', '--name', 'keyed', '--auth', 'private_key_jwt', '--jwks', writeJson('k.json', ecPair('k').pub), '--json'])).stdout).client_id;

    expect(await cli(['client-key', 'list', remote, '--json'])).toEqual({
      code: 0,
      stdout: '[]\n',
      stderr: `note: client ${remote} publishes its keys at https://client.example/jwks: none are stored, the issuer fetches them from there\n`,
    });
    expect(await cli(['client-key', 'list', plain, '--json'])).toEqual({ code: 0, stdout: '[]\n', stderr: '' });
    expect(JSON.parse((await cli(['client-key', 'list', keyed, '--json'])).stdout)).toEqual([{ kid: 'k', kty: 'EC', alg: 'ES256', crv: 'P-256' }]);

    // how a script tells "keys at a URI" from "a secret": the client's jwks_uri, an added field of list --json and update --json
    const listed = JSON.parse((await cli(['list', '--json'])).stdout) as Record<string, unknown>[];
    const byId = Object.fromEntries(listed.map((c) => [c.client_id, c]));
    expect(byId[remote]).toMatchObject({ auth: 'private_key_jwt', jwks_uri: 'https://client.example/jwks' });
    expect(byId[plain]).not.toHaveProperty('jwks_uri');
    expect(byId[keyed]).not.toHaveProperty('jwks_uri');
    const updated = await cli(['update', remote, '--name', 'remote-2', '--json']);
    expect(updated.code).toBe(0);
    expect(JSON.parse(updated.stdout)).toMatchObject({ client_id: remote, name: 'remote-2', auth: 'private_key_jwt', jwks_uri: 'https://client.example/jwks' });
    expect(JSON.parse((await cli(['update', plain, '--name', 'plain-2', '--json'])).stdout)).not.toHaveProperty('jwks_uri');
  });
});

describe('client-key add | remove | list', () => {
  it('rotates with overlap: add, both work, remove the old one, only the new one works', async () => {
    const old = ecPair('old');
    const next = ecPair('new');
    const r = await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', writeJson('old.json', old.pub), '--json']);
    const clientId = JSON.parse(r.stdout).client_id;

    const added = await cli(['client-key', 'add', clientId, writeJson('new.json', next.pub), '--json']);
    expect(added.code).toBe(0);
    expect(JSON.parse(added.stdout)).toEqual({ client_id: clientId, kid: 'new', alg: 'ES256' });
    expect(await tokenStatus(clientId, old.priv)).toBe(200);
    expect(await tokenStatus(clientId, next.priv)).toBe(200);

    const table = await cli(['client-key', 'list', clientId]);
    expect(table.stdout.split('\n')[0]).toMatch(/^KID\s+KTY\s+ALG$/);
    expect(table.stdout).toMatch(/old\s+EC P-256\s+ES256/);

    // a malformed REDIS_URL (remove rings the instances through it) stops it before the key goes
    const badRedis = await cli(['client-key', 'remove', clientId, 'old'], { REDIS_URL: 'localhost:6379' });
    expect(badRedis.code).toBe(2);
    expect(badRedis.stderr).toMatch(/^error: REDIS_URL must be redis:\/\/… or rediss:\/\/… /);
    expect(await tokenStatus(clientId, old.priv)).toBe(200);

    expect((await cli(['client-key', 'remove', clientId, 'old'])).code).toBe(0);
    expect(await tokenStatus(clientId, old.priv)).toBe(401);
    expect(await tokenStatus(clientId, next.priv)).toBe(200);

    // the last key stays; an unknown kid is an error
    const last = await cli(['client-key', 'remove', clientId, 'new']);
    expect(last.code).toBe(1);
    expect(last.stderr).toContain('last key');
    expect((await cli(['client-key', 'remove', clientId, 'nope'])).code).toBe(1);
    // a thumbprint kid may start with '-': taken as the KID, not as an option
    const dashKid = `-${'k'.repeat(42)}`;
    expect(await cli(['client-key', 'remove', clientId, dashKid])).toEqual({ code: 1, stdout: '', stderr: `error: client '${clientId}' has no key with kid '${dashKid}'\n` });
    // so may a kid given by hand, of any length: one that starts with '-' is the KID as it is, one with '--' goes after '--'
    for (const kid of ['-k2', '--k3']) expect((await cli(['client-key', 'add', clientId, writeJson(`${kid}.json`, ecPair(kid).pub)])).code).toBe(0);
    expect(await cli(['client-key', 'remove', clientId, '-k2', '--json'])).toEqual({ code: 0, stdout: `${JSON.stringify({ client_id: clientId, removed: '-k2' })}\n`, stderr: '' });
    expectRefused(await cli(['client-key', 'remove', clientId, '--k3']), /^error: unknown option '--k3' \(/);
    expect((await cli(['client-key', 'remove', clientId, '--json', '--', '--k3'])).code).toBe(0);
    expect(JSON.parse((await cli(['client-key', 'list', clientId, '--json'])).stdout).map((row: { kid: string }) => row.kid)).toEqual(['new']);
    // a missing argument is named: only the KID here
    expectRefused(await cli(['client-key', 'remove', clientId]), /^error: missing KID \(/);
    expectRefused(await cli(['client-key', 'remove']), /^error: missing CLIENT_ID and KID \(/);
    expectRefused(await cli(['client-key', 'add', clientId]), /^error: missing FILE \(/);
  });

  it('refuses a duplicate kid, a key it has already, a private key and a secret-based client', async () => {
    const k = ecPair('k');
    const clientId = JSON.parse((await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', writeJson('k.json', k.pub), '--json'])).stdout).client_id;
    // these depend on the client's keys, not on the command line: exit 1, as other state errors
    expectStateError(await cli(['client-key', 'add', clientId, writeJson('dup.json', ecPair('k').pub)]), `error: client ${clientId} has a key with kid "k" already`);
    // the same key again under a new kid: a "rotation" that rotates nothing
    expectStateError(
      await cli(['client-key', 'add', clientId, writeJson('same.json', { ...k.pub, kid: 'k2' })]),
      `error: client ${clientId} has this public key already (kid "k"): a new key needs a new key pair`,
    );
    expect(JSON.parse((await cli(['client-key', 'list', clientId, '--json'])).stdout).map((row: { kid: string }) => row.kid)).toEqual(['k']);
    expectRefused(await cli(['client-key', 'add', clientId, writeJson('priv.json', ecPair('p').priv)]), 'private member');
    const full = JSON.parse(
      (await cli(['create', '--name', 'full', '--auth', 'private_key_jwt', '--jwks', writeJson('full.json', { keys: Array.from({ length: 8 }, (_, i) => ecPair(`f${i}`).pub) }), '--json'])).stdout,
    ).client_id;
    expectStateError(await cli(['client-key', 'add', full, writeJson('ninth.json', ecPair('f8').pub)]), `error: client ${full} has 8 keys already; remove one first`);
    const secretClient = JSON.parse((await cli(['create', '--name', 'plain', '--json'])).stdout).client_id;
    const r = await cli(['client-key', 'add', secretClient, writeJson('x.json', ecPair('x').pub)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('authenticates with a secret');
  });

  // exit 2 (a usage error: the core's TypeError), where client-key add on a secret-based client exits 1
  it('rotate-secret on a key-based client: exit 1, one line saying it has no secret, its key still works', async () => {
    const k = ecPair('k');
    const clientId = JSON.parse((await cli(['create', '--name', 'svc', '--auth', 'private_key_jwt', '--jwks', writeJson('k.json', k.pub), '--json'])).stdout).client_id;
    for (const flags of [[], ['--json'], ['--keep-old', '1h']]) {
      expectStateError(
        await cli(['rotate-secret', clientId, ...flags]),
        `error: client '${clientId}' authenticates with a key (private_key_jwt), so it has no secret to rotate`,
      );
    }
    expect(JSON.parse((await cli(['client-key', 'list', clientId, '--json'])).stdout).map((row: { kid: string }) => row.kid)).toEqual(['k']);
    expect(await tokenStatus(clientId, k.priv)).toBe(200);
  });

  it('has help for each command', async () => {
    for (const args of [['client-key', '--help'], ['client-key', 'add', '--help'], ['client-key', 'remove', '--help'], ['client-key', 'list', '--help']]) {
      const r = await cli(args);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Usage: client-credentials ${args.slice(0, -1).join(' ')}`);
    }
  });
});
