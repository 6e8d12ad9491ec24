'use strict';
// A bare Express 5 app started the way a user starts one (`node app.js`, no
// IPC channel): GET /health answers constant JSON. The reference for the
// example server's memory right after start and its time to first answer.

const express = require('express');

const app = express();
app.disable('x-powered-by');
app.get('/health', (req, res) => res.json({ status: 'ok' }));
const server = app.listen(Number(process.env.PORT || 3000), process.env.HOST || '127.0.0.1');
process.once('SIGTERM', () => server.close(() => process.exit(0)));
