'use strict';
// One measurement with autocannon, used from code.
//
// autocannon's own latency histogram has 1 ms resolution, too coarse for the
// "p99 within 0.1 ms" target, so every 2xx response time (a float in ms, taken
// by autocannon with process.hrtime) is collected from the 'response' event
// and the percentiles are computed here. Throughput is 2xx responses divided by
// the run's wall time.

const autocannon = require('autocannon');

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx];
}

/**
 * @param {object} o
 * @param {number} o.port
 * @param {{method, path, headers, body, setupRequest?}} o.request
 * @param {number} o.connections
 * @param {number} [o.duration] seconds (ignored when o.amount is set)
 * @param {number} [o.amount] total requests
 */
async function measure({ port, request, connections, duration, amount }) {
  let latencies = new Float64Array(1 << 16);
  let n = 0;
  let non2xx = 0;
  const statuses = {};
  const opts = {
    url: `http://127.0.0.1:${port}${request.path}`,
    method: request.method || 'GET',
    headers: request.headers || {},
    connections,
    pipelining: 1,
    timeout: 30,
    bailout: 1000,
  };
  if (request.body != null) opts.body = request.body;
  if (amount) opts.amount = amount;
  else opts.duration = duration;
  if (request.setupRequest) {
    opts.requests = [{ method: opts.method, path: request.path, headers: opts.headers, body: opts.body, setupRequest: request.setupRequest }];
  }

  const instance = autocannon(opts);
  instance.on('response', (client, statusCode, resBytes, responseTime) => {
    if (statusCode >= 200 && statusCode < 300) {
      if (n === latencies.length) {
        const bigger = new Float64Array(latencies.length * 2);
        bigger.set(latencies);
        latencies = bigger;
      }
      latencies[n++] = responseTime;
    } else {
      non2xx++;
      statuses[statusCode] = (statuses[statusCode] || 0) + 1;
    }
  });
  const result = await instance;
  const seconds = (new Date(result.finish) - new Date(result.start)) / 1000 || result.duration || duration;
  const sorted = latencies.subarray(0, n).sort();
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sorted[i];
  return {
    connections,
    seconds: round(seconds, 3),
    ok: n,
    non2xx,
    statuses,
    errors: result.errors,
    timeouts: result.timeouts,
    rps: round(n / seconds, 1),
    p50: round(percentile(sorted, 50), 4),
    p99: round(percentile(sorted, 99), 4),
    mean: n ? round(sum / n, 4) : null,
    max: n ? round(sorted[n - 1], 3) : null,
  };
}

function round(x, digits) {
  if (x == null || !Number.isFinite(x)) return x;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

function median(values) {
  const v = values.filter((x) => x != null && Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  const mid = v.length >> 1;
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

/** { median, min, max } of a list. */
function summary(values) {
  const v = values.filter((x) => x != null && Number.isFinite(x));
  if (v.length === 0) return { median: null, min: null, max: null };
  return { median: median(v), min: Math.min(...v), max: Math.max(...v) };
}

module.exports = { measure, median, summary, round };
