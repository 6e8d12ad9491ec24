#!/usr/bin/env node
/**
 * Graceful restarts under keep-alive load: what clients see.
 *
 *   npm run build && node bench/graceful-restart.js
 *   STOPS=20 CONNECTIONS=8 CLIENT=http PORT=47100 PAUSE_MS=0 node bench/graceful-restart.js
 *
 * Each round starts the compiled example (`dist/examples/server.js`, one
 * process, embedded store in a temporary DATA_DIR), puts CONNECTIONS loops
 * of back-to-back requests on it (`GET /health`, keep-alive), sends SIGTERM
 * after a random 200-600 ms of load, and keeps the loops going until the
 * process has exited (PAUSE_MS: a random pause of up to that many ms
 * between a loop's requests, so that connections are also idle at times).
 * Every request is counted by what its client saw:
 *
 * - `answered`: a response;
 * - `refused`: ECONNREFUSED, a new connection the stopped server did not
 *   accept (clean: nothing was sent);
 * - `lost after written`: an error (reset, hang-up, "other side closed") on a
 *   request the client had already written to the connection;
 * - `lost before written`: any other error before the request was written.
 *
 * CLIENT=http: node:http with one keep-alive Agent (maxSockets CONNECTIONS);
 * CLIENT=fetch: Node's fetch (undici's pool, which honours the server's
 * `Keep-Alive: timeout` hint). Bounded: STOPS rounds, each killed with
 * SIGKILL if it has not exited 15 s after its SIGTERM.
 */
'use strict';
const { spawnExample } = require('./lib/proc');
const http = require('node:http');
const { mkdtempSync, rmSync } = require('node:fs');
const { tmpdir } = require('node:os');
const path = require('node:path');

const STOPS = Number(process.env.STOPS || 20);
const CONNECTIONS = Number(process.env.CONNECTIONS || 8);
const CLIENT = process.env.CLIENT || 'http';
const PORT = Number(process.env.PORT || 47100);
const URL_PATH = process.env.URL_PATH || '/health';
const PAUSE_MS = Number(process.env.PAUSE_MS || 0);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function startServer(dataDir) {
  return spawnExample({ PORT: String(PORT), HOST: '127.0.0.1', DATA_DIR: dataDir, DEMO_CLIENT: '0', ...(process.env.SERVER_ENV ? JSON.parse(process.env.SERVER_ENV) : {}) }, { timeoutMs: 10_000 });
}

/** One request with node:http; resolves with what the client saw. */
function httpRequest(agent) {
  return new Promise((resolve) => {
    let written = false;
    const req = http.request({ host: '127.0.0.1', port: PORT, path: URL_PATH, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ kind: 'answered', status: res.statusCode }));
      res.on('error', (err) => resolve({ kind: 'lost after written', error: err.code || err.message }));
    });
    req.on('finish', () => (written = true));
    req.on('error', (err) => {
      if (err.code === 'ECONNREFUSED') resolve({ kind: 'refused' });
      else resolve({ kind: written ? 'lost after written' : 'lost before written', error: `${err.code || ''} ${err.message}`.trim() });
    });
    req.end();
  });
}

/** One request with fetch (undici); "written" is not observable there: any error but a refusal counts as lost after written. */
async function fetchRequest() {
  try {
    const res = await fetch(`http://127.0.0.1:${PORT}${URL_PATH}`);
    await res.arrayBuffer();
    return { kind: 'answered', status: res.status };
  } catch (err) {
    const cause = err.cause || err;
    if (cause.code === 'ECONNREFUSED') return { kind: 'refused' };
    return { kind: 'lost after written', error: `${cause.code || ''} ${cause.message}`.trim() };
  }
}

async function round(index, dataDir) {
  const server = startServer(dataDir);
  await server.listening;
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const counts = { answered: 0, refused: 0, 'lost after written': 0, 'lost before written': 0 };
  const errors = {};
  let exited = false;
  const loop = async () => {
    while (!exited) {
      const seen = CLIENT === 'fetch' ? await fetchRequest() : await httpRequest(agent);
      counts[seen.kind] += 1;
      if (seen.error) errors[seen.error] = (errors[seen.error] || 0) + 1;
      if (seen.kind === 'refused') await sleep(5); // no busy loop against a closed port
      else if (PAUSE_MS > 0) await sleep(Math.random() * PAUSE_MS);
    }
  };
  const loops = Array.from({ length: CONNECTIONS }, loop);
  await sleep(200 + Math.floor(Math.random() * 400));
  const signalled = Date.now();
  server.child.kill('SIGTERM');
  const killer = setTimeout(() => server.child.kill('SIGKILL'), 15_000);
  const exit = await server.exited;
  clearTimeout(killer);
  const stopMs = Date.now() - signalled;
  exited = true;
  await Promise.all(loops);
  agent.destroy();
  console.log(JSON.stringify({ round: index + 1, stop_ms: stopMs, exit, ...counts, errors }));
  return { counts, errors, stopMs };
}

async function main() {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'graceful-restart-'));
  const total = { answered: 0, refused: 0, 'lost after written': 0, 'lost before written': 0 };
  const errors = {};
  const stops = [];
  let roundsWithLoss = 0;
  try {
    for (let i = 0; i < STOPS; i++) {
      const r = await round(i, dataDir);
      for (const k of Object.keys(total)) total[k] += r.counts[k];
      for (const [k, v] of Object.entries(r.errors)) errors[k] = (errors[k] || 0) + v;
      if (r.counts['lost after written'] + r.counts['lost before written'] > 0) roundsWithLoss += 1;
      stops.push(r.stopMs);
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
  stops.sort((a, b) => a - b);
  console.log(JSON.stringify({ client: CLIENT, connections: CONNECTIONS, pause_ms: PAUSE_MS, stops: STOPS, total, rounds_with_loss: roundsWithLoss, errors, stop_ms: { min: stops[0], median: stops[Math.floor(stops.length / 2)], max: stops.at(-1) } }));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
