'use strict';
// Side-by-side benchmark of express-client-credentials ("OURS") against a
// jsonwebtoken signing/verifying floor, bare Express 5 / node:http, and peer
// OAuth 2.0 stacks. Run from the repo root with `npm run bench` (which builds
// the package and installs bench/ dependencies first).
//
// Environment:
//   BENCH_ROUNDS=5        measured rounds per target (round-robin across targets)
//   BENCH_DURATION=4      seconds per measurement
//   BENCH_WARMUP=3        seconds of warm-up per target (32 connections) before round 1
//   BENCH_CONNECTIONS=32,1
//   BENCH_QUICK=1         smoke run: 3 rounds x 2 s, 1 s warm-up, 10 000-token memory test
//   BENCH_MEM_TOKENS=50000, BENCH_MEM_REQUESTS=100000, BENCH_SKIP_MEM=1
//   BENCH_ALG=ES256       algorithm of OURS' protected-route / memory servers
//   BENCH_CLIENT_AUTH=body|basic   how token requests authenticate the client
//   BENCH_ONLY=id,id      only these targets (the bare Express reference is always kept)
//   BENCH_OURS_MODULE     path of the package entry (default ../dist/lib/index.js)
//   BENCH_SERVER_CPU=0, BENCH_LOAD_CPU=1   cores for servers / load generator
//   BENCH_VERBOSE=1       echo the servers' stderr
//   BENCH_SKIP_CLIENT=1   skip the token client measurement (bench/client.js) at the end

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const jwt = require('jsonwebtoken');

