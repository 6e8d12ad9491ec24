'use strict';
// @node-oauth/oauth2-server with an in-memory model (opaque tokens), wired into
// Express as its documentation and the server2server example do: express
// body parsing, oauth.token() on POST /oauth/token, oauth.authenticate() in a
// middleware in front of GET /api/orders.

const http = require('node:http');
const express = require('express');
const OAuth2Server = require('@node-oauth/oauth2-server');
const { Request, Response } = OAuth2Server;
const { config, serve } = require('./_common');

const cfg = config();
const enabledScopes = ['orders:read'];
const system = { id: 'system' };

const db = {
  clients: new Map([[cfg.clientId, { id: cfg.clientId, secret: cfg.clientSecret, grants: ['client_credentials'] }]]),
  accessTokens: new Map(),
};

const model = {
  async getClient(clientId, clientSecret) {
    const client = db.clients.get(clientId);
    if (!client || (clientSecret !== null && clientSecret !== undefined && client.secret !== clientSecret)) return false;
    return client;
  },
  async getUserFromClient(client) {
    return db.clients.has(client.id) ? system : false;
  },
  async validateScope(user, client, scope) {
    if (!scope) return enabledScopes;
    const list = Array.isArray(scope) ? scope : String(scope).split(' ');
    return list.every((s) => enabledScopes.includes(s)) ? list : false;
  },
  async saveToken(token, client, user) {
    db.accessTokens.set(token.accessToken, {
      clientId: client.id,
      scope: token.scope,
      accessTokenExpiresAt: token.accessTokenExpiresAt,
    });
    return { ...token, client, user };
  },
  async getAccessToken(accessToken) {
    const meta = db.accessTokens.get(accessToken);
    if (!meta) return false;
    return {
      accessToken,
      accessTokenExpiresAt: meta.accessTokenExpiresAt,
      scope: meta.scope,
      client: db.clients.get(meta.clientId),
      user: system,
    };
  },
  async verifyScope(token, scope) {
    const need = Array.isArray(scope) ? scope : String(scope).split(' ');
    const have = Array.isArray(token.scope) ? token.scope : String(token.scope || '').split(' ');
    return need.every((s) => have.includes(s));
  },
};

const oauth = new OAuth2Server({ model, accessTokenLifetime: 3600 });

const app = express();
app.use(express.urlencoded({ extended: false }));

function send(res, response) {
  res.set(response.headers);
  res.status(response.status).json(response.body);
}

function fail(res, err) {
  res.status(err.code || err.status || 500).json({ error: err.name, error_description: err.message });
}

app.post('/oauth/token', async (req, res) => {
  const request = new Request(req);
  const response = new Response(res);
  try {
    await oauth.token(request, response);
    send(res, response);
  } catch (err) {
    fail(res, err);
  }
});

async function authenticate(req, res, next) {
  const request = new Request(req);
  const response = new Response(res);
  try {
    res.locals.oauth = { token: await oauth.authenticate(request, response, { scope: ['orders:read'] }) };
    next();
  } catch (err) {
    fail(res, err);
  }
}

app.get('/api/orders', authenticate, (req, res) => res.json({ ok: true }));

serve(http.createServer(app));
