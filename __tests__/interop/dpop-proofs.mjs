// Makes DPoP proofs with openid-client's DPoP handle (and jose keys), without
// a server: a custom fetch records each request's DPoP header and answers it.
//   node dpop-proofs.mjs NONCE
// prints, per algorithm, the proofs for a token request (without, then with
// the server nonce NONCE) and for a resource request, plus jose's RFC 7638
// thumbprint of the key, as JSON.
import * as client from 'openid-client';
import { calculateJwkThumbprint, exportJWK, generateKeyPair } from 'jose';

const [nonce] = process.argv.slice(2);
const accessToken = 'interop-access-token.with~chars';
const out = [];

for (const alg of ['ES256', 'ES384', 'PS256', 'RS256']) {
  const keyPair = await generateKeyPair(alg, { extractable: true });
  const proofs = [];
  const config = new client.Configuration(
    { issuer: 'https://as.test', token_endpoint: 'https://as.test/oauth/token' },
    'c1',
    {},
    client.None(),
  );
  let answer;
  config[client.customFetch] = async (url, options) => {
    proofs.push({ url: String(url), method: options.method, proof: new Headers(options.headers).get('dpop') });
    return answer();
  };
  const dpop = client.getDPoPHandle(config, keyPair);

  // 1. token request: the server wants a nonce, then answers a DPoP token
  answer = () =>
    new Response(JSON.stringify({ error: 'use_dpop_nonce' }), {
      status: 400,
      headers: { 'content-type': 'application/json', 'dpop-nonce': nonce, 'cache-control': 'no-store' },
    });
  await client.clientCredentialsGrant(config, { scope: 'orders:read' }, { DPoP: dpop }).catch(() => undefined);
  answer = () =>
    new Response(JSON.stringify({ access_token: accessToken, token_type: 'DPoP', expires_in: 60 }), {
      status: 200,
      headers: { 'content-type': 'application/json', 'cache-control': 'no-store' },
    });
  await client.clientCredentialsGrant(config, { scope: 'orders:read' }, { DPoP: dpop });

  // 2. resource request with the token
  answer = () => new Response('{}', { status: 200, headers: { 'content-type': 'application/json' } });
  await client.fetchProtectedResource(config, accessToken, new URL('https://api.test/api/orders?page=2#top'), 'GET', undefined, undefined, { DPoP: dpop });

  out.push({ alg, jkt: await calculateJwkThumbprint(await exportJWK(keyPair.publicKey)), accessToken, requests: proofs });
}
process.stdout.write(JSON.stringify(out));
