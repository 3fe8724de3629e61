/**
 * `static-role/:name`: existing directory accounts whose password the server rotates on a period or a cron schedule
 * (src/lib/rotation-schedule.ts has the rules, docs/rotation.md the guarantees). Also the rotation of one role (used
 * by the scheduler, `rotate-role` and drift take-back) and the leader's schedule.
 */
import { z } from 'zod';
import { BadRequestError, ConflictError, StrongroomError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, lowerName } from '../../core/framework.ts';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import { dnEquals, isValidDn } from '../../providers/ldap/dn.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import { ScheduleError, nextDue, resolveSchedule, sameSchedule, storedSchedule, storedScheduleFields, whenToRun, type RotationSchedule, type ScheduleFields } from '../../lib/rotation-schedule.ts';
import { dnKey, refuseBindAccount, usernameKey, type AccountIdentity, type AccountOwner } from './accounts.ts';
import { missingConfigError, readConfig } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { FencedWriteError, type RecordedPassword } from './directory-writes.ts';
import { clearDriftOp } from './drift-marks.ts';
import {
  GracePeriodError, accountIdentity, accountOf, accountTarget, changedFields, claimAccounts, driftReadData, dualAccountFields, dualAccountShape, dualIntent, dualReadData,
  dualSettingsOnCreate, dualSettingsOnUpdate, encodeIntent, managedAccounts, parseIntent, resolveAccountB, sentDualFields, switchHold, withReset, type AccountId, type DualRotateOptions,
} from './dual-account.ts';
import { UnrecordedPasswordError, changePasswordWithWal, listWalTargets, readWal, walKey } from './rotation.ts';
import { retryDelayMs } from './scheduler.ts';
import { LDAP_STATIC_ROTATIONS } from '../../telemetry/families.ts';

/** Role and set names: a word character, optionally followed by [\w-./]* ending in a word character. */
export const NAME_PATTERN = '\\w(?:[\\w\\-./]*\\w)?';
export const MIN_ROTATION_PERIOD = 5;

const PREFIX = 'static-role/';

const staticRoleSchema = z.object({
  name: z.string(),
  username: z.string(),
  /** DN given by the operator ("" = find by username). */
  dn: z.string().default(''),
  /**
   * DN the account was last found at: claimed in the registry, and where rotations write without searching
   * again. Updated when a rotation finds a username-addressed entry moved (or, for a role created without a
   * config, at its first rotation).
   */
  resolved_dn: z.string().default(''),
  /** Seconds; 0 = none (a schedule, or automation disabled). Records of earlier versions have only this. */
  rotation_period: z.number().int().default(0),
  /** Standard 5-field cron in UTC; "" = none. */
  rotation_schedule: z.string().default(''),
  /** Seconds after an occurrence within which its rotation may start; 0 = any time. */
  rotation_window: z.number().int().default(0),
  disable_automated_rotation: z.boolean().default(false),
  /** Overrides the config's password_policy for this account; "" = the config's. */
  password_policy: z.string().default(''),
  password: z.string().default(''),
  last_password: z.string().default(''),
  /** Unix ms; 0 = never rotated by the server (imported with skip_import_rotation). */
  last_rotation: z.number().default(0),
  /** Unix ms the next attempt may run: the due time, or while failing the backoff's retry time; 0 = never (manual). */
  next_rotation: z.number(),
  /**
   * Unix ms of the occurrence the pending rotation belongs to: equal to next_rotation until an attempt fails, then
   * kept, since a retry may start only inside that occurrence's window. Records of earlier versions lack it.
   */
  due_at: z.number().optional(),
  last_error: z.string().default(''),
  last_error_time: z.number().default(0),
  failed_attempts: z.number().int().default(0),
  /** Unix ms of the first failure since the last success; 0 = not failing (or recorded by an earlier version). */
  failing_since: z.number().default(0),
  /**
   * The last attempt's password reached the directory but was not recorded (its write-ahead entry holds it): its retry
   * only records what the directory already has, so it is no new rotation and is not held to the window.
   */
  password_unrecorded: z.boolean().default(false),
  /** Dual-account (blue/green) roles: dual-account.ts. */
  ...dualAccountShape,
}).transform((role) => ({ ...role, due_at: role.due_at ?? role.next_rotation }));
export type StaticRole = z.output<typeof staticRoleSchema>;

