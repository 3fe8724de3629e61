/**
 * The events of a static role's recorded changes (docs/events.md): `ldap/rotate`, and Strongroom's own
 * `ldap/dual-account-grace-end` when a dual-account role's grace ends (with `standby_action: reset` its reset, which
 * is no rotation; with `keep` the leader's record of its end, or the switch that comes first).
 */
import type { PreparedWrite } from '../../core/storage/view.ts';
import { accountOf, graceToClose, parseIntent, standbyOf } from './dual-account.ts';
import type { LdapEngine } from './engine.ts';
import { rfc3339, type StaticRole } from './static-role-store.ts';

type Operation = 'periodic' | 'update';

/** A grace's end: `role` as it was in the grace; the account is the one that was active before it (the standby now). */
export function graceEndEvent(engine: Pick<LdapEngine, 'ctx'>, role: StaticRole, operation: Operation): PreparedWrite {
  return engine.ctx.system.event('ldap/dual-account-grace-end', {
    modified: 'true', operation, path: `static-role/${role.name}`, name: role.name, standby_action: role.standby_action,
    account: accountOf(role, standbyOf(role)).username, grace_period_end: new Date(role.grace_period_end).toISOString(),
  });
}

/**
 * The events of a recorded change (`role` before it, `rotated` after, `walIntent` the intent the commit recorded): a
 * reset is the end of its grace; anything else is `ldap/rotate`, naming the rotation by the time it recorded
 * (static-cred's `last_service_rotation`), and, when it switches before the leader recorded the end of a `keep`
 * grace that already passed, that grace's end too (it is reported once either way: the switch replaces it).
 */
export function changeEvents(engine: Pick<LdapEngine, 'ctx' | 'clock'>, role: StaticRole, rotated: StaticRole, walIntent: string | undefined, operation: Operation): PreparedWrite[] {
  const intent = walIntent === undefined ? undefined : parseIntent(walIntent);
  if (intent?.kind === 'reset') return [graceEndEvent(engine, role, operation)];
  const rotate = engine.ctx.system.event('ldap/rotate', { modified: 'true', operation, path: `rotate-role/${role.name}`, name: role.name, last_service_rotation: rfc3339(rotated.last_rotation) });
  return intent?.kind === 'switch' && graceToClose(role, engine.clock.now()) ? [graceEndEvent(engine, role, operation), rotate] : [rotate];
}
