'use strict';
// Floors: the least work an Express 5 token endpoint / protected route can do
// with jsonwebtoken.
//
//   mode 'sign'   POST /oauth/token  express.urlencoded + jwt.sign of the same
//                 claims OURS puts in a token (iss, sub, client_id, aud, iat,
//                 exp, jti, scope; header typ at+jwt, kid), key object made once.
//                 No client authentication at all.
//   mode 'verify' GET /api/orders    jwt.verify (alg, iss, aud) + scope check.

const crypto = require('node:crypto');
const express = require('express');
const jwt = require('jsonwebtoken');
const { config, readFile, serve, bearer, httpServer } = require('./_common');

const cfg = config();
const alg = cfg.alg;
const app = express();

if (cfg.mode === 'sign') {
  const privateKey = crypto.createPrivateKey(readFile(cfg.privateKeyFile));
  const header = { typ: 'at+jwt', kid: cfg.kid };
  app.post('/oauth/token', express.urlencoded({ extended: false }), (req, res) => {
    const body = req.body || {};
    let clientId = body.client_id;
    if (!clientId && req.headers.authorization) {
      const raw = Buffer.from(req.headers.authorization.slice(6), 'base64').toString();
      clientId = decodeURIComponent(raw.slice(0, raw.indexOf(':')));
    }
    const scope = body.scope || 'orders:read';
    const accessToken = jwt.sign({ client_id: clientId, scope, jti: crypto.randomUUID() }, privateKey, {
      algorithm: alg,
      header,
      issuer: cfg.issuer,
      audience: cfg.audience,
      subject: clientId,
      expiresIn: 3600,
    });
    res.set('Cache-Control', 'no-store');
    res.json({ access_token: accessToken, token_type: 'Bearer', expires_in: 3600, scope });
  });
} else if (cfg.mode === 'verify') {
  const publicKey = crypto.createPublicKey(readFile(cfg.publicKeyFile));
  const options = { algorithms: [alg], issuer: cfg.issuer, audience: cfg.audience };
  app.get('/api/orders', (req, res) => {
    const token = bearer(req);
    let claims;
    try {
      claims = token && jwt.verify(token, publicKey, options);
    } catch {
      claims = null;
    }
    if (!claims || typeof claims.scope !== 'string' || !claims.scope.split(' ').includes('orders:read')) {
      res.status(401).set('WWW-Authenticate', 'Bearer error="invalid_token"').json({ error: 'invalid_token' });
      return;
    }
    res.json({ ok: true });
  });
} else {
  throw new Error(`floor: unknown mode ${cfg.mode}`);
}

serve(httpServer(app));
