// Runs openid-client (ESM only) with private_key_jwt against a running issuer:
//   node openid-client-private-key-jwt.mjs ISSUER_URL CLIENT_ID PRIVATE_JWK_FILE SCOPE
// and prints {token_type, scope, access_token} as JSON.
import { readFileSync } from 'node:fs';
import * as client from 'openid-client';

const [issuer, id, file, scope] = process.argv.slice(2);
const jwk = JSON.parse(readFileSync(file, 'utf8'));
const key = await crypto.subtle.importKey('jwk', jwk, { name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']);
const config = await client.discovery(new URL(issuer), id, undefined, client.PrivateKeyJwt({ key, kid: jwk.kid }), {
  algorithm: 'oauth2',
  execute: [client.allowInsecureRequests],
});
const tokens = await client.clientCredentialsGrant(config, { scope });
process.stdout.write(JSON.stringify({ token_type: tokens.token_type, scope: tokens.scope, access_token: tokens.access_token }));
