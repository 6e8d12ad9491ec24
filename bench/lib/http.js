'use strict';
// Small loopback HTTP client for set-up, sanity checks and token minting.
// (The measurements themselves use autocannon.)

const http = require('node:http');

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/**
 * One request; resolves to { status, headers, text, json }. A request on a
 * kept-alive socket that the server had closed while it sat idle (its
 * keepAliveTimeout, 5 s) fails with ECONNRESET: such a request (reused
 * socket, ECONNRESET) is sent again once, on a new socket, as Node's http
 * documentation suggests.
 */
function request(port, req, timeoutMs = 30_000) {
  return send(port, req, timeoutMs).catch((err) => {
    if (err.reusedSocket && err.code === 'ECONNRESET') return send(port, req, timeoutMs);
    throw err;
  });
}

function send(port, { method = 'GET', path = '/', headers = {}, body = null }, timeoutMs) {
  return new Promise((resolve, reject) => {
    const payload = body == null ? null : Buffer.from(body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        agent,
        headers: payload ? { ...headers, 'content-length': payload.length } : headers,
        timeout: timeoutMs,
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json = null;
          try {
            json = JSON.parse(text);
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`timeout after ${timeoutMs} ms: ${method} ${path}`)));
    req.on('error', (err) => reject(Object.assign(err, { reusedSocket: req.reusedSocket })));
    if (payload) req.write(payload);
    req.end();
  });
}

/**
 * Run `count` calls of `fn(i)` with at most `concurrency` in flight; bounded.
 * Resolves to the results in order.
 */
async function pool(count, concurrency, fn) {
  const out = new Array(count);
  let next = 0;
  async function worker() {
    for (;;) {
      const i = next++;
      if (i >= count) return;
      out[i] = await fn(i);
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return out;
}

/** Decode a JWT's header and payload without verifying (for reporting). */
function decodeJwt(token) {
  const parts = String(token).split('.');
  if (parts.length !== 3) return null;
  try {
    return {
      header: JSON.parse(Buffer.from(parts[0], 'base64url').toString()),
      payload: JSON.parse(Buffer.from(parts[1], 'base64url').toString()),
    };
  } catch {
    return null;
  }
}

/**
 * The same token with one signature character changed (not the last: its low
 * bits may be padding), or garbage for an empty or opaque one.
 */
function forge(token) {
  if (!token) return 'x';
  const i = token.length - 5;
  const c = token[i] === 'A' ? 'B' : 'A';
  return token.slice(0, i) + c + token.slice(i + 1);
}

module.exports = { request, pool, decodeJwt, forge, agent };
