/**
 * TRUST_PROXY: behind a proxy every caller comes from the proxy's address.
 * With the proxy trusted, X-Forwarded-For decides the address the
 * brute-force limits count (README "Brute-force protection"), so two callers
 * behind one proxy are limited apart; without it, they share one count.
 */
import { rmSync } from 'node:fs';
import request from 'supertest';
import { startServer } from '../../examples/server';
import { tempDir } from '../helpers/app';

/** Default limit per (client_id, address) (README "Brute-force protection"). */
const MAX_FAILURES_PER_CLIENT_ADDRESS = 10;

/** After 10 wrong secrets for one client from 198.51.100.1 (as forwarded), the right secret from each forwarded address. */
async function afterFailuresFromOneCaller(trustProxy: string | undefined): Promise<{ sameCaller: number; otherCaller: number }> {
  const dir = tempDir();
  const env: NodeJS.ProcessEnv = { PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DATA_DIR: dir, LOG_LEVEL: 'silent' };
  if (trustProxy !== undefined) env.TRUST_PROXY = trustProxy;
  const running = await startServer(env, () => undefined, { demoClient: false });
  try {
    const c = await running.issuer.clients.create({ name: 'svc', scopes: 'orders:read' });
    const ask = (from: string, secret: string) =>
      request(running.url).post('/oauth/token').set('X-Forwarded-For', from).auth(c.clientId, secret).type('form').send({ grant_type: 'client_credentials' });
    for (let i = 0; i < MAX_FAILURES_PER_CLIENT_ADDRESS; i++) expect((await ask('198.51.100.1', 'wrong')).status).toBe(401);
    return { sameCaller: (await ask('198.51.100.1', c.clientSecret)).status, otherCaller: (await ask('198.51.100.2', c.clientSecret)).status };
  } finally {
    await running.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('examples/server.ts behind a proxy (TRUST_PROXY)', () => {
  it.each(['1', 'true', 'loopback', '127.0.0.1, 10.0.0.0/8'])('TRUST_PROXY=%s: callers behind the proxy are counted apart, by X-Forwarded-For', async (value) => {
    expect(await afterFailuresFromOneCaller(value)).toEqual({ sameCaller: 429, otherCaller: 200 });
  });

  it.each([undefined, '', 'false', '0', '10.0.0.0/8'])('TRUST_PROXY=%s: X-Forwarded-For is not believed, every caller shares the proxy\'s count', async (value) => {
    expect(await afterFailuresFromOneCaller(value)).toEqual({ sameCaller: 429, otherCaller: 429 });
  });
});
