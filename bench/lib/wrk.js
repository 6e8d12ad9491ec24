'use strict';
// The load generator: wrk (a closed-loop HTTP benchmarking tool written in C),
// one thread pinned to the load generator's core. Every measurement is one
// wrk process running wrk.lua, whose done() prints the figures as JSON:
// request count, duration, latency percentiles (microseconds, from wrk's own
// histogram), non-2xx count and the CPU time wrk itself used, which gives the
// load generator's own ceiling (requests per CPU second).

const { execFileSync, spawn } = require('node:child_process');
const path = require('node:path');

const SCRIPT = path.join(__dirname, 'wrk.lua');

function which(cmd) {
  try {
    return execFileSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

/**
 * The path of `command`, installing Debian's package `pkg` with apt-get when
 * it is missing and this runs as root; null when it cannot be had.
 */
function ensureDebianTool(command, pkg, log = console.log) {
  let found = which(command);
  if (found) return found;
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!root || !which('apt-get')) return null;
  log(`${command} not found: installing it with apt-get (Debian package "${pkg}")`);
  const install = () => execFileSync('apt-get', ['install', '-y', '--no-install-recommends', pkg], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  try {
    install();
  } catch {
    try {
      execFileSync('apt-get', ['update'], { stdio: ['ignore', 'ignore', 'inherit'] });
      install();
    } catch {
      return null;
    }
  }
  found = which(command);
  return found || null;
}

/** Path of wrk; installs Debian's package when missing and running as root, else throws a clear message. */
function ensureWrk(log = console.log) {
  const found = ensureDebianTool('wrk', 'wrk', log);
  if (found) return found;
  throw new Error(
    'The benchmark needs wrk (https://github.com/wg/wrk), the load generator. Install it first: ' +
      '`sudo apt-get install wrk` (Debian, Ubuntu), `brew install wrk` (macOS), or build it from source; then run `npm run bench` again.',
  );
}

function wrkVersion(bin) {
  try {
    const out = execFileSync(bin, ['-v'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return /wrk\s+(\S+)/.exec(out)?.[1] ?? out.trim().split('\n')[0];
  } catch (err) {
    // wrk -v exits with status 1 after printing its version
    const out = `${err.stdout || ''}${err.stderr || ''}`;
    return /wrk\s+(\S+)/.exec(out)?.[1] ?? null;
  }
}

/**
 * One measurement.
 * @param {object} o
 * @param {string} o.bin          path of wrk
 * @param {number} o.port
 * @param {{method, path, headers, body}} o.request
 * @param {number} o.connections
 * @param {number} o.duration     seconds
 * @param {number|null} o.cpu     core to pin wrk to (null: unpinned)
 * @param {string} [o.bodiesFile] one request body per line, each sent once (wrk.lua); when they run
 *   out, requests go to `/bench-bodies-spent` (a 404: counted as non-2xx, and `bodiesMissing` says how many)
 * @param {string} [o.lineHeader] with bodiesFile: each line is this header's value, not a body
 * @returns {Promise<{connections, seconds, ok, non2xx, errors, rps, p50, p90, p99, p999, mean, max, loaderCpu, loaderCeiling}>}
 *   latencies in ms; loaderCpu = wrk's CPU seconds / wall seconds; loaderCeiling = requests per wrk CPU second.
 */
function measure({ bin, port, request, connections, duration, cpu = null, bodiesFile = null, lineHeader = null }) {
  const headers = Object.entries(request.headers || {})
    .map(([k, v]) => `${k}: ${v}`)
    .join('\n');
  const args = ['-t1', `-c${connections}`, `-d${duration}s`, '--timeout', '10s', '-s', SCRIPT, `http://127.0.0.1:${port}${request.path}`];
  const [cmd, argv] = cpu === null ? [bin, args] : ['taskset', ['-c', String(cpu), bin, ...args]];
  const env = { ...process.env, BENCH_METHOD: request.method || 'GET', BENCH_BODY: request.body || '', BENCH_HEADERS: headers, BENCH_BODIES_FILE: bodiesFile || '', BENCH_LINE_HEADER: lineHeader || '' };
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), (duration + 30) * 1000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const line = /BENCH_RESULT (\{.*\})/.exec(out);
      if (!line) return reject(new Error(`wrk exited with code ${code} without a result\n${out}\n${err}`));
      resolve(toMeasurement(JSON.parse(line[1]), connections));
    });
  });
}

function toMeasurement(r, connections) {
  const seconds = r.duration_us / 1e6;
  const ok = r.requests - r.non2xx;
  const errors = r.connect_errors + r.read_errors + r.write_errors;
  const bodies = r.bodies_available == null ? {} : { bodiesAvailable: r.bodies_available, bodiesMissing: r.bodies_missing };
  return {
    ...bodies,
    connections,
    seconds: round(seconds, 3),
    ok,
    non2xx: r.non2xx,
    errors,
    timeouts: r.timeouts,
    rps: round(ok / seconds, 1),
    p50: r.p50_us / 1000,
    p90: r.p90_us / 1000,
    p99: r.p99_us / 1000,
    p999: r.p999_us / 1000,
    mean: round(r.mean_us / 1000, 4),
    max: r.max_us / 1000,
    loaderCpu: round(r.cpu_s / seconds, 3),
    loaderCeiling: r.cpu_s > 0 ? Math.round(r.requests / r.cpu_s) : null,
  };
}

function round(x, digits) {
  if (x == null || !Number.isFinite(x)) return x;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

module.exports = { ensureDebianTool, ensureWrk, wrkVersion, measure };
