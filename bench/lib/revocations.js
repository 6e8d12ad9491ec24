'use strict';
// Revocations written into an example server's embedded store while it runs,
// as the CLI or another instance would: shared by the revocation phases of
// run.js and the instruction counts of instructions.js.

const crypto = require('node:crypto');
const path = require('node:path');
const { request, decodeJwt } = require('./http');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const round = (x, d) => Math.round(x * 10 ** d) / 10 ** d;

/**
 * Writes revocations to the embedded store on `dataDir` (the compiled
 * lib/stores/embedded.js under `distDir`), whether or not a server runs on
 * it: `tokens` random jtis denylisted (exp one hour ahead, spread over
 * `clients` client ids that are not the demo client), the token generation
 * of `clients` such ids bumped and, last, `token`'s jti denylisted. Answers
 * the seconds it took.
 */
async function writeRevocations(distDir, dataDir, { tokens, clients }, token) {
  const { openEmbeddedStore } = require(path.join(distDir, 'lib', 'stores', 'embedded.js'));
  const claims = decodeJwt(token).payload;
  const t0 = process.hrtime.bigint();
  const store = await openEmbeddedStore({ dataDir });
  try {
    const now = new Date();
    const exp = new Date(now.getTime() + 3600_000);
    for (let i = 0; i < clients; i++) await store.bumpTokenGeneration(`bench-revoked-${i}`, now);
    for (let i = 0; i < tokens; i++) await store.revokeToken({ jti: crypto.randomUUID(), clientId: `bench-revoked-${i % Math.max(clients, 1)}`, exp });
    await store.revokeToken({ jti: claims.jti, clientId: claims.client_id, exp: new Date(claims.exp * 1000) });
  } finally {
    await store.close();
  }
  return round(Number(process.hrtime.bigint() - t0) / 1e9, 2);
}

/**
 * Waits until `req` (a protected request carrying the token denylisted last)
 * gets 401 invalid_token: the server has then reloaded everything written
 * before it. Answers the seconds that took; throws after `timeoutMs`.
 */
async function untilRefused(name, port, req, timeoutMs = 20_000) {
  const t0 = process.hrtime.bigint();
  const deadline = Date.now() + timeoutMs;
  let res;
  for (;;) {
    res = await request(port, req);
    if (res.status === 401 && /invalid_token/.test(res.headers['www-authenticate'] || '')) break;
    if (Date.now() > deadline) {
      throw new Error(`${name}: ${timeoutMs / 1000} s after the revocations were written to its store, the denylisted token still got HTTP ${res.status}: the server did not load them`);
    }
    await sleep(100);
  }
  return round(Number(process.hrtime.bigint() - t0) / 1e9, 2);
}

module.exports = { writeRevocations, untilRefused };
