import { defineConfig } from 'vitest/config';

/**
 * `npm run test:container`: the images built with podman from the Dockerfiles and run as compose.yaml and
 * examples/ci/ run them (docs/container.md). Apart from `npm test` because the builds take minutes.
 */
export default defineConfig({
  test: {
    include: ['test/container/**/*.test.ts'],
    environment: 'node',
    testTimeout: 180_000,
    hookTimeout: 180_000,
    pool: 'forks',
    // The files share the built images and podman's machine-wide storage: one at a time.
    fileParallelism: false,
    globalSetup: ['test/support/container-images-global.ts'],
  },
});
