import type { Core } from '../../core/core.ts';
import type { BackendFactory } from '../../core/framework.ts';
import { createPaths } from './create.ts';
import { managePaths } from './manage.ts';
import { TokenRoleStore, rolePaths } from './roles.ts';
import { tidyPaths } from './tidy.ts';

/** The `auth/token/` backend: token creation (also through token roles), lookup, renewal, revocation and tidy. */
export const tokenBackend = (core: Core): BackendFactory => (ctx) => {
  const roles = new TokenRoleStore(ctx.storage);
  return { paths: [...createPaths(core, roles), ...managePaths(core), ...rolePaths(roles, () => ctx.system.maxLeaseTtl()), ...tidyPaths(core)] };
};
