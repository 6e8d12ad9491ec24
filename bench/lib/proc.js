'use strict';
// Server child processes: spawn (pinned to one core with taskset when it is
// available), wait for 'ready', read peak RSS, stop.

const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const SERVERS_DIR = path.join(__dirname, '..', 'servers');

/** The last 20,000 characters a child wrote to stderr (echoed with BENCH_VERBOSE=1). */
function tailOfStderr(child, name) {
  let text = '';
  child.stderr.on('data', (d) => {
    text += d;
    if (text.length > 20_000) text = text.slice(-20_000);
    if (process.env.BENCH_VERBOSE) process.stderr.write(`[${name}] ${d}`);
  });
  return () => text;
}

function hasTaskset() {
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Raise this process's priority (negative nice); returns the niceness in effect. */
function reniceSelf(nice) {
  const os = require('node:os');
  try {
    os.setPriority(0, nice);
  } catch {
    /* not permitted: stay where we are */
  }
  return os.getPriority(0);
}

/**
 * Start a SCHED_IDLE busy loop pinned to `cpu` (see spin.js); null when chrt or
 * taskset is missing.
 */
function startSpinner(cpu, maxSeconds) {
  try {
    execFileSync('chrt', ['-i', '0', 'true'], { stdio: 'ignore' });
  } catch {
    return null;
  }
  const child = spawn('chrt', ['-i', '0', 'taskset', '-c', String(cpu), process.execPath, path.join(__dirname, 'spin.js'), String(maxSeconds)], {
    stdio: 'ignore',
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** Pin every thread of this process to `cpu`; returns true when it worked. */
function pinSelf(cpu) {
  try {
    execFileSync('taskset', ['-a', '-cp', String(cpu), String(process.pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const children = new Set();

function killAll() {
  for (const child of children) {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
  children.clear();
}

/**
 * Start servers/<script> with `config` (JSON in BENCH_SERVER_CONFIG).
 * Resolves to { name, pid, port, info, child, send(msg) }.
 */
function startServer(name, script, config, { cpu = null, timeoutMs = 90_000, execArgv = [] } = {}) {
  const scriptPath = path.join(SERVERS_DIR, script);
  const nodeArgs = [...execArgv, scriptPath];
  const env = {
    ...process.env,
    NODE_ENV: 'production',
    BENCH_SERVER_CONFIG: JSON.stringify(config || {}),
  };
  // The provider's development warnings are not part of the measurement.
  env.NODE_NO_WARNINGS = '1';
  // Children inherit the niceness set by reniceSelf().
  const [cmd, args] = cpu === null ? [process.execPath, nodeArgs] : ['taskset', ['-c', String(cpu), process.execPath, ...nodeArgs]];
  const child = spawn(cmd, args, {
    cwd: path.join(__dirname, '..'),
    env,
    stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
  });
  children.add(child);
  const stderr = tailOfStderr(child, name);

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name}: not ready after ${timeoutMs} ms\n${stderr()}`));
    }, timeoutMs);
    const onExit = (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      reject(new Error(`${name}: exited before ready (code ${code}, signal ${signal})\n${stderr()}`));
    };
    child.once('exit', onExit);
    child.on('message', function onMessage(msg) {
      if (msg && msg.type === 'ready') {
        clearTimeout(timer);
        child.off('message', onMessage);
        child.off('exit', onExit);
        child.once('exit', () => children.delete(child));
        resolve({
          name,
          pid: child.pid,
          port: msg.port,
          info: msg.info || {},
          child,
          stderr,
        });
      } else if (msg && msg.type === 'error') {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(new Error(`${name}: ${msg.message}\n${stderr()}`));
      }
    });
  });
}

/** Ask the server to stop; resolves to its own report ({ peakRss, maxRSS }) or null. */
function stopServer(server, timeoutMs = 10_000) {
  const { child } = server;
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(null);
  return new Promise((resolve) => {
    let report = null;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('message', (msg) => {
      if (msg && msg.type === 'stopped') report = msg;
    });
    child.once('exit', () => {
      clearTimeout(timer);
      children.delete(child);
      resolve(report);
    });
    try {
      child.send({ type: 'stop' });
    } catch {
      child.kill('SIGKILL');
    }
  });
}

/** { peakRss, rss } in bytes from /proc/<pid>/status, or null when there is no /proc. */
function procMemory(pid) {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const hwm = /VmHWM:\s+(\d+)\s+kB/.exec(status);
    const rss = /VmRSS:\s+(\d+)\s+kB/.exec(status);
    return { peakRss: hwm ? Number(hwm[1]) * 1024 : null, rss: rss ? Number(rss[1]) * 1024 : null };
  } catch {
    return null;
  }
}

/** CPU time (user + system) a process has used so far, in µs, from /proc/<pid>/stat; null without /proc. */
function procCpuUs(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const ticks = Number(f[11]) + Number(f[12]); // utime, stime
    return (ticks * 1e6) / CLOCK_TICKS;
  } catch {
    return null;
  }
}

const CLOCK_TICKS = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** Ask the server itself for its memory (works without /proc); `gc` runs a full GC first when it can. */
function askMemory(server, { gc = false, timeoutMs = 10_000 } = {}) {
  return new Promise((resolve) => {
    const id = Math.random().toString(36).slice(2);
    const timer = setTimeout(() => {
      server.child.off('message', onMessage);
      resolve(null);
    }, timeoutMs);
    function onMessage(msg) {
      if (msg && msg.type === 'rss' && msg.id === id) {
        clearTimeout(timer);
        server.child.off('message', onMessage);
        resolve({ peakRss: msg.peakRss, rss: msg.rss, heapUsed: msg.heapUsed, external: msg.external, gc: msg.gc });
      }
    }
    server.child.on('message', onMessage);
    server.child.send({ type: 'rss', id, gc });
  });
}

async function memoryOf(server) {
  return procMemory(server.pid) || (await askMemory(server));
}

/** A free TCP port on 127.0.0.1 (listen on 0, close). */
function freePort() {
  const net = require('node:net');
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/** GET `path` once; resolves to the status, or null when nothing answers yet. */
function probe(port, path) {
  const http = require('node:http');
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent: false, timeout: 1000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
  });
}

/**
 * Start a program the way its users run it (no IPC channel): `node <script>`
 * with `env`, stdout appended to `stdoutFile` (a real file, as when a user
 * redirects it), on a free port passed as PORT. Ready when GET `readyPath`
 * answers 200; `firstAnswerMs` is the time from spawn to that answer (polled
 * every 2 ms) and `startRss` the resident set size right then.
 */
async function startProcess(name, script, { env = {}, stdoutFile, cpu = null, readyPath = '/health', timeoutMs = 30_000, execArgv = [] } = {}) {
  const port = await freePort();
  const out = stdoutFile ? fs.openSync(stdoutFile, 'a') : 'ignore';
  const nodeArgs = [...execArgv, script];
  const [cmd, args] = cpu === null ? [process.execPath, nodeArgs] : ['taskset', ['-c', String(cpu), process.execPath, ...nodeArgs]];
  const t0 = process.hrtime.bigint();
  const child = spawn(cmd, args, {
    cwd: path.join(__dirname, '..', '..'),
    env: { ...process.env, NODE_ENV: 'production', ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', out, 'pipe'],
  });
  if (typeof out === 'number') fs.closeSync(out);
  children.add(child);
  const stderr = tailOfStderr(child, name);
  let exited = null;
  child.once('exit', (code, signal) => {
    exited = { code, signal };
    children.delete(child);
  });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`${name}: exited before answering (code ${exited.code}, signal ${exited.signal})\n${stderr()}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${name}: no answer on ${readyPath} after ${timeoutMs} ms\n${stderr()}`);
    }
    if ((await probe(port, readyPath)) === 200) break;
    await new Promise((r) => setTimeout(r, 2));
  }
  const firstAnswerMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const mem = procMemory(child.pid);
  return { name, pid: child.pid, port, child, info: {}, firstAnswerMs, startRss: mem && mem.rss, stderr };
}

/** SIGTERM, then SIGKILL after `timeoutMs`; resolves to the peak RSS (VmHWM) read just before. */
function stopProcess(server, timeoutMs = 10_000) {
  const { child } = server;
  const mem = procMemory(child.pid);
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(mem);
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      children.delete(child);
      resolve(mem);
    });
    child.kill('SIGTERM');
  });
}

/** The demo client the example prints at its first start (client_id / client_secret lines on stdout), waited for up to timeoutMs. */
async function readDemoClient(file, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
    const id = /^\s*client_id:\s+(\S+)/m.exec(text);
    const secret = /^\s*client_secret:\s+(\S+)/m.exec(text);
    if (id && secret) return { clientId: id[1], clientSecret: secret[1] };
    if (Date.now() > deadline) throw new Error(`no demo client (client_id / client_secret lines) in ${file}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * The compiled example server (`script`, dist/examples/server.js by default) with `env` (and PATH), its output kept:
 * `listening` resolves once `listeners` processes (WORKERS=N: N) logged server.listening, and rejects
 * when it exits first or none does within `timeoutMs`; `exited` resolves with its code and signal.
 */
function spawnExample(env, { script = path.join(__dirname, '..', '..', 'dist', 'examples', 'server.js'), listeners = 1, timeoutMs = 10_000 } = {}) {
  const child = spawn(process.execPath, [script], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const listening = (async () => {
    for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await new Promise((r) => setTimeout(r, 20))) {
      if ((stdout.match(/"server\.listening"/g) || []).length >= listeners) return;
      if (child.exitCode !== null) throw new Error(`server exited ${child.exitCode}: ${stderr}`);
    }
    throw new Error(`server did not listen: ${stdout} ${stderr}`);
  })();
  return { child, exited, listening, stdout: () => stdout, stderr: () => stderr };
}

module.exports = { spawnExample, hasTaskset, pinSelf, reniceSelf, startSpinner, startServer, stopServer, startProcess, stopProcess, procMemory, procCpuUs, memoryOf, askMemory, killAll, freePort, readDemoClient };
