'use strict';
// Side-by-side benchmark of express-client-credentials ("OURS": the compiled
// example server, run as its users run it, audit log at info to a file)
// against a jsonwebtoken signing/verifying floor, bare Express 5 / node:http,
// and peer OAuth 2.0 stacks. The load generator is wrk (bench/lib/wrk.js).
// Run from the repo root with `npm run bench` (which builds the package and
// installs bench/ dependencies first). See bench/README.md.
//
// Environment:
//   BENCH_ROUNDS=3        measured rounds per target (round-robin across targets)
//   BENCH_DURATION=5      seconds per measurement
//   BENCH_WARMUP=2        seconds of warm-up per target (32 connections) before round 1
//   BENCH_CONNECTIONS=32,1
//   BENCH_QUICK=1         smoke run: 3 rounds x 1 s, 1 s warm-up, 5 000-token memory test
//   BENCH_MEM_TOKENS=20000, BENCH_MEM_REQUESTS=2 x tokens, BENCH_SKIP_MEM=1
//   BENCH_CLIENT_AUTH=body|basic   how token requests authenticate the client
//   BENCH_ONLY=id,id      only these targets (bare Express and node:http are always kept)
//   BENCH_ALL=1           also the optional targets (RS256, LOG_LEVEL=warn, bcrypt)
//   BENCH_EXAMPLE         compiled example server (default ../dist/examples/server.js)
//   BENCH_SERVER_CPU=0, BENCH_LOAD_CPU=1   cores for servers / load generator
//   BENCH_VERBOSE=1       echo the servers' stderr
//   BENCH_SKIP_CLIENT=1   skip the token client measurement (bench/client.js) at the end
//   BENCH_SKIP_INSN=1     skip the instruction counts under callgrind (bench/instructions.js)
//   BENCH_REVOCATION_ROUNDS=5   rounds of each phase of the revocation check (before and after loading)
//   BENCH_REVOCATION_ITERATIONS=200000   isRevoked() calls per round of bench/revocation-check.js

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const jwt = require('jsonwebtoken');

const { hasTaskset, pinSelf, reniceSelf, startSpinner, startServer, stopServer, startProcess, stopProcess, procMemory, procCpuUs, memoryOf, killAll, readDemoClient } = require('./lib/proc');
const { request, pool, decodeJwt, forge } = require('./lib/http');
const { privateKeyJwtClient, dpopCaller } = require('./lib/callers');
const { summary, round } = require('./lib/measure');
const autocannon = require('./lib/measure');
const wrk = require('./lib/wrk');
const { computeChecks } = require('./lib/checks');
const report = require('./lib/report');
const { writeRevocations, untilRefused } = require('./lib/revocations');

const BENCH_DIR = __dirname;
const REPO_ROOT = path.resolve(BENCH_DIR, '..');
const RESULTS_DIR = path.join(BENCH_DIR, 'results');
const MiB = 1024 * 1024;

