#!/usr/bin/env node
/**
 * Where a request's time goes, kernel included: the compiled example server
 * under load from wrk, sampled by Linux perf, two kinds of request compared
 * symbol by symbol in server CPU µs per request. Run after `npm run build`:
 *
 *   node bench/perf-profile.js protected    # GET /api/whoami against GET /health (Bearer token on both)
 *   node bench/perf-profile.js dpop         # GET /api/whoami with a DPoP-bound token and a fresh ES256 proof, against Bearer
 *   node bench/perf-profile.js dpop-ps256   # the same with an RSA key and PS256 proofs
 *   node bench/perf-profile.js pkjwt        # POST /oauth/token with a fresh private_key_jwt assertion, against client_secret_post
 *
 * bench/profile.js counts instructions under callgrind (steady, but blind to
 * the kernel and to how fast each instruction runs); this samples real time
 * on the machine as it is. One example process (node --perf-basic-prof, so
 * compiled JavaScript has names), pinned to CPU 0, wrk on CPU 1 at
 * BENCH_PERF_CONNECTIONS (32); for each kind a 4 s warm-up, then a wrk run
 * of BENCH_PERF_SECONDS (8) with perf record at 1,999 Hz over all but its
 * last second, the server's CPU time per request read from /proc over the
 * whole run. Each
 * symbol's share of the samples times that CPU time is its µs per request.
 * Printed: both kinds' rates and CPU per request, the difference split into
 * kernel, OpenSSL, compiled JavaScript and the rest, and the symbols that
 * differ most. Needs perf (Debian's linux-perf) and permission to use it.
 */
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');
const wrk = require('./lib/wrk');
const { startProcess, stopProcess, readDemoClient, procCpuUs } = require('./lib/proc');
const { dpopCaller, privateKeyJwtClient, secretTokenRequest, secretAccessToken } = require('./lib/callers');

const DIST = path.resolve(__dirname, '..', 'dist');
const SECONDS = Number(process.env.BENCH_PERF_SECONDS || 8);
const CONNECTIONS = Number(process.env.BENCH_PERF_CONNECTIONS || 32);
const TOP = Number(process.env.BENCH_PERF_TOP || 25);
const OPENSSL = /^_*(ecp_|bn_|BN_|rsaz?_|RSA_|ossl_|OSSL|EVP_|evp_|EC_|ec_|ECDSA|ecdsa|CRYPTO_|ERR_|ASN1|asn1|OPENSSL|WPACKET|do_name|do_sigver|sha\d+_block|SHA\d+)|nistz256|_mont/;

const secretRequest = (s) => secretTokenRequest(s.info);

async function bearer(s, p) {
  return { request: { path: p, headers: { authorization: `Bearer ${await secretAccessToken(s.port, s.info)}` } } };
}

/** A kind whose every request carries a fresh proof: written to a file right before each run, sent once each. */
async function dpop(s, keyType) {
  const caller = dpopCaller({ dist: DIST, tokenRequest: secretRequest, keyType });
  await caller.token(s);
  return { request: caller.request(), lineHeader: 'dpop', write: (n, file) => caller.writeProofs(n, file) };
}

/** Token requests each with a fresh client assertion (the harness signs them, ES256), written to a file before each run. */
async function pkjwt(s) {
  const client = privateKeyJwtClient({ dist: DIST, dataDir: s.dataDir, keyFile: path.join(s.work, 'pkjwt.key.json'), scope: 'orders:read' });
  await client.setup(s);
  return { request: client.request(), write: (n, file) => client.writeBodies(n, file) };
}

const PAIRS = {
  protected: { '/api/whoami': (s) => bearer(s, '/api/whoami'), '/health': (s) => bearer(s, '/health') },
  dpop: { dpop: (s) => dpop(s, 'ec'), bearer: (s) => bearer(s, '/api/whoami') },
  'dpop-ps256': { 'dpop-ps256': (s) => dpop(s, 'rsa'), bearer: (s) => bearer(s, '/api/whoami') },
  pkjwt: { pkjwt: (s) => pkjwt(s), secret: (s) => ({ request: secretRequest(s) }) },
};

/** Self share (%) of each symbol in one recording. */
function shares(file) {
  const text = execFileSync('perf', ['report', '-i', file, '--no-children', '--sort', 'sym', '-g', 'none', '--stdio'], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024, stdio: ['ignore', 'pipe', 'ignore'] });
  const out = new Map();
  for (const line of text.split('\n')) {
    const m = /^\s*([\d.]+)%\s+\[(.)\]\s+(.+)$/.exec(line);
    if (!m) continue;
    const name = `${m[2] === 'k' ? '[k] ' : ''}${m[3].replace(/\s+tid \d+/, '').trim()}`;
    out.set(name, (out.get(name) ?? 0) + Number(m[1]));
  }
  return out;
}

