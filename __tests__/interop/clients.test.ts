import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ClientCredentials } from 'simple-oauth2';
import request from 'supertest';
import { startServer, type RunningServer } from '../../examples/server';
import { tempDir } from '../helpers/app';

/** Real OAuth client libraries against the example server, as a new user would run them. */
describe('OAuth client libraries', () => {
  const dataDir = tempDir();
  let running: RunningServer;
  let id: string;
  let secret: string;

  beforeAll(async () => {
    const lines: string[] = [];
    // ISSUER must be the URL clients reach: start once to learn the port, then restart on it
    running = await startServer({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'silent' }, (l) => lines.push(l));
    const port = new URL(running.url).port;
    await running.close();
    running = await startServer({ PORT: port, HOST: '127.0.0.1', ISSUER: `http://127.0.0.1:${port}`, DATA_DIR: dataDir, LOG_LEVEL: 'silent' }, () => undefined);
    id = lines.find((l) => l.includes('client_id:'))!.split(/\s+/).pop()!;
    secret = lines.find((l) => l.includes('client_secret:'))!.split(/\s+/).pop()!;
  });
  afterAll(async () => {
    await running?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it.each([['header'], ['body']] as const)('simple-oauth2 (authorizationMethod %s) gets a token the API accepts', async (authorizationMethod) => {
    const oauth = new ClientCredentials({
      client: { id, secret },
      auth: { tokenHost: running.url, tokenPath: '/oauth/token' },
      options: { authorizationMethod },
    });
    const token = await oauth.getToken({ scope: ['orders:read'] });
    expect(token.token).toMatchObject({ token_type: 'Bearer', scope: 'orders:read', expires_in: 3600 });
    const who = await request(running.url).get('/api/whoami').set('Authorization', `Bearer ${token.token.access_token}`);
    expect(who.body).toEqual({ client_id: id, scope: 'orders:read' });
  });

  it.each([['basic'], ['post']])('openid-client (client_secret_%s, RFC 8414 discovery) gets a token the API accepts', async (method) => {
    const { stdout } = await promisify(execFile)(process.execPath, [join(__dirname, 'openid-client.mjs'), running.url, id, secret, method, 'orders:write'], { timeout: 20_000 });
    const token = JSON.parse(stdout);
    expect(token).toMatchObject({ token_type: 'bearer', expires_in: 3600, scope: 'orders:write' });
    const created = await request(running.url).post('/api/orders').set('Authorization', `Bearer ${token.access_token}`).send({ item: 'pears', quantity: 2 });
    expect(created.status).toBe(201);
  });
});
