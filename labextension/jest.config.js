/**
 * Unit tests of the frontend: the pure logic (formatting, payload parsing, sparkline scaling) in node,
 * and the DOM-level tests (the sidebar's MgpuPanel, the widgets' jupyter_mgpu/widgets/static/*.js) in
 * jsdom, chosen per file by a `@jest-environment jsdom` docblock (jest-environment-jsdom).
 */
module.exports = {
  rootDir: __dirname,
  testEnvironment: 'node',
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: '<rootDir>/test/tsconfig.json' }]
  }
};
