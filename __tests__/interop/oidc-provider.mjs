// node-oidc-provider (ESM only) as a foreign authorization server for the
// client_credentials grant, on 127.0.0.1:<free port>. Prints
// {"issuer": "...", "clients": [...]} on one line, then serves until killed.
import http from 'node:http';
import Provider from 'oidc-provider';

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;
const clients = [
  { client_id: 'basic-client', client_secret: 'basic secret:+%', token_endpoint_auth_method: 'client_secret_basic' },
  { client_id: 'post-client', client_secret: 'post-secret', token_endpoint_auth_method: 'client_secret_post' },
];
const provider = new Provider(issuer, {
  clients: clients.map((c) => ({ ...c, grant_types: ['client_credentials'], response_types: [], redirect_uris: [], scope: 'api:read api:write' })),
  scopes: ['api:read', 'api:write'],
  ttl: { ClientCredentials: 600 },
  features: { devInteractions: { enabled: false }, clientCredentials: { enabled: true }, introspection: { enabled: true } },
});
provider.on('server_error', (ctx, err) => console.error('[oidc-provider] server_error', err));
server.on('request', provider.callback());
process.stdout.write(`${JSON.stringify({ issuer, clients })}\n`);
