'use strict';
// Callers of the example server that need more than a fixed request: a
// private_key_jwt client (a fresh assertion per token request) and a DPoP
// caller (a fresh proof per API request). Used by run.js and profile.js.
const fs = require('node:fs');
const path = require('node:path');
const crypto = require('node:crypto');
const { spawnSync } = require('node:child_process');
const { request } = require('./http');

/**
 * A private_key_jwt client of the example server, registered with the CLI on
 * the server's DATA_DIR (the running server sees it on its next request), its
 * private key kept here. Every token request carries a fresh assertion (each
 * jti is accepted once); wrk cannot sign ES256, so writeBodies() signs them
 * in the harness (on the load generator's core) right before a measurement.
 * `dist`: the compiled package the CLI and the signing helper come from.
 */
function privateKeyJwtClient({ dist, dataDir, keyFile, scope }) {
  const { signClientAssertion, CLIENT_ASSERTION_TYPE } = require(path.join(dist, 'lib', 'jwt', 'client-assertion.js'));
  let clientId = null;
  let privateKey = null;
  let kid = null;
  let audience = null;
  const body = (assertion) =>
    `grant_type=client_credentials&scope=${encodeURIComponent(scope)}&client_id=${encodeURIComponent(clientId)}` +
    `&client_assertion_type=${encodeURIComponent(CLIENT_ASSERTION_TYPE)}&client_assertion=${assertion}`;
  // lifetime 290 s: the issuer accepts exp - iat <= 300 s
  const sign = () => signClientAssertion({ clientId, audience, privateKey, kid, lifetime: 290 });
  const req = (b) => ({ method: 'POST', path: '/oauth/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: b });
  return {
    async setup(server) {
      if (clientId) return;
      const cli = path.join(dist, 'lib', 'cli', 'main.js');
      const args = ['create', '--name', 'bench-pkjwt', '--scope', scope, '--auth', 'private_key_jwt', '--generate-key', '--out', keyFile, '--json'];
      const r = spawnSync(process.execPath, ['-e', 'require(process.argv[1]).run()', cli, ...args], { env: { ...process.env, DATA_DIR: dataDir }, encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`client-credentials create --auth private_key_jwt failed (exit ${r.status}): ${r.stderr}`);
      clientId = JSON.parse(r.stdout.trim().split('\n').pop()).client_id;
      const jwk = JSON.parse(fs.readFileSync(keyFile, 'utf8'));
      kid = jwk.kid;
      privateKey = crypto.createPrivateKey({ key: jwk, format: 'jwk' });
      // aud = the issuer identifier the server announces (ISSUER, or http://localhost:PORT)
      const meta = await request(server.port, { method: 'GET', path: '/.well-known/oauth-authorization-server' });
      audience = meta.json && meta.json.issuer;
      if (typeof audience !== 'string') throw new Error(`no issuer in the example's metadata: HTTP ${meta.status}`);
    },
    request: () => req(body(sign())),
    /** n token request bodies, one per line, each with its own assertion. */
    writeBodies(n, file) {
      const lines = new Array(n);
      for (let i = 0; i < n; i++) lines[i] = body(sign());
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
    },
  };
}

/**
 * A DPoP caller of the example: a DPoP-bound token from the example's token
 * endpoint (`tokenRequest(server)`: the demo client's request, to which the
 * proof header is added), then one fresh proof per API request (htm GET, htu
 * the example's public URL + /api/whoami, ath of the token): the server
 * remembers every proof's jti, so none can be sent twice. `keyType`: 'ec'
 * (P-256, ES256 proofs: the token client's usual key) or 'rsa' (2048 bits,
 * PS256 proofs). `signUs` is what one proof cost the caller to sign, from
 * the last writeProofs().
 */
function dpopCaller({ dist, tokenRequest, keyType = 'ec' }) {
  let key = null;
  let signUs = null;
  let token = null;
  let htu = null;
  const proof = () => key.proof({ htm: 'GET', htu, accessToken: token });
  const req = () => ({ method: 'GET', path: '/api/whoami', headers: { authorization: `DPoP ${token}`, dpop: proof() } });
  return {
    async token(server) {
      const { DpopKey } = require(path.join(dist, 'lib', 'jwt', 'dpop-proof.js'));
      const pair = keyType === 'rsa' ? crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }) : crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
      key = new DpopKey({ privateKey: pair.privateKey });
      const meta = await request(server.port, { method: 'GET', path: '/.well-known/oauth-authorization-server' });
      if (!meta.json || typeof meta.json.token_endpoint !== 'string') throw new Error(`no token_endpoint in the example's metadata: HTTP ${meta.status}`);
      const base = tokenRequest(server);
      const res = await request(server.port, { ...base, headers: { ...base.headers, dpop: key.proof({ htm: 'POST', htu: meta.json.token_endpoint }) } });
      if (res.status !== 200 || !res.json || res.json.token_type !== 'DPoP') throw new Error(`DPoP token request: HTTP ${res.status} ${res.text.slice(0, 300)}`);
      token = res.json.access_token;
      // the issuer-bound requireBearer() builds htu from the issuer's origin (publicUrl) + the path
      htu = `${new URL(meta.json.issuer).origin}/api/whoami`;
      return token;
    },
    request: req,
    /** n proofs, one per line, each for its own request. */
    writeProofs(n, file) {
      const lines = new Array(n);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) lines[i] = proof();
      signUs = Math.round(Number(process.hrtime.bigint() - t0) / n / 100) / 10;
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
    },
    get alg() {
      return key && key.alg;
    },
    get signUs() {
      return signUs;
    },
  };
}

/** The example's demo client asking for a token with its secret (client_secret_post), `client` = { clientId, clientSecret }. */
function secretTokenRequest(client, scope = 'orders:read') {
  const body = `grant_type=client_credentials&scope=${encodeURIComponent(scope)}&client_id=${encodeURIComponent(client.clientId)}&client_secret=${encodeURIComponent(client.clientSecret)}`;
  return { method: 'POST', path: '/oauth/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body };
}

/** An access token of that client from the server on `port`; throws unless it answers 200 with one. */
async function secretAccessToken(port, client) {
  const res = await request(port, secretTokenRequest(client));
  if (res.status !== 200 || !res.json?.access_token) throw new Error(`token request: HTTP ${res.status} ${res.text.slice(0, 200)}`);
  return res.json.access_token;
}

module.exports = { privateKeyJwtClient, dpopCaller, secretTokenRequest, secretAccessToken };
