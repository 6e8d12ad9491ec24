'use strict';
// The example server with one change: in place of requireBearer(), a
// middleware that sets the req.auth it would set for the demo client (its
// client_id and scopes) and goes on. The app, its routes and their order, the
// issuer, the audit log and the server helper are the example's own, so
// GET /api/whoami walks the same layers and sends the same bytes; set beside
// the example's /api/whoami, the difference is what the token check itself
// costs on that route.
//
// Started by bench/run.js like the example (PORT, HOST, DATA_DIR, LOG_LEVEL,
// stdout to a file, the demo client printed at first start); EXAMPLE_DIST is
// the compiled examples folder (dist/examples).

const path = require('node:path');

const dist = process.env.EXAMPLE_DIST || path.resolve(__dirname, '..', '..', 'dist', 'examples');
const { issuerFromEnv, loggerFromEnv, portFromEnv } = require(path.join(dist, 'env.js'));
const { createDemoClient } = require(path.join(dist, 'demo-client.js'));
const { createApp } = require(path.join(dist, 'orders-app.js'));
const { listen } = require(path.join(dist, 'http-server.js'));

async function main() {
  const env = process.env;
  // read as the example reads it (examples/env.ts: a whole number from 0 to 65535), before anything is opened
  const port = portFromEnv(env, 3000);
  const logger = loggerFromEnv(env);
  const { issuer, publicUrl, metrics } = await issuerFromEnv(env, logger);
  await createDemoClient(issuer, publicUrl, console.log);
  const [demo] = await issuer.clients.list();
  if (!demo) throw new Error('no demo client in the store');
  const auth = { clientId: demo.clientId, scope: demo.scopes, claims: {}, token: '' };
  const setAuth = (req, _res, next) => {
    req.auth = auth;
    next();
  };
  const app = createApp({ router: () => issuer.router(), health: () => issuer.health(), requireBearer: () => setAuth }, { metrics });
  await listen(app, port, env.HOST);
  const stop = () => issuer.close().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((err) => {
  console.error(`error: ${err.message}`);
  process.exit(1);
});
