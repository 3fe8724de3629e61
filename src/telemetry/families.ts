/**
 * The metric families engines record, in one list (docs/telemetry.md describes each). Every one carries the
 * `mount` label, added by the mount's MountMetrics; the labels declared here are the others, typed with the values
 * they may take. Label values come from bounded sets only: a result, a reason, an API, an HTTP status, or a name the
 * operator created (a library set). Never a role name, a lease id or anything a client can invent without limit.
 */
import type { Family, Labels, MountMetrics, SystemView } from '../core/framework.ts';

export type Result = 'success' | 'failure';

const counter = <L extends Labels = Record<never, string>>(name: string, help: string, labels: ReadonlyArray<keyof L & string> = []): Family<L> => ({ name, help, type: 'counter', labels });
const gauge = <L extends Labels = Record<never, string>>(name: string, help: string, labels: ReadonlyArray<keyof L & string> = []): Family<L> => ({ name, help, type: 'gauge', labels });

export const ROTATE_ROOT = counter<{ result: Result }>('strongroom_rotate_root_total', 'rotate-root attempts of an engine\'s own credential, by result.', ['result']);
export const ROOT_ROTATIONS_SCHEDULED = counter<{ result: Result }>(
  'strongroom_root_rotations_scheduled_total', 'Automated (rotation_period / rotation_schedule) rotations of an engine\'s own credential, by result.', ['result']);

export const LDAP_STATIC_ROTATIONS = counter<{ result: Result }>(
  'strongroom_ldap_static_role_rotations_total', 'Static-role password rotations (scheduled and rotate-role), by result.', ['result']);
export const LDAP_STATIC_ROLES = gauge('strongroom_ldap_static_roles', 'Static roles of the mount.');
export const LDAP_DUAL_ACCOUNT_ROLES = gauge<{ state: 'active' | 'grace_period' }>(
  'strongroom_ldap_dual_account_roles', 'Dual-account static roles by state: active, or grace_period (the previously active account still holds a served password).', ['state']);
export const LDAP_STATIC_ROLES_FAILING = gauge('strongroom_ldap_static_roles_failing', 'Static roles whose last rotation failed.');
export const LDAP_ROTATION_FAILURES = gauge<{ kind: 'rotation' | 'drift' }>(
  'strongroom_ldap_rotation_failures', 'Entries of LIST rotation-failures by kind: rotation (a static role whose rotation keeps failing) or drift (an account whose password the directory no longer takes).', ['kind']);
export const LDAP_ROTATION_OVERDUE = gauge(
  'strongroom_ldap_static_role_rotation_overdue_seconds', 'How long the most overdue static-role rotation has been due (0 when none is).');
export const LDAP_LIBRARY_ACCOUNTS = gauge<{ set: string; state: 'available' | 'lent' | 'returning' }>(
  'strongroom_ldap_library_accounts', 'Library accounts by set and state (returning: being checked in).', ['set', 'state']);
/** none_free: no account free and no `wait`; queue_full: the set's waiters at STRONGROOM_LIBRARY_MAX_WAITERS; wait_expired: the `wait` ended first. */
export type LibraryRefusal = 'none_free' | 'queue_full' | 'wait_expired';
export const LDAP_LIBRARY_REFUSED = counter<{ set: string; reason: LibraryRefusal }>(
  'strongroom_ldap_library_checkouts_refused_total', 'Check-outs refused for want of an account, by set and reason (none_free, queue_full, wait_expired).', ['set', 'reason']);
export const LDAP_LIBRARY_WAIT_SECONDS: Family = {
  name: 'strongroom_ldap_library_wait_seconds', type: 'histogram', labels: [],
  help: 'How long check-outs that asked to wait (wait > 0) waited before an account was lent or the wait ended.',
  buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600],
};
export const LDAP_LIBRARY_WAITERS = gauge<{ set: string }>(
  'strongroom_ldap_library_waiters', 'Check-outs waiting for an account of the set, on every node.', ['set']);
export type DriftTarget = 'static_role' | 'library';
export const LDAP_DRIFT_VERIFICATIONS = counter<{ target: DriftTarget; result: 'verified' | 'drifted' | 'error' }>(
  'strongroom_ldap_drift_verifications_total', 'Drift verification binds with the password the server holds, by kind of account and result (drifted: the directory refused the password; error: no answer, not counted as drift).', ['target', 'result']);
