#!/usr/bin/env node
/**
 * Start-up footprint of the example server against a bare Express app:
 * time from spawn to the first 200 from GET /health, and the server
 * process's resident memory (VmRSS from /proc) right after that answer.
 * Linux only (reads /proc). Run after `npm run build`:
 *
 *   node bench/start-footprint.js [runs]
 *
 * Each case starts `runs` times (default 5) on a free port with a fresh
 * data folder; the table shows the median and the range.
 */
'use strict';
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const runs = Number(process.argv[2] || 5);

const BARE = `
const express = require('express');
const app = express();
app.get('/health', (req, res) => res.json({ status: 'ok' }));
app.listen(Number(process.env.PORT));
`;

const cases = [
  { name: 'bare Express (5 lines)', cmd: process.execPath, args: ['-e', BARE] },
  { name: 'node dist/examples/server.js', cmd: process.execPath, args: ['dist/examples/server.js'] },
  { name: 'npm start', cmd: 'npm', args: ['start', '--silent'], viaNpm: true },
  { name: 'ts-node examples/server.ts (before)', cmd: process.execPath, args: ['-r', 'ts-node/register/transpile-only', 'examples/server.ts'] },
];

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

/** The node process serving the port: the spawned one, or (under npm) its newest node descendant. */
function serverPid(pid, viaNpm) {
  if (!viaNpm) return pid;
  const all = execFileSync('ps', ['-e', '-o', 'pid=,ppid=,comm='], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((l) => l.trim().split(/\s+/));
  let frontier = [String(pid)];
  let found = pid;
  while (frontier.length) {
    const next = all.filter(([, ppid]) => frontier.includes(ppid));
    for (const [p, , comm] of next) if (comm === 'node') found = Number(p);
    frontier = next.map(([p]) => p);
  }
  return found;
}

async function once(c) {
  const port = await freePort();
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ecc-footprint-'));
  const env = { ...process.env, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, ISSUER: `http://localhost:${port}`, LOG_LEVEL: 'warn' };
  const started = process.hrtime.bigint();
  const child = spawn(c.cmd, c.args, { cwd: ROOT, env, stdio: 'ignore', detached: true });
  try {
    for (let i = 0; i < 3000; i++) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/health`);
        if (res.status === 200) {
          const ms = Number(process.hrtime.bigint() - started) / 1e6;
          return { ms, rssMiB: rssKiB(serverPid(child.pid, c.viaNpm)) / 1024 };
        }
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    throw new Error(`${c.name}: no answer within 15 s`);
  } finally {
    process.kill(-child.pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 100));
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const range = (xs, d) => `${Math.min(...xs).toFixed(d)}-${Math.max(...xs).toFixed(d)}`;

(async () => {
  if (!fs.existsSync(path.join(ROOT, 'dist/examples/server.js'))) throw new Error('run npm run build first');
  console.log(`node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(2)}, ${runs} runs each`);
  console.log('| case | first answer (ms), median (range) | RSS after it (MiB), median (range) |');
  console.log('|---|---|---|');
  for (const c of cases) {
    const results = [];
    for (let i = 0; i < runs; i++) results.push(await once(c));
    const ms = results.map((r) => r.ms);
    const rss = results.map((r) => r.rssMiB);
    console.log(`| ${c.name} | ${median(ms).toFixed(0)} (${range(ms, 0)}) | ${median(rss).toFixed(1)} (${range(rss, 1)}) |`);
  }
})().catch((err) => {
  console.error(`error: ${err.message}`);
  process.exit(1);
});
