import type { BackendRegistry } from './core/core.ts';
import type { BackendFactory } from './core/framework.ts';

/**
 * The engine and auth method types as the server registers them: each factory loads the engines' modules
 * (`engines.ts`, with the LDAP client, the Azure SDK wrappers, the template language) at its first call, so a start
 * strips and compiles none of them before it listens (docs/architecture.md, "Start-up"). The names are listed here,
 * since only they are needed before: `engines.ts` registers the same ones (a test compares them).
 */
const LAZY_TYPES = { secret: ['ldap', 'cloud'], auth: ['cloud'] } as const;

/** Vault's names for the same backends, so Vault clients and scripts enable them unchanged (shown as the spec's names). */
export const backendAliases: NonNullable<BackendRegistry['aliases']> = { secret: { azure: 'cloud', openldap: 'ldap' }, auth: { azure: 'cloud' } };

/** The registry with the server's settings given to the engines that take some, each loaded at its first mount. */
export function lazyBackends(opts: { libraryMaxWaiters: number }): BackendRegistry {
  let loaded: Promise<BackendRegistry> | undefined;
  const registry = () => (loaded ??= import('./engines.ts').then((m) => m.configuredBackends(opts)));
  const lazily = (cls: 'secret' | 'auth', type: string): BackendFactory => async (ctx) => (await registry())[cls][type]!(ctx);
  const of = (cls: 'secret' | 'auth') => Object.fromEntries(LAZY_TYPES[cls].map((type) => [type, lazily(cls, type)]));
  return { secret: of('secret'), auth: of('auth'), aliases: backendAliases };
}

/** Mounted on first initialisation when their type is registered. */
export const defaultMounts = [
  { path: 'cloud/', type: 'cloud', description: 'Cloud (Azure) service principal credentials' },
  { path: 'ldap/', type: 'ldap', description: 'LDAP static, dynamic and library credentials' },
  { path: 'auth/cloud/', type: 'cloud', description: 'Cloud workload login with directory-signed JWTs' },
];
