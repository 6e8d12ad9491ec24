// One folder for every temporary folder the tests make (__tests__/helpers/app.ts), removed after the run.
const { mkdtempSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');

module.exports = async () => {
  process.env.ECC_TEST_TMP = mkdtempSync(join(tmpdir(), 'ecc-test-run-'));
};