const { hasTaskset, pinSelf, reniceSelf, startSpinner, startServer, stopServer, memoryOf, askMemory, killAll } = require('./lib/proc');
const { request, pool, decodeJwt } = require('./lib/http');
const { measure, summary, round } = require('./lib/measure');
const report = require('./lib/report');

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
  rounds: Math.round(envNum('BENCH_ROUNDS', QUICK ? 3 : 5)),
  duration: envNum('BENCH_DURATION', QUICK ? 2 : 4),
  warmup: envNum('BENCH_WARMUP', QUICK ? 1 : 3),
  connections: (process.env.BENCH_CONNECTIONS || '32,1')
    .split(',')
    .map((s) => Number(s.trim()))
    .filter((n) => Number.isInteger(n) && n > 0),
  memTokens: Math.round(envNum('BENCH_MEM_TOKENS', QUICK ? 10_000 : 50_000)),
  memRequests: 0,
  memConnections: 32,
  skipMemory: process.env.BENCH_SKIP_MEM === '1',
  protectedAlg: (process.env.BENCH_ALG || 'ES256').toUpperCase(),
  clientAuth: process.env.BENCH_CLIENT_AUTH === 'basic' ? 'basic' : 'body',
  only: process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(',').map((s) => s.trim()) : null,
  oursModule: path.resolve(process.env.BENCH_OURS_MODULE || path.join(REPO_ROOT, 'dist', 'lib', 'index.js')),
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
if (!['ES256', 'RS256'].includes(settings.protectedAlg)) throw new Error('BENCH_ALG must be ES256 or RS256');
if (settings.connections.length === 0) throw new Error('BENCH_CONNECTIONS is empty');

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
function defineTargets(keys, dataRoot, peerClient) {
  const alg = settings.protectedAlg;
  const oursCfg = (name, a) => ({
    module: settings.oursModule,
    repoRoot: REPO_ROOT,
    alg: a,
    dataDir: path.join(dataRoot, name),
  });
  const servers = {
    'express-const': { script: 'express-const.js', cfg: {} },
    'node-http-const': { script: 'node-http-const.js', cfg: {} },
    'ours-es256': { script: 'ours.js', cfg: oursCfg('ours-es256', 'ES256') },
    'ours-rs256': { script: 'ours.js', cfg: oursCfg('ours-rs256', 'RS256') },
    'floor-sign-es256': { script: 'floor.js', cfg: { mode: 'sign', alg: 'ES256', ...pick(keys.ES256), issuer: PEER_ISS, audience: PEER_AUD } },
    'floor-sign-rs256': { script: 'floor.js', cfg: { mode: 'sign', alg: 'RS256', ...pick(keys.RS256), issuer: PEER_ISS, audience: PEER_AUD } },
    textbook: { script: 'textbook.js', cfg: { ...pick(keys.RS256), issuer: PEER_ISS, audience: PEER_AUD, ...peerClient } },
    'textbook-bcrypt': { script: 'textbook.js', cfg: { ...pick(keys.RS256), issuer: PEER_ISS, audience: PEER_AUD, ...peerClient, bcrypt: true } },
    oidc: { script: 'oidc.mjs', cfg: { privateJwkFile: keys.RS256.privateJwkFile, ...peerClient, clientAuth: settings.clientAuth } },
    'node-oauth': { script: 'node-oauth.js', cfg: { ...peerClient } },
    'ours-api': { script: 'ours.js', cfg: oursCfg('ours-api', alg) },
    'ours-open': { script: 'ours.js', cfg: oursCfg('ours-open', alg) },
    'floor-verify-es256': { script: 'floor.js', cfg: { mode: 'verify', alg: 'ES256', ...pick(keys.ES256), issuer: PEER_ISS, audience: PEER_AUD } },
    'floor-verify-rs256': { script: 'floor.js', cfg: { mode: 'verify', alg: 'RS256', ...pick(keys.RS256), issuer: PEER_ISS, audience: PEER_AUD } },
  };

  const peerTokenReq = (p) => tokenRequest(p, peerClient.clientId, peerClient.clientSecret);
  const oursTokenReq = (s) => tokenRequest('/oauth/token', s.info.clientId, s.info.clientSecret);
  const mintPeer = (a) =>
    jwt.sign({ client_id: peerClient.clientId, scope: SCOPE, jti: crypto.randomUUID() }, keys[a].privateKey, {
      algorithm: a,
      header: { typ: 'at+jwt', kid: keys[a].kid },
      issuer: PEER_ISS,
      audience: PEER_AUD,
      subject: peerClient.clientId,
      expiresIn: 3600,
    });

  // kind: 'const' | 'token' | 'protected' | 'open'
  const targets = [
    { id: 'express-const', group: 'reference', label: 'bare Express 5, constant JSON', server: 'express-const', kind: 'const', request: () => ({ method: 'GET', path: '/const' }) },
    { id: 'node-http-const', group: 'reference', label: 'bare node:http, constant JSON', server: 'node-http-const', kind: 'const', request: () => ({ method: 'GET', path: '/const' }) },

    { id: 'ours-token-es256', group: 'issue', ours: true, label: 'OURS POST /oauth/token (ES256)', server: 'ours-es256', kind: 'token', request: (s) => oursTokenReq(s) },
    { id: 'floor-sign-es256', group: 'issue', label: 'signing floor: Express + jwt.sign (ES256)', server: 'floor-sign-es256', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'ours-token-rs256', group: 'issue', ours: true, label: 'OURS POST /oauth/token (RS256)', server: 'ours-rs256', kind: 'token', request: (s) => oursTokenReq(s) },
    { id: 'floor-sign-rs256', group: 'issue', label: 'signing floor: Express + jwt.sign (RS256)', server: 'floor-sign-rs256', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'textbook-token', group: 'issue', label: 'textbook oauth2orize + passport, plain secret (RS256)', server: 'textbook', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'textbook-bcrypt-token', group: 'issue', label: 'textbook oauth2orize + passport, bcrypt cost 10 (RS256)', server: 'textbook-bcrypt', kind: 'token', request: () => peerTokenReq('/oauth/token') },
    { id: 'oidc-token', group: 'issue', label: 'node-oidc-provider, JWT access token (RS256)', server: 'oidc', kind: 'token', request: (s) => peerTokenReq(s.info.tokenPath) },
    { id: 'node-oauth-token', group: 'issue', label: '@node-oauth/oauth2-server, opaque token', server: 'node-oauth', kind: 'token', request: () => peerTokenReq('/oauth/token') },

    { id: 'ours-protected', group: 'protected', ours: true, label: `OURS requireBearer() (${alg})`, server: 'ours-api', kind: 'protected', token: async (s) => (await fetchToken(s, oursTokenReq(s))).access_token, request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'ours-open', group: 'protected', label: 'same app, route without auth', server: 'ours-open', kind: 'open', token: async (s) => (await fetchToken(s, oursTokenReq(s))).access_token, request: (s, t) => bearerRequest('/api/open', t) },
    { id: 'floor-verify-es256', group: 'protected', label: 'verify floor: Express + jwt.verify (ES256)', server: 'floor-verify-es256', kind: 'protected', token: async () => mintPeer('ES256'), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'floor-verify-rs256', group: 'protected', label: 'verify floor: Express + jwt.verify (RS256)', server: 'floor-verify-rs256', kind: 'protected', token: async () => mintPeer('RS256'), request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'textbook-protected', group: 'protected', label: 'textbook passport-http-bearer + jwt.verify (RS256)', server: 'textbook', kind: 'protected', token: async (s) => (await fetchToken(s, peerTokenReq('/oauth/token'))).access_token, request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'oidc-protected', group: 'protected', label: 'express-oauth2-jwt-bearer, oidc-provider token (RS256)', server: 'oidc', kind: 'protected', token: async (s) => (await fetchToken(s, peerTokenReq(s.info.tokenPath))).access_token, request: (s, t) => bearerRequest('/api/orders', t) },
    { id: 'node-oauth-protected', group: 'protected', label: '@node-oauth/oauth2-server authenticate(), opaque', server: 'node-oauth', kind: 'protected', token: async (s) => (await fetchToken(s, peerTokenReq('/oauth/token'))).access_token, request: (s, t) => bearerRequest('/api/orders', t) },
  ];

  let selected = targets;
  if (settings.only) {
    selected = targets.filter((t) => t.id === 'express-const' || settings.only.includes(t.id));
  }
  const used = new Set(selected.map((t) => t.server));
  return { servers: Object.fromEntries(Object.entries(servers).filter(([k]) => used.has(k))), targets: selected };
}

