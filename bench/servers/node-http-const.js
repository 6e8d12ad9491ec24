'use strict';
// Bare node:http answering constant JSON: the ceiling of this machine and load
// generator.

const http = require('node:http');
const { serve } = require('./_common');

const body = Buffer.from(JSON.stringify({ ok: true }));
const server = http.createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': body.length });
  res.end(body);
});

serve(server);
