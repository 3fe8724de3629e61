import type { Core } from '../../core/core.ts';
import type { BackendFactory } from '../../core/framework.ts';
import { createPaths } from './create.ts';
import { managePaths } from './manage.ts';

/** The `auth/token/` backend: token creation, lookup, renewal and revocation. */
export const tokenBackend = (core: Core): BackendFactory => () => ({
  paths: [...createPaths(core), ...managePaths(core)],
});
