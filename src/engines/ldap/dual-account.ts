/**
 * Dual-account (blue/green) static roles: a role with `dual_account_mode` manages two directory accounts, `a` and
 * `b`, and serves one of them (the active one). A rotation changes the password of the other one (the standby) and
 * then makes it the active one, so the account clients were using keeps its password through `grace_period`. With
 * `standby_action: reset` the previously active account gets a fresh password, never returned, when the grace ends.
 *
 * Every change of a dual role goes through the role's one write-ahead entry (rotation.ts) and targets the standby of
 * the role as stored; the entry's intent says which account and whether the commit switches, so a change finished
 * after a crash does what was begun. The commit that records the password is the one that switches: static-cred
 * never serves a password the directory may not have. docs/rotation.md has the state machine and its guarantees.
 *
 * This file holds the dual fields, their validation and account b's lookups, and the rules (which change comes next,
 * what its commit records, when the leader has work, what reads show); static-role-rotation.ts runs the changes.
 */
import { z } from 'zod';
import { BadRequestError, ConflictError, StrongroomError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import type { StorageView } from '../../core/storage/view.ts';
import { isValidDn } from '../../providers/ldap/dn.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import { shortestInterval, type RotationSchedule } from '../../lib/rotation-schedule.ts';
import { refuseBindAccount, sameAccount, type AccountIdentity, type AccountOwner, type ManagedAccounts } from './accounts.ts';
import type { LdapEngine } from './engine.ts';
import { readDriftMark } from './drift-marks.ts';

export type AccountId = 'a' | 'b';
export type RoleState = 'active' | 'grace_period';
const STANDBY_ACTIONS = ['keep', 'reset'] as const;

/** The stored fields; a role without the mode keeps the defaults. Account a is the role's own username/dn/password. */
export const dualAccountShape = {
  dual_account_mode: z.boolean().default(false),
  username_b: z.string().default(''),
  /** DN given for account b ("" = find by username_b). */
  dn_b: z.string().default(''),
  /** DN account b was last found at (as resolved_dn for account a). */
  resolved_dn_b: z.string().default(''),
  password_b: z.string().default(''),
  active_account: z.enum(['a', 'b']).default('a'),
  /** Seconds the previously active account stays valid after a switch. */
  grace_period: z.number().int().default(0),
  /** Unix ms the grace of the last switch ends; 0 = none, or its end is recorded (the reset done, or a keep grace's end reported). */
  grace_period_end: z.number().default(0),
  standby_action: z.enum(STANDBY_ACTIONS).default('keep'),
};

/** What the rules below read of a role (StaticRole has it all). */
export interface DualRole {
  name: string;
  username: string;
  dn: string;
  resolved_dn: string;
  password: string;
  last_password: string;
  dual_account_mode: boolean;
  username_b: string;
  dn_b: string;
  resolved_dn_b: string;
  password_b: string;
  active_account: AccountId;
  grace_period: number;
  grace_period_end: number;
  standby_action: 'keep' | 'reset';
}

/** The schedule state a static role keeps beside (static-role-store.ts). */
interface ScheduleState {
  failed_attempts: number;
  next_rotation: number;
  due_at: number;
}

const otherAccount = (id: AccountId): AccountId => (id === 'a' ? 'b' : 'a');
export const standbyOf = (role: DualRole): AccountId => otherAccount(role.active_account);

export function accountOf(role: DualRole, id: AccountId): { username: string; dn: string; resolvedDn: string; password: string } {
  return id === 'a'
    ? { username: role.username, dn: role.dn, resolvedDn: role.resolved_dn, password: role.password }
    : { username: role.username_b, dn: role.dn_b, resolvedDn: role.resolved_dn_b, password: role.password_b };
}

/** The registry identity of one account: its username and the DN it was found at (or was given). */
export function accountIdentity(role: DualRole, id: AccountId): AccountIdentity {
  const account = accountOf(role, id);
  return { username: account.username, dn: account.resolvedDn || account.dn || undefined };
}

/**
 * The drift-mark target of one account: account a keeps the role's own target (`static-role/<name>`), account b adds
 * `:b`, which no role name holds, so `rotation-failures` lists it as `<name>:b`.
 */
export const accountTarget = (roleTarget: string, id: AccountId): string => (id === 'a' ? roleTarget : `${roleTarget}:b`);

/** The role's accounts by id: both with the mode, else a alone. */
export const managedAccounts = (role: Pick<DualRole, 'dual_account_mode'>): AccountId[] => (role.dual_account_mode ? ['a', 'b'] : ['a']);

/** A reset of the previously active account is owed: the role resets, and a switch's grace has not been closed yet. */
const resetPending = (role: DualRole): boolean => role.dual_account_mode && role.standby_action === 'reset' && role.grace_period_end > 0;

/**
 * `grace_period` while the previously active account still holds a password that was served: until the grace ends,
 * or with reset until the reset is recorded (a late reset is shown, not hidden). `active` otherwise.
 */
export function roleState(role: DualRole, now: number): RoleState {
  if (!role.dual_account_mode || role.grace_period_end === 0) return 'active';
  return resetPending(role) || now < role.grace_period_end ? 'grace_period' : 'active';
}

/** The time before which no automated switch starts (the grace of the last one); 0 without the mode. */
export const switchHold = (role: DualRole): number => (role.dual_account_mode ? role.grace_period_end : 0);

/** A `standby_action: keep` grace that has passed and whose end the leader has not recorded yet (it reports it). */
export const graceToClose = (role: DualRole, now: number): boolean =>
  role.dual_account_mode && role.standby_action === 'keep' && role.grace_period_end > 0 && now >= role.grace_period_end;

/**
 * The leader's next run for a role whose next rotation is `rotation`: before it, the end of a grace, for the reset
 * a dual role owes (at the end, or at the retry time of a failed reset) or to record and report a `keep` grace's end.
 */
export function withGraceEnd<P extends { runAt: number; dueMs: number }>(role: DualRole & ScheduleState, now: number, rotation: P | undefined): { runAt: number; dueMs: number } | undefined {
  const keepEnds = role.dual_account_mode && role.standby_action === 'keep' && role.grace_period_end > 0;
  if (!resetPending(role) && !keepEnds) return rotation;
  const endAt = Math.max(now, role.grace_period_end, resetPending(role) && role.failed_attempts > 0 ? role.next_rotation : 0);
  return rotation && rotation.runAt < endAt ? rotation : { runAt: endAt, dueMs: rotation?.dueMs ?? role.due_at };
}

// ---- the next change ---------------------------------------------------------------------------------

/** A change of a dual role: `import` sets an account's first password, `switch` also makes it active, `reset` does not. */
export interface Intent {
  kind: 'import' | 'switch' | 'reset';
  account: AccountId;
}

export const encodeIntent = (intent: Intent): string => `${intent.kind}:${intent.account}`;

export function parseIntent(text: string): Intent | undefined {
  const m = /^(import|switch|reset):(a|b)$/.exec(text);
  return m ? { kind: m[1] as Intent['kind'], account: m[2] as AccountId } : undefined;
}

/** A manual rotation during a grace period, refused (409) unless forced. */
export class GracePeriodError extends ConflictError {}

interface ChangeRequest {
  /** rotate-role's force=true: a switch even during a grace period, or over a drifted standby. */
  force: boolean;
  /** The leader's schedule (it waits for a grace to end instead of being refused). */
  scheduled: boolean;
  /** Drift take-back of this account: the active one is switched away from, the standby gets a new password. */
  takeBack?: AccountId;
  /** The intent of the role's pending write-ahead entry, if any: it is finished, whatever would begin now. */
  walIntent?: string;
  /** A drift mark of the standby exists. */
  standbyDrifted: boolean;
}

/**
 * The change to make now. An unfinished change is finished as begun; a scheduled run after a reset grace ends resets;
 * anything else switches to the standby, refused during a grace (409 naming grace_period_end) unless forced, and
 * refused over a drifted standby (the server would hand out an account someone else changed).
 */
function nextChange(role: DualRole, now: number, req: ChangeRequest): Intent {
  const standby = standbyOf(role);
  if (req.walIntent !== undefined) {
    const begun = parseIntent(req.walIntent);
    // Every change after the import targets the standby as stored (only a commit switches); anything else is not
    // this role's change as it stands, and applying it could change the account clients are using.
    if (!begun || (begun.kind !== 'import' && begun.account !== standby)) {
      throw new StrongroomError(500, `the unfinished change of static role "${role.name}" does not match the role (${req.walIntent || 'no intent'}); it is kept, nothing is changed`);
    }
    return begun;
  }
  if (req.takeBack === standby) return { kind: 'reset', account: standby };
  const forced = req.force || req.takeBack !== undefined;
  if (req.scheduled && resetPending(role) && now >= role.grace_period_end) return { kind: 'reset', account: standby };
  if (!forced && !req.scheduled && roleState(role, now) === 'grace_period') {
    throw new GracePeriodError(`static role "${role.name}" is in its grace period until grace_period_end ${new Date(role.grace_period_end).toISOString()}: ` +
      `account "${accountOf(role, standby).username}" may still be in use with its previous password; force=true rotates now and cuts those clients off`);
  }
  if (!forced && req.standbyDrifted) {
    throw new ConflictError(`the standby account "${accountOf(role, standby).username}" of static role "${role.name}" drifted (its password was changed outside the server): ` +
      'no switch to it until drift verification takes it back (drift_action rotate) or finds its password again, or rotate-role with force=true');
  }
  return { kind: 'switch', account: standby };
}

/** What a rotation of a dual role was asked for (static-role-rotation.ts's RotateOptions). */
export interface DualRotateOptions {
  scheduled: boolean;
  force: boolean;
  takeBack?: AccountId;
  /** The creation's second step: account b's first password, unless it has one by now. */
  importStandby: boolean;
}

/** The change a rotation of a dual role makes now (nextChange, with the standby's drift mark read); null: nothing to do. */
export async function dualIntent(storage: StorageView, role: DualRole, roleTarget: string, wal: { intent: string } | undefined, now: number, opts: DualRotateOptions): Promise<Intent | null> {
  const standby = standbyOf(role);
  // A rotation that came first (rotate-role on another node right after the creation) already set and switched to it.
  if (opts.importStandby && !wal) return accountOf(role, standby).password || role.active_account !== 'a' ? null : { kind: 'import', account: standby };
  const standbyDrifted = (await readDriftMark(storage, accountTarget(roleTarget, standby))) !== undefined;
  return nextChange(role, now, { ...opts, walIntent: wal?.intent, standbyDrifted });
}

/**
 * The dual fields a committed change writes: the account's password and DN, and for a switch the active account and
 * the grace's end. `rotation`: the change is a rotation (it sets the last rotation and the next due time); a reset is not.
 */
export function changedFields(role: DualRole, intent: Intent, password: string, dn: string, at: number): { fields: Partial<DualRole>; rotation: boolean } {
  const account: Partial<DualRole> = intent.account === 'a'
    ? { password, resolved_dn: role.dn ? role.resolved_dn : dn }
    : { password_b: password, resolved_dn_b: role.dn_b ? role.resolved_dn_b : dn };
  if (intent.kind === 'reset') return { fields: { ...account, grace_period_end: 0 }, rotation: false };
  if (intent.kind === 'import') return { fields: account, rotation: true };
  // The previously served password is the one clients may still hold during the grace (static-cred's last_password).
  const previous = accountOf(role, role.active_account).password;
  return { fields: { ...account, active_account: intent.account, grace_period_end: at + role.grace_period * 1000, last_password: previous }, rotation: true };
}

/** static-cred's account fields: the active account's, and while in grace the standby's name and the grace's end. */
export function servedCredential(role: DualRole, now: number): Record<string, unknown> {
  if (!role.dual_account_mode) return { dn: role.dn, username: role.username, password: role.password, last_password: role.last_password };
  const active = accountOf(role, role.active_account);
  const grace = roleState(role, now) === 'grace_period';
  return {
    dn: active.dn, username: active.username, password: active.password,
    // Never a reset password: it is only the one served before the switch, and only while it may still be in use.
    last_password: grace ? role.last_password : '',
    active_account: role.active_account,
    ...(grace ? { standby_username: accountOf(role, standbyOf(role)).username, grace_period_end: new Date(role.grace_period_end).toISOString() } : {}),
  };
}

/** The role read's dual fields; none without the mode, so a plain role reads as it always did. */
export function dualReadData(role: DualRole, now: number): Record<string, unknown> {
  if (!role.dual_account_mode) return {};
  const state = roleState(role, now);
  return {
    dual_account_mode: true, username_b: role.username_b, dn_b: role.dn_b, grace_period: role.grace_period, standby_action: role.standby_action,
    active_account: role.active_account, state,
    ...(state === 'grace_period' ? { grace_period_end: new Date(role.grace_period_end).toISOString() } : {}),
  };
}

/**
 * The read's drift fields: `drifted` when any account of the role drifted, since the first one was found; a dual role
 * also names them (`drifted_accounts`), since a drifted standby blocks the next switch.
 */
export async function driftReadData(storage: StorageView, roleTarget: string, role: DualRole): Promise<Record<string, unknown>> {
  const marks = [];
  for (const id of managedAccounts(role)) {
    const mark = await readDriftMark(storage, accountTarget(roleTarget, id));
    if (mark) marks.push({ id, at: mark.detected_at });
  }
  return {
    drifted: marks.length > 0,
    ...(marks.length ? { drift_detected_at: new Date(Math.min(...marks.map((m) => m.at))).toISOString() } : {}),
    ...(role.dual_account_mode ? { drifted_accounts: marks.map((m) => m.id) } : {}),
  };
}

// ---- request fields ----------------------------------------------------------------------------------

export const dualAccountFields = {
  dual_account_mode: field.bool('Manage two accounts (a: username/dn, b: username_b/dn_b) and serve one: a rotation sets the other one\'s password and switches to it. Cannot change after creation.'),
  username_b: field.string('With dual_account_mode: the second account, matched as username is. Cannot change after creation.'),
  dn_b: field.string('With dual_account_mode: DN of the second account, used instead of the username_b search. Cannot change after creation.'),
  grace_period: field.duration('With dual_account_mode: how long the previously active account stays valid after a switch; shorter than the rotation period or the schedule\'s shortest interval.'),
  standby_action: field.string('With dual_account_mode: keep (default: the previous account keeps its password until its next rotation) or reset (it gets a fresh, never returned password when the grace ends).', { oneOf: STANDBY_ACTIONS }),
};

type DualFieldName = keyof typeof dualAccountFields;
type DualSent = Partial<{ dual_account_mode: boolean; username_b: string; dn_b: string; grace_period: number; standby_action: string }>;

/** The dual fields a request sends (as sentScheduleFields does for the schedule). */
export function sentDualFields(req: { has(name: string): boolean; data: Record<string, unknown> }): DualSent {
  const sent: Record<string, unknown> = {};
  for (const k of Object.keys(dualAccountFields) as DualFieldName[]) if (req.has(k)) sent[k] = req.data[k];
  return sent as DualSent;
}

export type DualSettings = Pick<DualRole, 'dual_account_mode' | 'username_b' | 'dn_b' | 'grace_period' | 'standby_action'>;

/** The field as sent (the field type already refused anything but keep and reset, in any case). */
const standbyAction = (sent: string | undefined): DualRole['standby_action'] | undefined =>
  sent === undefined ? undefined : sent.trim().toLowerCase() === 'reset' ? 'reset' : 'keep';

const NO_DUAL: DualSettings = { dual_account_mode: false, username_b: '', dn_b: '', grace_period: 0, standby_action: 'keep' };

/** A grace that ends before the next rotation can be due; a 400 naming grace_period otherwise. */
function checkGrace(grace: number, schedule: RotationSchedule, now: number): void {
  if (!(grace > 0)) throw new BadRequestError('grace_period: a dual-account role needs a grace_period longer than 0');
  const interval = shortestInterval(schedule, now);
  if (grace >= interval) {
    throw new BadRequestError(`grace_period: ${grace}s is not shorter than ${schedule.kind === 'period' ? 'rotation_period' : 'the shortest interval of rotation_schedule'} (${interval}s)`);
  }
}

/** The dual settings of a role being created, checked (the directory lookups are resolveAccountB's). */
export function dualSettingsOnCreate(sent: DualSent, schedule: RotationSchedule, now: number, username: string, dn: string): DualSettings {
  if (!sent.dual_account_mode) {
    const stray = (['username_b', 'dn_b', 'grace_period', 'standby_action'] as const).find((k) => sent[k] !== undefined);
    if (stray) throw new BadRequestError(`${stray}: only with dual_account_mode`);
    return NO_DUAL;
  }
  const usernameB = (sent.username_b ?? '').trim();
  if (!usernameB) throw new BadRequestError('username_b: a dual-account role needs the second account\'s username_b');
  const dnB = (sent.dn_b ?? '').trim();
  if (dnB && !isValidDn(dnB)) throw new BadRequestError(`dn_b: "${dnB}" is not a valid DN`);
  // As written, before any lookup: the same username in any case, or the same DN in any spelling.
  if (sameAccount({ username }, { username: usernameB })) throw new BadRequestError(`username_b: "${usernameB}" is the role's account a (username)`);
  if (dn && dnB && sameAccount({ dn }, { dn: dnB })) throw new BadRequestError(`dn_b: "${dnB}" is the role's account a (dn)`);
  checkGrace(sent.grace_period ?? 0, schedule, now);
  return { dual_account_mode: true, username_b: usernameB, dn_b: dnB, grace_period: sent.grace_period!, standby_action: standbyAction(sent.standby_action) ?? 'keep' };
}

/**
 * The dual settings after an update: the mode and account b never change (400 naming the field); grace_period and
 * standby_action may, and the grace is checked against the schedule as it will be.
 */
export function dualSettingsOnUpdate(sent: DualSent, role: DualRole, schedule: RotationSchedule, now: number): Partial<DualSettings> {
  if (sent.dual_account_mode !== undefined && sent.dual_account_mode !== role.dual_account_mode) {
    throw new BadRequestError('dual_account_mode: cannot change after creation');
  }
  if (!role.dual_account_mode) return dualSettingsOnCreate({ ...sent, dual_account_mode: false }, schedule, now, role.username, role.dn);
  if (sent.username_b !== undefined && sent.username_b.trim() !== role.username_b) throw new BadRequestError('username_b: cannot update the second account\'s username');
  if (sent.dn_b !== undefined && sent.dn_b.trim() !== role.dn_b) throw new BadRequestError('dn_b: cannot update the second account\'s distinguished name');
  const grace = sent.grace_period ?? role.grace_period;
  checkGrace(grace, schedule, now);
  return { grace_period: grace, standby_action: standbyAction(sent.standby_action) ?? role.standby_action };
}

/**
 * Claims the role's accounts in the managed-account registry, all or nothing: account b on its own, so that a refusal
 * names its field; the one-owner rule covers both accounts.
 */
export async function claimAccounts(accounts: ManagedAccounts, owner: AccountOwner, role: DualRole): Promise<void> {
  await accounts.claim(owner, [accountIdentity(role, 'a')]);
  if (!role.dual_account_mode) return;
  await accounts.claim(owner, [accountIdentity(role, 'b')]).catch(async (err: unknown) => {
    await accounts.release(owner, [accountIdentity(role, 'a'), accountIdentity(role, 'b')]);
    throw err instanceof BadRequestError ? new BadRequestError(`username_b: ${err.message}`) : err;
  });
}

/**
 * Account b as the directory has it (when a config exists): the entry must exist, must not be the bind account, and
 * must not be account a's entry under another name. Returns the DN found ("" without a config).
 */
export async function resolveAccountB(engine: Pick<LdapEngine, 'connections'>, settings: DualSettings, resolvedA: string): Promise<string> {
  const { client, bindAccount } = await engine.connections.get();
  const subject = settings.dn_b ? `dn_b: "${settings.dn_b}"` : `username_b: "${settings.username_b}"`;
  let found: string;
  try {
    found = (await client.resolveAccount({ dn: settings.dn_b || undefined, username: settings.username_b })).dn;
  } catch (err) {
    // The provider names the field it was given (dn, username): here it is account b's.
    if (err instanceof LdapProviderError && err.kind === 'input') throw new BadRequestError(err.message.replace(/^(dn|username):/, '$1_b:'));
    throw err;
  }
  const bind = await bindAccount();
  refuseBindAccount(bind, { dn: found }, subject);
  refuseBindAccount(bind, { username: settings.username_b }, `username_b: "${settings.username_b}"`);
  if (resolvedA && sameAccount({ dn: resolvedA }, { dn: found })) throw new BadRequestError(`${subject} is the same entry as the role's account a`);
  return found;
}
