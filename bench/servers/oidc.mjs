// node-oidc-provider (ESM, loaded with import) as an OAuth 2.0 authorization
// server for the client_credentials grant, issuing JWT access tokens through
// the resource indicators feature (accessTokenFormat 'jwt', RS256), mounted in
// Express 5 as its documentation shows (app.use(prefix, provider.callback())).
//
// The same Express app protects GET /api/orders with express-oauth2-jwt-bearer
// (auth() + requiredScopes()), discovering the provider's metadata and JWKS
// over loopback, as an API would.

import http from 'node:http';
import { createRequire } from 'node:module';
import express from 'express';

const require = createRequire(import.meta.url);
const { config, readFile, serve } = require('./_common.js');
const cfg = config();

const { default: Provider, errors } = await import('oidc-provider');
const { auth, requiredScopes } = require('express-oauth2-jwt-bearer');

const app = express();
const server = http.createServer(app);

serve(server, {
  async setup(port) {
    const issuer = `http://127.0.0.1:${port}/oidc`;
    const audience = `http://127.0.0.1:${port}/api`;
    const signingJwk = JSON.parse(readFile(cfg.privateJwkFile, 'utf8'));

    const provider = new Provider(issuer, {
      clients: [
        {
          client_id: cfg.clientId,
          client_secret: cfg.clientSecret,
          grant_types: ['client_credentials'],
          response_types: [],
          redirect_uris: [],
          token_endpoint_auth_method: cfg.clientAuth === 'basic' ? 'client_secret_basic' : 'client_secret_post',
        },
      ],
      jwks: { keys: [signingJwk] },
      ttl: { ClientCredentials: 3600 },
      features: {
        devInteractions: { enabled: false },
        clientCredentials: { enabled: true },
        resourceIndicators: {
          enabled: true,
          defaultResource: () => audience,
          useGrantedResource: () => true,
          getResourceServerInfo(ctx, resourceIndicator) {
            if (resourceIndicator !== audience) throw new errors.InvalidTarget();
            return {
              scope: 'orders:read',
              audience,
              accessTokenTTL: 3600,
              accessTokenFormat: 'jwt',
              jwt: { sign: { alg: 'RS256' } },
            };
          },
        },
      },
    });
    // Development-mode warnings (http issuer, default cookie keys) are not
    // what is measured; keep stderr readable.
    provider.on('server_error', (ctx, err) => console.error('[oidc-provider] server_error', err));

    app.use('/oidc', provider.callback());
    app.get(
      '/api/orders',
      auth({ issuerBaseURL: issuer, audience, tokenSigningAlg: 'RS256' }),
      requiredScopes('orders:read'),
      (req, res) => res.json({ ok: true }),
    );
    return { issuer, audience, tokenPath: '/oidc/token' };
  },
});
