'use strict';
// A server of the bench started under valgrind's callgrind, instrumentation
// off until asked for (bench/instructions.js, bench/profile.js).
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { request } = require('./http');
const { freePort, readDemoClient } = require('./proc');

const HOST = '127.0.0.1';

/**
 * Starts `script` (the example server or one made like it) under callgrind in
 * `work`: a fresh DATA_DIR, LOG_LEVEL info, stdout to a file, dumps to
 * `outFile`, valgrind's gdbserver pipes under `vgdbPrefix` (callgrind_control
 * needs the same prefix and HOST). Waits for GET /health (up to 180 s) and for
 * the demo client the server prints.
 */
async function startUnderCallgrind({ script, work, vgdbPrefix, outFile, env = {} }) {
  const dataDir = path.join(work, 'data');
  const stdoutFile = path.join(work, 'stdout.log');
  const port = await freePort();
  const out = fs.openSync(stdoutFile, 'a');
  const child = spawn(
    'valgrind',
    ['--tool=callgrind', '--instr-atstart=no', '--smc-check=all-non-file', `--vgdb-prefix=${vgdbPrefix}`, `--callgrind-out-file=${outFile}`, process.execPath, script],
    { env: { ...process.env, NODE_ENV: 'production', DATA_DIR: dataDir, LOG_LEVEL: 'info', PORT: String(port), HOST, ...env }, stdio: ['ignore', out, 'pipe'] },
  );
  fs.closeSync(out);
  let stderr = '';
  child.stderr.on('data', (c) => (stderr = (stderr + c).slice(-4000)));
  const deadline = Date.now() + 180_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${path.basename(script)} under valgrind exited (${child.exitCode}):\n${stderr}`);
    const res = await request(port, { path: '/health' }, 2000).catch(() => null);
    if (res && res.status === 200) break;
    if (Date.now() > deadline) throw new Error(`${path.basename(script)} under valgrind did not answer in 180 s:\n${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return { child, pid: child.pid, port, dataDir, client: await readDemoClient(stdoutFile, 0) };
}

module.exports = { startUnderCallgrind, HOST };
