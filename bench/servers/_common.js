'use strict';
// Shared plumbing for the benchmark's server processes.
//
// Each server is started by bench/run.js as its own child process (pinned to
// core 0 with taskset where available) with an IPC channel. The parent passes
// the configuration as JSON in BENCH_SERVER_CONFIG; the child listens on
// 127.0.0.1 with an ephemeral port and answers {type: 'ready', port, info}.
// On {type: 'stop'} it reports its peak RSS and exits.

const fs = require('node:fs');

function config() {
  return JSON.parse(process.env.BENCH_SERVER_CONFIG || '{}');
}

function readFile(p) {
  return fs.readFileSync(p);
}

/** Peak resident set size in bytes, from /proc (VmHWM) or process.resourceUsage(). */
function peakRss() {
  try {
    const status = fs.readFileSync('/proc/self/status', 'utf8');
    const m = /VmHWM:\s+(\d+)\s+kB/.exec(status);
    if (m) return Number(m[1]) * 1024;
  } catch {
    /* not Linux */
  }
  return process.resourceUsage().maxRSS * 1024;
}

/**
 * Listen on 127.0.0.1:0 and tell the parent. `onStop` (optional, async) runs
 * before exit. `setup(port)` (optional, async) runs after listening and before
 * 'ready' and may return extra info for the parent.
 */
function serve(server, { setup, onStop } = {}) {
  server.keepAliveTimeout = 65_000;
  server.listen(0, '127.0.0.1', async () => {
    const { port } = server.address();
    try {
      const info = setup ? await setup(port) : {};
      send({ type: 'ready', port, info: info || {} });
    } catch (err) {
      send({ type: 'error', message: err && err.stack ? err.stack : String(err) });
      process.exit(1);
    }
  });
  process.on('message', async (msg) => {
    if (!msg || typeof msg !== 'object') return;
    if (msg.type === 'rss') {
      const peak = peakRss();
      // With --expose-gc, msg.gc asks for what is still retained after a full GC.
      if (msg.gc && typeof global.gc === 'function') global.gc();
      const mu = process.memoryUsage();
      send({ type: 'rss', id: msg.id, peakRss: peak, rss: mu.rss, heapUsed: mu.heapUsed, external: mu.external, gc: !!(msg.gc && global.gc) });
    } else if (msg.type === 'stop') {
      const report = { type: 'stopped', peakRss: peakRss(), maxRSS: process.resourceUsage().maxRSS * 1024 };
      try {
        if (onStop) await onStop();
      } catch {
        /* closing is best effort */
      }
      send(report);
      server.closeAllConnections?.();
      server.close();
      setTimeout(() => process.exit(0), 50).unref();
    }
  });
  process.on('disconnect', () => process.exit(0));
}

function send(msg) {
  if (process.send) process.send(msg);
}

/** Pull the bearer token out of an Authorization header, or null. */
function bearer(req) {
  const h = req.headers.authorization;
  if (!h || h.length < 8 || h.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  return h.slice(7).trim();
}

/**
 * The HTTP server for an Express app: `http.createServer(app)`, as Express's
 * documentation shows, or with `prewired: true` in the configuration the
 * example's own construction (dist/examples/http-server.js: requests and
 * responses built on the app's prototypes), so a floor can be measured served
 * the way OURS is.
 */
function httpServer(app) {
  if (!config().prewired) return require('node:http').createServer(app);
  return require(require('node:path').join(__dirname, '..', '..', 'dist', 'examples', 'http-server.js')).createHttpServer(app);
}

module.exports = { config, readFile, peakRss, serve, bearer, httpServer };
