import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    environment: 'node',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Real slapd, PostgreSQL and emulator processes are shared per run; forks keep node:sqlite and sockets isolated.
    pool: 'forks',
    globalSetup: ['test/support/slapd-global.ts', 'test/support/postgres-global.ts', 'test/support/azure-emulator/global-setup.ts'],
  },
});
