/**
 * The rotation of one static role (used by the scheduler, `rotate-role`, drift take-back and the endpoint's import)
 * and the leader's schedule of them all (src/lib/rotation-schedule.ts has the rules, docs/rotation.md the guarantees).
 */
import { ConflictError, StrongroomError } from '../../core/errors.ts';
import { GuardError, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import { nextDue, storedSchedule, whenToRun, type RotationSchedule } from '../../lib/rotation-schedule.ts';
import { dnEquals } from '../../providers/ldap/dn.ts';
import { LDAP_STATIC_ROTATIONS } from '../../telemetry/families.ts';
import type { LdapEngine } from './engine.ts';
import { FencedWriteError, type RecordedPassword } from './directory-writes.ts';
import { clearDriftOp } from './drift-marks.ts';
import {
  GracePeriodError, accountOf, accountTarget, changedFields, dualIntent, encodeIntent, graceToClose, parseIntent, switchHold, withGraceEnd, type AccountId,
  type DualRotateOptions,
} from './dual-account.ts';
import { changePasswordWithWal, listWalTargets, readWal, walKey } from './rotation.ts';
import { retryDelayMs } from './scheduler.ts';
import { changeEvents, graceEndEvent } from './static-role-events.ts';
import {
  STATIC_ROLE_PREFIX as PREFIX, editStaticRole, listStaticRoleNames, putStaticRoleOp, readStaticRole, readStaticRoleSnapshot, staticRoleKey,
  staticRoleOwner as owner, staticRoleTarget, type StaticRole,
} from './static-role-store.ts';

// ---- schedule --------------------------------------------------------------------------------------

export const roleSchedule = (role: StaticRole): RotationSchedule => storedSchedule(role);

/**
 * When the role's next attempt runs, and the occurrence it belongs to; undefined when nothing runs it but a rotation
 * by hand. `walPending`: a write-ahead entry of this role exists.
 *
 * An unfinished change with no failure recorded (the server stopped mid-rotation) finishes as soon as a leader finds
 * it, and so does one whose password the directory already took (password_unrecorded; retried on the backoff by the
 * node that failed): neither sets a new password, they record the one the directory may have, so neither waits for
 * a window or needs automation. Everything else follows whenToRun from the stored due time, a failing role no
 * earlier than its backoff allows: so a restart or a new leader neither runs a rotation early nor skips one that came
 * due meanwhile, and a retry never starts outside the window of its occurrence (it waits for the next occurrence
 * instead, still failing).
 */
export function plannedRotation(role: StaticRole, now: number, walPending = false): { runAt: number; dueMs: number } | undefined {
  if (walPending && (role.failed_attempts === 0 || role.password_unrecorded)) return { runAt: now, dueMs: role.due_at };
  if (role.password_unrecorded) return { runAt: Math.max(now, role.next_rotation), dueMs: role.due_at };
  // A dual-account role does not switch again before the grace of its last switch ended.
  return whenToRun(roleSchedule(role), role.due_at, Math.max(now, role.next_rotation, switchHold(role)));
}

/** The leader's next run for the role: its rotation, or before it the end of a dual-account role's grace (its reset, or its report). */
const plannedWork = (role: StaticRole, now: number, walPending = false) => withGraceEnd(role, now, plannedRotation(role, now, walPending));

/** Puts the role on the leader's schedule at its planned time, or off it. */
export function reschedule(engine: LdapEngine, role: StaticRole, walPending = false): void {
  const plan = plannedWork(role, engine.clock.now(), walPending);
  if (plan) engine.scheduler.schedule(role.name, plan.runAt);
  else engine.scheduler.unschedule(role.name);
}

/** The first due time of a schedule that starts (or changes) now: a period counts from the last rotation. */
export function firstDue(role: StaticRole, now: number): number {
  const schedule = roleSchedule(role);
  return nextDue(schedule, schedule.kind === 'period' ? role.last_rotation || now : now) ?? 0;
}

// ---- rotation --------------------------------------------------------------------------------------

/** How a rotation is asked for: `scheduled` below; the rest is dual-account.ts's, but `fence`, the leader's for work off its schedule (drift take-back). */
export type RotateOptions = Partial<DualRotateOptions> & { fence?: PreparedWrite };

/**
 * Rotates one role now under its lock. On failure the role records the error and is rescheduled with
 * backoff; the error is rethrown for a manual caller. A success also clears the changed account's drift mark: the
 * directory has the password the server just set. A dual-account role changes its standby (dual-account.ts).
 *
 * `scheduled` is the leader's schedule: it rotates only a role whose planned time has come (the schedule may be older
 * than a rotation by hand on another node, or than a closed window) and only while this node leads (the fence).
 * `fence` alone is other leader work (drift take-back): any time, but only while this node leads.
 * Undefined when there was nothing to rotate, or this node stopped leading.
 */
export async function rotateStaticRole(engine: LdapEngine, name: string, { scheduled = false, force = false, takeBack, fence, importStandby = false }: RotateOptions = {}): Promise<StaticRole | undefined> {
  return engine.locks.run(staticRoleKey(name), async () => {
    const snapshot = await readStaticRoleSnapshot(engine.storage, name);
    if (!snapshot) {
      engine.scheduler.unschedule(name);
      return undefined;
    }
    const { role } = snapshot;
    const now = engine.clock.now();
    const target = staticRoleTarget(name);
    const wal = await readWal(engine.storage, target);
    // A rotation by hand is an occurrence of its own: its retries keep to the window that starts now.
    let dueMs = now;
    if (scheduled) {
      const plan = plannedWork(role, now, wal !== undefined);
      if (!plan || plan.runAt > now) {
        if (plan) engine.scheduler.schedule(name, plan.runAt);
        else engine.scheduler.unschedule(name);
        return undefined;
      }
      dueMs = plan.dueMs;
      if (!wal && graceToClose(role, now)) return closeGrace(engine, role, snapshot.raw);
    }
    let searchedDn: string | undefined;
    // Set once the directory took the new password: a failure after that only failed to record it.
    let applied = false;
    let id: AccountId = 'a';
    let committedIntent: string | undefined;
    try {
      // A dual-account role changes one account, the standby (dual-account.ts); a plain role its only one, a.
      const intent = role.dual_account_mode ? await dualIntent(engine.storage, role, target, wal, now, { scheduled, force, takeBack, importStandby }) : undefined;
      if (intent === null) return undefined;
      id = intent?.account ?? 'a';
      const account = accountOf(role, id);
      let rotated: StaticRole = role;
      const changed = await changePasswordWithWal(engine, {
        target: staticRoleTarget(name),
        account: { dn: account.dn || undefined, username: account.username },
        knownDn: account.resolvedDn || undefined,
        passwordPolicy: role.password_policy || undefined,
        intent: intent && encodeIntent(intent),
        // A DN found by a new search is claimed before its entry changes: another role or set may manage it.
        found: async (dn) => {
          await engine.accounts.claim(owner(name), [{ dn }]);
          searchedDn = dn;
        },
        commit: (password, dn, walIntent) => {
          applied = true;
          committedIntent = walIntent;
          rotated = changedRecord(role, id, password, dn, walIntent, engine.clock.now());
          return [putStaticRoleOp(rotated), clearDriftOp(accountTarget(target, id))];
        },
        // Recorded over the role as read: an update or another rotation meanwhile fails this record (the WAL keeps the password).
        commitConditions: [{ key: staticRoleKey(name), expected: snapshot.raw }],
        commitAlongside: async () => changeEvents(engine, role, rotated, committedIntent, scheduled ? 'periodic' : 'update'),
        fence: scheduled ? engine.ctx.system.fence() : fence,
        recorded: () => recordedPassword(engine.storage, name, id),
      });
      // The fence failed: this node no longer leads, and the leader's schedule has the role.
      if (!changed) return undefined;
      if (searchedDn !== undefined) await releaseStaleDn(engine, name, account.resolvedDn, searchedDn);
      engine.ctx.metrics.counter(LDAP_STATIC_ROTATIONS).inc({ result: 'success' });
      reschedule(engine, rotated);
      engine.ctx.logger.info({ role: name, scheduled, ...(intent ? { change: encodeIntent(intent) } : {}) }, 'static role rotated');
      return rotated;
    } catch (err) {
      // Refused before anything began (dual-account.ts): nothing to record or retry.
      if (err instanceof GracePeriodError) throw err;
      // The claim of a newly found DN is only kept once the role records that DN.
      if (searchedDn !== undefined) await releaseStaleDn(engine, name, searchedDn, accountOf(role, id).resolvedDn);
      // Leader work of a node that no longer leads: the leader's schedule has the role (and its WAL, if any).
      if (err instanceof FencedWriteError) {
        engine.ctx.logger.warn({ role: name, err: { message: err.message } }, 'static role rotation stopped: this node no longer leads');
        return undefined;
      }
      // Another node rotated the role at the same time, with the same password (it found this change's WAL, or this
      // change found its): that rotation is this one's, recorded once.
      const stored = err instanceof ConflictError ? await readStaticRole(engine.storage, name).catch(() => undefined) : undefined;
      if (stored && stored.last_rotation > role.last_rotation) {
        reschedule(engine, stored);
        return stored;
      }
      await recordFailure(engine, role, err, { dueMs, applied });
      throw err;
    }
  });
}

/** The password static-cred serves for the role and the entry it is for (verified by directory-writes.ts). */
async function recordedPassword(storage: StorageView, name: string, id: AccountId): Promise<RecordedPassword | undefined> {
  const role = await readStaticRole(storage, name);
  const account = role && accountOf(role, id);
  const dn = account && (account.resolvedDn || account.dn);
  return account?.password && dn ? { dn, password: account.password } : undefined;
}

/** Releases the registry claim of `stale` unless it names the same entry as `kept`; best effort (logged). */
async function releaseStaleDn(engine: LdapEngine, name: string, stale: string, kept: string): Promise<void> {
  if (!stale || (kept && dnEquals(stale, kept))) return;
  await engine.accounts.release(owner(name), [{ dn: stale }]).catch((err: unknown) => {
    engine.ctx.logger.warn({ role: name, err: { message: (err as Error).message } }, 'releasing the registry claim of a moved entry failed');
  });
}

/** The role as a rotation at `at` to `password` leaves it: no failure, next due by its schedule. */
export function rotatedRecord(role: StaticRole, password: string, at: number): StaticRole {
  const due = nextDue(roleSchedule(role), at) ?? 0;
  return {
    ...role, password, last_password: role.password, last_rotation: at, next_rotation: due, due_at: due,
    last_error: '', last_error_time: 0, failed_attempts: 0, failing_since: 0, password_unrecorded: false,
  };
}

/**
 * The role after `password` was set on account `id` at `at`. A dual-account role records what its write-ahead entry's
 * intent says (dual-account.ts: a switch, a reset, an import), which must be a change of that account.
 */
function changedRecord(role: StaticRole, id: AccountId, password: string, dn: string, walIntent: string, at: number): StaticRole {
  if (!role.dual_account_mode) return { ...rotatedRecord(role, password, at), resolved_dn: role.dn ? role.resolved_dn : dn };
  const intent = parseIntent(walIntent);
  // Another node began a different change between this one's read and its write-ahead entry: not recorded; its entry is finished by the next attempt.
  if (intent?.account !== id) throw new ConflictError(`the unfinished change of static role "${role.name}" is not the one this rotation began; the next attempt finishes it`);
  const { fields, rotation } = changedFields(role, intent, password, dn, at);
  // A reset is no rotation: the due time stays, and only the failure it may have had clears.
  const base = rotation ? rotatedRecord(role, role.password, at) : { ...rotatedRecord(role, role.password, role.last_rotation), next_rotation: role.due_at, due_at: role.due_at };
  return { ...base, last_password: role.last_password, ...fields };
}

/** How an attempt failed: the occurrence it belonged to, and whether the directory had taken its password. */
interface FailedAttempt {
  dueMs: number;
  applied: boolean;
}

/** The role after a failed attempt at `now`. */
function failedRecord(engine: LdapEngine, role: StaticRole, err: unknown, now: number, { dueMs, applied }: FailedAttempt): StaticRole {
  const attempts = role.failed_attempts + 1;
  return {
    ...role,
    // A StrongroomError's message is written for clients (scrubbed of credentials); anything else may not be.
    last_error: err instanceof StrongroomError ? err.message : 'internal error',
    last_error_time: now,
    failing_since: role.failed_attempts > 0 ? role.failing_since || role.last_error_time : now,
    failed_attempts: attempts,
    next_rotation: now + retryDelayMs(attempts, engine.options.retryBaseMs, engine.options.retryMaxMs),
    due_at: dueMs,
    password_unrecorded: applied,
  };
}

/** The `ldap/rotate-fail` event of a failed attempt: its error is the one the role records, written for clients. */
function rotateFailEvent(engine: LdapEngine, role: StaticRole): PreparedWrite {
  return engine.ctx.system.event('ldap/rotate-fail', { modified: 'false', operation: 'update', path: `rotate-role/${role.name}`, name: role.name, error: role.last_error, attempts: String(role.failed_attempts) });
}

/** Records a failed attempt on the role (as stored now; `read` if storage fails too) and plans its retry. */
export async function recordFailure(engine: LdapEngine, read: StaticRole, err: unknown, attempt: FailedAttempt): Promise<void> {
  engine.ctx.metrics.counter(LDAP_STATIC_ROTATIONS).inc({ result: 'failure' });
  const now = engine.clock.now();
  let failed = failedRecord(engine, read, err, now, attempt);
  try {
    const stored = await editStaticRole(engine.storage, read.name, (role) => failedRecord(engine, role, err, now, attempt), (role) => [rotateFailEvent(engine, role)]);
    // A role deleted meanwhile stops here: nothing retries it.
    if (!stored) return engine.scheduler.unschedule(read.name);
    failed = stored;
  } catch {
    // Storage is what failed: the in-memory schedule still retries, planned from the role as read.
  }
  engine.ctx.logger.warn({ role: read.name, attempts: failed.failed_attempts, retry_at: failed.next_rotation, error: failed.last_error }, 'static role rotation failed');
  reschedule(engine, failed);
}

/**
 * The leader's schedule from storage: every role at its planned time (plannedRotation: a rotation that came due while
 * no node led runs now if its window is still open), a role with an unfinished rotation at once (its WAL password
 * finishes it). Runs when this node takes over, and on a shared store again every few seconds, since roles are
 * created, updated and rotated by hand on other nodes too. WALs of roles that no longer exist go.
 */
export async function scheduleStaticRoles(engine: LdapEngine): Promise<void> {
  const names = await listStaticRoleNames(engine.storage);
  const pending = new Set(await listWalTargets(engine.storage, PREFIX));
  const now = engine.clock.now();
  for (const name of names) {
    const role = await readStaticRole(engine.storage, name);
    if (!role) continue;
    reschedule(engine, role, pending.delete(staticRoleTarget(name)));
  }
  for (const target of pending) {
    const key = walKey(target);
    // Unless the role was created meanwhile (its WAL is written with it).
    if (await readStaticRole(engine.storage, target.slice(PREFIX.length))) continue;
    await engine.storage.transaction([{ type: 'delete', key }], [{ key: staticRoleKey(target.slice(PREFIX.length)), expected: undefined }], [engine.ctx.system.fence()]);
  }
}

/**
 * The end of a `standby_action: keep` grace, which changes no password: recorded (its end cleared, which reads the
 * same once it passed) with its `ldap/dual-account-grace-end` over the role as read, fenced, so it is reported once
 * by whichever node leads. Undefined, as a scheduled run with nothing rotated.
 */
async function closeGrace(engine: LdapEngine, role: StaticRole, raw: Buffer): Promise<undefined> {
  const closed: StaticRole = { ...role, grace_period_end: 0 };
  const written = await engine.storage.transaction([putStaticRoleOp(closed)], [{ key: staticRoleKey(role.name), expected: raw }], [engine.ctx.system.fence(), graceEndEvent(engine, role, 'periodic')])
    .catch((err: unknown) => {
      if (err instanceof GuardError) return false;
      throw err;
    });
  reschedule(engine, written ? closed : role);
  return undefined;
}