export const staticRoleKey = (name: string): string => PREFIX + name;
export const staticRoleTarget = (name: string): string => PREFIX + name;

export async function readStaticRole(storage: StorageView, name: string): Promise<StaticRole | undefined> {
  return (await readStaticRoleSnapshot(storage, name))?.role;
}

/** The role with the bytes it was read from, for a write that must not overwrite another node's (a rotation's record). */
export async function readStaticRoleSnapshot(storage: StorageView, name: string): Promise<{ role: StaticRole; raw: Buffer } | undefined> {
  const raw = await storage.get(staticRoleKey(name));
  return raw && { role: staticRoleSchema.parse(JSON.parse(raw.toString('utf8'))), raw };
}

export function putStaticRoleOp(role: StaticRole): StorageOp {
  return { type: 'put', key: staticRoleKey(role.name), value: jsonBytes(staticRoleSchema.parse(role)) };
}

/** Writes the role over exactly `expected` (undefined: where there is none); false when it changed meanwhile. */
export async function writeStaticRole(storage: StorageView, role: StaticRole, expected: Buffer | undefined): Promise<boolean> {
  return storage.transaction([putStaticRoleOp(role)], [{ key: staticRoleKey(role.name), expected }]);
}

/**
 * Applies `edit` to the role as stored, by compare-and-set: another node may record a rotation at any moment, and a
 * write built on the role read before it would put the previous password back. Undefined when there is no role.
 */
async function editStaticRole(storage: StorageView, name: string, edit: (role: StaticRole) => StaticRole): Promise<StaticRole | undefined> {
  for (let attempt = 0; attempt < 8; attempt++) {
    const current = await readStaticRoleSnapshot(storage, name);
    if (!current) return undefined;
    const next = edit(current.role);
    if (await writeStaticRole(storage, next, current.raw)) return next;
  }
  throw new ConflictError(`the static role "${name}" kept changing while it was being updated; try again`);
}

export async function listStaticRoleNames(storage: StorageView): Promise<string[]> {
  return (await storage.listRecursive(PREFIX)).map((k) => k.slice(PREFIX.length));
}

/** Every static role of the mount, read now (one deleted between the list and its read is left out). */
export async function readStaticRoles(storage: StorageView): Promise<StaticRole[]> {
  return (await Promise.all((await listStaticRoleNames(storage)).map((name) => readStaticRole(storage, name)))).filter((r) => r !== undefined);
}

const owner = (name: string): AccountOwner => ({ kind: 'static-role', name });
/** The directory account a role manages, by every name stored for it. */
export const staticRoleAccount = (role: Pick<StaticRole, 'username' | 'dn' | 'resolved_dn'>): AccountIdentity =>
  ({ username: role.username, dn: role.resolved_dn || role.dn || undefined });
const identities = (role: StaticRole): AccountIdentity[] => managedAccounts(role).map((id) => accountIdentity(role, id));

export const rfc3339 = (ms: number): string => (ms > 0 ? new Date(ms).toISOString() : '0001-01-01T00:00:00Z');

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

/** The leader's next run for the role: its rotation, or before it the reset a dual-account role owes when a grace ends. */
const plannedWork = (role: StaticRole, now: number, walPending = false) => withReset(role, now, plannedRotation(role, now, walPending));

/** Puts the role on the leader's schedule at its planned time, or off it. */
function reschedule(engine: LdapEngine, role: StaticRole, walPending = false): void {
  const plan = plannedWork(role, engine.clock.now(), walPending);
  if (plan) engine.scheduler.schedule(role.name, plan.runAt);
  else engine.scheduler.unschedule(role.name);
}

