/**
 * Static roles on the engine's own bind account. A role write refuses the bind account (accounts.ts), but an earlier
 * version stored such roles, and one would hand the bind password (the key to the whole directory) to every reader
 * of its static-cred. Such a role's password is never served (403), the role is listed in `LIST rotation-failures`
 * as `bind-account`, and every start reports it in a warning naming the mount and the role. The way out is to delete
 * the role.
 */
import { PermissionDeniedError } from '../../core/errors.ts';
import { sameAccount, type AccountIdentity } from './accounts.ts';
import { configuredBindAccount, readConfig } from './config-store.ts';
import type { LdapEngine } from './engine.ts';
import { readStaticRoles, staticRoleAccount, type StaticRole } from './static-role-store.ts';

export const BIND_ACCOUNT_ROLE_ERROR = 'this static role manages the account the secrets engine binds as (a role an earlier version accepted); its password is not served. Delete the role';

/**
 * The bind account as storage alone names it (no directory call): the configured DN, or the UPN of a UPN bind.
 * Undefined when the engine is not configured.
 */
export async function storedBindAccount(engine: Pick<LdapEngine, 'storage'>): Promise<AccountIdentity | undefined> {
  const config = await readConfig(engine.storage);
  return config && configuredBindAccount(config);
}

/** The stored roles that manage the bind account, judged by what storage knows of both. */
export function bindAccountRoles(roles: StaticRole[], bind: AccountIdentity | undefined): StaticRole[] {
  return bind ? roles.filter((role) => sameAccount(bind, staticRoleAccount(role))) : [];
}

/**
 * Refuses to serve a role on the bind account, asking the directory what storage cannot tell: the DN of a UPN bind,
 * and the DN of a role an earlier version stored by username alone. Fails closed: when the directory cannot answer
 * either, the error propagates and nothing is served.
 */
export async function refuseServingBindAccount(engine: Pick<LdapEngine, 'connections' | 'storage'>, role: StaticRole): Promise<void> {
  // Without a config the engine binds as nobody (a role may be written before the config).
  if (!(await readConfig(engine.storage))) return;
  const { client, bindAccount } = await engine.connections.get();
  const bind = await bindAccount();
  const account = staticRoleAccount(role);
  if (sameAccount(bind, account)) throw new PermissionDeniedError(BIND_ACCOUNT_ROLE_ERROR);
  if (account.dn || !bind.dn) return;
  const entry = await client.findByUsername(role.username, ['1.1']);
  if (entry && sameAccount(bind, { dn: entry.dn })) throw new PermissionDeniedError(BIND_ACCOUNT_ROLE_ERROR);
}

/** The start-up report: one warning per role on the bind account, naming the mount and the role (never a secret). */
export async function reportBindAccountRoles(engine: Pick<LdapEngine, 'storage' | 'ctx'>): Promise<void> {
  const found = bindAccountRoles(await readStaticRoles(engine.storage), await storedBindAccount(engine));
  for (const role of found) {
    engine.ctx.logger.warn({ mount: engine.ctx.mount.path, role: role.name }, 'a static role manages the account this secrets engine binds as; its password is not served: delete the role');
  }
}
