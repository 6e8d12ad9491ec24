'use strict';
// The calling side: what a cached client.fetch() costs over plain fetch, and
// whether the heap stays flat over many cache hits.
//
//   npm run build && node --expose-gc bench/client.js
//
// A node:http server in a child process answers POST /token (one token,
// expires_in 3600) and GET /api (constant JSON). Sequential calls in pairs,
// plain fetch with the same Authorization header and client.fetch(), which
// goes first alternating; the median of the per-pair differences, in µs per
// call (and the same against a plain fetch without the header). Then the heap
// after a full GC before and after 1,000,000 cached getToken() calls and
// BENCH_CLIENT_FETCHES (100,000) cached client.fetch() calls.
//
// Environment: BENCH_CLIENT_PAIRS=30000,
// BENCH_CLIENT_HITS=1000000, BENCH_CLIENT_FETCHES=100000,
// BENCH_CLIENT_MODULE (default ../dist/lib/client/index.js).

const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

if (typeof global.gc !== 'function') {
  const r = spawnSync(process.execPath, ['--expose-gc', __filename, ...process.argv.slice(2)], { stdio: 'inherit' });
  process.exit(r.status ?? 1);
}

const num = (name, dflt) => (process.env[name] ? Number(process.env[name]) : dflt);
const PAIRS = num('BENCH_CLIENT_PAIRS', 30000);
const HITS = num('BENCH_CLIENT_HITS', 1_000_000);
const FETCHES = num('BENCH_CLIENT_FETCHES', 100_000);
const MODULE = path.resolve(process.env.BENCH_CLIENT_MODULE || path.join(__dirname, '..', 'dist', 'lib', 'client', 'index.js'));
const MiB = 1024 * 1024;

const SERVER = `
  const http = require('node:http');
  let tokens = 0;
  const body = JSON.stringify({ orders: [] });
  http.createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/token') {
      req.resume();
      req.on('end', () => { tokens++; res.writeHead(200, { 'content-type': 'application/json' }); res.end(JSON.stringify({ access_token: 'tok-' + tokens, token_type: 'Bearer', expires_in: 3600 })); });
      return;
    }
    if (req.url === '/tokens') { res.end(String(tokens)); return; }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  }).listen(0, '127.0.0.1', function () { process.stdout.write(String(this.address().port) + '\\n'); });
`;

async function startServer() {
  const child = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((resolve, reject) => {
    child.stdout.once('data', (d) => resolve(Number(String(d).trim())));
    child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
  });
  return { child, url: `http://127.0.0.1:${port}` };
}

/** µs of one call, the response body read. */
async function timeOne(call) {
  const start = process.hrtime.bigint();
  const res = await call();
  await res.arrayBuffer();
  return Number(process.hrtime.bigint() - start) / 1000;
}

/**
 * `n` pairs of calls to `a` (baseline) and `b`, alternating which goes
 * first; the median of the per-pair differences b − a, the medians of a
 * and b, and the range of the difference's median over 10 equal blocks.
 */
async function interleaved(n, a, b) {
  const diffs = new Array(n);
  const as = new Array(n);
  const bs = new Array(n);
  for (let i = 0; i < n; i++) {
    let ta;
    let tb;
    if (i % 2 === 0) {
      ta = await timeOne(a);
      tb = await timeOne(b);
    } else {
      tb = await timeOne(b);
      ta = await timeOne(a);
    }
    as[i] = ta;
    bs[i] = tb;
    diffs[i] = tb - ta;
  }
  const blocks = [];
  const size = Math.floor(n / 10);
  for (let k = 0; k < 10; k++) blocks.push(median(diffs.slice(k * size, (k + 1) * size)));
  return { differenceUs: median(diffs), baselineUs: median(as), clientUs: median(bs), blockMediansUs: [Math.min(...blocks), Math.max(...blocks)] };
}

