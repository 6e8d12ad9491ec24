/**
 * A service calling the orders API (examples/server.ts) with a token client:
 * one token, reused across calls.
 *
 *   npm start                                                  # the orders API, prints a demo client
 *   CLIENT_ID=… CLIENT_SECRET=… npm run caller
 *
 * Environment: CLIENT_ID, CLIENT_SECRET (required), ISSUER (http://localhost:3000),
 * API (ISSUER + /api), SCOPE (orders:read orders:write).
 */
import { createTokenClient, type TokenClientEvent } from '../lib/client';

export async function main(env: NodeJS.ProcessEnv, print: (line: string) => void): Promise<number> {
  const { CLIENT_ID, CLIENT_SECRET } = env;
  if (!CLIENT_ID || !CLIENT_SECRET) {
    print('set CLIENT_ID and CLIENT_SECRET (npm start prints a demo client)');
    return 2;
  }
  const issuer = env.ISSUER ?? 'http://localhost:3000';
  const api = env.API ?? `${issuer.replace(/\/$/, '')}/api`;
  const client = createTokenClient({
    issuer,
    clientId: CLIENT_ID,
    clientSecret: CLIENT_SECRET,
    scope: env.SCOPE ?? 'orders:read orders:write',
    onEvent: (e: TokenClientEvent) => print(`  event ${JSON.stringify(e)}`),
  });
  try {
    const calls: Array<[string, string, RequestInit?]> = [
      ['GET', `${api}/whoami`],
      ['POST', `${api}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ item: 'apples', quantity: 3 }) }],
      ['GET', `${api}/orders`],
      ['GET', `${api}/whoami`],
    ];
    for (const [method, url, init] of calls) {
      const res = await client.fetch(url, init);
      print(`${method} ${url} → ${res.status} ${await res.text()}`);
    }
    const token = await client.getToken();
    print(`one token for all calls, expires at ${token.expiresAt.toISOString()}, scope "${token.scope}"`);
    return 0;
  } finally {
    await client.close();
  }
}

if (require.main === module) {
  main(process.env, (line) => console.log(line)).then(
    (code) => (process.exitCode = code),
    (err: Error) => {
      console.error(`${err.name}: ${err.message}`);
      process.exitCode = 1;
    },
  );
}
