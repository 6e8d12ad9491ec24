'use strict';
// Bare Express 5: one route answering constant JSON. The reference (1.00x) for
// every "ratio to bare Express" in the report.

const express = require('express');
const { serve, httpServer } = require('./_common');

const app = express();
app.get('/const', (req, res) => res.json({ ok: true }));

serve(httpServer(app));
