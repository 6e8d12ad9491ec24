#!/usr/bin/env node
/**
 * WORKERS=N METRICS=1 under a flood of scrapes: how many GET /metrics the
 * group answers, and what that costs every other caller (the cluster's
 * primary hands each new connection to a worker, and it also sums the
 * workers' registries for a scrape).
 *
 *   npm run build && node bench/cluster-scrape.js
 *   SERVER_JS=/elsewhere/dist/examples/server.js WORKERS=2 SCRAPERS=16 HEALTH=300 PORT=42100 node bench/cluster-scrape.js
 *
 * Starts the compiled example (`dist/examples/server.js`, or SERVER_JS) with
 * WORKERS and METRICS=1, embedded store in a temporary DATA_DIR (under
 * TMPDIR), and waits for every worker to listen. Each of ROUNDS rounds then:
 *
 * - idle: HEALTH `GET /health`, one after the other, each on a new
 *   connection (so each goes through the primary's accept and hand-over);
 * - loaded: the same, while SCRAPERS loops send `GET /metrics` back to back
 *   (keep-alive, one connection per loop, as Prometheus scrapes; SCRAPE_CONN=new
 *   for a new connection per scrape).
 *
 * Prints one JSON line per phase: /health p50, p90, p99 and max in ms;
 * scrapes answered per second (and how many were not 200) during the
 * loaded phase; the primary's CPU time in ms per second of the phase
 * (/proc/<pid>/stat). Bounded: each phase stops after HEALTH requests or
 * 30 s, the server gets SIGTERM at the end and SIGKILL 10 s later.
 */
'use strict';
const { spawnExample } = require('./lib/proc');
const http = require('node:http');
const { mkdtempSync, readFileSync, rmSync } = require('node:fs');
const { tmpdir } = require('node:os');
const path = require('node:path');

const SERVER_JS = process.env.SERVER_JS || path.join(__dirname, '..', 'dist', 'examples', 'server.js');
const PORT = Number(process.env.PORT || 42100);
const WORKERS = Number(process.env.WORKERS || 2);
const SCRAPERS = Number(process.env.SCRAPERS || 16);
const HEALTH = Number(process.env.HEALTH || 300);
const ROUNDS = Number(process.env.ROUNDS || 2);
const SCRAPE_CONN = process.env.SCRAPE_CONN || 'keepalive';
const PHASE_MAX_MS = 30_000;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function startServer(dataDir) {
  return spawnExample({ PORT: String(PORT), HOST: '127.0.0.1', ISSUER: `http://localhost:${PORT}`, DATA_DIR: dataDir, DEMO_CLIENT: '0', WORKERS: String(WORKERS), METRICS: '1', LOG_LEVEL: 'info' }, { script: SERVER_JS, listeners: WORKERS, timeoutMs: 30_000 });
}

/** One GET; resolves with its status and how long it took (ms). */
function get(urlPath, agent) {
  const started = process.hrtime.bigint();
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: PORT, path: urlPath, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, ms: Number(process.hrtime.bigint() - started) / 1e6 }));
      res.on('error', () => resolve({ status: 0, ms: Number(process.hrtime.bigint() - started) / 1e6 }));
    });
    req.setTimeout(15_000, () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve({ status: 0, ms: Number(process.hrtime.bigint() - started) / 1e6 }));
    req.end();
  });
}

/** utime + stime of `pid`, in ms. */
function cpuMs(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const round1 = (x) => Math.round(x * 10) / 10;

async function phase(server, name, scrapers) {
  let running = true;
  let scrapes = 0;
  let scrapeErrors = 0;
  const agent = SCRAPE_CONN === 'new' ? false : new http.Agent({ keepAlive: true, maxSockets: scrapers });
  const loops = Array.from({ length: scrapers }, async () => {
    while (running) {
      const r = await get('/metrics', agent);
      if (r.status === 200) scrapes += 1;
      else {
        scrapeErrors += 1;
        await sleep(5);
      }
    }
  });
  if (scrapers > 0) await sleep(500);
  const scrapesBefore = scrapes;
  const cpuBefore = cpuMs(server.child.pid);
  const started = Date.now();
  const ms = [];
  let healthErrors = 0;
  while (ms.length + healthErrors < HEALTH && Date.now() - started < PHASE_MAX_MS) {
    const r = await get('/health', false);
    if (r.status === 200) ms.push(r.ms);
    else healthErrors += 1;
  }
  const elapsed = (Date.now() - started) / 1000;
  const cpu = cpuMs(server.child.pid) - cpuBefore;
  const scraped = scrapes - scrapesBefore;
  running = false;
  await Promise.all(loops);
  if (agent) agent.destroy();
  ms.sort((a, b) => a - b);
  const line = {
    phase: name,
    scrapers,
    health: ms.length,
    health_errors: healthErrors,
    health_ms: { p50: round1(pct(ms, 50)), p90: round1(pct(ms, 90)), p99: round1(pct(ms, 99)), max: round1(ms.at(-1)) },
    scrapes_per_s: Math.round(scraped / elapsed),
    scrape_errors: scrapeErrors,
    primary_cpu_ms_per_s: Math.round(cpu / elapsed),
    seconds: round1(elapsed),
  };
  console.log(JSON.stringify(line));
  return line;
}

async function main() {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'cluster-scrape-'));
  const server = startServer(dataDir);
  try {
    await server.listening;
    // warm-up: both workers have answered a collection, the JIT has seen both paths
    for (let i = 0; i < 50; i++) await get('/health', false);
    for (let i = 0; i < 10; i++) await get('/metrics', false);
    for (let r = 0; r < ROUNDS; r++) {
      await phase(server, 'idle', 0);
      await phase(server, 'loaded', SCRAPERS);
    }
  } finally {
    server.child.kill('SIGTERM');
    const killer = setTimeout(() => server.child.kill('SIGKILL'), 10_000);
    await server.exited;
    clearTimeout(killer);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