function pick(k) {
  return { kid: k.kid, privateKeyFile: k.privateKeyFile, publicKeyFile: k.publicKeyFile };
}

// ---------------------------------------------------------- sanity checks
async function prepareTarget(t, server, sanity) {
  const entry = { id: t.id, ok: true, notes: [] };
  sanity[t.id] = entry;
  let token = null;
  if (t.token) token = await t.token(server);
  t.req = t.request(server, token);
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
  } else if (t.kind === 'protected') {
    // The route must refuse a request without a token and one with a forged token.
    const none = await request(server.port, { method: 'GET', path: t.req.path });
    const forged = await request(server.port, bearerRequest(t.req.path, forge(token)));
    entry.withoutToken = none.status;
    entry.forgedToken = forged.status;
    if (none.status < 400 || forged.status < 400) {
      throw new Error(`${t.id}: route accepted a request without a valid token (${none.status}/${forged.status})`);
    }
  }
  return entry;
}

/** Same token with one signature character changed (or garbage for opaque tokens). */
function forge(token) {
  if (!token) return 'x';
  const i = token.length - 5;
  const c = token[i] === 'A' ? 'B' : 'A';
  return token.slice(0, i) + c + token.slice(i + 1);
}

// ---------------------------------------------------------------- memory
async function memoryTest(dataRoot, warnings) {
  const alg = settings.protectedAlg;
  const n = settings.memTokens;
  const total = settings.memRequests;
  log(`\n== Memory: peak RSS over ${total.toLocaleString('en-US')} protected requests with ${n.toLocaleString('en-US')} distinct tokens (${alg}) ==`);
  const memDir = path.join(dataRoot, 'mem-ours');
  const baseCfg = { module: settings.oursModule, repoRoot: REPO_ROOT, alg };
  const cpu = settings.pinned ? settings.serverCpu : null;

  // 1. Mint the tokens through our token endpoint, from a separate process on
  //    the same data dir (so the measured server never did issuance work).
  const mint = await startServer('mem-mint', 'ours.js', { ...baseCfg, dataDir: memDir }, { cpu });
  const mintReq = tokenRequest('/oauth/token', mint.info.clientId, mint.info.clientSecret);
  const t0 = Date.now();
  const tokens = await pool(n, 32, async () => (await fetchToken(mint, mintReq)).access_token);
  const mintSeconds = (Date.now() - t0) / 1000;
  const distinct = new Set(tokens).size;
  log(`minted ${n.toLocaleString('en-US')} tokens in ${mintSeconds.toFixed(1)} s (${distinct.toLocaleString('en-US')} distinct)`);
  if (distinct !== n) warnings.push(`memory test: only ${distinct} of ${n} minted tokens are distinct`);
  await stopServer(mint);

  // 2. A fresh server on that data dir (protected route) and a fresh twin of
  //    the same app (unauthenticated route), each sent the same requests.
  const runs = {};
  for (const [id, routePath, dataDir] of [
    ['ours-protected', '/api/orders', memDir],
    ['ours-open', '/api/open', path.join(dataRoot, 'mem-open')],
  ]) {
    const server = await startServer(
      `mem-${id}`,
      'ours.js',
      { ...baseCfg, dataDir, issuer: mint.info.issuer, audience: mint.info.audience, createClient: false },
      { cpu, execArgv: ['--expose-gc'] },
    );
    await sleep(300);
    const idle = await memoryOf(server);
    let i = 0;
    const req = {
      method: 'GET',
      path: routePath,
      headers: { authorization: `Bearer ${tokens[0]}` },
      setupRequest: (r) => {
        const token = tokens[i++ % n];
        return { ...r, headers: { ...r.headers, authorization: `Bearer ${token}` } };
      },
    };
    const m = await measure({ port: server.port, request: req, connections: settings.memConnections, amount: total });
    const after = await memoryOf(server);
    const retained = await askMemory(server, { gc: true }); // informational: what survives a full GC
    const own = await stopServer(server);
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
      peakRssSelfReported: own && own.peakRss,
      afterFullGc: retained && { rss: retained.rss, heapUsed: retained.heapUsed, external: retained.external },
    };
    log(
      `${id.padEnd(15)} ${m.ok.toLocaleString('en-US')} x 2xx, ${m.non2xx} non-2xx, ${Math.round(m.rps).toLocaleString('en-US')} req/s, ` +
        `idle RSS ${fmtMiB(idle && idle.rss)}, peak RSS ${fmtMiB(after && after.peakRss)}, heap after full GC ${fmtMiB(retained && retained.heapUsed)}`,
    );
    if (m.non2xx || m.errors) warnings.push(`memory test ${id}: ${m.non2xx} non-2xx responses, ${m.errors} errors`);
  }
  const a = runs['ours-protected'].peakRss;
  const b = runs['ours-open'].peakRss;
  return {
    algorithm: alg,
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

// ----------------------------------------------------------------- checks
function computeChecks(medians, memory) {
  const checks = [];
  const rps = (id, c) => medians[id]?.[c]?.rps?.median ?? null;
  const p99 = (id, c) => medians[id]?.[c]?.p99?.median ?? null;
  const ratio = (a, b) => (a != null && b != null && b > 0 ? a / b : null);

  const SHORT = {
    'issue-floor-es256': 'issuance ES256 / signing floor',
    'issue-floor-rs256': 'issuance RS256 / signing floor',
    'issue-textbook': 'issuance (ES256) / textbook oauth2orize',
    'issue-oidc': 'issuance (ES256) / node-oidc-provider',
    'protected-open': 'protected / unauthenticated route',
    'protected-p99': `p99 protected − unauthenticated (${LO} conn)`,
    'protected-node-oauth': 'protected / @node-oauth/oauth2-server',
    memory: 'peak RSS − unauthenticated',
  };
  const add = (id, label, measured, op, threshold, unit, detail) => {
    let pass = null;
    if (measured != null) pass = op === '>=' ? measured >= threshold : measured <= threshold;
    checks.push({ id, label, short: SHORT[id] || label, measured: measured == null ? null : round(measured, 3), op, threshold, unit, pass, detail });
  };

  add('issue-floor-es256', `token issuance ES256 vs signing floor ES256 (${HI} conn)`, ratio(rps('ours-token-es256', HI), rps('floor-sign-es256', HI)), '>=', 0.85, 'x', 'OURS req/s / floor req/s');
  add('issue-floor-rs256', `token issuance RS256 vs signing floor RS256 (${HI} conn)`, ratio(rps('ours-token-rs256', HI), rps('floor-sign-rs256', HI)), '>=', 0.85, 'x', 'OURS req/s / floor req/s');
  // the peers as their documentation sets them up (RS256) against OURS as shipped (ES256, the default)
  add('issue-textbook', `token issuance (default ES256) vs textbook oauth2orize + passport (RS256, ${HI} conn)`, ratio(rps('ours-token-es256', HI), rps('textbook-token', HI)), '>=', 2.5, 'x', 'OURS ES256 / textbook (plain secret compare)');
  add('issue-oidc', `token issuance (default ES256) vs node-oidc-provider (RS256, ${HI} conn)`, ratio(rps('ours-token-es256', HI), rps('oidc-token', HI)), '>=', 2.5, 'x', 'OURS ES256 / oidc-provider JWT access tokens');
  add('protected-open', `protected route vs unauthenticated route (${HI} conn)`, ratio(rps('ours-protected', HI), rps('ours-open', HI)), '>=', 0.9, 'x', 'requireBearer req/s / same route without auth');
  const d = p99('ours-protected', LO) != null && p99('ours-open', LO) != null ? p99('ours-protected', LO) - p99('ours-open', LO) : null;
  add('protected-p99', `protected route p99 minus unauthenticated p99 (${LO} conn)`, d, '<=', 0.1, 'ms', 'median p99 difference');
  add('protected-node-oauth', `protected route vs @node-oauth/oauth2-server (${HI} conn)`, ratio(rps('ours-protected', HI), rps('node-oauth-protected', HI)), '>=', 1.2, 'x', 'OURS / node-oauth authenticate()');
  add('memory', `peak RSS with ${memory ? memory.tokens.toLocaleString('en-US') : 'n/a'} distinct tokens minus unauthenticated`, memory ? memory.deltaMiB : null, '<=', 40, 'MiB', memory ? `${memory.requests.toLocaleString('en-US')} requests` : 'skipped');
  return checks;
}

// ------------------------------------------------------------------- main
/** BENCH_REPORT_ONLY=1: recompute the checks and rewrite the reports from bench/results/latest.json. */
function reportOnly() {
  const file = path.join(RESULTS_DIR, 'latest.json');
  const results = JSON.parse(fs.readFileSync(file, 'utf8'));
  results.checks = computeChecks(results.medians, results.memory);
  fs.writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  fs.writeFileSync(path.join(RESULTS_DIR, 'latest.md'), report.markdown(results));
  fs.writeFileSync(path.join(RESULTS_DIR, 'latest.svg'), report.svg(results));
  log(report.text(results));
}

async function main() {
  if (process.env.BENCH_REPORT_ONLY === '1') return reportOnly();
  const startedAt = new Date();
  const warnings = [];

  if (!fs.existsSync(settings.oursModule)) {
    throw new Error(`${settings.oursModule} not found: run \`npm run build\` in the repo root first (npm run bench does).`);
  }

  // Pinning: servers on one core, this process (the load generator) on another.
  if (os.cpus().length >= 2 && hasTaskset()) {
    settings.pinned = pinSelf(settings.loadCpu);
    if (!settings.pinned) warnings.push('taskset could not pin the load generator; running unpinned');
  } else {
    warnings.push(os.cpus().length < 2 ? 'fewer than 2 cores: running unpinned' : 'taskset not found: running unpinned');
  }
  const cpu = settings.pinned ? settings.serverCpu : null;
  // Higher priority than whatever else runs here (needs root or CAP_SYS_NICE; otherwise a no-op).
  if (settings.nice) settings.niceInEffect = reniceSelf(settings.nice);
  const loadBefore = os.loadavg();
  if (loadBefore[0] > 0.5) {
    warnings.push(`the machine was busy when the run started (load average ${loadBefore.map((x) => x.toFixed(2)).join(' ')}); figures are noisier than on an idle machine`);
  }
  // Keep both cores out of their idle state (see lib/spin.js). The two
  // spinners add about 2 to the load average from here on.
  if (settings.spin && settings.pinned) {
    const spinners = [settings.serverCpu, settings.loadCpu].map((c) => startSpinner(c, 3 * 3600));
    settings.spinning = spinners.every(Boolean);
    if (!settings.spinning) warnings.push('chrt not available: cores may idle between requests (noisier 1-connection latency)');
  }

  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-bench-'));
  const keys = makeKeys(work);
  const peerClient = { clientId: 'bench-client', clientSecret: crypto.randomBytes(24).toString('base64url') };
  const { servers: serverDefs, targets } = defineTargets(keys, work, peerClient);

  const perMeasure = settings.duration + 0.4;
  const est =
    Object.keys(serverDefs).length * 1.5 +
    targets.length * (settings.warmup + 0.5) +
    targets.length * settings.connections.length * settings.rounds * perMeasure +
    (settings.skipMemory ? 0 : 20 + settings.memTokens / 2500 + settings.memRequests / 4000);
  log(
    `express-client-credentials bench: ${targets.length} targets x ${settings.connections.join('/')} connections x ${settings.rounds} rounds x ${settings.duration} s` +
      `${settings.quick ? ' (quick)' : ''}; about ${Math.ceil(est / 60)} min`,
  );
  log(`${os.cpus()[0].model}, ${os.cpus().length} cores, Node ${process.version}; ${settings.pinned ? `servers on CPU ${settings.serverCpu}, load generator on CPU ${settings.loadCpu}` : 'unpinned'}`);

  // Start every server (sequentially: they share one core).
  const servers = {};
  const cleanup = () => {
    killAll();
    try {
      fs.rmSync(work, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
  };
  process.on('SIGINT', () => {
    cleanup();
    process.exit(130);
  });
  process.on('exit', () => killAll());

  try {
    for (const [name, def] of Object.entries(serverDefs)) {
      servers[name] = await startServer(name, def.script, def.cfg, { cpu });
    }
    log(`started ${Object.keys(servers).length} server processes`);

    // Sanity: every target answers correctly, protected ones refuse bad tokens.
    const sanity = {};
    for (const t of targets) await prepareTarget(t, servers[t.server], sanity);
    const oursClaims = sanity['ours-token-es256']?.claims || sanity['ours-token-rs256']?.claims;
    const floorClaims = sanity['floor-sign-es256']?.claims;
    if (oursClaims && floorClaims && oursClaims.join() !== floorClaims.join()) {
      warnings.push(`OURS token claims [${oursClaims}] differ from the signing floor's [${floorClaims}]`);
    }
    log('sanity checks passed (token responses, 200 with a valid token, 401 without / with a forged one)');

    // Warm-up.
    const warmup = {};
    for (const t of targets) {
      const w = await measure({ port: servers[t.server].port, request: t.req, connections: HI, duration: settings.warmup });
      warmup[t.id] = { rps: w.rps, non2xx: w.non2xx, errors: w.errors };
      if (w.non2xx || w.errors) warnings.push(`${t.id}: warm-up had ${w.non2xx} non-2xx and ${w.errors} errors`);
      log(`warm-up ${t.id.padEnd(22)} ${Math.round(w.rps).toLocaleString('en-US').padStart(8)} req/s`);
      await drain(servers[t.server], t.req);
    }

    // Rounds: targets alternate, starting one later each round.
    const raw = Object.fromEntries(targets.map((t) => [t.id, Object.fromEntries(settings.connections.map((c) => [c, []]))]));
    for (let r = 0; r < settings.rounds; r++) {
      log(`\n-- round ${r + 1}/${settings.rounds}`);
      for (let k = 0; k < targets.length; k++) {
        const t = targets[(k + r) % targets.length];
        const line = [];
        for (const c of settings.connections) {
          const m = await measure({ port: servers[t.server].port, request: t.req, connections: c, duration: settings.duration });
          m.round = r + 1;
          raw[t.id][c].push(m);
          if (m.non2xx || m.errors) warnings.push(`${t.id} round ${r + 1} c=${c}: ${m.non2xx} non-2xx, ${m.errors} errors`);
          line.push(`c=${c}: ${Math.round(m.rps).toLocaleString('en-US').padStart(7)} req/s p50 ${fmtMs(m.p50)} p99 ${fmtMs(m.p99)}`);
          await drain(servers[t.server], t.req);
        }
        log(`${t.id.padEnd(22)} ${line.join(' | ')}`);
      }
    }

    // Server memory after the throughput runs (informational).
    const serverMemory = {};
    for (const [name, s] of Object.entries(servers)) serverMemory[name] = await memoryOf(s);
    for (const s of Object.values(servers)) await stopServer(s);

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

    const memory = settings.skipMemory ? null : await memoryTest(work, warnings);
    const checks = computeChecks(medians, memory);

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
        loadAverageNote: settings.spinning ? 'loadAverageAfter includes the 2 SCHED_IDLE spinners (about +2)' : undefined,
      },
      versions: versions(),
      settings: { ...settings, oursModule: path.relative(REPO_ROOT, settings.oursModule), hi: HI, lo: LO },
      targets: targets.map((t) => ({ id: t.id, group: t.group, label: t.label, ours: !!t.ours, server: t.server, method: t.req.method, path: t.req.path })),
      sanity,
      warmup,
      rounds: raw,
      medians,
      serverMemory,
      memory,
      checks,
      notes: notes(targets),
      warnings,
    };

    fs.mkdirSync(RESULTS_DIR, { recursive: true });
    fs.writeFileSync(path.join(RESULTS_DIR, 'latest.json'), `${JSON.stringify(results, null, 2)}\n`);
    fs.writeFileSync(path.join(RESULTS_DIR, 'latest.md'), report.markdown(results));
    fs.writeFileSync(path.join(RESULTS_DIR, 'latest.svg'), report.svg(results));

    log(`\n${report.text(results)}`);
    log(`wrote ${['latest.json', 'latest.md', 'latest.svg'].map((f) => path.relative(REPO_ROOT, path.join(RESULTS_DIR, f))).join(', ')}`);
    // the calling side (token client), standalone: see bench/client.js
    if (process.env.BENCH_SKIP_CLIENT !== '1') {
      log('');
      require('node:child_process').spawnSync(process.execPath, ['--expose-gc', path.join(BENCH_DIR, 'client.js')], { stdio: 'inherit' });
    }
  } finally {
    cleanup();
  }
}

/**
 * Wait until the server has worked off what the load generator left in flight
 * (autocannon closes its sockets at the end of a run, but requests already
 * accepted, e.g. bcrypt hashes queued on the thread pool, still run and would
 * steal the shared server core from the next measurement): one more request of
 * the same kind is answered only after them.
 */
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
  if ((ids.has('oidc-token') || ids.has('oidc-protected')) && Number(process.versions.node.split('.')[0]) < 22) {
    out.push(
      `oidc-provider ${versions()['oidc-provider']} prints "Unsupported runtime" on Node ${process.version} (its supported runtimes are Node 22 LTS and later) but works: every request in this run was checked.`,
    );
  }
  if (ids.has('textbook-bcrypt-token')) {
    out.push('The bcrypt textbook variant is measured for issuance only; its protected route is identical to the plain textbook one.');
  }
  out.push('Floors do no client authentication and no store lookup: they are the cost of parsing the form and signing (or verifying) with jsonwebtoken, nothing else.');
  return out;
}

function fmtMs(x) {
  return x == null ? '   n/a' : `${x.toFixed(2).padStart(6)} ms`;
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