async function main() {
  const pairName = process.argv[2];
  const pair = PAIRS[pairName];
  if (!pair) {
    console.error(`usage: node bench/perf-profile.js ${Object.keys(PAIRS).join('|')}`);
    process.exit(2);
  }
  if (!wrk.ensureDebianTool('perf', 'linux-perf')) {
    console.error('perf is not available (Debian: apt-get install linux-perf)');
    process.exit(3);
  }
  const bin = wrk.ensureWrk();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-perf-'));
  const stdoutFile = path.join(work, 'stdout.log');
  const dataDir = path.join(work, 'data');
  const server = await startProcess('example', path.join(DIST, 'examples', 'server.js'), { env: { DATA_DIR: dataDir, LOG_LEVEL: 'info' }, stdoutFile, cpu: 0, execArgv: ['--perf-basic-prof'] });
  try {
    Object.assign(server, { work, dataDir, info: await readDemoClient(stdoutFile) });
    const kinds = {};
    for (const [name, make] of Object.entries(pair)) kinds[name] = await make(server);
    // rate: requests a second to prepare fresh proofs for (1.5 times it); the warm-up guesses, the recording uses the warm-up's
    const run = async (kind, seconds, record, rate) => {
      let bodiesFile = null;
      if (kind.write) {
        bodiesFile = path.join(work, 'bodies');
        kind.write(Math.ceil(rate * seconds * 1.5) + 100, bodiesFile);
      }
      const perf = record ? spawn('perf', ['record', '-F', '1999', '-p', String(server.pid), '-o', record, '--', 'sleep', String(seconds - 1)], { stdio: 'ignore' }) : null;
      const before = procCpuUs(server.pid);
      const m = await wrk.measure({ bin, port: server.port, request: kind.request, connections: CONNECTIONS, duration: seconds, cpu: 1, bodiesFile, lineHeader: kind.lineHeader });
      const after = procCpuUs(server.pid);
      if (perf) await new Promise((resolve) => (perf.exitCode !== null ? resolve() : perf.once('close', resolve)));
      if (record && (m.non2xx || m.errors || m.bodiesMissing)) throw new Error(`${kind.request.path}: ${m.non2xx} non-2xx, ${m.errors} errors, ${m.bodiesMissing ?? 0} without a fresh request`);
      return { rps: m.rps, cpuUs: (after - before) / (m.ok + m.non2xx) };
    };
    const results = {};
    for (const [name, kind] of Object.entries(kinds)) {
      const warm = await run(kind, 4, null, 8_000);
      const file = path.join(work, `${name.replace(/\W/g, '_')}.data`);
      results[name] = { ...(await run(kind, SECONDS, file, warm.rps)), file };
    }
    const [a, b] = Object.keys(results);
    const us = Object.fromEntries([a, b].map((n) => [n, new Map([...shares(results[n].file)].map(([k, pct]) => [k, (pct / 100) * results[n].cpuUs]))]));
    const r1 = (x) => (Math.round(x * 10) / 10).toFixed(1);
    for (const n of [a, b]) console.log(`${n}: ${Math.round(results[n].rps).toLocaleString('en-US')} req/s, ${r1(results[n].cpuUs)} µs server CPU per request`);
    const rows = [...new Set([...us[a].keys(), ...us[b].keys()])].map((k) => ({ k, a: us[a].get(k) ?? 0, b: us[b].get(k) ?? 0 })).map((r) => ({ ...r, d: r.a - r.b }));
    const group = (test) => rows.filter((r) => test(r.k)).reduce((sum, r) => sum + r.d, 0);
    const kernel = group((k) => k.startsWith('[k] '));
    const openssl = group((k) => OPENSSL.test(k));
    const js = group((k) => k.startsWith('JS:') || k.startsWith('RegExp:'));
    const total = results[a].cpuUs - results[b].cpuUs;
    console.log(`difference ${r1(total)} µs per request: kernel ${r1(kernel)}, OpenSSL ${r1(openssl)}, compiled JavaScript ${r1(js)}, the rest (V8, Node, libc) ${r1(total - kernel - openssl - js)}`);
    console.log(`${'µs diff'.padStart(8)} ${a.slice(0, 10).padStart(10)} ${b.slice(0, 10).padStart(10)}  symbol`);
    for (const r of rows.sort((x, y) => Math.abs(y.d) - Math.abs(x.d)).slice(0, TOP)) {
      console.log(`${r1(r.d).padStart(8)} ${r1(r.a).padStart(10)} ${r1(r.b).padStart(10)}  ${r.k.slice(0, 110)}`);
    }
    console.log(`recordings: ${work}`);
  } finally {
    await stopProcess(server);
  }
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
