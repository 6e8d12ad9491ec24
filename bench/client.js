'use strict';
// The calling side: what a cached client.fetch() costs over plain fetch, and
// whether the heap stays flat over many cache hits.
//
//   npm run build && node bench/client.js      (re-runs itself with --expose-gc)
//
// A node:http server in a child process answers POST /token (one token,
// expires_in 3600) and GET /api (constant JSON). Compared: plain global
// fetch(api, { headers: { authorization: 'Bearer <token>' } }) (the same
// header, so header size is not what is measured) and client.fetch(api) with
// the token cached. Sequential calls, interleaved per call (ABAB, the order
// flipping every pair), each call timed in wall clock (hrtime) and in this
// process's CPU time (process.cpuUsage(), user + system: the client side
// only, the server is another process). Each call includes reading the body.
// Figures: the median of the per-pair differences (client − plain), its
// interquartile range, and a distribution-free 95 % confidence interval of
// that median (binomial order statistics). The verdict (differenceUs, what
// bench/run.js compares to the 5 µs budget) is the upper 95 % bound of the
// median per-pair wall-clock difference. The pairs are also split into
// rounds, and the spread of the per-round medians is reported.
// Then the wrapper alone (a fetch that answers at once, no network), and the
// heap after a full GC before and after 1,000,000 cached getToken() calls,
// BENCH_CLIENT_FETCHES (100,000) plain fetch calls (the control: undici's own
// growth) and as many cached client.fetch() calls.
//
// Environment: BENCH_CLIENT_PAIRS=60000, BENCH_CLIENT_ROUNDS=6 (pairs split
// into rounds), BENCH_CLIENT_WARMUP=20000 pairs, BENCH_CLIENT_HITS=1000000,
// BENCH_CLIENT_FETCHES=100000, BENCH_CLIENT_MODULE (default
// ../dist/lib/client/index.js).

const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

