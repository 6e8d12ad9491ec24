'use strict';
// Server child processes: spawn (pinned to one core with taskset when it is
// available), wait for 'ready', read peak RSS, stop.

const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const SERVERS_DIR = path.join(__dirname, '..', 'servers');

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
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d;
    if (stderr.length > 20_000) stderr = stderr.slice(-20_000);
    if (process.env.BENCH_VERBOSE) process.stderr.write(`[${name}] ${d}`);
  });

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name}: not ready after ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    const onExit = (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      reject(new Error(`${name}: exited before ready (code ${code}, signal ${signal})\n${stderr}`));
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
          stderr: () => stderr,
        });
      } else if (msg && msg.type === 'error') {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(new Error(`${name}: ${msg.message}\n${stderr}`));
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

module.exports = { hasTaskset, pinSelf, reniceSelf, startSpinner, startServer, stopServer, memoryOf, askMemory, killAll };
