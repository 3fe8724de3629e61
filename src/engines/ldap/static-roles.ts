/**
 * `static-role/:name`: existing directory accounts whose password the server rotates on a period or a cron schedule.
 * The record is static-role-store.ts's, the rotation and the leader's schedule static-role-rotation.ts's.
 */
import { BadRequestError, ConflictError, invalidField, StrongroomError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, lowerName } from '../../core/framework.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import { dnEquals, isValidDn } from '../../providers/ldap/dn.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import { ScheduleError, resolveSchedule, sameSchedule, scheduleReadFields, storedSchedule, storedScheduleFields, type ScheduleFields } from '../../lib/rotation-schedule.ts';
import { dnKey, refuseBindAccount, usernameKey } from './accounts.ts';
import { missingConfigError, readConfig } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { clearDriftOp } from './drift-marks.ts';
import {
  accountTarget, claimAccounts, driftReadData, dualAccountFields, dualReadData, dualSettingsOnCreate, dualSettingsOnUpdate, encodeIntent, managedAccounts,
  resolveAccountB, sentDualFields,
} from './dual-account.ts';
import { UnrecordedPasswordError, changePasswordWithWal, walKey } from './rotation.ts';
import { LDAP_STATIC_ROTATIONS } from '../../telemetry/families.ts';
import { firstDue, plannedRotation, recordFailure, reschedule, roleSchedule, rotateStaticRole, rotatedRecord, scheduleStaticRoles } from './static-role-rotation.ts';
import {
  MIN_ROTATION_PERIOD, NAME_PATTERN, STATIC_ROLE_PREFIX as PREFIX, editStaticRole, listStaticRoleNames, putStaticRoleOp, readStaticRole, rfc3339,
  staticRoleIdentities as identities, staticRoleKey, staticRoleOwner as owner, staticRoleTarget, writeStaticRole, type StaticRole,
} from './static-role-store.ts';

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

/** Vault's `ldap/static-role-create|update|delete`. */
function staticRoleEvent(engine: LdapEngine, operation: 'create' | 'update' | 'delete', name: string): PreparedWrite {
  return engine.ctx.system.event(`ldap/static-role-${operation}`, { modified: 'true', operation, path: `static-role/${name}`, name });
}

/** Creates the role; true when a dual-account role's account b is to get its first password next. */
async function createRole(engine: LdapEngine, name: string, req: RoleRequest): Promise<boolean> {
  if (!req.has('username')) throw new BadRequestError('username: username is a required field to manage a static account');
  const username = (req.data.username ?? '').trim();
  if (!username) throw new BadRequestError('username: username must not be empty');
  const dn = (req.data.dn ?? '').trim();
  if (dn && !isValidDn(dn)) throw invalidField('dn', 'not a valid DN (RFC 4514)');
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
    refuseBindAccount(bind, { dn: resolvedDn }, dn ? 'invalid value for field "dn": the entry' : 'invalid value for field "username": the account');
    refuseBindAccount(bind, { username }, 'invalid value for field "username": the account');
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
      if (!(await writeStaticRole(engine.storage, role, undefined, [staticRoleEvent(engine, 'create', name)]))) throw new ConflictError(`the static role "${name}" was created at the same time by another request; read it`);
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
      commitAlongside: async () => [staticRoleEvent(engine, 'create', name)],
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
  }, () => [staticRoleEvent(engine, 'update', role.name)]);
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
    ], [], [staticRoleEvent(engine, 'delete', name)]);
    await engine.accounts.release(owner(name), identities(role));
  });
}

async function readData(engine: LdapEngine, role: StaticRole): Promise<Record<string, unknown>> {
  const now = engine.clock.now();
  const plan = plannedRotation(role, now);
  return {
    dn: role.dn,
    username: role.username,
    ...scheduleReadFields(role),
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