async function timeCalls(n, call) {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const res = await call();
    await res.arrayBuffer();
  }
  return Number(process.hrtime.bigint() - start) / 1000 / n; // µs per call
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

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
    // warm-up: JIT, keep-alive connections, the token
    await timeCalls(2000, () => fetch(api));
    await timeCalls(2000, () => client.fetch(api));

    const token = (await client.getToken()).accessToken;
    const withHeader = { headers: { authorization: `Bearer ${token}` } };
    await timeCalls(2000, () => fetch(api, withHeader));
    // Interleaved per call (A B, then B A, ...): each pair runs within
    // microseconds of each other, so drift of the machine (other processes,
    // GC, the server's own pace) hits both alike; the statistic is the median
    // of the per-pair differences, with the spread of block medians as its
    // uncertainty.
    const sameRequest = await interleaved(PAIRS, () => fetch(api, withHeader), () => client.fetch(api));
    const noHeader = await interleaved(PAIRS, () => fetch(api), () => client.fetch(api));

    // the wrapper alone: a fetch that answers at once, no network
    const stubResponse = () => new Response(null, { status: 204 });
    const stubbed = createTokenClient({
      tokenEndpoint: `${server.url}/token`,
      clientId: 'bench',
      clientSecret: 'bench-secret',
      fetch: (input, init) => (String(input).endsWith('/token') ? fetch(input, init) : Promise.resolve(stubResponse())),
    });
    await stubbed.fetch(api);
    const stubOnly = async () => stubResponse();
    await timeCalls(20000, stubOnly);
    await timeCalls(20000, () => stubbed.fetch(api));
    const stubPlain = median([await timeCalls(50000, stubOnly), await timeCalls(50000, stubOnly), await timeCalls(50000, stubOnly)]);
    const stubWrapped = median([await timeCalls(50000, () => stubbed.fetch(api)), await timeCalls(50000, () => stubbed.fetch(api)), await timeCalls(50000, () => stubbed.fetch(api))]);
    await stubbed.close();

    // heap over cache hits
    await client.getToken();
    const heapBefore = heapMiB();
    for (let i = 0; i < HITS; i++) await client.getToken();
    const heapAfterHits = heapMiB();
    for (let i = 0; i < FETCHES; i++) {
      const res = await client.fetch(api);
      await res.arrayBuffer();
    }
    const heapAfterFetches = heapMiB();
    const tokens = Number(await (await fetch(`${server.url}/tokens`)).text());

    const result = {
      node: process.version,
      pairs: PAIRS,
      // the verdict: client.fetch(url) against the same request made by hand (plain fetch with the same Authorization header)
      plainFetchWithHeaderUs: round(sameRequest.baselineUs),
      clientFetchUs: round(sameRequest.clientUs),
      differenceUs: round(sameRequest.differenceUs),
      differenceBlockRangeUs: sameRequest.blockMediansUs.map(round),
      // for reference: against a plain fetch without any Authorization header (the header's own cost in undici included)
      plainFetchUs: round(noHeader.baselineUs),
      differenceNoHeaderUs: round(noHeader.differenceUs),
      differenceNoHeaderBlockRangeUs: noHeader.blockMediansUs.map(round),
      wrapperOnlyUs: round(stubWrapped - stubPlain),
      tokenRequests: tokens,
      heap: {
        beforeMiB: round(heapBefore),
        afterGetTokenHitsMiB: round(heapAfterHits),
        getTokenHits: HITS,
        afterFetchHitsMiB: round(heapAfterFetches),
        fetchHits: FETCHES,
      },
    };
    console.log(`client.fetch() vs plain fetch, sequential calls interleaved in ${PAIRS.toLocaleString('en')} pairs, local node:http server (µs per call, medians)`);
    console.log(`  plain fetch, same Authorization header  ${result.plainFetchWithHeaderUs}`);
    console.log(`  client.fetch()                          ${result.clientFetchUs}`);
    console.log(`  difference (median of pairs)            ${result.differenceUs} (block medians ${result.differenceBlockRangeUs.join(' to ')})   target ≤ 5`);
    console.log(`  plain fetch without the header          ${result.plainFetchUs}; difference ${result.differenceNoHeaderUs} (block medians ${result.differenceNoHeaderBlockRangeUs.join(' to ')}): the header itself included`);
    console.log(`  wrapper alone (stub fetch, no network): ${result.wrapperOnlyUs} µs`);
    console.log(`heap after full GC: ${result.heap.beforeMiB} MiB before, ${result.heap.afterGetTokenHitsMiB} MiB after ${HITS.toLocaleString('en')} getToken() hits, ${result.heap.afterFetchHitsMiB} MiB after ${FETCHES.toLocaleString('en')} client.fetch() hits`);
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
