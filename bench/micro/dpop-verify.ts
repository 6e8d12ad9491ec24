/**
 * Micro-measurement of the DPoP core, for planning (not a test, not part of
 * `npm run bench`): verifications per second of one ES256 DPoP proof
 * (distinct jti each, key cached, in-memory replay store) against one ES256
 * access-token verification with jsonwebtoken, plus the parts.
 *
 *   node --expose-gc -r ts-node/register/transpile-only bench/micro/dpop-verify.ts
 */
import { createPublicKey, randomBytes } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { verifyDpopProof, type DpopVerifyOptions } from '../../lib/core/dpop';
import { normalizeHtu } from '../../lib/core/dpop-htu';
import { DpopKeyCache } from '../../lib/core/dpop-key-cache';
import { DpopNonces } from '../../lib/core/dpop-nonces';
import { MemoryReplayStore } from '../../lib/core/dpop-replay';
import { signAccessToken } from '../../lib/core/issuer';
import { generateStoredKey, loadStoredKey } from '../../lib/core/keys';
import { AccessTokenVerifier } from '../../lib/core/verifier';
import { verifyJws } from '../../lib/jwt/algorithms';
import { DpopKey, accessTokenHash } from '../../lib/jwt/dpop-proof';
import { jwkThumbprint } from '../../lib/jwt/thumbprint';

const N = Number(process.env.N ?? 20_000);
const ROUNDS = 5;

function measure(name: string, n: number, run: (i: number) => unknown): number {
  let best = Infinity;
  for (let r = 0; r < ROUNDS; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) run(i);
    const us = Number(process.hrtime.bigint() - start) / 1000 / n;
    best = Math.min(best, us);
  }
  console.log(`${name.padEnd(58)} ${best.toFixed(2).padStart(8)} µs  ${Math.round(1e6 / best).toString().padStart(8)} /s`);
  return best;
}

const issuer = 'https://as.test';
const audience = 'https://api.test';
const signingKey = loadStoredKey(generateStoredKey('ES256', new Date()));
const { accessToken } = signAccessToken(signingKey, { issuer, audience, clientId: 'c1', scopes: ['orders:read'], ttl: 3600, now: Date.now() });
const keys = { peek: () => signingKey, resolve: () => signingKey };
const uncached = new AccessTokenVerifier({ issuer, audience, keys, clockTolerance: 5, cacheMax: 0, now: Date.now });
const cached = new AccessTokenVerifier({ issuer, audience, keys, clockTolerance: 5, cacheMax: 1000, now: Date.now });

const dpopKey = new DpopKey({ privateKey: require('node:crypto').generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey });
const htu = 'https://api.test/api/orders';
const proofs = Array.from({ length: N }, () => dpopKey.proof({ htm: 'GET', htu, accessToken }));
const expected = { htm: 'GET', htu: `${htu}?page=1`, accessToken, jkt: dpopKey.jkt };
const keyCache = new DpopKeyCache();

console.log('memory (measured first, on a clean heap)');
const gc = (globalThis as { gc?: () => void }).gc;
if (gc) {
  const M = 200_000;
  gc();
  const before = process.memoryUsage().heapUsed;
  const store = new MemoryReplayStore({ max: M });
  const exp = Date.now() + 300_000;
  for (let i = 0; i < M; i++) store.consume(randomBytes(16).toString('base64url'), exp + (i % 1000));
  gc();
  const per = (process.memoryUsage().heapUsed - before) / store.size;
  console.log(`  memory replay store: ${per.toFixed(0)} bytes per remembered proof (${M} proofs: ${((per * M) / 1e6).toFixed(1)} MB)`);
} else {
  console.log('  (run with --expose-gc for the replay store memory per proof)');
}
console.log('');

