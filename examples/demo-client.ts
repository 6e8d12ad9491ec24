import type { Issuer } from '../lib';

/**
 * On the first start on a store, creates the demo client and prints it. Only
 * one process ever creates a store's first key, so instances starting
 * together on one database create one demo client between them.
 */
export async function createDemoClient(issuer: Issuer, publicUrl: string, print: (line: string) => void): Promise<void> {
  if (!issuer.isFirstStart() || (await issuer.clients.list()).length > 0) return;
  const demo = await issuer.clients.create({ name: 'demo', scopes: 'orders:read orders:write' });
  print('');
  print('Created a demo client (the secret is shown only now):');
  print(`  client_id:     ${demo.clientId}`);
  print(`  client_secret: ${demo.clientSecret}`);
  print('Get a token:');
  print(`  curl -s -u '${demo.clientId}:${demo.clientSecret}' -d grant_type=client_credentials ${publicUrl}/oauth/token`);
  print('');
}