/** The first due time of a schedule that starts (or changes) now: a period counts from the last rotation. */
function firstDue(role: StaticRole, now: number): number {
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
    }
    let searchedDn: string | undefined;
    // Set once the directory took the new password: a failure after that only failed to record it.
    let applied = false;
    let id: AccountId = 'a';
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
          rotated = changedRecord(role, id, password, dn, walIntent, engine.clock.now());
          return [putStaticRoleOp(rotated), clearDriftOp(accountTarget(target, id))];
        },
        // Recorded over the role as read: an update or another rotation meanwhile fails this record (the WAL keeps the password).
        commitConditions: [{ key: staticRoleKey(name), expected: snapshot.raw }],
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
function rotatedRecord(role: StaticRole, password: string, at: number): StaticRole {
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

/** Records a failed attempt on the role (as stored now; `read` if storage fails too) and plans its retry. */
async function recordFailure(engine: LdapEngine, read: StaticRole, err: unknown, attempt: FailedAttempt): Promise<void> {
  engine.ctx.metrics.counter(LDAP_STATIC_ROTATIONS).inc({ result: 'failure' });
  const now = engine.clock.now();
  let failed = failedRecord(engine, read, err, now, attempt);
  try {
    const stored = await editStaticRole(engine.storage, read.name, (role) => failedRecord(engine, role, err, now, attempt));
    // A role deleted meanwhile stops here: nothing retries it.
    if (!stored) return engine.scheduler.unschedule(read.name);
    failed = stored;
  } catch {
    // Storage is what failed: the in-memory schedule still retries, planned from the role as read.
  }
  engine.ctx.logger.warn({ role: read.name, attempts: failed.failed_attempts, retry_at: failed.next_rotation, error: failed.last_error }, 'static role rotation failed');
  reschedule(engine, failed);
}

// ---- endpoint --------------------------------------------------------------------------------------

const roleFields = {
  username: field.string('Name of the existing entry, matched against userattr under userdn. Cannot change after creation.', { matchKey: usernameKey }),
  dn: field.string('DN of the entry; when set it is used instead of the username search. Cannot change after creation.', { matchKey: dnKey }),
  rotation_period: field.duration('How often the password is rotated (duration or seconds, at least 5s). Exclusive with rotation_schedule.'),
  rotation_schedule: field.string('When the password is rotated: a standard 5-field cron expression in UTC (e.g. "0 2 * * 6"). Exclusive with rotation_period.'),
  rotation_window: field.duration('With rotation_schedule: a due rotation starts only within this long after its occurrence, else waits for the next (at least 1h).'),
  disable_automated_rotation: field.bool('Only rotate-role changes the password; rotation_period and rotation_schedule may then be absent.'),
  password_policy: field.string('Name of the password policy for this role\'s passwords; overrides the config\'s. Must exist.', { maxLength: 256 }),
  skip_import_rotation: field.bool('Do not rotate on creation; the password is unknown until the first rotation. Default from the config.'),
  ...dualAccountFields,
};

type RoleRequest = BackendRequest<typeof roleFields>;

/** The schedule fields the request sends, as resolveSchedule takes them. */
function sentScheduleFields(req: RoleRequest): ScheduleFields {
  const sent: ScheduleFields = {};
  for (const k of ['rotation_period', 'rotation_window', 'rotation_schedule', 'disable_automated_rotation'] as const) {
    if (req.has(k)) (sent as Record<string, unknown>)[k] = req.data[k];
  }
  return sent;
}

/** The stored schedule fields after applying what the request sent to `current`; a 400 naming the fields when invalid. */
function validateSchedule(sent: ScheduleFields, current: StaticRole | undefined): Pick<StaticRole, 'rotation_period' | 'rotation_schedule' | 'rotation_window' | 'disable_automated_rotation'> {
  try {
    const resolved = resolveSchedule(sent, { minPeriod: MIN_ROTATION_PERIOD, current: current && storedScheduleFields(current) });
    return {
      rotation_period: resolved.rotation_period ?? 0,
      rotation_schedule: resolved.schedule.kind === 'cron' ? resolved.schedule.schedule : (resolved.rotation_schedule ?? '').trim(),
      rotation_window: resolved.rotation_window ?? 0,
      disable_automated_rotation: resolved.disable_automated_rotation ?? false,
    };
  } catch (err) {
    if (err instanceof ScheduleError) throw new BadRequestError(err.message);
    throw err;
  }
}

/** A role's own password policy: "" (the config's) or the name of one that exists now. */
async function validatePasswordPolicy(engine: LdapEngine, name: string): Promise<string> {
  const policy = name.trim();
  if (!policy) return '';
  try {
    // Generating one is the check the policy store offers; the password is thrown away.
    await engine.ctx.system.generatePassword(policy);
  } catch (err) {
    if (err instanceof BadRequestError) throw new BadRequestError(`password_policy: ${err.message}`);
    throw err;
  }
  return policy;
}

/** Creates the role; true when a dual-account role's account b is to get its first password next. */
async function createRole(engine: LdapEngine, name: string, req: RoleRequest): Promise<boolean> {
  if (!req.has('username')) throw new BadRequestError('username: username is a required field to manage a static account');
  const username = (req.data.username ?? '').trim();
  if (!username) throw new BadRequestError('username: username must not be empty');
  const dn = (req.data.dn ?? '').trim();
  if (dn && !isValidDn(dn)) throw new BadRequestError(`dn: "${dn}" is not a valid DN`);
  const schedule = validateSchedule(sentScheduleFields(req), undefined);
  const dual = dualSettingsOnCreate(sentDualFields(req), storedSchedule(schedule), engine.clock.now(), username, dn);
  const passwordPolicy = req.has('password_policy') ? await validatePasswordPolicy(engine, req.data.password_policy ?? '') : '';

  const config = await readConfig(engine.storage);
  const skip = req.has('skip_import_rotation') ? req.data.skip_import_rotation === true : config?.skip_static_role_import_rotation ?? false;
  // Only an explicit skip works without a config (nothing touches the directory then).
  if (!config && !skip) throw missingConfigError();
  let resolvedDn = '';
  let resolvedDnB = '';
  if (config) {
    const { client, bindAccount } = await engine.connections.get();
    // The entry must exist; resolving it also gives the DN the registry claims, spelled as the directory spells it.
    resolvedDn = (await client.resolveAccount({ dn: dn || undefined, username })).dn;
    // Without a config there is no bind account yet: the config write and every rotation check it then.
    const bind = await bindAccount();
    refuseBindAccount(bind, { dn: resolvedDn }, dn ? `dn: "${dn}"` : `username: "${username}"`);
    refuseBindAccount(bind, { username }, `username: "${username}"`);
    if (dual.dual_account_mode) resolvedDnB = await resolveAccountB(engine, dual, resolvedDn);
  }

  const now = engine.clock.now();
  const pending: StaticRole = {
    name, username, dn, resolved_dn: resolvedDn, ...schedule, password_policy: passwordPolicy, password: '', last_password: '',
    last_rotation: 0, next_rotation: 0, due_at: 0, last_error: '', last_error_time: 0, failed_attempts: 0, failing_since: 0, password_unrecorded: false,
    ...dual, resolved_dn_b: resolvedDnB, password_b: '', active_account: 'a', grace_period_end: 0,
  };
  const due = firstDue(pending, now);
  const role: StaticRole = { ...pending, next_rotation: due, due_at: due };
  await claimAccounts(engine.accounts, owner(name), role);
  if (skip) {
    try {
      if (!(await writeStaticRole(engine.storage, role, undefined))) throw new ConflictError(`the static role "${name}" was created at the same time by another request; read it`);
    } catch (err) {
      await engine.accounts.release(owner(name), identities(role));
      throw err;
    }
    reschedule(engine, role);
    return false;
  }

  // Set once the directory took the new password (see rotateStaticRole).
  let applied = false;
  try {
    await changePasswordWithWal(engine, {
      target: staticRoleTarget(name),
      account: { dn: dn || resolvedDn || undefined, username },
      passwordPolicy: passwordPolicy || undefined,
      // The role is stored with the WAL, so a crash from here on leaves both and start-up finishes the import.
      prepare: [putStaticRoleOp(role)],
      intent: dual.dual_account_mode ? encodeIntent({ kind: 'import', account: 'a' }) : undefined,
      commit: (password) => {
        applied = true;
        return [putStaticRoleOp(rotatedRecord(role, password, engine.clock.now())), clearDriftOp(staticRoleTarget(name))];
      },
    });
    engine.ctx.metrics.counter(LDAP_STATIC_ROTATIONS).inc({ result: 'success' });
    reschedule(engine, (await readStaticRole(engine.storage, name))!);
  } catch (err) {
    // Unknown outcome (the modify may have landed): keep the pending role and its WAL; retries finish it.
    const unknownOutcome = err instanceof UnrecordedPasswordError || (err instanceof LdapProviderError && err.kind === 'connection');
    if (unknownOutcome && (await readStaticRole(engine.storage, name).catch(() => undefined))) {
      // The import is an occurrence of its own: its retries keep to the window that starts at the creation.
      await recordFailure(engine, role, err, { dueMs: now, applied });
      throw err;
    }
    // The directory refused (or was never reached): nothing changed there, so undo everything here.
    await engine.storage.transaction([{ type: 'delete', key: staticRoleKey(name) }, { type: 'delete', key: walKey(staticRoleTarget(name)) }]).catch(() => undefined);
    await engine.accounts.release(owner(name), identities(role)).catch(() => undefined);
    throw err;
  }
  return dual.dual_account_mode;
}

async function updateRole(engine: LdapEngine, role: StaticRole, req: RoleRequest): Promise<void> {
  if (req.has('username') && (req.data.username ?? '').trim() !== role.username) {
    throw new BadRequestError('username: cannot update static account username');
  }
  if (req.has('skip_import_rotation')) throw new BadRequestError('skip_import_rotation: skip_import_rotation has no effect on updates');
  const dn = req.has('dn') ? (req.data.dn ?? '').trim() : undefined;
  // "" clears the DN (the username search is used from then on); any other value must be the same entry.
  if (dn && !(isValidDn(dn) && role.dn && dnEquals(dn, role.dn))) throw new BadRequestError('dn: cannot update static account distinguished name (dn)');
  const sent = sentScheduleFields(req);
  const sentDual = sentDualFields(req);
  const now = engine.clock.now();
  // Checked against the role as read, so a bad request fails before anything is written; applied to the role as stored.
  dualSettingsOnUpdate(sentDual, role, storedSchedule(validateSchedule(sent, role)), now);
  const passwordPolicy = req.has('password_policy') ? await validatePasswordPolicy(engine, req.data.password_policy ?? '') : undefined;
  const updated = await editStaticRole(engine.storage, role.name, (current) => {
    const schedule = validateSchedule(sent, current);
    const dual = dualSettingsOnUpdate(sentDual, current, storedSchedule(schedule), now);
    const next: StaticRole = { ...current, ...schedule, ...dual, password_policy: passwordPolicy ?? current.password_policy };
    if (dn !== undefined) next.dn = dn ? current.dn : '';
    // A new schedule sets the next due time; a role waiting for a retry keeps its retry time and occurrence.
    if (!sameSchedule(roleSchedule(next), roleSchedule(current)) && current.failed_attempts === 0) {
      next.next_rotation = next.due_at = firstDue(next, now);
    }
    return next;
  });
  if (updated) reschedule(engine, updated);
}

async function deleteRole(engine: LdapEngine, name: string): Promise<void> {
  await engine.locks.run(staticRoleKey(name), async () => {
    const role = await readStaticRole(engine.storage, name);
    if (!role) return;
    engine.scheduler.unschedule(name);
    // The directory keeps the last password the server set; the WAL of an unfinished rotation and the drift mark go too.
    await engine.storage.transaction([
      { type: 'delete', key: staticRoleKey(name) }, { type: 'delete', key: walKey(staticRoleTarget(name)) },
      ...managedAccounts(role).map((id) => clearDriftOp(accountTarget(staticRoleTarget(name), id))),
    ]);
    await engine.accounts.release(owner(name), identities(role));
  });
}

async function readData(engine: LdapEngine, role: StaticRole): Promise<Record<string, unknown>> {
  const now = engine.clock.now();
  const plan = plannedRotation(role, now);
  return {
    dn: role.dn,
    username: role.username,
    rotation_period: role.rotation_period,
    rotation_schedule: role.rotation_schedule,
    rotation_window: role.rotation_window,
    disable_automated_rotation: role.disable_automated_rotation,
    password_policy: role.password_policy,
    ...(role.last_rotation ? { last_service_rotation: rfc3339(role.last_rotation) } : {}),
    ...(plan ? { next_rotation: rfc3339(plan.runAt) } : {}),
    // Failures are visible until the next successful rotation.
    ...(role.failed_attempts > 0 ? { last_rotation_error: { message: role.last_error, time: rfc3339(role.last_error_time) } } : {}),
    ...(await driftReadData(engine.storage, staticRoleTarget(role.name), role)),
    ...dualReadData(role, now),
  };
}

async function listKeys(engine: LdapEngine, prefix: string): Promise<{ data: { keys: string[] } }> {
  return { data: { keys: await engine.storage.list(PREFIX + prefix.toLowerCase()) } };
}

export function staticRolesPart(engine: LdapEngine): LdapEnginePart {
  engine.configDependents.push({ what: 'static roles', names: () => listStaticRoleNames(engine.storage) });
  return {
    paths: [
      definePath({
        pattern: `static-role/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Manage a static role: an existing account whose password is rotated on a period or a schedule.',
        fields: roleFields,
        existenceCheck: async (req) => (await readStaticRole(engine.storage, req.params.name!.toLowerCase())) !== undefined,
        operations: {
          read: async (req) => {
            const role = await readStaticRole(engine.storage, req.params.name!.toLowerCase());
            return role ? { data: await readData(engine, role) } : undefined;
          },
          update: async (req) => {
            const name = req.params.name!.toLowerCase();
            const importB = await engine.locks.run(staticRoleKey(name), async () => {
              const existing = await readStaticRole(engine.storage, name);
              if (!existing) return createRole(engine, name, req);
              await updateRole(engine, existing, req);
              return false;
            });
            // A dual-account role's account b gets its first password as a change of the stored role: a failure keeps the role
            // serving account a, recorded and retried on the backoff (the retry is a rotation that switches to b).
            if (importB) {
              await rotateStaticRole(engine, name, { importStandby: true }).catch((err: unknown) => {
                throw err instanceof StrongroomError ? new StrongroomError(err.status, `the role was created serving account a; setting account b's password failed and is retried in the background: ${err.message}`) : err;
              });
            }
          },
          delete: async (req) => deleteRole(engine, req.params.name!.toLowerCase()),
        },
      }),
      definePath({
        pattern: 'static-role/?(?<prefix>(?:.+/)?)',
        canonical: { prefix: lowerName },
        description: 'List static roles; names that are prefixes of deeper names end with "/".',
        operations: {
          list: async (req) => listKeys(engine, req.params.prefix ?? ''),
        },
      }),
    ],
    lead: () => scheduleStaticRoles(engine),
  };
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
