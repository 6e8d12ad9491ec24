#!/usr/bin/env node
const cli = require('node:path').join(__dirname, '../dist/lib/cli/main.js');
if (require('node:fs').existsSync(cli)) require(cli).run();
else { process.stderr.write("client-credentials: dist/ is missing; run 'npm run build' first\n"); process.exitCode = 1; }
