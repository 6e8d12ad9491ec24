'use strict';
// A/B comparison of server variants by their CPU time per request: the tool for
// deciding whether a change pays, on a machine that other work keeps busy.
//
//   node bench/ab.js [--path /oauth/token] [--seconds 4] [--rounds 6] [--connections 32] VARIANT...
//
// VARIANT is name=script[,ENV=value...]: a server that listens on PORT and
// HOST, answers GET /health, and (like the example server) prints a demo
// client at its first start. Each variant runs as its own process on a fresh
// DATA_DIR with LOG_LEVEL=info and its stdout appended to a file, pinned to
// CPU 0; wrk runs on CPU 1. The variants take turns for --rounds rounds; the
// report gives, per variant, the server's CPU µs per request (utime + stime
// from /proc over each wrk run) and req/s, medians with every round.
//
// Example: what the audit line costs.
//   node bench/ab.js info=dist/examples/server.js warn=dist/examples/server.js,LOG_LEVEL=warn

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startProcess, stopProcess, procCpuUs, killAll } = require('./lib/proc');
const { request } = require('./lib/http');
const { summary } = require('./lib/measure');
const wrk = require('./lib/wrk');

const REPO_ROOT = path.resolve(__dirname, '..');

function parseArgs(argv) {
  const o = { path: '/oauth/token', seconds: 4, rounds: 6, connections: 32, variants: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--path') o.path = argv[++i];
    else if (a === '--seconds') o.seconds = Number(argv[++i]);
    else if (a === '--rounds') o.rounds = Number(argv[++i]);
    else if (a === '--connections') o.connections = Number(argv[++i]);
    else {
      const [name, rest] = a.split(/=(.*)/s);
      if (!rest) throw new Error(`variant must be name=script[,ENV=value...], got ${a}`);
      const [script, ...envs] = rest.split(',');
      o.variants.push({ name, script: path.resolve(REPO_ROOT, script), env: Object.fromEntries(envs.map((e) => e.split(/=(.*)/s).slice(0, 2))) });
    }
  }
  if (o.variants.length === 0) throw new Error('usage: node bench/ab.js [--path P] [--seconds S] [--rounds R] name=script[,ENV=value] ...');
  return o;
}

async function prepare(server, stdoutFile, urlPath) {
  const text = fs.readFileSync(stdoutFile, 'utf8');
  const id = /client_id:\s+(\S+)/.exec(text)?.[1];
  const secret = /client_secret:\s+(\S+)/.exec(text)?.[1];
  const form = id && secret ? `grant_type=client_credentials&scope=orders%3Aread&client_id=${encodeURIComponent(id)}&client_secret=${encodeURIComponent(secret)}` : '';
  const tokenReq = { method: 'POST', path: '/oauth/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form };
  if (urlPath === '/oauth/token') return tokenReq;
  if (!form) return { method: 'GET', path: urlPath, headers: {} };
  const res = await request(server.port, tokenReq);
  return { method: 'GET', path: urlPath, headers: { authorization: `Bearer ${res.json.access_token}` } };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const bin = wrk.ensureWrk();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-ab-'));
  const runs = [];
  try {
    for (const v of o.variants) {
      const dir = path.join(work, v.name.replace(/[^\w.-]/g, '_'));
      fs.mkdirSync(dir, { recursive: true });
      const stdoutFile = path.join(dir, 'stdout.log');
      const server = await startProcess(v.name, v.script, { env: { DATA_DIR: path.join(dir, 'data'), LOG_LEVEL: 'info', ...v.env }, stdoutFile, cpu: 0 });
      await new Promise((r) => setTimeout(r, 200));
      const req = await prepare(server, stdoutFile, o.path);
      const check = await request(server.port, req);
      if (check.status !== 200) throw new Error(`${v.name}: ${req.method} ${req.path} answered ${check.status}: ${check.text.slice(0, 200)}`);
      await wrk.measure({ bin, port: server.port, request: req, connections: o.connections, duration: 2, cpu: 1 }); // warm-up
      runs.push({ v, server, req, cpu: [], rps: [] });
    }
    for (let r = 0; r < o.rounds; r++) {
      for (let k = 0; k < runs.length; k++) {
        const run = runs[(k + r) % runs.length];
        const before = procCpuUs(run.server.pid);
        const m = await wrk.measure({ bin, port: run.server.port, request: run.req, connections: o.connections, duration: o.seconds, cpu: 1 });
        const after = procCpuUs(run.server.pid);
        if (m.non2xx || m.errors) console.log(`${run.v.name}: ${m.non2xx} non-2xx, ${m.errors} errors`);
        run.cpu.push((after - before) / (m.ok + m.non2xx));
        run.rps.push(m.rps);
      }
    }
    console.log(`${o.path}, ${o.connections} connections, ${o.rounds} rounds × ${o.seconds} s; load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
    for (const run of runs) {
      const c = summary(run.cpu);
      const q = summary(run.rps);
      console.log(
        `${run.v.name.padEnd(28)} CPU ${c.median.toFixed(1).padStart(7)} µs/req [${run.cpu.map((x) => x.toFixed(0)).join(' ')}]   ${Math.round(q.median).toLocaleString('en-US').padStart(7)} req/s [${run.rps.map((x) => Math.round(x)).join(' ')}]`,
      );
    }
  } finally {
    for (const run of runs) await stopProcess(run.server);
    killAll();
    fs.rmSync(work, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  killAll();
  process.exit(1);
});