export const LDAP_DRIFT_TAKEBACKS = counter<{ target: DriftTarget; result: Result }>(
  'strongroom_ldap_drift_takebacks_total', 'Drifted accounts given a new password by the server (drift_action rotate), by kind of account and result.', ['target', 'result']);
export type DirectoryWriteTarget = DriftTarget | 'bind_account';
/** unknown: no answer came; refused: assertionFailed; fenced: this node stopped leading; unrecorded: the record failed; grace_end: before a previous bind password is erased. */
export type DirectoryWriteOutcome = 'unknown' | 'refused' | 'fenced' | 'unrecorded' | 'grace_end';
export const LDAP_DIRECTORY_VERIFICATIONS = counter<{ target: DirectoryWriteTarget; outcome: DirectoryWriteOutcome; result: 'verified' | 'pending' | 'repaired' | 'repair_failed' | 'error' }>(
  'strongroom_ldap_directory_verifications_total', 'Verification binds after a directory password write that was not recorded as applied (or before a previous bind password is erased), by kind of account, what happened to the write, and result (pending: the directory holds the unfinished change\'s password; repaired: it held neither, and the recorded password was written again through the bind account).', ['target', 'outcome', 'result']);
export const LDAP_DYNAMIC_CREDENTIALS = gauge('strongroom_ldap_dynamic_credentials', 'Dynamic-role credentials outstanding (leases not yet revoked).');

export type ProviderApi = 'graph' | 'arm_authorization' | 'arm_compute';
export type RetryReason = 'throttled' | 'server' | 'network' | 'replication';
export const CLOUD_PROVIDER_REQUESTS = counter<{ api: ProviderApi; status: string }>(
  'strongroom_cloud_provider_requests_total', 'HTTP requests to the cloud provider, by API and status (network_error when no answer came).', ['api', 'status']);
export const CLOUD_PROVIDER_RETRIES = counter<{ api: ProviderApi; reason: RetryReason }>(
  'strongroom_cloud_provider_retries_total', 'Provider calls retried, by API and reason (throttled: 429).', ['api', 'reason']);
export const CLOUD_STATIC_ROTATIONS = counter<{ result: Result }>('strongroom_cloud_static_role_rotations_total', 'Scheduled cloud static-role steps that added a secret or failed, by result.', ['result']);
export const CLOUD_STATIC_EXPIRY = gauge<{ role: string }>('strongroom_cloud_static_role_expiry_seconds', 'Seconds until the client secret a cloud static role serves expires (negative: expired), by role (an operator-created name).', ['role']);
export const CLOUD_STATIC_FAILING = gauge('strongroom_cloud_static_roles_failing', 'Cloud static roles whose last rotation step failed (LIST rotation-failures).');
export const CLOUD_CREDENTIALS = gauge('strongroom_cloud_credentials', 'Cloud credentials outstanding (leases not yet revoked).');

export type LoginFailure = 'invalid_request' | 'unknown_role' | 'bound_cidrs' | 'not_configured' | 'jwt' | 'bound_principal' | 'resource' | 'upstream';
export const CLOUD_LOGIN_FAILURES = counter<{ reason: LoginFailure }>('strongroom_cloud_login_failures_total', 'Cloud logins refused, by the check that refused them.', ['reason']);

/** Runs `attempt` and counts it in a `{ result }` family: success when it resolved, failure when it threw. */
export async function counted<T>(metrics: MountMetrics, family: Family<{ result: Result }>, attempt: () => Promise<T>): Promise<T> {
  let result: Result = 'failure';
  try {
    const out = await attempt();
    result = 'success';
    return out;
  } finally {
    metrics.counter(family).inc({ result });
  }
}

/** A gauge reader: how many of the mount's leases below `prefix` are outstanding (credentials not yet revoked). */
export function outstandingLeases(system: Pick<SystemView, 'leaseIds'>, prefix: string): () => Promise<Array<{ labels: Record<never, string>; value: number }>> {
  return async () => [{ labels: {}, value: (await system.leaseIds(prefix)).length }];
}

/** One reading at a time: callers that arrive while it runs share it (several gauges of one scrape, one pass over storage). */
export function shared<T>(read: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined;
  return () => (running ??= read().finally(() => (running = undefined)));
}
