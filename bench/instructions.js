#!/usr/bin/env node
/**
 * Instructions per request of the example server, counted by valgrind's
 * callgrind: the same build, configuration and audit log as the timed runs,
 * but a count that does not move with the machine's noise (the timed
 * figures of one process drift by ±15 % between runs here; these by well
 * under 1 %). Run after `npm run build`:
 *
 *   node bench/instructions.js [--json]
 *
 * The example starts under callgrind with instrumentation off (valgrind
 * still runs it, several times slower). Each count switches it on, reads the
 * totals of every thread (callgrind_control -e), sends BENCH_INSN_REQUESTS
 * requests on 4 kept-alive connections, reads the totals again: the
 * difference over the requests. GET /health and GET /api/whoami take turns
 * for BENCH_INSN_ROUNDS rounds; then 10,000 denylisted jtis and 1,000 client
 * token generations are written to the example's store while it runs, as
 * for the timed revocation phases, and the rounds run again. Figures:
 * instructions per request of each route, before and after loading, and what
 * the entries add to a protected request (the difference in differences of
 * the least counts: whatever falls into a count, a collection, the periodic
 * reload or a timer, only adds to it).
 *
 * valgrind comes from Debian's package (installed when missing and this runs
 * as root); without it the script says so and exits 3.
 */
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { request, pool, forge } = require('./lib/http');
const { ensureDebianTool } = require('./lib/wrk');
const { writeRevocations, untilRefused } = require('./lib/revocations');
const { median } = require('./lib/measure');
const { startUnderCallgrind, HOST } = require('./lib/callgrind');
const { secretAccessToken } = require('./lib/callers');

const json = process.argv.includes('--json');
const REQUESTS = Number(process.env.BENCH_INSN_REQUESTS || 3000);
const ROUNDS = Number(process.env.BENCH_INSN_ROUNDS || 5);
const WARMUP = Number(process.env.BENCH_INSN_WARMUP || 6000);
const CONNECTIONS = 4;
const REPO_ROOT = path.resolve(__dirname, '..');
const DIST = path.join(REPO_ROOT, 'dist');
const log = (line) => console.log(line);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Where valgrind's gdbserver keeps its pipes: in the work folder, so that they go with it. */
let vgdbPrefix = '';

