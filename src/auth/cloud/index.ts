/**
 * Cloud auth method: workloads log in with a JWT the directory issued for the configured resource
 * (typically a managed-identity access token) and get a token with their role's policies. Roles
 * with subscription/resource group/location/scale set bounds also have the caller's resource
 * verified with ARM.
 */
import type { Backend, BackendFactory } from '../../core/framework.ts';
import type { ResolveEnvironmentOptions } from '../../providers/azure/environments.ts';
import { configPaths } from './config.ts';
import { loginPaths, renewLogin } from './login.ts';
import { CloudAuthProviders } from './providers.ts';
import { RoleCache, rolePaths } from './roles.ts';
import { providerMetrics } from '../../providers/azure/observer.ts';

export interface CloudAuthOptions {
  /** Where CLOUD_ENVIRONMENT_FILEPATH is read from (default: the process environment). */
  envOptions?: ResolveEnvironmentOptions;
}

export function createCloudAuth(options: CloudAuthOptions = {}): BackendFactory {
  return (ctx): Backend => {
    const envOptions = options.envOptions ?? {};
    const providers = new CloudAuthProviders({ clock: ctx.clock, system: ctx.system, envOptions, observer: providerMetrics(ctx.metrics) });
    const roles = new RoleCache();
    return {
      // login and config are fixed names; role/<name> and the role/ list follow.
      paths: [
        ...loginPaths({ providers, roles, logger: ctx.logger, metrics: ctx.metrics }),
        ...configPaths({ envOptions, onChange: () => providers.reset() }),
        ...rolePaths(ctx.system, roles),
      ],
      renewAuth: (token) => renewLogin(ctx.storage, token),
      // Logins use a parsed config and roles; writes of either on another node drop them here (docs/ha.md).
      cached: { prefixes: ['config', 'role/'], invalidate: () => {
        providers.reset();
        roles.clear();
      } },
      cleanup: async () => providers.reset(),
    };
  };
}

export const cloudAuthBackend = createCloudAuth();