console.log(`node ${process.version}, ${N} distinct proofs, best of ${ROUNDS} rounds\n`);
const bearerUncached = measure('access token verify, jsonwebtoken ES256 (uncached)', N, () => uncached.verify(accessToken));
const bearerCached = measure('access token verify, cache hit (the Bearer route today)', N, () => cached.verify(accessToken));
let options: DpopVerifyOptions = { replay: new MemoryReplayStore({ max: N }), keyCache };
const dpop = measure('DPoP proof verify ES256 (cached key, memory replay)', N, (i) => {
  if (i === 0) options = { replay: new MemoryReplayStore({ max: N }), keyCache };
  verifyDpopProof(proofs[i], expected, options);
});
const secret = randomBytes(32);
const nonces = new DpopNonces(secret);
const nonceProofs = Array.from({ length: N }, () => dpopKey.proof({ htm: 'GET', htu, accessToken, nonce: nonces.current() }));
measure('DPoP proof verify ES256 with a nonce', N, (i) => {
  if (i === 0) options = { replay: new MemoryReplayStore({ max: N }), keyCache, nonces };
  verifyDpopProof(nonceProofs[i], expected, options);
});

for (const alg of ['ES384', 'PS256'] as const) {
  const pair =
    alg === 'ES384'
      ? require('node:crypto').generateKeyPairSync('ec', { namedCurve: 'P-384' })
      : require('node:crypto').generateKeyPairSync('rsa', { modulusLength: 2048 });
  const k = new DpopKey({ privateKey: pair.privateKey, alg });
  const ps = Array.from({ length: N }, () => k.proof({ htm: 'GET', htu, accessToken }));
  measure(`DPoP proof verify ${alg} (cached key, memory replay)`, N, (i) => {
    if (i === 0) options = { replay: new MemoryReplayStore({ max: N }), keyCache };
    verifyDpopProof(ps[i], { ...expected, jkt: k.jkt }, options);
  });
}

console.log('\nparts');
const proof = proofs[0];
const dot = proof.lastIndexOf('.');
const input = proof.slice(0, dot);
const signature = Buffer.from(proof.slice(dot + 1), 'base64url');
const publicKey = createPublicKey({ key: dpopKey.publicJwk, format: 'jwk' });
measure('  signature only, node:crypto verify (cached KeyObject)', N, () => verifyJws('ES256', publicKey, input, signature));
measure('  jsonwebtoken.verify of the proof (cached KeyObject)', N, () => jwt.verify(proof, publicKey, { algorithms: ['ES256'] }));
measure('  JWK import, createPublicKey (what the cache saves)', N, () => createPublicKey({ key: dpopKey.publicJwk, format: 'jwk' }));
measure('  RFC 7638 thumbprint', N, () => jwkThumbprint(dpopKey.publicJwk));
measure('  ath: SHA-256 of the access token', N, () => accessTokenHash(accessToken));
measure('  htu normalisation (one URL)', N, () => normalizeHtu(expected.htu));
measure('  nonce check (cached step)', N, () => nonces.isValid(nonces.current()));
const replay = new MemoryReplayStore({ max: N * ROUNDS + 1 });
let serial = 0;
measure('  memory replay consume', N, () => replay.consume(`k${serial++}`, Date.now() + 300_000));

console.log('\nestimate');
// the Bearer route's throughput from the last `npm run bench` (server on one core, 32 connections)
let bearerRps: number | undefined;
try {
  bearerRps = require('../results/latest.json').medians['ours-protected']['32'].rps.median;
} catch {
  // no bench results here
}
if (bearerRps) {
  const dpopRps = 1e6 / (1e6 / bearerRps + dpop);
  console.log(`  Bearer route ${Math.round(bearerRps)} req/s (bench/results/latest.json) = ${(1e6 / bearerRps).toFixed(0)} µs per request`);
  console.log(`  + one ES256 proof check (${dpop.toFixed(0)} µs) ≈ ${Math.round(dpopRps)} req/s = ${(dpopRps / bearerRps).toFixed(2)}× Bearer`);
}
console.log(`  DPoP proof check vs an uncached access-token verify: ${(dpop / bearerUncached).toFixed(2)}× the time`);
