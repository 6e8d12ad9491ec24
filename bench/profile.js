#!/usr/bin/env node
/**
 * Where a request's instructions go: the compiled example server under
 * valgrind's callgrind, two kinds of request compared function by function.
 * Run after `npm run build`:
 *
 *   node bench/profile.js protected   # GET /api/whoami against GET /health (Bearer token on both)
 *   node bench/profile.js noauth      # the same two routes, example app with a no-op in place of requireBearer()
 *   node bench/profile.js dpop        # GET /api/whoami with a DPoP-bound token and a fresh proof, against Bearer
 *   node bench/profile.js pkjwt       # POST /oauth/token with a fresh private_key_jwt assertion, against client_secret_post
 *
 * One fresh process per run: both kinds warmed up (BENCH_PROFILE_WARMUP
 * requests each, twice, in turn), then for each kind instrumentation on,
 * counters zeroed, BENCH_PROFILE_REQUESTS requests on 4 kept-alive
 * connections, a dump, instrumentation off. Printed: instructions per request
 * of each, and the functions whose self count differs most per request
 * (callgrind_annotate). The server runs with node --perf-basic-prof: V8
 * writes where it put each compiled function to /tmp/perf-<pid>.map, and the
 * bare addresses callgrind gives compiled JavaScript are named from it
 * ("JS:*next router/index.js:189"); V8's builtins, OpenSSL, SQLite and libc
 * have their own names. Counts, not time: system calls and the kernel's share
 * are not in them. The dumps stay in the printed folder.
 */
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { request, pool } = require('./lib/http');
const { ensureDebianTool } = require('./lib/wrk');
const { startUnderCallgrind, HOST } = require('./lib/callgrind');
const { privateKeyJwtClient, dpopCaller, secretTokenRequest, secretAccessToken } = require('./lib/callers');

const REPO_ROOT = path.resolve(__dirname, '..');
const DIST = path.join(REPO_ROOT, 'dist');
const REQUESTS = Number(process.env.BENCH_PROFILE_REQUESTS || 3000);
const WARMUP = Number(process.env.BENCH_PROFILE_WARMUP || 6000);
const TOP = Number(process.env.BENCH_PROFILE_TOP || 25);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Each pair: which server, and how to make its two kinds of request once the server runs. */
const PAIRS = {
  protected: { script: 'examples/server.js', kinds: (s) => bearerKinds(s, '/api/whoami', '/health') },
  noauth: { script: path.join(__dirname, 'servers', 'example-without-auth.js'), kinds: (s) => bearerKinds(s, '/api/whoami', '/health') },
  dpop: { script: 'examples/server.js', kinds: dpopKinds },
  pkjwt: { script: 'examples/server.js', kinds: pkjwtKinds },
};

const secretRequest = (s) => secretTokenRequest(s.client);
const token = (s) => secretAccessToken(s.port, s.client);

async function bearerKinds(s, a, b) {
  const headers = { authorization: `Bearer ${await token(s)}` };
  return { [a]: () => ({ path: a, headers }), [b]: () => ({ path: b, headers }) };
}

async function dpopKinds(s) {
  const caller = dpopCaller({ dist: DIST, tokenRequest: secretRequest });
  await caller.token(s);
  const bearer = { authorization: `Bearer ${await token(s)}` };
  return { dpop: () => caller.request(), bearer: () => ({ path: '/api/whoami', headers: bearer }) };
}

async function pkjwtKinds(s) {
  const client = privateKeyJwtClient({ dist: DIST, dataDir: s.dataDir, keyFile: path.join(s.work, 'pkjwt.key.json'), scope: 'orders:read' });
  await client.setup(s);
  return { pkjwt: () => client.request(), secret: () => secretRequest(s) };
}

