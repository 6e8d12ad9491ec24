/**
 * CLOCK_TOLERANCE (documented for the server, read by the CLI's `keys
 * prune`) is read by the example server and the resource server: a token a
 * second past its expiry is refused with CLOCK_TOLERANCE=0 and accepted
 * within the default 5 s.
 */
import { rmSync } from 'node:fs';
import request from 'supertest';
import { startResourceServer, type RunningResourceServer } from '../../examples/resource-server';
import { startServer, type RunningServer } from '../../examples/server';
import { tempDir } from '../helpers/app';

const ISSUER = 'http://localhost:3000';

describe('CLOCK_TOLERANCE in the examples', () => {
  const dirs = [tempDir(), tempDir()];
  const issuers: RunningServer[] = [];
  const apis: RunningResourceServer[] = [];

  afterAll(async () => {
    await Promise.all([...apis, ...issuers].map((s) => s.close()));
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('decides how long past its expiry a token is still taken, by the issuer and by the resource server', async () => {
    const env = (dataDir: string, extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv => ({
      PORT: '0', HOST: '127.0.0.1', ISSUER, DATA_DIR: dataDir, LOG_LEVEL: 'silent', ACCESS_TOKEN_TTL: '1', ...extra,
    });
    issuers.push(await startServer(env(dirs[0], { CLOCK_TOLERANCE: '0' }), () => undefined, { demoClient: false }));
    issuers.push(await startServer(env(dirs[1], {}), () => undefined, { demoClient: false }));
    const [strict, lenient] = issuers;
    for (const extra of [{ CLOCK_TOLERANCE: '0' }, {}]) {
      apis.push(await startResourceServer({ PORT: '0', HOST: '127.0.0.1', ISSUER, JWKS_URI: `${lenient.url}/.well-known/jwks.json`, REVOCATION_LIST: 'off', LOG_LEVEL: 'silent', ...extra }));
    }
    const tokenFrom = async (server: RunningServer): Promise<string> => {
      const c = await server.issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
      const res = await request(server.url).post('/oauth/token').auth(c.clientId, c.clientSecret).type('form').send({ grant_type: 'client_credentials' });
      expect(res.body.expires_in).toBe(1);
      return res.body.access_token as string;
    };
    const [strictToken, lenientToken] = [await tokenFrom(strict), await tokenFrom(lenient)];
    await new Promise((r) => setTimeout(r, 2100)); // exp is 1 s after iat (whole seconds): now 1-2 s past it
    const whoami = (url: string, token: string) => request(url).get('/api/whoami').set('Authorization', `Bearer ${token}`);
    expect((await whoami(strict.url, strictToken)).status).toBe(401);
    expect((await whoami(lenient.url, lenientToken)).status).toBe(200);
    expect((await whoami(apis[0].url, lenientToken)).status).toBe(401);
    expect((await whoami(apis[1].url, lenientToken)).status).toBe(200);
  }, 20_000);
});
