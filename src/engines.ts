import { cloudAuthBackend } from './auth/cloud/index.ts';
import type { BackendRegistry } from './core/core.ts';
import { cloudBackend } from './engines/cloud/index.ts';
import { ldapBackend } from './engines/ldap/index.ts';

/** Every engine and auth method type this build can mount. */
export const backendTypes: BackendRegistry = { secret: {}, auth: {} };
backendTypes.secret.ldap = ldapBackend();
backendTypes.secret.cloud = cloudBackend;
backendTypes.auth.cloud = cloudAuthBackend;
// Vault's names for the same backends, so Vault clients and scripts enable them unchanged (shown as the spec's names).
backendTypes.aliases = { secret: { azure: 'cloud', openldap: 'ldap' }, auth: { azure: 'cloud' } };

/** The registry with the server's settings given to the engines that take some. */
export function configuredBackends(opts: { libraryMaxWaiters: number }): BackendRegistry {
  return { ...backendTypes, secret: { ...backendTypes.secret, ldap: ldapBackend({ libraryMaxWaiters: opts.libraryMaxWaiters }) } };
}

/** Mounted on first initialisation when their type is registered. */
export const defaultMounts = [
  { path: 'cloud/', type: 'cloud', description: 'Cloud (Azure) service principal credentials' },
  { path: 'ldap/', type: 'ldap', description: 'LDAP static, dynamic and library credentials' },
  { path: 'auth/cloud/', type: 'cloud', description: 'Cloud workload login with directory-signed JWTs' },
];
