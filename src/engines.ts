import { cloudAuthBackend } from './auth/cloud/index.ts';
import type { BackendRegistry } from './core/core.ts';
import { cloudBackend } from './engines/cloud/index.ts';
import { ldapBackend } from './engines/ldap/index.ts';
import { backendAliases } from './lazy-engines.ts';

/**
 * Every engine and auth method type this build can mount, loaded (the server registers them through
 * `lazy-engines.ts`, which loads this module at the first mount; the bootstrap's offline check and tests use it as is).
 */
export const backendTypes: BackendRegistry = { secret: {}, auth: {} };
backendTypes.secret.ldap = ldapBackend();
backendTypes.secret.cloud = cloudBackend;
backendTypes.auth.cloud = cloudAuthBackend;
backendTypes.aliases = backendAliases;

/** The registry with the server's settings given to the engines that take some. */
export function configuredBackends(opts: { libraryMaxWaiters: number }): BackendRegistry {
  return { ...backendTypes, secret: { ...backendTypes.secret, ldap: ldapBackend({ libraryMaxWaiters: opts.libraryMaxWaiters }) } };
}
