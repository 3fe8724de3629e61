import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Podman builds and runs the images there: `npm run test:container` (vitest.container.config.ts).
    exclude: [...configDefaults.exclude, 'test/container/**'],
    environment: 'node',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Real slapd, PostgreSQL and emulator processes are shared per run; forks keep node:sqlite and sockets isolated.
    pool: 'forks',
    // Most integration files wait on real processes (slapd, PostgreSQL, SIGSTOPped nodes, Chromium) rather than
    // compute: vitest's default of one worker per core less one (a single worker on 2 cores) left the CPU mostly idle.
    maxWorkers: 3,
    // In CI a failed test runs once more and vitest reports it as flaky. Three fresh-clone runs on 2026-11-28 each met
    // a different timing race in a test of real processes (each fixed). This keeps such a race from turning CI red
    // while later sessions hunt the rest; locally every failure shows at once.
    retry: process.env.CI ? 1 : 0,
    globalSetup: ['test/support/slapd-global.ts', 'test/support/postgres-global.ts', 'test/support/azure-emulator/global-setup.ts'],
  },
});
