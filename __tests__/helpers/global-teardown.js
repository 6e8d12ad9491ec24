const { rmSync } = require('node:fs');

module.exports = async () => {
  if (process.env.ECC_TEST_TMP) rmSync(process.env.ECC_TEST_TMP, { recursive: true, force: true });
};
