#!/usr/bin/env node
/**
 * Cost of the revocation check on the protected path: RevocationState.isRevoked()
 * against a state holding 10 000 denylisted jtis and 1 000 client cut-offs,
 * for the common case (a live token: a miss in both maps) and the revoked
 * cases. Run after `npm run build`:
 *
 *   node bench/revocation-check.js [iterations] [--json]
 *
 * Prints ns per check (median of 7 rounds). The budget is 2 µs per request.
 * With --json, the last line is the figures as one JSON object (bench/run.js
 * runs it so and shows them in its report).
 */
'use strict';
const path = require('node:path');
const { randomUUID } = require('node:crypto');
const { RevocationState, revocationClaims } = require(path.resolve(__dirname, '../dist/lib/core/revocation'));

const args = process.argv.slice(2);
const json = args.includes('--json');
const iterations = Number(args.find((a) => a !== '--json') ?? 2_000_000);
if (!Number.isInteger(iterations) || iterations < 256) throw new Error(`iterations must be an integer >= 256, got ${args[0]}`);
const figures = {};
const state = new RevocationState({ maxTokenTtl: 3600 });
const exp = Math.floor(Date.now() / 1000) + 3600;
const events = [];
for (let i = 0; i < 10_000; i++) events.push({ type: 'token', jti: randomUUID(), clientId: `client-${i % 1000}`, exp });
for (let i = 0; i < 1000; i += 2) events.push({ type: 'tokens', clientId: `client-${i}`, generation: 1, at: Date.now() });
for (let i = 1; i < 1000; i += 50) events.push({ type: 'client', clientId: `client-${i}`, at: Date.now() });
state.apply(events);

/** 256 distinct claim objects as the verifier would hand them over. */
function claimsFor(kind) {
  return Array.from({ length: 256 }, (_, i) => {
    const clientId = `client-${kind === 'client' ? 1 + 50 * (i % 20) : (i * 2) % 1000}`;
    if (kind === 'token') return { jti: events[i].jti, client_id: events[i].clientId, ...revocationClaims(state, events[i].clientId) };
    if (kind === 'before') return { jti: randomUUID(), client_id: clientId, gen: 0 };
    return { jti: randomUUID(), client_id: clientId, ...revocationClaims(state, clientId) };
  });
}

function measure(kind, expected) {
  const list = claimsFor(kind);
  for (const c of list) if (state.isRevoked(c) !== expected) throw new Error(`${kind}: expected ${expected}, got ${state.isRevoked(c)}`);
  const rounds = [];
  let sink = 0;
  for (let r = 0; r < 7; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) if (state.isRevoked(list[i & 255]) !== false) sink++;
    rounds.push(Number(process.hrtime.bigint() - t0) / iterations);
  }
  rounds.sort((a, b) => a - b);
  figures[kind] = { nsPerCheck: round1(rounds[3]), min: round1(rounds[0]), max: round1(rounds[6]) };
  console.log(`${kind.padEnd(8)} → ${String(expected).padEnd(21)} ${rounds[3].toFixed(1)} ns/check (min ${rounds[0].toFixed(1)}, max ${rounds[6].toFixed(1)})${sink < 0 ? '' : ''}`);
}

async function main() {
  console.log(`state: ${JSON.stringify(state.size())}, ${iterations} checks per round, node ${process.version}`);
  figures.state = state.size();
  figures.iterations = iterations;
  measure('live', false);
  measure('token', 'token_revoked');
  measure('before', 'tokens_revoked_before');
  measure('client', 'client_revoked');

  // the standalone path: RevocationListPoller.isRevoked() adds a freshness check (one clock read) before the same lookups
  const { generateStoredKey, loadStoredKey } = require(path.resolve(__dirname, '../dist/lib/core/keys'));
  const { RevocationListPoller, signRevocationList } = require(path.resolve(__dirname, '../dist/lib/core/revocation-list'));
  const key = loadStoredKey(generateStoredKey('ES256', new Date()));
  const body = signRevocationList(state, key, { issuer: 'https://issuer.test', now: Date.now() });
  const local = new RevocationState({ maxTokenTtl: 3600 });
  const poller = new RevocationListPoller({
    url: 'http://127.0.0.1/unused',
    issuer: 'https://issuer.test',
    keys: { peek: () => key, resolve: () => key },
    state: local,
    fetch: async () => new Response(body, { status: 200, headers: { etag: '"x"' } }),
  });
  if ((await poller.poll()) !== 'updated') throw new Error('the list did not load');
  const list = claimsFor('live');
  const rounds = [];
  for (let r = 0; r < 7; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) if (poller.isRevoked(list[i & 255]) !== false) throw new Error('revoked');
    rounds.push(Number(process.hrtime.bigint() - t0) / iterations);
  }
  rounds.sort((a, b) => a - b);
  figures.standalone = { nsPerCheck: round1(rounds[3]), min: round1(rounds[0]), max: round1(rounds[6]), listBytes: body.length };
  console.log(`standalone (poller) live → false   ${rounds[3].toFixed(1)} ns/check (min ${rounds[0].toFixed(1)}, max ${rounds[6].toFixed(1)}), list ${body.length} bytes`);
}

const round1 = (x) => Math.round(x * 10) / 10;

main().then(
  () => {
    if (json) console.log(JSON.stringify(figures));
  },
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