async function startServer(script, work) {
  const vgdb = path.join(work, 'vgdb');
  const server = await startUnderCallgrind({
    script: path.resolve(DIST, script),
    work,
    vgdbPrefix: vgdb,
    outFile: path.join(work, 'callgrind.out'),
    env: { EXAMPLE_DIST: path.join(DIST, 'examples'), NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --perf-basic-prof`.trim() },
  });
  const control = (...args) =>
    execFileSync('callgrind_control', [`--vgdb-prefix=${vgdb}`, ...args, String(server.pid)], { encoding: 'utf8', env: { ...process.env, HOST }, stdio: ['ignore', 'pipe', 'pipe'] });
  return { ...server, work, control };
}

function send(port, make, count) {
  return pool(count, 4, async () => {
    const req = make();
    const res = await request(port, req);
    if (res.status !== 200) throw new Error(`${req.method || 'GET'} ${req.path}: HTTP ${res.status} ${res.text.slice(0, 200)}`);
  });
}

/**
 * Names for compiled JavaScript: V8's perf map of the process (start, size,
 * name per line, hex), sorted for lookup by address. Empty when there is none.
 */
function perfMap(pid) {
  let text;
  try {
    text = fs.readFileSync(`/tmp/perf-${pid}.map`, 'utf8');
  } catch {
    return [];
  }
  const entries = [];
  for (const line of text.split('\n')) {
    const m = /^([0-9a-f]+) ([0-9a-f]+) (.+)$/.exec(line);
    if (m) entries.push({ start: parseInt(m[1], 16), end: parseInt(m[1], 16) + parseInt(m[2], 16), name: m[3] });
  }
  return entries.sort((x, y) => x.start - y.start);
}

/** The map's name for `address`, or undefined (the last entry starting at or before it, if it holds it). */
function nameAt(map, address) {
  let lo = 0;
  let hi = map.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (map[mid].start <= address) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found >= 0 && address < map[found].end ? map[found].name : undefined;
}

/** Self instructions per function of one dump, from callgrind_annotate; compiled JavaScript named from `map`, its copies summed. */
function selfCounts(file, map) {
  const text = execFileSync('callgrind_annotate', ['--threshold=100', file], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const counts = new Map();
  for (const line of text.split('\n')) {
    const m = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.+)$/.exec(line);
    if (!m) continue;
    let name = m[2].trim();
    const bare = /^\?\?\?:0x([0-9a-f]+)/.exec(name);
    const js = bare && nameAt(map, parseInt(bare[1], 16));
    if (js) name = js.replace(REPO_ROOT + path.sep, '');
    counts.set(name, (counts.get(name) ?? 0) + Number(m[1].replace(/,/g, '')));
  }
  return counts;
}

async function main() {
  const pair = PAIRS[process.argv[2]];
  if (!pair) {
    console.error(`usage: node bench/profile.js ${Object.keys(PAIRS).join('|')}`);
    process.exit(2);
  }
  if (!ensureDebianTool('valgrind', 'valgrind') || !ensureDebianTool('callgrind_annotate', 'valgrind')) {
    console.error('valgrind (callgrind) is not available');
    process.exit(3);
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-profile-'));
  const server = await startServer(pair.script, work);
  try {
    const kinds = await pair.kinds(server);
    const names = Object.keys(kinds);
    for (let i = 0; i < 2; i++) for (const name of names) await send(server.port, kinds[name], WARMUP);
    const dumps = {};
    for (const [i, name] of names.entries()) {
      server.control('-i', 'on');
      server.control('-z');
      await send(server.port, kinds[name], REQUESTS);
      server.control('-d', `kind-${i}`);
      server.control('-i', 'off');
      dumps[name] = fs.readdirSync(work).filter((f) => f.startsWith('callgrind.out.')).sort((x, y) => Number(x.split('.').pop()) - Number(y.split('.').pop())).pop();
    }
    const map = perfMap(server.pid);
    const [a, b] = names.map((n) => selfCounts(path.join(work, dumps[n]), map));
    const per = (x) => Math.round(x / REQUESTS);
    const total = (c) => c.get('PROGRAM TOTALS') ?? 0;
    console.log(`${names[0]}: ${per(total(a)).toLocaleString('en-US')} instructions per request; ${names[1]}: ${per(total(b)).toLocaleString('en-US')} (${REQUESTS} requests each, one process)`);
    const rows = [...new Set([...a.keys(), ...b.keys()])]
      .filter((k) => k !== 'PROGRAM TOTALS')
      .map((k) => ({ k, d: per((a.get(k) ?? 0) - (b.get(k) ?? 0)), a: per(a.get(k) ?? 0), b: per(b.get(k) ?? 0) }));
    const compiled = rows.filter((r) => r.k.startsWith('???:0x')).reduce((sum, r) => sum + r.d, 0);
    const named = rows.filter((r) => /^(JS|RegExp):/.test(r.k)).reduce((sum, r) => sum + r.d, 0);
    console.log(
      `difference ${per(total(a) - total(b)).toLocaleString('en-US')}, of which compiled JavaScript ${named.toLocaleString('en-US')} (named from V8's perf map) and ${compiled.toLocaleString('en-US')} at addresses it does not name; the functions that differ most:`,
    );
    console.log(`${'difference'.padStart(10)} ${names[0].padStart(10)} ${names[1].padStart(10)}  function`);
    for (const r of rows.filter((x) => !x.k.startsWith('???:0x')).sort((x, y) => Math.abs(y.d) - Math.abs(x.d)).slice(0, TOP)) {
      console.log(`${String(r.d).padStart(10)} ${String(r.a).padStart(10)} ${String(r.b).padStart(10)}  ${r.k.replace(/^\?\?\?:/, '').slice(0, 110)}`);
    }
    console.log(`dumps: ${work}`);
  } finally {
    fs.rmSync(`/tmp/perf-${server.pid}.map`, { force: true });
    server.child.kill('SIGTERM');
    await sleep(2000);
    if (server.child.exitCode === null) server.child.kill('SIGKILL');
  }
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