function run(cmd, args) {
  return new Promise((resolve, reject) => {
    // the same prefix and HOST as the server: valgrind's gdbserver names its pipes after them (and $USER)
    execFile(cmd, [`--vgdb-prefix=${vgdbPrefix}`, ...args], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, HOST } }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd} ${args.join(' ')}: ${err.message} ${stderr}`)) : resolve(stdout),
    );
  });
}

/** Instructions executed so far by every thread of callgrind's `pid` (instrumented stretches only). */
async function totals(pid) {
  const out = await run('callgrind_control', ['-e', String(pid)]);
  let sum = 0;
  let threads = 0;
  for (const m of out.matchAll(/^\s*Th\s+\d+\s+([\d,]+)\s*$/gm)) {
    sum += Number(m[1].replace(/,/g, ''));
    threads++;
  }
  // right after instrumentation is switched on, the totals list no thread yet
  if (threads === 0 && !/Totals:/.test(out)) throw new Error(`callgrind_control -e ${pid} gave no totals:\n${out}`);
  return sum;
}

async function send(port, req, count) {
  const statuses = await pool(count, CONNECTIONS, () => request(port, req).then((r) => r.status));
  const bad = statuses.filter((s) => s !== 200).length;
  if (bad) throw new Error(`${bad} of ${count} requests to ${req.path} did not get 200`);
}

/** Instructions per second while no request comes (timers, reloads, collections of the process's own). */
async function idleRate(server, ms = 3000) {
  await run('callgrind_control', ['-i', 'on', String(server.pid)]);
  const before = await totals(server.pid);
  const t0 = process.hrtime.bigint();
  await sleep(ms);
  const after = await totals(server.pid);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await run('callgrind_control', ['-i', 'off', String(server.pid)]);
  return Math.round((after - before) / seconds);
}

/** Instructions per request of `count` requests, counted with instrumentation on. */
async function count(server, req) {
  await run('callgrind_control', ['-i', 'on', String(server.pid)]);
  const before = await totals(server.pid);
  await send(server.port, req, REQUESTS);
  const after = await totals(server.pid);
  await run('callgrind_control', ['-i', 'off', String(server.pid)]);
  return Math.round((after - before) / REQUESTS);
}


/** SIGTERM (the example closes, valgrind removes its pipes), SIGKILL after 20 s. */
function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

async function refused(server, req) {
  const res = await request(server.port, req);
  if (res.status !== 401) throw new Error(`${req.path} with a forged or no token: HTTP ${res.status}, expected 401`);
}

async function main() {
  if (!ensureDebianTool('valgrind', 'valgrind', log) || !ensureDebianTool('callgrind_control', 'valgrind', log)) {
    console.error('valgrind (callgrind) is not available: no instruction counts');
    process.exit(3);
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-insn-'));
  vgdbPrefix = path.join(work, 'vgdb');
  const server = await startUnderCallgrind({ script: path.join(DIST, 'examples', 'server.js'), work, vgdbPrefix, outFile: path.join(work, 'callgrind.out.%p') });
  try {
    const live = await secretAccessToken(server.port, server.client);
    const routes = {
      health: { path: '/health', headers: { authorization: `Bearer ${live}` } },
      whoami: { path: '/api/whoami', headers: { authorization: `Bearer ${live}` } },
    };
    const warm = async () => {
      for (const r of Object.values(routes)) await send(server.port, r, WARMUP);
    };
    const phase = async (name) => {
      const out = { health: [], whoami: [], difference: [], idlePerSecond: await idleRate(server) };
      log(`instructions ${name} loading, idle: ${out.idlePerSecond.toLocaleString('en-US')} per second`);
      for (let i = 0; i < ROUNDS; i++) {
        for (const k of i % 2 === 0 ? ['health', 'whoami'] : ['whoami', 'health']) out[k].push(await count(server, routes[k]));
        out.difference.push(out.whoami[i] - out.health[i]);
        log(`instructions ${name} loading, round ${i + 1}: /health ${out.health[i].toLocaleString('en-US')}, /api/whoami ${out.whoami[i].toLocaleString('en-US')} per request (difference ${out.difference[i].toLocaleString('en-US')})`);
      }
      return out;
    };
    log(`-- instructions per request under callgrind (example server, ${REQUESTS} requests per count, ${CONNECTIONS} connections, ${ROUNDS} rounds)`);
    // the answers the loading phase gives too (401 invalid_token, from the same client) before the
    // first counts: a kind of answer the process has not yet given changes the object shapes its hot
    // code sees (V8 deoptimizes it), and that would land on the second phase alone
    await refused(server, { path: '/api/whoami', headers: { authorization: `Bearer ${forge(live)}` } });
    await refused(server, { path: '/api/whoami', headers: {} });
    await warm();
    const before = await phase('before');
    // revocations written while it runs, the last for a token of its own that then gets 401
    const doomed = await secretAccessToken(server.port, server.client);
    const loadLater = { tokens: 10_000, clients: 1_000 };
    const writeSeconds = await writeRevocations(DIST, server.dataDir, loadLater, doomed);
    const refusedAfterSeconds = await untilRefused('example under callgrind', server.port, { path: '/api/whoami', headers: { authorization: `Bearer ${doomed}` } }, 60_000);
    log(`${(loadLater.tokens + 1).toLocaleString('en-US')} revoked tokens and ${loadLater.clients.toLocaleString('en-US')} client generations written in ${writeSeconds} s, refused ${refusedAfterSeconds} s later`);
    await warm();
    const after = await phase('after');
    const figures = {
      requests: REQUESTS,
      connections: CONNECTIONS,
      rounds: ROUNDS,
      loaded: { tokens: loadLater.tokens + 1, clientGenerations: loadLater.clients, writeSeconds, refusedAfterSeconds },
      before,
      after,
      medians: {
        health: median(before.health),
        whoami: median(before.whoami),
        healthAfter: median(after.health),
        whoamiAfter: median(after.whoami),
      },
      // the least count of each route in each phase: what interferes (a collection, the periodic
      // reload or sweep, a timer) only adds instructions to the count it falls into
      least: {
        health: Math.min(...before.health),
        whoami: Math.min(...before.whoami),
        healthAfter: Math.min(...after.health),
        whoamiAfter: Math.min(...after.whoami),
      },
    };
    // what the entries add to a protected request, over the same process's /health
    figures.revocationInstructions = figures.least.whoamiAfter - figures.least.healthAfter - (figures.least.whoami - figures.least.health);
    log(`revocation check: ${figures.revocationInstructions.toLocaleString('en-US')} instructions per protected request once loaded (least counts: /api/whoami − /health after loading, minus the same before)`);
    if (json) console.log(JSON.stringify(figures));
  } finally {
    await stop(server.child);
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
