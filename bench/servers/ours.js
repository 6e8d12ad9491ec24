'use strict';
// OURS: express-client-credentials as its README shows it, mounted on the
// express that the package itself resolves (the repo root's node_modules).
//
//   POST /oauth/token   (issuer.router())
//   GET  /api/orders    requireBearer({ scope: 'orders:read' })
//   GET  /api/open      the same handler without auth (the "unauthenticated route")
//
// One process serves one target; the parent picks the route.

const http = require('node:http');
const path = require('node:path');
const { config, serve } = require('./_common');

const cfg = config();
const repoRoot = cfg.repoRoot || path.resolve(__dirname, '..', '..');
const express = require(require.resolve('express', { paths: [repoRoot] }));
const { createIssuer } = require(cfg.module || path.join(repoRoot, 'dist', 'lib', 'index.js'));

const server = http.createServer();
let issuer;

serve(server, {
  async setup(port) {
    const base = cfg.issuer || `http://127.0.0.1:${port}`;
    issuer = createIssuer({
      issuer: base,
      audience: cfg.audience || `${base}/api`,
      dataDir: cfg.dataDir,
      algorithm: cfg.alg || 'ES256',
      accessTokenTtl: 3600,
      logger: false,
    });
    await issuer.ready();

    const app = express();
    app.use(issuer.router());
    const handler = (req, res) => res.json({ ok: true });
    app.get('/api/orders', issuer.requireBearer({ scope: 'orders:read' }), handler);
    app.get('/api/open', handler);
    server.on('request', app);

    const info = { issuer: base, audience: cfg.audience || `${base}/api` };
    if (cfg.createClient !== false) {
      const { clientId, clientSecret } = await issuer.clients.create({ name: 'bench', scopes: ['orders:read'] });
      info.clientId = clientId;
      info.clientSecret = clientSecret;
    }
    return info;
  },
  async onStop() {
    if (issuer) await issuer.close();
  },
});
