import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { generateKeyPairSync, type JsonWebKey } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import express from 'express';
import request from 'supertest';
import { createIssuer } from '../../lib';
import { tempDir } from '../helpers/app';

/** openid-client's PrivateKeyJwt client authentication against a real issuer over HTTP. */
describe('openid-client with private_key_jwt', () => {
  it('gets a token (aud = the issuer, RFC 8414 discovery) that requireBearer() accepts', async () => {
    const dataDir = tempDir();
    const app = express();
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const issuer = createIssuer({ issuer: url, audience: 'http://api.test', dataDir, logger: false });
    app.use(issuer.router());
    app.get('/api/whoami', issuer.requireBearer(), (req, res) => void res.json({ client_id: req.auth!.clientId }));
    try {
      await issuer.ready();
      const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      const pub: JsonWebKey = { ...publicKey.export({ format: 'jwk' }), kid: 'oc1' };
      const c = await issuer.clients.create({ name: 'oc', scopes: 'orders:read', authMethod: 'private_key_jwt', jwks: { keys: [pub] } });
      const keyFile = join(dataDir, 'client.jwk.json');
      writeFileSync(keyFile, JSON.stringify({ ...privateKey.export({ format: 'jwk' }), kid: 'oc1' }), { mode: 0o600 });
      const { stdout } = await promisify(execFile)(process.execPath, [join(__dirname, 'openid-client-private-key-jwt.mjs'), url, c.clientId, keyFile, 'orders:read'], {
        timeout: 20_000,
      });
      const token = JSON.parse(stdout);
      expect(token).toMatchObject({ token_type: 'bearer', scope: 'orders:read' });
      const who = await request(app).get('/api/whoami').set('Authorization', `Bearer ${token.access_token}`);
      expect(who.status).toBe(200);
      expect(who.body).toEqual({ client_id: c.clientId });
    } finally {
      server.close();
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
