/** The token client against node-oidc-provider, a foreign authorization server, run in a child process (it is ESM only). */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createTokenClient, type TokenClientEvent } from '../../lib/client';

let child: ChildProcess;
let issuer: string;
let clients: Array<{ client_id: string; client_secret: string; token_endpoint_auth_method: 'client_secret_basic' | 'client_secret_post' }>;

beforeAll(async () => {
  child = spawn(process.execPath, [join(__dirname, 'oidc-provider.mjs')], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr!.resume();
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (out.includes('\n')) resolve(out.split('\n')[0]);
    });
    child.once('exit', (code) => reject(new Error(`oidc-provider exited with ${code}`)));
  });
  ({ issuer, clients } = JSON.parse(line));
}, 30_000);

afterAll(() => {
  child?.kill();
});

it.each([['client_secret_basic'], ['client_secret_post']])('gets a token with %s through discovery, and reuses it', async (method) => {
  const c = clients.find((x) => x.token_endpoint_auth_method === method)!;
  const events: TokenClientEvent[] = [];
  const client = createTokenClient({ issuer, clientId: c.client_id, clientSecret: c.client_secret, authMethod: c.token_endpoint_auth_method, scope: 'api:read', onEvent: (e) => events.push(e) });
  try {
    const before = Date.now();
    const token = await client.getToken();
    expect(token.accessToken).toMatch(/^[\w-]{20,}$/);
    expect(token.tokenType).toBe('Bearer');
    expect(token.scope).toBe('api:read');
    expect(token.expiresAt.getTime()).toBeGreaterThanOrEqual(before + 600_000 - 1000);
    expect(token.expiresAt.getTime()).toBeLessThanOrEqual(Date.now() + 600_000);
    for (let i = 0; i < 20; i++) expect((await client.getToken()).accessToken).toBe(token.accessToken);
    expect(events.filter((e) => e.type === 'token.requested')).toHaveLength(1);

    // the provider's introspection endpoint accepts it as its own active token
    const meta = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as { introspection_endpoint: string };
    const res = await fetch(meta.introspection_endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: token.accessToken, client_id: clients[1].client_id, client_secret: clients[1].client_secret }),
    });
    expect(await res.json()).toMatchObject({ active: true, client_id: c.client_id, scope: 'api:read' });
  } finally {
    await client.close();
  }
});

it("the provider's refusal of a wrong secret is a TokenEndpointError invalid_client", async () => {
  const client = createTokenClient({ issuer, clientId: clients[0].client_id, clientSecret: 'wrong', scope: 'api:read' });
  await expect(client.getToken()).rejects.toMatchObject({ name: 'TokenEndpointError', status: 401, error: 'invalid_client' });
  await client.close();
});