// ---------------------------------------------------------------- settings
function envNum(name, dflt) {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number, got ${v}`);
  return n;
}

const QUICK = process.env.BENCH_QUICK === '1' || process.env.BENCH_QUICK === 'true';
const settings = {
  quick: QUICK,
  loader: 'wrk',
  rounds: Math.round(envNum('BENCH_ROUNDS', 3)),
  revocationRounds: Math.round(envNum('BENCH_REVOCATION_ROUNDS', 5)),
  duration: Math.round(envNum('BENCH_DURATION', QUICK ? 1 : 5)),
  warmup: Math.round(envNum('BENCH_WARMUP', QUICK ? 1 : 2)),
  connections: (process.env.BENCH_CONNECTIONS || '32,1')
    .split(',')
    .map((s) => Number(s.trim()))
    .filter((n) => Number.isInteger(n) && n > 0),
  memTokens: Math.round(envNum('BENCH_MEM_TOKENS', QUICK ? 5_000 : 20_000)),
  memRequests: 0,
  memConnections: 32,
  startupRuns: 3,
  skipMemory: process.env.BENCH_SKIP_MEM === '1',
  clientAuth: process.env.BENCH_CLIENT_AUTH === 'basic' ? 'basic' : 'body',
  only: process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(',').map((s) => s.trim()) : null,
  exampleScript: path.resolve(process.env.BENCH_EXAMPLE || path.join(REPO_ROOT, 'dist', 'examples', 'server.js')),
  nice: process.env.BENCH_NICE === undefined ? -10 : Number(process.env.BENCH_NICE),
  niceInEffect: 0,
  spin: process.env.BENCH_SPIN !== '0',
  spinning: false,
  serverCpu: Number(process.env.BENCH_SERVER_CPU || 0),
  loadCpu: Number(process.env.BENCH_LOAD_CPU || 1),
  pinned: false,
};
settings.memRequests = Math.round(envNum('BENCH_MEM_REQUESTS', settings.memTokens * 2));
if (settings.rounds < 3 && !process.env.BENCH_ALLOW_FEW_ROUNDS) {
  throw new Error('BENCH_ROUNDS must be at least 3');
}
if (settings.connections.length === 0) throw new Error('BENCH_CONNECTIONS is empty');

// the compiled package the example comes from: the CLI, the DPoP and assertion helpers are taken from it too
const DIST = path.resolve(path.dirname(settings.exampleScript), '..');

const HI = Math.max(...settings.connections); // "32 connections"
const LO = Math.min(...settings.connections); // "1 connection"

// Fixed claims for the floors and the textbook stack (they sign and verify with
// the same values; OURS uses its own issuer/audience).
const PEER_ISS = 'http://127.0.0.1/bench';
const PEER_AUD = 'http://127.0.0.1/bench/api';
const SCOPE = 'orders:read';

const log = (...a) => console.log(...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------------- keys
function makeKeys(dir) {
  const out = {};
  const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  for (const [alg, kp] of [
    ['RS256', rsa],
    ['ES256', ec],
  ]) {
    const kid = `bench-${alg.toLowerCase()}`;
    const privateKeyFile = path.join(dir, `${alg}.key.pem`);
    const publicKeyFile = path.join(dir, `${alg}.pub.pem`);
    const privateJwkFile = path.join(dir, `${alg}.jwk.json`);
    fs.writeFileSync(privateKeyFile, kp.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    fs.writeFileSync(publicKeyFile, kp.publicKey.export({ type: 'spki', format: 'pem' }));
    fs.writeFileSync(privateJwkFile, JSON.stringify({ ...kp.privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' }), {
      mode: 0o600,
    });
    out[alg] = { kid, privateKeyFile, publicKeyFile, privateJwkFile, privateKey: kp.privateKey };
  }
  return out;
}

// --------------------------------------------------------------- requests
function tokenRequest(tokenPath, clientId, clientSecret) {
  const headers = { 'content-type': 'application/x-www-form-urlencoded' };
  let body = `grant_type=client_credentials&scope=${encodeURIComponent(SCOPE)}`;
  if (settings.clientAuth === 'basic') {
    const cred = `${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`;
    headers.authorization = `Basic ${Buffer.from(cred).toString('base64')}`;
  } else {
    body += `&client_id=${encodeURIComponent(clientId)}&client_secret=${encodeURIComponent(clientSecret)}`;
  }
  return { method: 'POST', path: tokenPath, headers, body };
}

function bearerRequest(routePath, token) {
  return { method: 'GET', path: routePath, headers: { authorization: `Bearer ${token}` } };
}

async function fetchToken(server, req) {
  const res = await request(server.port, req);
  if (res.status !== 200 || !res.json || typeof res.json.access_token !== 'string') {
    throw new Error(`${server.name}: token request failed: HTTP ${res.status} ${res.text.slice(0, 300)}`);
  }
  return res.json;
}

// ---------------------------------------------------------------- targets
/**
 * Servers. `script` ones are bench/servers/* with an IPC channel; `example`
 * ones are the compiled example server started as its users start it.
 */
function defineTargets(keys, work, peerClient) {
  const example = (name, env = {}) => ({
    example: true,
    script: settings.exampleScript,
    env: { DATA_DIR: path.join(work, name, 'data'), LOG_LEVEL: 'info', ...env },
    stdoutFile: path.join(work, name, 'stdout.log'),
  });
  const peerKeys = (k) => ({ ...pick(k), issuer: PEER_ISS, audience: PEER_AUD });
  const servers = {
    'express-const': { script: 'express-const.js', cfg: {} },
    'express-const-prewired': { script: 'express-const.js', cfg: { prewired: true } },
    'node-http-const': { script: 'node-http-const.js', cfg: {} },
    example: example('example'),
    // the revocation budget's process: /api/whoami and /health measured side by
    // side, then 10 000 denylisted jtis (1 000 client ids) and 1 000 client
    // generations written to its store while it runs, then measured again
    // (see measureRevocationPhases)
    'example-revoked': { ...example('example-revoked'), loadLater: { tokens: 10_000, clients: 1_000 } },
    // the example app with a no-op setting req.auth in place of requireBearer(): the route without the token check
    'example-without-auth': {
      ...example('example-without-auth', { EXAMPLE_DIST: path.dirname(settings.exampleScript) }),
      script: path.join(__dirname, 'servers', 'example-without-auth.js'),
    },
    'example-warn': example('example-warn', { LOG_LEVEL: 'warn' }),
    'example-rs256': example('example-rs256', { SIGNING_ALG: 'RS256' }),
    'floor-sign-es256': { script: 'floor.js', cfg: { mode: 'sign', alg: 'ES256', ...peerKeys(keys.ES256) } },
    'floor-sign-es256-prewired': { script: 'floor.js', cfg: { mode: 'sign', alg: 'ES256', ...peerKeys(keys.ES256), prewired: true } },
    'floor-sign-rs256': { script: 'floor.js', cfg: { mode: 'sign', alg: 'RS256', ...peerKeys(keys.RS256) } },
    'textbook-pem': { script: 'textbook.js', cfg: { ...peerKeys(keys.RS256), ...peerClient } },
    'textbook-keyobject': { script: 'textbook.js', cfg: { ...peerKeys(keys.RS256), ...peerClient, keyObject: true } },
    'textbook-bcrypt': { script: 'textbook.js', cfg: { ...peerKeys(keys.RS256), ...peerClient, keyObject: true, bcrypt: true } },
    oidc: { script: 'oidc.mjs', cfg: { privateJwkFile: keys.RS256.privateJwkFile, ...peerClient, clientAuth: settings.clientAuth } },
    'node-oauth': { script: 'node-oauth.js', cfg: { ...peerClient } },
    'floor-verify-es256': { script: 'floor.js', cfg: { mode: 'verify', alg: 'ES256', ...peerKeys(keys.ES256) } },
    'floor-verify-rs256': { script: 'floor.js', cfg: { mode: 'verify', alg: 'RS256', ...peerKeys(keys.RS256) } },
  };

  const peerTokenReq = (p) => tokenRequest(p, peerClient.clientId, peerClient.clientSecret);
  const oursTokenReq = (s) => tokenRequest('/oauth/token', s.info.clientId, s.info.clientSecret);
  const oursToken = async (s) => (await fetchToken(s, oursTokenReq(s))).access_token;
  const peerToken = (p) => async (s) => (await fetchToken(s, peerTokenReq(typeof p === 'function' ? p(s) : p))).access_token;
  const mintPeer = (a) => async () =>
    jwt.sign({ client_id: peerClient.clientId, scope: SCOPE, jti: crypto.randomUUID() }, keys[a].privateKey, {
      algorithm: a,
      header: { typ: 'at+jwt', kid: keys[a].kid },
      issuer: PEER_ISS,
      audience: PEER_AUD,
      subject: peerClient.clientId,
      expiresIn: 3600,
    });
  const get = (p) => () => ({ method: 'GET', path: p });
  const pkjwt = privateKeyJwtClient({ dist: DIST, dataDir: servers.example.env.DATA_DIR, keyFile: path.join(work, 'example', 'pkjwt.key.json'), scope: SCOPE });
  // GET /api/whoami with a DPoP-bound token and a fresh proof per request (each jti is accepted once), bounded by the Bearer route
  const dpopTarget = (id, label, caller) => ({
    id, group: 'protected', ours: true, label, server: 'example', kind: 'protected', token: (s) => caller.token(s), request: () => caller.request(), fresh: () => caller.request(),
    bodies: (n, file) => caller.writeProofs(n, file), lineHeader: 'dpop', boundedBy: 'ours-whoami', caller,
  });
  const dpopCallerOf = (keyType) => dpopCaller({ dist: DIST, tokenRequest: (s) => oursTokenReq(s), keyType });

  // kind: 'const' | 'token' | 'protected' | 'open'. optional: only with BENCH_ONLY or BENCH_ALL=1.
  // Each target stands right after the one its ratio is read against (the
  // floor after ours-token, /health after /api/whoami), so the two are
  // measured back to back in every round.
  const targets = [
    { id: 'node-http-const', group: 'reference', label: 'bare node:http, constant JSON (the load generator\'s ceiling)', server: 'node-http-const', kind: 'const', request: get('/const') },
    { id: 'express-const', group: 'reference', label: 'bare Express 5, constant JSON', server: 'express-const', kind: 'const', request: get('/const') },
    { id: 'express-const-prewired', group: 'reference', label: 'bare Express 5, constant JSON, served as the example serves its app (requests built on the app\'s prototypes)', server: 'express-const-prewired', kind: 'const', request: get('/const') },

    { id: 'ours-token', group: 'issue', ours: true, label: 'OURS example server POST /oauth/token (ES256, audit log on)', server: 'example', kind: 'token', request: (s) => oursTokenReq(s) },
    { id: 'floor-sign-es256', group: 'issue', label: 'signing floor: Express + urlencoded + jwt.sign (ES256)', server: 'floor-sign-es256', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'floor-sign-es256-prewired', group: 'issue', label: 'signing floor served as the example serves its app (requests built on the app\'s prototypes)', server: 'floor-sign-es256-prewired', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'ours-token-warn', group: 'issue', ours: true, label: 'OURS example server POST /oauth/token (ES256, LOG_LEVEL=warn: no audit line)', server: 'example-warn', kind: 'token', request: (s) => oursTokenReq(s) },
    { id: 'ours-token-pkjwt', group: 'issue', ours: true, label: 'OURS example server POST /oauth/token, private_key_jwt', server: 'example', kind: 'token', setup: (s) => pkjwt.setup(s), request: () => pkjwt.request(), fresh: () => pkjwt.request(), bodies: (n, file) => pkjwt.writeBodies(n, file) },
    { id: 'ours-token-rs256', optional: true, group: 'issue', ours: true, label: 'OURS example server POST /oauth/token (RS256, audit log on)', server: 'example-rs256', kind: 'token', request: (s) => oursTokenReq(s) },
    { id: 'floor-sign-rs256', optional: true, group: 'issue', label: 'signing floor: Express + urlencoded + jwt.sign (RS256)', server: 'floor-sign-rs256', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'textbook-pem-token', group: 'issue', label: 'textbook oauth2orize + passport, PEM per request (RS256)', server: 'textbook-pem', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'textbook-keyobject-token', group: 'issue', label: 'textbook oauth2orize + passport, KeyObject (RS256)', server: 'textbook-keyobject', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'textbook-bcrypt-token', optional: true, group: 'issue', label: 'textbook oauth2orize + passport, KeyObject, bcrypt cost 10 (RS256)', server: 'textbook-bcrypt', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'oidc-token', group: 'issue', label: 'node-oidc-provider, JWT access token (RS256)', server: 'oidc', kind: 'token', request: (s) => peerTokenReq(s.info.tokenPath) },
    { id: 'node-oauth-token', group: 'issue', label: '@node-oauth/oauth2-server, opaque token', server: 'node-oauth', kind: 'token', request: () => peerTokenReq('/oauth/token') },

    { id: 'ours-whoami', group: 'protected', ours: true, label: 'OURS example server GET /api/whoami (requireBearer, ES256)', server: 'example', kind: 'protected', token: oursToken, request: (s, t) => bearerRequest('/api/whoami', t) },
    { id: 'ours-health', group: 'protected', label: 'same process, unauthenticated GET /health (same header sent)', server: 'example', kind: 'open', token: oursToken, request: (s, t) => bearerRequest('/health', t) },
    { id: 'ours-whoami-without-auth', group: 'protected', label: 'the example app with a no-op setting the same req.auth in place of requireBearer(), GET /api/whoami (same header sent): the route without the token check', server: 'example-without-auth', kind: 'open', token: oursToken, request: (s, t) => bearerRequest('/api/whoami', t) },
    { id: 'ours-health-without-auth', group: 'protected', label: 'the same no-op process, GET /health (same header sent)', server: 'example-without-auth', kind: 'open', token: oursToken, request: (s, t) => bearerRequest('/health', t) },
    { id: 'ours-orders', group: 'protected', ours: true, label: 'OURS example server GET /api/orders (requireBearer twice, scope)', server: 'example', kind: 'protected', token: oursToken, request: (s, t) => bearerRequest('/api/orders', t) },
    dpopTarget('ours-dpop', 'OURS example server GET /api/whoami with a DPoP-bound token, a fresh ES256 proof per request', dpopCallerOf('ec')),
    dpopTarget('ours-dpop-ps256', 'OURS example server GET /api/whoami with a DPoP-bound token, a fresh PS256 proof (RSA 2048) per request', dpopCallerOf('rsa')),
    // phased: measured apart from the rounds, before and after the revocations are loaded (measureRevocationPhases)
    { id: 'ours-whoami-revocation', group: 'protected', ours: true, phased: true, label: 'OURS example server GET /api/whoami, after 10,000 revoked tokens and 1,000 client cut-offs were loaded into it (a live token: both lookups miss)', server: 'example-revoked', kind: 'protected', token: oursToken, request: (s, t) => bearerRequest('/api/whoami', t) },
    { id: 'ours-health-revocation', group: 'protected', phased: true, label: 'same process, unauthenticated GET /health (same header sent): the control of the revocation check', server: 'example-revoked', kind: 'open', token: oursToken, request: (s, t) => bearerRequest('/health', t) },
    { id: 'floor-verify-es256', group: 'protected', label: 'verify floor: Express + jwt.verify (ES256)', server: 'floor-verify-es256', kind: 'protected', token: mintPeer('ES256'), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'floor-verify-rs256', optional: true, group: 'protected', label: 'verify floor: Express + jwt.verify (RS256)', server: 'floor-verify-rs256', kind: 'protected', token: mintPeer('RS256'), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'textbook-pem-protected', group: 'protected', label: 'textbook passport-http-bearer + jwt.verify, PEM per request (RS256)', server: 'textbook-pem', kind: 'protected', token: peerToken('/oauth/token'), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'textbook-keyobject-protected', group: 'protected', label: 'textbook passport-http-bearer + jwt.verify, KeyObject (RS256)', server: 'textbook-keyobject', kind: 'protected', token: peerToken('/oauth/token'), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'oidc-protected', group: 'protected', label: 'express-oauth2-jwt-bearer, oidc-provider token (RS256)', server: 'oidc', kind: 'protected', token: peerToken((s) => s.info.tokenPath), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'node-oauth-protected', group: 'protected', label: '@node-oauth/oauth2-server authenticate(), opaque', server: 'node-oauth', kind: 'protected', token: peerToken('/oauth/token'), request: (s, t) => bearerRequest('/api/orders', t) },
  ];

  const all = process.env.BENCH_ALL === '1';
  let selected = targets.filter((t) => all || !t.optional);
  if (settings.only) {
    const keep = new Set(['express-const', 'node-http-const', ...settings.only]);
    selected = targets.filter((t) => keep.has(t.id));
    // each target brings its baseline: the revocation check its own /health, DPoP the Bearer route, the protected route /health and the same route without the token check
    if (selected.some((t) => t.id === 'ours-whoami-revocation') && !selected.some((t) => t.id === 'ours-health-revocation')) selected.push(targets.find((t) => t.id === 'ours-health-revocation'));
    for (const t of [...selected]) {
      if (t.boundedBy && !selected.some((u) => u.id === t.boundedBy)) selected.push(targets.find((u) => u.id === t.boundedBy));
    }
    for (const id of ['ours-health', 'ours-whoami-without-auth', 'ours-health-without-auth']) {
      if (selected.some((t) => t.id === 'ours-whoami') && !selected.some((t) => t.id === id)) selected.push(targets.find((t) => t.id === id));
    }
  }
  const used = new Set(selected.map((t) => t.server));
  return { servers: Object.fromEntries(Object.entries(servers).filter(([k]) => used.has(k))), targets: selected };
}

function pick(k) {
  return { kid: k.kid, privateKeyFile: k.privateKeyFile, publicKeyFile: k.publicKeyFile };
}

async function startExample(name, def, cpu) {
  fs.mkdirSync(path.dirname(def.stdoutFile), { recursive: true });
  const s = await startProcess(name, def.script, { env: def.env, stdoutFile: def.stdoutFile, cpu });
  s.info = await readDemoClient(def.stdoutFile);
  s.example = true;
  return s;
}

/** A token of the example's demo client, accepted on /api/whoami (200) before anything is done with it. */
async function acceptedToken(server) {
  const token = (await fetchToken(server, tokenRequest('/oauth/token', server.info.clientId, server.info.clientSecret))).access_token;
  const res = await request(server.port, bearerRequest('/api/whoami', token));
  if (res.status !== 200) throw new Error(`${server.name}: a fresh token of the demo client got HTTP ${res.status} on /api/whoami: ${res.text.slice(0, 300)}`);
  return token;
}

/**
 * Loads def.loadLater into example-revoked while it runs (writeRevocations,
 * a token of the demo client minted and accepted just before denylisted
 * last). The server has reloaded everything once that token gets 401
 * invalid_token (its resync every 2 s sees the store's data_version move);
 * otherwise the run stops.
 */
async function loadRevocations(server, def) {
  const { tokens, clients } = def.loadLater;
  const token = await acceptedToken(server);
  const writeSeconds = await writeRevocations(DIST, def.env.DATA_DIR, def.loadLater, token);
  const refusedAfterSeconds = await untilRefused(server.name, server.port, bearerRequest('/api/whoami', token));
  return { tokens: tokens + 1, clientGenerations: clients, writeSeconds, refusedAfterSeconds };
}

/**
 * The revocation budget, in one process (example-revoked): GET /api/whoami
 * and GET /health measured side by side for settings.revocationRounds rounds at HI
 * connections (the order alternating), the revocations loaded into it while
 * it runs (loadRevocations), the pair measured again. The figure (checks.js)
 * is the median per-round difference (whoami − health, server CPU µs per
 * request) after loading minus the same before: the process's drift lands on
 * both routes of a pair, and what the protected route costs anyway drops out.
 * The rows of the two targets are the measurements after loading.
 */
async function measureRevocationPhases(targets, servers, serverDefs, run, raw, warnings) {
  const whoami = targets.find((t) => t.id === 'ours-whoami-revocation');
  const health = targets.find((t) => t.id === 'ours-health-revocation');
  if (!whoami || !health) return null;
  const phase = async (name) => {
    const out = { whoami: [], health: [], differenceUs: [] };
    const kept = { [whoami.id]: [], [health.id]: [] };
    for (let r = 0; r < settings.revocationRounds; r++) {
      const m = {};
      for (const t of r % 2 === 0 ? [whoami, health] : [health, whoami]) {
        m[t.id] = await run(t, HI, settings.duration, `revocation ${name} ${r + 1}`);
        m[t.id].round = r + 1;
        kept[t.id].push(m[t.id]);
        if (m[t.id].non2xx || m[t.id].errors) warnings.push(`${t.id} ${name} loading, round ${r + 1}: ${m[t.id].non2xx} non-2xx, ${m[t.id].errors} errors`);
        await drain(servers[t.server], t.req);
      }
      const a = m[whoami.id].serverCpuUs;
      const b = m[health.id].serverCpuUs;
      out.whoami.push(a);
      out.health.push(b);
      out.differenceUs.push(a != null && b != null ? round(a - b, 2) : null);
      log(`revocation ${name} loading, round ${r + 1}: /api/whoami ${a} µs/req, /health ${b} µs/req (difference ${out.differenceUs.at(-1)})`);
    }
    return { out, kept };
  };
  // a turn each under load, not recorded, before each phase: before the first, the process last
  // ran at the warm-up minutes ago; before the second, it sat through the writes and reloaded them
  const settle = async () => {
    for (const t of [whoami, health]) {
      await run(t, HI, settings.duration, 'revocation warm-up');
      await drain(servers[t.server], t.req);
    }
  };
  log('\n-- revocation check: example-revoked before and after loading 10,000 revoked tokens into its store');
  await settle();
  const before = await phase('before');
  const loaded = await loadRevocations(servers[whoami.server], serverDefs[whoami.server]);
  log(`example-revoked: ${loaded.tokens.toLocaleString('en-US')} revoked tokens and ${loaded.clientGenerations.toLocaleString('en-US')} client generations written in ${loaded.writeSeconds} s, refused after ${loaded.refusedAfterSeconds} s more`);
  await settle();
  const after = await phase('after');
  raw[whoami.id][HI] = after.kept[whoami.id];
  raw[health.id][HI] = after.kept[health.id];
  return { connections: HI, loaded, before: before.out, after: after.out };
}

// ---------------------------------------------------------- sanity checks
async function prepareTarget(t, server, sanity) {
  const entry = { id: t.id, ok: true, notes: [] };
  sanity[t.id] = entry;
  let token = null;
  if (t.setup) await t.setup(server);
  if (t.token) token = await t.token(server);
  t.req = t.request(server, token);
  if (t.check) await t.check(server, entry);
  const res = await request(server.port, t.req);
  entry.status = res.status;
  if (res.status !== 200) throw new Error(`${t.id}: expected 200, got ${res.status}: ${res.text.slice(0, 300)}`);
  if (t.kind === 'token') {
    if (!res.json || typeof res.json.access_token !== 'string' || !/^bearer$/i.test(res.json.token_type || '')) {
      throw new Error(`${t.id}: not a token response: ${res.text.slice(0, 300)}`);
    }
    const decoded = decodeJwt(res.json.access_token);
    entry.tokenFormat = decoded ? 'jwt' : 'opaque';
    entry.tokenLength = res.json.access_token.length;
    entry.response = { ...res.json, access_token: `<${res.json.access_token.length} chars>` };
    if (decoded) {
      entry.jwtHeader = decoded.header;
      entry.claims = Object.keys(decoded.payload).sort();
    }
    if (t.fresh) {
      // a request that must be fresh each time (a client assertion) is refused when replayed
      const again = await request(server.port, t.req);
      entry.replayed = again.status;
      if (again.status !== 401) throw new Error(`${t.id}: a replayed request should get 401, got ${again.status}: ${again.text.slice(0, 300)}`);
    }
  } else if (t.kind === 'protected') {
    // The route must refuse a request without a token and one with a forged token.
    const none = await request(server.port, { method: 'GET', path: t.req.path });
    const forged = await request(server.port, bearerRequest(t.req.path, forge(token)));
    entry.withoutToken = none.status;
    entry.forgedToken = forged.status;
    if (t.fresh) {
      // a request that must be fresh each time (a DPoP proof) is refused when replayed
      const again = await request(server.port, t.req);
      entry.replayed = again.status;
      if (again.status !== 401) throw new Error(`${t.id}: a replayed request should get 401, got ${again.status}: ${again.text.slice(0, 300)}`);
    }
    if (none.status !== 401 || forged.status !== 401) {
      throw new Error(`${t.id}: expected 401 without a token and with a forged one, got ${none.status} / ${forged.status}`);
    }
  }
  return entry;
}

// ---------------------------------------------------------------- memory
/**
 * Start-up: the example server on a fresh DATA_DIR (first start: keys and the
 * demo client are created), again on the same DATA_DIR, and a bare Express app;
 * time from spawn to the first 200 on /health and the RSS right then.
 */
async function startupTest(work, cpu) {
  const runs = { example: [], exampleRestart: [], express: [] };
  for (let i = 0; i < settings.startupRuns; i++) {
    const dir = path.join(work, `startup-${i}`);
    fs.mkdirSync(dir, { recursive: true });
    const env = { DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'info' };
    const stdoutFile = path.join(dir, 'stdout.log');
    for (const [key, script, e] of [
      ['example', settings.exampleScript, env],
      ['exampleRestart', settings.exampleScript, env],
      ['express', path.join(BENCH_DIR, 'servers', 'express-bare.js'), {}],
    ]) {
      const s = await startProcess(`startup-${key}`, script, { env: e, stdoutFile, cpu });
      await sleep(200);
      const settled = procMemory(s.pid);
      await stopProcess(s);
      runs[key].push({ firstAnswerMs: round(s.firstAnswerMs, 1), rss: s.startRss, rssAfter200ms: settled && settled.rss });
    }
  }
  const med = (key, f) => summary(runs[key].map(f)).median;
  const pick = (key) => ({
    firstAnswerS: round(med(key, (r) => r.firstAnswerMs) / 1000, 3),
    rssMiB: round(med(key, (r) => r.rss) / MiB, 1),
    rssAfter200msMiB: round(med(key, (r) => r.rssAfter200ms) / MiB, 1),
  });
  const out = { runs, example: pick('example'), exampleRestart: pick('exampleRestart'), express: pick('express') };
  out.rssDeltaMiB = round(out.example.rssMiB - out.express.rssMiB, 1);
  log(
    `start-up: example first answer ${out.example.firstAnswerS} s (restart ${out.exampleRestart.firstAnswerS} s), RSS ${out.example.rssMiB} MiB; ` +
      `bare Express ${out.express.firstAnswerS} s, RSS ${out.express.rssMiB} MiB; difference ${out.rssDeltaMiB} MiB`,
  );
  return out;
}

/**
 * Peak RSS of the example server over many distinct tokens: tokens are minted
 * through a first process on one DATA_DIR; a fresh process on that DATA_DIR
 * serves /api/whoami with each of them (twice), a fresh one the same number of
 * requests on /health.
 */
async function memoryTest(work, warnings, cpu) {
  const n = settings.memTokens;
  const total = settings.memRequests;
  log(`\n== Memory: peak RSS over ${total.toLocaleString('en-US')} protected requests with ${n.toLocaleString('en-US')} distinct tokens ==`);
  const dir = path.join(work, 'mem');
  // one ISSUER for the three processes (by default it names the port, which changes)
  const env = { DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'info', ISSUER: 'http://127.0.0.1:3000' };
  const def = { script: settings.exampleScript, env, stdoutFile: path.join(dir, 'stdout.log') };
  const mint = await startExample('mem-mint', def, cpu);
  const mintReq = tokenRequest('/oauth/token', mint.info.clientId, mint.info.clientSecret);
  const t0 = Date.now();
  const tokens = await pool(n, 32, async () => (await fetchToken(mint, mintReq)).access_token);
  const mintSeconds = (Date.now() - t0) / 1000;
  const distinct = new Set(tokens).size;
  log(`minted ${n.toLocaleString('en-US')} tokens in ${mintSeconds.toFixed(1)} s (${distinct.toLocaleString('en-US')} distinct)`);
  if (distinct !== n) warnings.push(`memory test: only ${distinct} of ${n} minted tokens are distinct`);
  await stopProcess(mint);

  const runs = {};
  for (const [id, routePath] of [
    ['ours-whoami', '/api/whoami'],
    ['ours-health', '/health'],
  ]) {
    const server = await startProcess(`mem-${id}`, def.script, { env: def.env, stdoutFile: def.stdoutFile, cpu });
    await sleep(300);
    const idle = procMemory(server.pid);
    let i = 0;
    const req = {
      method: 'GET',
      path: routePath,
      headers: { authorization: `Bearer ${tokens[0]}` },
      setupRequest: (r) => ({ ...r, headers: { ...r.headers, authorization: `Bearer ${tokens[i++ % n]}` } }),
    };
    const m = await autocannon.measure({ port: server.port, request: req, connections: settings.memConnections, amount: total });
    const after = await stopProcess(server);
    runs[id] = {
      route: routePath,
      requests: m.ok + m.non2xx,
      ok: m.ok,
      non2xx: m.non2xx,
      statuses: m.statuses,
      errors: m.errors,
      rps: m.rps,
      idleRss: idle && idle.rss,
      peakRss: after && after.peakRss,
    };
    log(`${id.padEnd(15)} ${m.ok.toLocaleString('en-US')} x 2xx, ${m.non2xx} non-2xx, idle RSS ${fmtMiB(idle && idle.rss)}, peak RSS ${fmtMiB(after && after.peakRss)}`);
    if (m.non2xx || m.errors) warnings.push(`memory test ${id}: ${m.non2xx} non-2xx responses, ${m.errors} errors`);
  }
  const a = runs['ours-whoami'].peakRss;
  const b = runs['ours-health'].peakRss;
  return {
    tokens: n,
    distinctTokens: distinct,
    requests: total,
    connections: settings.memConnections,
    mintSeconds: round(mintSeconds, 2),
    runs,
    deltaBytes: a != null && b != null ? a - b : null,
    deltaMiB: a != null && b != null ? round((a - b) / MiB, 1) : null,
  };
}

function fmtMiB(bytes) {
  return bytes == null ? 'n/a' : `${(bytes / MiB).toFixed(1)} MiB`;
}

/**
 * The load generator's ceiling, from its runs against bare node:http (median
 * over the rounds, HI connections): the rate it drove that server at, and
 * its own ceiling, requests per second of wrk's CPU time (never below the
 * rate it reached). A single-core node:http server saturates before wrk
 * does, so the rate is node:http's limit as much as wrk's; the requests per
 * CPU second say what wrk could drive with its whole core. The headroom over
 * the fastest other target is read from the latter.
 */
function loaderFigures(raw, medians, targets) {
  const id = 'node-http-const';
  if (!medians[id]) return null;
  const ceiling = medians[id][HI].rps.median;
  const cpu = summary(raw[id][HI].map((m) => m.loaderCpu)).median;
  const perCpuSecond = summary(raw[id][HI].map((m) => m.loaderCeiling)).median;
  const own = ceiling == null ? null : Math.max(ceiling, perCpuSecond ?? 0);
  let fastest = null;
  for (const t of targets) {
    if (t.id === id) continue;
    const v = medians[t.id][HI].rps.median;
    if (v != null && (!fastest || v > fastest.rps)) fastest = { id: t.id, rps: v };
  }
  return {
    loader: 'wrk',
    ceiling,
    loaderCpuShare: cpu,
    requestsPerLoaderCpuSecond: perCpuSecond,
    ownCeiling: own,
    fastest,
    headroom: fastest && own ? round(own / fastest.rps, 2) : null,
  };
}

// ------------------------------------------------------------------- main
function writeReports(results) {
  fs.mkdirSync(RESULTS_DIR, { recursive: true });
  fs.writeFileSync(path.join(RESULTS_DIR, 'latest.json'), `${JSON.stringify(results, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS_DIR, 'latest.md'), report.markdown(results));
  fs.writeFileSync(path.join(RESULTS_DIR, 'latest.svg'), report.svg(results));
}

/** BENCH_REPORT_ONLY=1: recompute the checks and rewrite the reports from bench/results/latest.json. */
function reportOnly() {
  const file = path.join(RESULTS_DIR, 'latest.json');
  const results = JSON.parse(fs.readFileSync(file, 'utf8'));
  results.checks = computeChecks(results);
  writeReports(results);
  log(report.text(results));
}

async function main() {
  if (process.env.BENCH_REPORT_ONLY === '1') return reportOnly();
  const startedAt = new Date();
  const warnings = [];

  if (!fs.existsSync(settings.exampleScript)) {
    throw new Error(`${settings.exampleScript} not found: run \`npm run build\` in the repo root first (npm run bench does).`);
  }
  const wrkBin = wrk.ensureWrk(log);

  // Pinning: servers on one core, the load generator (wrk) on another.
  if (os.cpus().length >= 2 && hasTaskset()) {
    settings.pinned = pinSelf(settings.loadCpu);
    if (!settings.pinned) warnings.push('taskset could not pin the harness; running unpinned');
  } else {
    warnings.push(os.cpus().length < 2 ? 'fewer than 2 cores: running unpinned' : 'taskset not found: running unpinned');
  }
  const cpu = settings.pinned ? settings.serverCpu : null;
  const loadCpu = settings.pinned ? settings.loadCpu : null;
  // Higher priority than whatever else runs here (needs root or CAP_SYS_NICE; otherwise a no-op).
  if (settings.nice) settings.niceInEffect = reniceSelf(settings.nice);
  const loadBefore = os.loadavg();
  if (loadBefore[0] > 0.5) {
    warnings.push(`the machine was busy when the run started (load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}); figures are noisier than on an idle machine`);
  }
  // Keep both cores out of their idle state during the latency runs at LO
  // connections (see lib/spin.js); stopped (SIGSTOP) for everything else.
  // At HI connections a spinner is in the way: every response has to wake
  // the loader off a busy core, and by hand that doubled the server's system
  // time per request (9 -> 18 µs) and cut every target's rate by about 30%,
  // which no user's server pays.
  let spinners = [];
  if (settings.spin && settings.pinned) {
    spinners = [settings.serverCpu, settings.loadCpu].map((c) => startSpinner(c, 3 * 3600));
    settings.spinning = spinners.every(Boolean);
    if (!settings.spinning) warnings.push('chrt not available: cores may idle between requests (noisier 1-connection latency)');
    spinners = spinners.filter(Boolean);
  }
  const spin = (on) => {
    for (const child of spinners) child.kill(on ? 'SIGCONT' : 'SIGSTOP');
  };
  spin(false);

  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-bench-'));
  const keys = makeKeys(work);
  const peerClient = { clientId: 'bench-client', clientSecret: crypto.randomBytes(24).toString('base64url') };
  const { servers: serverDefs, targets } = defineTargets(keys, work, peerClient);

  const perMeasure = settings.duration + 0.3;
  const phased = targets.filter((t) => t.phased).length;
  const est =
    Object.keys(serverDefs).length * 1.5 +
    targets.length * (settings.warmup + 0.5) +
    (targets.length - phased) * settings.connections.length * settings.rounds * perMeasure +
    (phased ? phased * (2 + 2 * settings.revocationRounds) * perMeasure + 5 : 0) +
    settings.startupRuns * 3 * 1.5 +
    (settings.skipMemory ? 0 : 10 + settings.memTokens / 2000 + settings.memRequests / 4000);
  log(
    `express-client-credentials bench: ${targets.length} targets x ${settings.connections.join('/')} connections x ${settings.rounds} rounds x ${settings.duration} s` +
      `${settings.quick ? ' (quick)' : ''}; about ${Math.ceil(est / 60)} min`,
  );
  log(`${os.cpus()[0].model}, ${os.cpus().length} cores, Node ${process.version}, wrk ${wrk.wrkVersion(wrkBin)}; ${settings.pinned ? `servers on CPU ${settings.serverCpu}, load generator on CPU ${settings.loadCpu}` : 'unpinned'}`);

  const servers = {};
  const cleanup = () => {
    killAll();
    try {
      fs.rmSync(work, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
  };
  // SIGTERM too (pkill, a CI timeout): without a handler node exits at once, and the
  // servers and the stopped SCHED_IDLE spinners it started were left behind
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]]) {
    process.on(signal, () => {
      cleanup();
      process.exit(code);
    });
  }
  process.on('exit', () => killAll());

  try {
    // Start-up figures first, while nothing else runs.
    const startup = await startupTest(work, cpu);

    for (const [name, def] of Object.entries(serverDefs)) {
      servers[name] = def.example ? await startExample(name, def, cpu) : await startServer(name, def.script, def.cfg, { cpu });
    }
    log(`started ${Object.keys(servers).length} server processes`);

    // Sanity: every target answers correctly, protected ones refuse bad tokens.
    const sanity = {};
    for (const t of targets) await prepareTarget(t, servers[t.server], sanity);
    const oursClaims = sanity['ours-token']?.claims;
    const floorClaims = sanity['floor-sign-es256']?.claims;
    if (oursClaims && floorClaims && oursClaims.join() !== floorClaims.join()) {
      warnings.push(`OURS token claims [${oursClaims}] differ from the signing floor's [${floorClaims}]`);
    }
    log('sanity checks passed (token responses, 200 with a valid token, 401 without / with a forged one)');

    // Besides throughput: the server's own CPU time per request over the
    // measurement, which other processes on the machine disturb much less.
    // Targets whose requests are each used once (t.bodies: private_key_jwt
    // assertions) get them written to a file right before the measurement:
    // 2 x duration x the fastest rate seen so far for the target or for OURS
    // client_secret issuance, at least 2 000/s (warm-ups run cold, so their
    // rate is no safe guess). Running out is reported, never a silent rate.
    const fastest = {};
    const run = async (t, connections, duration, label = 'warm-up') => {
      const pid = servers[t.server].pid;
      let bodiesFile = null;
      let prepared = null;
      if (t.bodies) {
        // a target bounded by another (DPoP by the Bearer route: a proof check on top) never runs faster than it
        const rate = Math.max(fastest[t.id] ?? 0, fastest['ours-token'] ?? 0, t.boundedBy ? (fastest[t.boundedBy] ?? 0) : 0, 2000);
        prepared = { count: Math.ceil(rate * duration * 2) + 100 };
        bodiesFile = path.join(work, `${t.id}.bodies`);
        const t0 = process.hrtime.bigint();
        t.bodies(prepared.count, bodiesFile);
        prepared.seconds = round(Number(process.hrtime.bigint() - t0) / 1e9, 2);
      }
      const spinning = connections === LO && LO < HI;
      if (spinning) spin(true);
      const before = procCpuUs(pid);
      const m = await wrk.measure({ bin: wrkBin, port: servers[t.server].port, request: t.req, connections, duration, cpu: loadCpu, bodiesFile, lineHeader: t.lineHeader });
      const after = procCpuUs(pid);
      if (spinning) spin(false);
      if (bodiesFile) fs.rmSync(bodiesFile, { force: true });
      const n = m.ok + m.non2xx;
      m.serverCpuUs = before != null && after != null && n > 0 ? round((after - before) / n, 1) : null;
      if (prepared) {
        m.preparedRequests = prepared.count;
        m.prepareSeconds = prepared.seconds;
        if (m.bodiesMissing) warnings.push(`${t.id} ${label} c=${connections}: the ${prepared.count} pre-signed requests ran out (${m.bodiesMissing} more were sent to a 404 path): its rate is not valid`);
      }
      fastest[t.id] = Math.max(fastest[t.id] ?? 0, m.rps);
      return m;
    };

    // Warm-up.
    const warmup = {};
    for (const t of targets) {
      const w = await run(t, HI, settings.warmup);
      warmup[t.id] = { rps: w.rps, non2xx: w.non2xx, errors: w.errors };
      if (w.non2xx || w.errors) warnings.push(`${t.id}: warm-up had ${w.non2xx} non-2xx and ${w.errors} errors`);
      log(`warm-up ${t.id.padEnd(30)} ${Math.round(w.rps).toLocaleString('en-US').padStart(8)} req/s`);
      await drain(servers[t.server], t.fresh ? t.fresh() : t.req);
    }

    // Rounds: targets alternate, starting one later each round.
    const raw = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(settings.connections.map((c) => [c, []]))]));
    const rotating = targets.filter((t) => !t.phased);
    for (let r = 0; r < settings.rounds; r++) {
      log(`\n-- round ${r + 1}/${settings.rounds}`);
      for (let k = 0; k < rotating.length; k++) {
        const t = rotating[(k + r) % rotating.length];
        const line = [];
        for (const c of settings.connections) {
          const m = await run(t, c, settings.duration, `round ${r + 1}`);
          m.round = r + 1;
          raw[t.id][c].push(m);
          if (m.non2xx || m.errors) warnings.push(`${t.id} round ${r + 1} c=${c}: ${m.non2xx} non-2xx, ${m.errors} errors`);
          line.push(`c=${c}: ${Math.round(m.rps).toLocaleString('en-US').padStart(7)} req/s p50 ${fmtMs(m.p50)} p99 ${fmtMs(m.p99)} cpu ${m.serverCpuUs == null ? 'n/a' : `${Math.round(m.serverCpuUs)} µs`}/req`);
          await drain(servers[t.server], t.fresh ? t.fresh() : t.req);
        }
        log(`${t.id.padEnd(30)} ${line.join(' | ')}`);
      }
    }

    const revocationPhases = await measureRevocationPhases(targets, servers, serverDefs, run, raw, warnings);

    // Server memory after the throughput runs (informational).
    const serverMemory = {};
    for (const [name, s] of Object.entries(servers)) serverMemory[name] = s.example ? procMemory(s.pid) : await memoryOf(s);
    const exampleLogs = {};
    for (const [name, s] of Object.entries(servers)) {
      if (s.example) {
        exampleLogs[name] = { bytes: fs.statSync(serverDefs[name].stdoutFile).size };
        await stopProcess(s);
      } else {
        await stopServer(s);
      }
    }

    // Medians and ratios to bare Express.
    const medians = {};
    for (const t of targets) {
      medians[t.id] = {};
      for (const c of settings.connections) {
        const rows = raw[t.id][c];
        medians[t.id][c] = {
          rps: summary(rows.map((m) => m.rps)),
          p50: summary(rows.map((m) => m.p50)),
          p99: summary(rows.map((m) => m.p99)),
          cpuUs: summary(rows.map((m) => m.serverCpuUs)),
        };
      }
    }
    for (const t of targets) {
      for (const c of settings.connections) {
        const base = medians['express-const'][c].rps.median;
        const mine = medians[t.id][c].rps.median;
        medians[t.id][c].ratioToExpress = base && mine != null ? round(mine / base, 4) : null;
      }
    }
    const loader = loaderFigures(raw, medians, targets);
    if (loader && loader.headroom != null && loader.headroom < 3) {
      warnings.push(
        `the load generator was the limit: its own ceiling is ${Math.round(loader.ownCeiling)} req/s (it drove bare node:http at ${Math.round(loader.ceiling)} req/s with ${Math.round((loader.loaderCpuShare || 0) * 100)}% of its core), only ${loader.headroom}× the fastest target (${loader.fastest.id}); figures near the top are the loader's, not the servers'`,
      );
    }

    const memory = settings.skipMemory ? null : await memoryTest(work, warnings, cpu);

    // the calling side (token client), standalone: see bench/client.js; its figures feed the targets
    let micro = null;
    // the revocation check alone (RevocationState.isRevoked(), 10 000 denylisted jtis): bench/revocation-check.js, short rounds
    if (targets.some((t) => t.id === 'ours-whoami-revocation')) {
      const iterations = String(Math.round(envNum('BENCH_REVOCATION_ITERATIONS', 200_000)));
      const figures = jsonScript('revocation-check.js', [iterations], warnings);
      if (figures) micro = { ...micro, revocationCheck: figures };
    }
    // instructions per request under callgrind (bench/instructions.js): the protected route's work over
    // /health, and what the loaded revocations add to it, in counts the machine's noise does not move
    if (process.env.BENCH_SKIP_INSN !== '1' && targets.some((t) => t.id === 'ours-whoami')) {
      const figures = jsonScript('instructions.js', [], warnings, 20 * 60_000);
      if (figures) micro = { ...micro, instructions: figures };
    }
    if (process.env.BENCH_SKIP_CLIENT !== '1') {
      log('');
      const clientRun = require('node:child_process').spawnSync(process.execPath, ['--expose-gc', path.join(BENCH_DIR, 'client.js')], { stdio: 'inherit' });
      const clientFile = path.join(RESULTS_DIR, 'client.json');
      if (clientRun.status === 0 && fs.existsSync(clientFile)) {
        const client = JSON.parse(fs.readFileSync(clientFile, 'utf8'));
        micro = { ...micro, tokenClientOverheadUs: client.differenceUs, tokenClient: client };
      } else {
        warnings.push('bench/client.js failed: the token client target is not measured');
      }
    }

    const results = {
      date: startedAt.toISOString(),
      finished: new Date().toISOString(),
      machine: {
        cpuModel: os.cpus()[0].model,
        cores: os.cpus().length,
        memoryBytes: os.totalmem(),
        platform: `${os.platform()} ${os.release()} ${os.arch()}`,
        node: process.version,
        pinned: settings.pinned,
        loadAverageBefore: loadBefore.map((x) => round(x, 2)),
        loadAverageAfter: os.loadavg().map((x) => round(x, 2)),
        loadAverageNote: settings.spinning ? 'loadAverageAfter may include the 2 SCHED_IDLE spinners of the 1-connection runs' : undefined,
      },
      versions: { ...versions(), wrk: wrk.wrkVersion(wrkBin) },
      settings: { ...settings, exampleScript: path.relative(REPO_ROOT, settings.exampleScript), hi: HI, lo: LO },
      targets: targets.map((t) => ({ id: t.id, group: t.group, label: t.label, ours: !!t.ours, server: t.server, method: t.req.method, path: t.req.path })),
      sanity,
      warmup,
      rounds: raw,
      medians,
      loader,
      startup,
      serverMemory,
      exampleLogs,
      revocationPhases,
      memory,
      micro,
      // what one proof cost the harness to sign (the caller's side of each DPoP target)
      dpopSigning: Object.fromEntries(targets.filter((t) => t.caller && t.caller.signUs != null).map((t) => [t.id, { alg: t.caller.alg, signUs: t.caller.signUs }])),
      notes: notes(targets),
      warnings,
    };
    results.checks = computeChecks(results);
    writeReports(results);

    log(`\n${report.text(results)}`);
    log(`wrote ${['latest.json', 'latest.md', 'latest.svg'].map((f) => path.relative(REPO_ROOT, path.join(RESULTS_DIR, f))).join(', ')}`);
  } finally {
    cleanup();
  }
}

