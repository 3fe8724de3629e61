/**
 * The engine's gauges, read from storage when scraped, so every node of a cluster reports the same values whichever
 * of them runs the rotations. Its counters are recorded where the events happen (static-roles.ts,
 * static-role-rotation.ts, rotate-root.ts, library-checkout.ts).
 */
import {
  LDAP_DUAL_ACCOUNT_ROLES, LDAP_DYNAMIC_CREDENTIALS, LDAP_LIBRARY_ACCOUNTS, LDAP_LIBRARY_WAITERS, LDAP_ROTATION_FAILURES, LDAP_ROTATION_OVERDUE, LDAP_STATIC_ROLES, LDAP_STATIC_ROLES_FAILING, outstandingLeases, shared,
} from '../../telemetry/families.ts';
import type { LdapEngine } from './engine.ts';
import { allLibrarySetNames, readAccount, readLibrarySet } from './library-store.ts';
import { roleState } from './dual-account.ts';
import { readRotationFailures } from './rotation-failures.ts';
import { roleSchedule } from './static-role-rotation.ts';
import { readStaticRoles } from './static-role-store.ts';

export function registerLdapGauges(engine: LdapEngine): void {
  const { metrics } = engine.ctx;
  const health = shared(() => rotationHealth(engine));
  metrics.gauge(LDAP_STATIC_ROLES, async () => [{ labels: {}, value: (await health()).roles }]);
  metrics.gauge(LDAP_DUAL_ACCOUNT_ROLES, async () => {
    const states = (await health()).dualStates;
    return (['active', 'grace_period'] as const).map((state) => ({ labels: { state }, value: states.filter((s) => s === state).length }));
  });
  metrics.gauge(LDAP_STATIC_ROLES_FAILING, async () => [{ labels: {}, value: (await health()).failing }]);
  metrics.gauge(LDAP_ROTATION_OVERDUE, async () => [{ labels: {}, value: (await health()).overdueSeconds }]);
  metrics.gauge(LDAP_ROTATION_FAILURES, async () => {
    const kinds = [...(await health()).failures.values()].map((f) => f.kind);
    return (['rotation', 'drift'] as const).map((kind) => ({ labels: { kind }, value: kinds.filter((k) => k === kind).length }));
  });
  metrics.gauge(LDAP_LIBRARY_ACCOUNTS, () => libraryAccounts(engine));
  metrics.gauge(LDAP_LIBRARY_WAITERS, async () => Promise.all((await allLibrarySetNames(engine.storage)).map(async (set) => ({ labels: { set }, value: await engine.libraryWaiters(set) }))));
  metrics.gauge(LDAP_DYNAMIC_CREDENTIALS, outstandingLeases(engine.ctx.system, 'creds/'));
}

/**
 * One pass over the static roles per scrape. A role is overdue from the occurrence its pending rotation belongs to
 * (due_at: a failing role's retries keep it, and so does a rotation whose window closed while no node led), so the
 * gauge grows until a rotation succeeds; a role rotated only by hand is never overdue.
 */
async function rotationHealth(engine: LdapEngine) {
  const now = engine.clock.now();
  const roles = await readStaticRoles(engine.storage);
  const oldestDue = Math.min(now, ...roles.filter((r) => roleSchedule(r).kind !== 'manual').map((r) => r.due_at));
  return {
    roles: roles.length,
    failing: roles.filter((r) => r.failed_attempts > 0).length,
    dualStates: roles.filter((r) => r.dual_account_mode).map((r) => roleState(r, now)),
    overdueSeconds: (now - oldestDue) / 1000,
    failures: await readRotationFailures(engine, roles),
  };
}

async function libraryAccounts(engine: LdapEngine): Promise<Array<{ labels: { set: string; state: 'available' | 'lent' | 'returning' }; value: number }>> {
  const out: Array<{ labels: { set: string; state: 'available' | 'lent' | 'returning' }; value: number }> = [];
  for (const set of await allLibrarySetNames(engine.storage)) {
    const members = (await readLibrarySet(engine.storage, set))?.service_account_names ?? [];
    const states = await Promise.all(members.map(async (name) => (await readAccount(engine.storage, name))?.state.state));
    for (const state of ['available', 'lent', 'returning'] as const) out.push({ labels: { set, state }, value: states.filter((s) => s === state).length });
  }
  return out;
}
