/** @type {import('jest').Config} */
const common = {
  preset: 'ts-jest',
  testEnvironment: 'node',
};

module.exports = {
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
