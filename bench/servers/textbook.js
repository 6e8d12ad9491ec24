'use strict';
// "Textbook" stack, written the way the oauth2orize / passport READMEs show it:
//
//   - client authentication: passport-http BasicStrategy and
//     passport-oauth2-client-password ClientPasswordStrategy, verify callbacks
//     written by hand against an in-memory client table; the secret is compared
//     in plain text, or (cfg.bcrypt) with bcrypt.compare against a cost-10 hash;
//   - oauth2orize server with the client_credentials exchange, issuing RS256
//     JWTs with jsonwebtoken;
//   - passport-http-bearer protecting GET /api/orders, jwt.verify with the
//     public key, then a scope check.
//
// Keys: by default the PEM text is handed to jwt.sign / jwt.verify, as
// jsonwebtoken's README shows (the key is parsed again on every request);
// with cfg.keyObject the keys are KeyObjects made once at start-up.

const crypto = require('node:crypto');
const http = require('node:http');
const express = require('express');
const passport = require('passport');
const oauth2orize = require('oauth2orize');
const { BasicStrategy } = require('passport-http');
const ClientPasswordStrategy = require('passport-oauth2-client-password').Strategy;
const BearerStrategy = require('passport-http-bearer').Strategy;
const jwt = require('jsonwebtoken');
const { config, readFile, serve } = require('./_common');

const cfg = config();
// PEM as in the jsonwebtoken README, or KeyObjects made once
const privateKey = cfg.keyObject ? crypto.createPrivateKey(readFile(cfg.privateKeyFile)) : readFile(cfg.privateKeyFile);
const publicKey = cfg.keyObject ? crypto.createPublicKey(readFile(cfg.publicKeyFile)) : readFile(cfg.publicKeyFile);
const bcrypt = cfg.bcrypt ? require('bcrypt') : null;

const clients = new Map();
clients.set(cfg.clientId, {
  id: cfg.clientId,
  name: 'bench',
  scopes: ['orders:read'],
  secret: bcrypt ? null : cfg.clientSecret,
  secretHash: bcrypt ? bcrypt.hashSync(cfg.clientSecret, 10) : null,
});

function verifyClient(clientId, clientSecret, done) {
  const client = clients.get(clientId);
  if (!client) return done(null, false);
  if (bcrypt) {
    bcrypt.compare(clientSecret, client.secretHash, (err, same) => {
      if (err) return done(err);
      return done(null, same ? client : false);
    });
    return undefined;
  }
  if (client.secret !== clientSecret) return done(null, false);
  return done(null, client);
}

passport.use(new BasicStrategy(verifyClient));
passport.use(new ClientPasswordStrategy(verifyClient));
passport.use(
  new BearerStrategy((token, done) => {
    jwt.verify(token, publicKey, { algorithms: ['RS256'], issuer: cfg.issuer, audience: cfg.audience }, (err, claims) => {
      if (err) return done(null, false);
      return done(null, { id: claims.sub, clientId: claims.client_id }, { scope: claims.scope });
    });
  }),
);

const server = oauth2orize.createServer();
server.exchange(
  oauth2orize.exchange.clientCredentials((client, scope, done) => {
    const granted = scope && scope.length ? scope.filter((s) => client.scopes.includes(s)) : client.scopes;
    if (scope && scope.length && granted.length !== scope.length) return done(new oauth2orize.TokenError('invalid scope', 'invalid_scope'));
    const grantedScope = granted.join(' ');
    jwt.sign(
      { client_id: client.id, scope: grantedScope, jti: crypto.randomUUID() },
      privateKey,
      {
        algorithm: 'RS256',
        header: { typ: 'at+jwt', kid: cfg.kid },
        issuer: cfg.issuer,
        audience: cfg.audience,
        subject: client.id,
        expiresIn: 3600,
      },
      (err, token) => {
        if (err) return done(err);
        return done(null, token, null, { expires_in: 3600, scope: grantedScope });
      },
    );
    return undefined;
  }),
);

const app = express();
app.use(express.urlencoded({ extended: false }));
app.use(passport.initialize());

app.post(
  '/oauth/token',
  passport.authenticate(['basic', 'oauth2-client-password'], { session: false }),
  server.token(),
  server.errorHandler(),
);

app.get('/api/orders', passport.authenticate('bearer', { session: false }), (req, res) => {
  const scope = (req.authInfo && req.authInfo.scope) || '';
  if (!scope.split(' ').includes('orders:read')) return res.status(403).json({ error: 'insufficient_scope' });
  return res.json({ ok: true });
});

serve(http.createServer(app));