if (typeof global.gc !== 'function') {
  const r = spawnSync(process.execPath, ['--expose-gc', __filename, ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}

const num = (name, dflt) => (process.env[name] ? Number(process.env[name]) : dflt);
const PAIRS = num('BENCH_CLIENT_PAIRS', 60_000);
const ROUNDS = num('BENCH_CLIENT_ROUNDS', 6);
const WARMUP = num('BENCH_CLIENT_WARMUP', 20_000);
const HITS = num('BENCH_CLIENT_HITS', 1_000_000);
const FETCHES = num('BENCH_CLIENT_FETCHES', 100_000);
const MODULE = path.resolve(process.env.BENCH_CLIENT_MODULE || path.join(__dirname, '..', 'dist', 'lib', 'client', 'index.js'));
const MiB = 1024 * 1024;

const SERVER = `
  const http = require('node:http');
  let tokens = 0;
  const body = JSON.stringify({ orders: [] });
  const server = http.createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/token') {
      req.resume();
      req.on('end', () => { tokens++; res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ access_token: 'tok-' + tokens, token_type: 'Bearer', expires_in: 3600 })); });
      return;
    }
    if (req.url === '/tokens') { res.end(String(tokens)); return; }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  });
  // no idle timeout: a keep-alive connection idle through the getToken() loop
  // must not be closed under the next request (undici: "other side closed")
  server.keepAliveTimeout = 0;
  server.listen(0, '127.0.0.1', function () { process.stdout.write(String(this.address().port) + '\\n'); });
`;

async function startServer() {
  const child = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    child.stdout.once('data', (d) => resolve(Number(String(d).trim())));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
  return { child, url: `http://127.0.0.1:${port}` };
}

const cpuNow = () => {
  const u = process.cpuUsage();
  return u.user + u.system; // µs
};

/**
 * `pairs` pairs of calls, one of `a` and one of `b` each, the order flipping
 * every pair; each call timed in wall clock and process CPU (µs). Returns four
 * Float64Arrays: wall and CPU per call of `a` and of `b`, in pair order.
 */
async function interleaved(pairs, a, b) {
  const wallA = new Float64Array(pairs);
  const wallB = new Float64Array(pairs);
  const cpuA = new Float64Array(pairs);
  const cpuB = new Float64Array(pairs);
  const one = async (call, wall, cpu, i) => {
    const c0 = cpuNow();
    const t0 = process.hrtime.bigint();
    const res = await call();
    await res.arrayBuffer();
    const t1 = process.hrtime.bigint();
    const c1 = cpuNow();
    wall[i] = Number(t1 - t0) / 1000;
    cpu[i] = c1 - c0;
  };
  for (let i = 0; i < pairs; i++) {
    if (i % 2 === 0) {
      await one(a, wallA, cpuA, i);
      await one(b, wallB, cpuB, i);
    } else {
      await one(b, wallB, cpuB, i);
      await one(a, wallA, cpuA, i);
    }
  }
  return { wallA, wallB, cpuA, cpuB };
}

const sorted = (xs) => Float64Array.from(xs).sort();
/** The q-quantile of a sorted array (linear interpolation). */
function quantile(s, q) {
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.min(lo + 1, s.length - 1);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}
const median = (xs) => quantile(sorted(xs), 0.5);

/**
 * Median, interquartile range and a distribution-free 95 % confidence interval
 * of the median (order statistics n/2 ± 1.96·√n/2) of the differences b − a;
 * also their interquartile mean (for CPU time, whose per-call readings are
 * whole microseconds, the finer figure).
 */
function pairedStats(a, b) {
  const n = a.length;
  const d = new Float64Array(n);
  for (let i = 0; i < n; i++) d[i] = b[i] - a[i];
  const s = sorted(d);
  const k = Math.ceil(1.96 * Math.sqrt(n) / 2);
  const lo = Math.max(0, Math.floor(n / 2) - k);
  const hi = Math.min(n - 1, Math.ceil(n / 2) + k);
  // interquartile mean: robust to the odd GC pause, finer than the median when readings are whole µs
  const q1 = Math.floor(n / 4);
  const q3 = Math.ceil((3 * n) / 4);
  let sum = 0;
  for (let i = q1; i < q3; i++) sum += s[i];
  return {
    iqMean: round(sum / (q3 - q1)),
    n,
    medianA: round(median(a)),
    medianB: round(median(b)),
    median: round(quantile(s, 0.5)),
    iqr: [round(quantile(s, 0.25)), round(quantile(s, 0.75))],
    ci95: [round(s[lo]), round(s[hi])],
    d,
  };
}

/** The median per-pair difference of each round (the pairs cut into `rounds` consecutive runs). */
function perRound(d, rounds) {
  const size = Math.floor(d.length / rounds);
  const out = [];
  for (let r = 0; r < rounds; r++) out.push(round(median(d.subarray(r * size, (r + 1) * size))));
  return out;
}

function heapMiB() {
  global.gc();
  global.gc();
  return process.memoryUsage().heapUsed / MiB;
}

async function main() {
  const { createTokenClient } = require(MODULE);
  const server = await startServer();
  const api = `${server.url}/api`;
  const client = createTokenClient({ tokenEndpoint: `${server.url}/token`, clientId: 'bench', clientSecret: 'bench-secret' });
  try {
    const token = (await client.getToken()).accessToken;
    // plain fetch sends the very header client.fetch() sends (same name, same length)
    const plain = () => fetch(api, { headers: { authorization: `Bearer ${token}` } });
    const wrapped = () => client.fetch(api);

    // warm-up, both paths equally and interleaved: JIT, keep-alive connections
    await interleaved(WARMUP, plain, wrapped);
    global.gc();
    const net = await interleaved(PAIRS, plain, wrapped);
    const wall = pairedStats(net.wallA, net.wallB);
    const cpu = pairedStats(net.cpuA, net.cpuB);
    const wallRounds = perRound(wall.d, ROUNDS);
    const cpuRounds = perRound(cpu.d, ROUNDS);

    // the wrapper alone: a fetch that answers at once, no network
    const stubResponse = () => new Response(null, { status: 204 });
    const stubbed = createTokenClient({
      tokenEndpoint: `${server.url}/token`,
      clientId: 'bench',
      clientSecret: 'bench-secret',
      fetch: (input, init) => (String(input).endsWith('/token') ? fetch(input, init) : Promise.resolve(stubResponse())),
    });
    await stubbed.getToken();
    const stubPlain = async () => stubResponse();
    const stubWrapped = () => stubbed.fetch(api);
    await interleaved(WARMUP, stubPlain, stubWrapped);
    const stub = await interleaved(PAIRS, stubPlain, stubWrapped);
    const stubWall = pairedStats(stub.wallA, stub.wallB);
    await stubbed.close();

    // heap over cache hits
    await client.getToken();
    const heapBefore = heapMiB();
    for (let i = 0; i < HITS; i++) await client.getToken();
    const heapAfterHits = heapMiB();
    // control: as many plain fetch calls first, so that undici's own growth is not read as the client's
    for (let i = 0; i < FETCHES; i++) {
      const res = await plain();
      await res.arrayBuffer();
    }
    const heapAfterPlain = heapMiB();
    for (let i = 0; i < FETCHES; i++) {
      const res = await client.fetch(api);
      await res.arrayBuffer();
    }
    const heapAfterFetches = heapMiB();
    const tokens = Number(await (await fetch(`${server.url}/tokens`)).text());

    const result = {
      node: process.version,
      pairs: PAIRS,
      rounds: ROUNDS,
      method: 'per-call interleaved pairs (ABAB, order flipped each pair); plain fetch sends the same Authorization header',
      verdictStatistic: 'upper 95 % confidence bound of the median per-pair wall-clock difference (client.fetch() − plain fetch)',
      differenceUs: wall.ci95[1],
      plainFetchUs: wall.medianA,
      clientFetchUs: wall.medianB,
      wall: { medianDifferenceUs: wall.median, interquartileMeanDifferenceUs: wall.iqMean, iqrUs: wall.iqr, ci95Us: wall.ci95, perRoundMedianDifferenceUs: wallRounds },
      cpu: { plainFetchUs: cpu.medianA, clientFetchUs: cpu.medianB, interquartileMeanDifferenceUs: cpu.iqMean, medianDifferenceUs: cpu.median, iqrUs: cpu.iqr, ci95Us: cpu.ci95, perRoundMedianDifferenceUs: cpuRounds },
      differenceMinMaxUs: [Math.min(...wallRounds), Math.max(...wallRounds)],
      wrapperOnlyUs: stubWall.median,
      wrapperOnly: { medianDifferenceUs: stubWall.median, iqrUs: stubWall.iqr, ci95Us: stubWall.ci95 },
      tokenRequests: tokens,
      heap: {
        beforeMiB: round(heapBefore),
        afterGetTokenHitsMiB: round(heapAfterHits),
        getTokenHits: HITS,
        afterPlainFetchesMiB: round(heapAfterPlain),
        afterFetchHitsMiB: round(heapAfterFetches),
        fetchHits: FETCHES,
      },
    };
    const range = (xs) => `${xs[0]} to ${xs[1]}`;
    console.log(`client.fetch() vs plain fetch with the same Authorization header, local node:http server, ${PAIRS.toLocaleString('en')} interleaved pairs (µs per call)`);
    console.log(`  wall  plain ${wall.medianA}  client ${wall.medianB}  per-pair difference: median ${wall.median}, IQR ${range(wall.iqr)}, 95 % CI ${range(wall.ci95)}, per-round medians ${wallRounds.join(' ')}`);
    console.log(`  CPU   plain ${cpu.medianA}  client ${cpu.medianB}  per-pair difference: interquartile mean ${cpu.iqMean}, median ${cpu.median}, IQR ${range(cpu.iqr)}, 95 % CI ${range(cpu.ci95)}, per-round medians ${cpuRounds.join(' ')}`);
    console.log(`  verdict (upper 95 % bound of the median per-pair wall-clock difference): ${result.differenceUs} µs   target ≤ 5   ${result.differenceUs <= 5 ? 'met' : 'NOT met'}`);
    console.log(`  wrapper alone (stub fetch, no network): median ${stubWall.median} µs, IQR ${range(stubWall.iqr)}, 95 % CI ${range(stubWall.ci95)}`);
    console.log(`heap after full GC: ${result.heap.beforeMiB} MiB before, ${result.heap.afterGetTokenHitsMiB} MiB after ${HITS.toLocaleString('en')} getToken() hits, ${result.heap.afterPlainFetchesMiB} MiB after ${FETCHES.toLocaleString('en')} plain fetch calls (control), ${result.heap.afterFetchHitsMiB} MiB after ${FETCHES.toLocaleString('en')} client.fetch() hits`);
    console.log(`token requests seen by the server: ${tokens}`);
    const out = path.join(__dirname, 'results', 'client.json');
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
    console.log(`wrote ${path.relative(path.join(__dirname, '..'), out)}`);
  } finally {
    await client.close();
    server.child.kill();
  }
}

function round(x) {
  return Math.round(x * 100) / 100;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
