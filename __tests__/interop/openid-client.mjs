// Runs openid-client (ESM only) against a running issuer:
//   node openid-client.mjs ISSUER_URL CLIENT_ID CLIENT_SECRET basic|post SCOPE
// and prints {token_type, expires_in, scope, access_token} as JSON.
import * as client from 'openid-client';

const [issuer, id, secret, method, scope] = process.argv.slice(2);
const auth = method === 'basic' ? client.ClientSecretBasic(secret) : client.ClientSecretPost(secret);
const config = await client.discovery(new URL(issuer), id, undefined, auth, {
  algorithm: 'oauth2',
  execute: [client.allowInsecureRequests],
});
const tokens = await client.clientCredentialsGrant(config, { scope });
process.stdout.write(JSON.stringify({ token_type: tokens.token_type, expires_in: tokens.expires_in, scope: tokens.scope, access_token: tokens.access_token }));