/**
 * Wait until the server has worked off what the load generator left in flight
 * (requests already accepted, e.g. bcrypt hashes queued on the thread pool,
 * still run and would steal the shared server core from the next
 * measurement): one more request of the same kind is answered only after them.
 */
/**
 * Runs bench/`script` with `args` and --json: echoes what it printed and
 * answers the JSON object of its last line, or null (with a warning) when it
 * failed.
 */
function jsonScript(script, args, warnings, timeout = undefined) {
  log('');
  const r = require('node:child_process').spawnSync(process.execPath, [path.join(BENCH_DIR, script), ...args, '--json'], { encoding: 'utf8', timeout });
  const lines = (r.stdout || '').trim().split('\n');
  let figures = null;
  try {
    figures = r.status === 0 ? JSON.parse(lines.pop()) : null;
  } catch {
    figures = null;
  }
  for (const l of lines) log(l);
  if (!figures) warnings.push(`bench/${script} gave no figures (exit ${r.status}): ${(r.stderr || '').trim().split('\n').slice(-3).join(' / ')}`);
  return figures;
}

async function drain(server, req) {
  try {
    await request(server.port, req, 120_000);
  } catch {
    /* the next measurement reports problems */
  }
  await sleep(100);
}

function notes(targets) {
  const out = [];
  const ids = new Set(targets.map((t) => t.id));
  out.push('OURS is the compiled example server (dist/examples/server.js) started as its users start it: LOG_LEVEL=info, its stdout (the audit log, pino\'s default destination) appended to a file, a fresh DATA_DIR and the demo client it prints.');
  out.push('The protected route\'s baseline is GET /health of the same process: the example\'s one unauthenticated route. It is registered first, so it also skips the routing in front of /api (the issuer\'s router and the /api mount), which a request to /api/whoami walks through.');
  if ((ids.has('oidc-token') || ids.has('oidc-protected')) && Number(process.versions.node.split('.')[0]) < 22) {
    out.push(
      `oidc-provider ${versions()['oidc-provider']} prints "Unsupported runtime" on Node ${process.version} (its supported runtimes are Node 22 LTS and later) but works: every request in this run was checked.`,
    );
  }
  if (ids.has('ours-token-pkjwt')) {
    out.push('private_key_jwt issuance: a client registered with `client-credentials create --auth private_key_jwt --generate-key` on the example\'s DATA_DIR; every request carries its own ES256 assertion (aud = the issuer the example announces, lifetime 290 s), signed in the harness right before each measurement and sent once by wrk (each jti is accepted once).');
  }
  if (ids.has('ours-whoami')) {
    out.push('Instructions: `bench/instructions.js` runs the example server under valgrind\'s callgrind and counts the instructions per request of GET /health and GET /api/whoami (3,000 requests per count, 5 rounds), before and after the same 10,000 revocations are written to its store. The revocation budget is read from these counts (the difference in differences of each route\'s least count, at the example\'s own ns per instruction), and the work ratio of the protected route from the least counts; counts of one route agree within a few hundred instructions of about 120,000, where timed figures of one process drift by ±15 %.');
  }
  if (ids.has('ours-whoami-revocation')) {
    out.push('Revocation check: `ours-whoami-revocation` is GET /api/whoami on a second example process (`example-revoked`), `ours-health-revocation` its GET /health. After the rounds, the two are measured side by side for BENCH_REVOCATION_ROUNDS (5) rounds (32 connections, the order alternating); then 10,000 denylisted jtis (1,000 client ids) and 1,000 client token generations are written to its embedded store while it runs, as the CLI would (it reloads them within its 2 s revocationResync; a token denylisted last must get 401 before the run goes on); then the two are measured again. The figure is the median per-round difference in server CPU per request (/api/whoami − /health) after loading minus the same before: what the entries add to a protected request, with the process\'s own drift on both sides of every difference. The demo client\'s live token misses both lookups. The two rows in the tables are the measurements after loading.');
  }
  out.push('Floors do no client authentication and no store lookup: they are the cost of parsing the form and signing (or verifying) with jsonwebtoken, nothing else.');
  out.push('The example serves its Express app through examples/http-server.ts: requests and responses are built on the app\'s prototypes, so Express does not switch each one\'s prototype (which costs every Express app most of its time under load). The floors and the peers are served as their documentation shows (`http.createServer(app)`); the `-prewired` targets are bare Express and the signing floor served the example\'s way, so that the like-with-like ratio is reported too.');
  return out;
}

function fmtMs(x) {
  return x == null ? '   n/a' : `${x.toFixed(3).padStart(7)} ms`;
}

function versions() {
  const v = { node: process.version };
  const read = (p) => {
    try {
      return JSON.parse(fs.readFileSync(p, 'utf8')).version;
    } catch {
      return null;
    }
  };
  v['express-client-credentials'] = read(path.join(REPO_ROOT, 'package.json'));
  v['express (OURS)'] = read(path.join(path.dirname(require.resolve('express/package.json', { paths: [REPO_ROOT] })), 'package.json'));
  v['pino (OURS)'] = read(path.join(path.dirname(require.resolve('pino/package.json', { paths: [REPO_ROOT] })), 'package.json'));
  for (const name of ['autocannon', 'express', 'jsonwebtoken', 'oauth2orize', 'passport', 'passport-http', 'passport-oauth2-client-password', 'passport-http-bearer', 'bcrypt', 'oidc-provider', 'express-oauth2-jwt-bearer', '@node-oauth/oauth2-server']) {
    v[name] = read(path.join(BENCH_DIR, 'node_modules', name, 'package.json'));
  }
  return v;
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    killAll();
    process.exit(1);
  },
);
