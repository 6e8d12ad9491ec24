/** @type {import('jest').Config} */
const common = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  // stops the pollers a file's standalone verifiers started (see the file)
  setupFilesAfterEnv: ['<rootDir>/__tests__/helpers/after-each-file.ts'],
};

module.exports = {
  // the tests' temporary folders live under one folder per run, removed at its end
  globalSetup: '<rootDir>/__tests__/helpers/global-setup.js',
  globalTeardown: '<rootDir>/__tests__/helpers/global-teardown.js',
  projects: [
    {
      ...common,
      displayName: 'express5',
      testMatch: ['<rootDir>/__tests__/**/*.test.ts'],
    },
    {
      // The HTTP contract again, with the library and the tests on Express 4.
      ...common,
      displayName: 'express4',
      testMatch: ['<rootDir>/__tests__/express/**/*.test.ts'],
      moduleNameMapper: { '^express$': '<rootDir>/node_modules/express4' },
    },
  ],
};
