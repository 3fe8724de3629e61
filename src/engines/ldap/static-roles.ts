/**
 * `static-role/:name`: existing directory accounts whose password the server rotates on a period.
 * Also the rotation of one role (used by the scheduler and `rotate-role`) and start-up scheduling.
 */
import { z } from 'zod';
import { BadRequestError, ConflictError, StrongroomError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, lowerName } from '../../core/framework.ts';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type StorageView } from '../../core/storage/view.ts';
import { dnEquals, isValidDn } from '../../providers/ldap/dn.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import { refuseBindAccount, type AccountIdentity, type AccountOwner } from './accounts.ts';
import { missingConfigError, readConfig, type LdapEngine, type LdapEnginePart } from './config.ts';
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
  rotation_period: z.number().int(),
  password: z.string().default(''),
  last_password: z.string().default(''),
  /** Unix ms; 0 = never rotated by the server (imported with skip_import_rotation). */
  last_rotation: z.number().default(0),
  next_rotation: z.number(),
  last_error: z.string().default(''),
  last_error_time: z.number().default(0),
  failed_attempts: z.number().int().default(0),
});
export type StaticRole = z.infer<typeof staticRoleSchema>;

export const staticRoleKey = (name: string): string => PREFIX + name;
export const staticRoleTarget = (name: string): string => PREFIX + name;

export async function readStaticRole(storage: StorageView, name: string): Promise<StaticRole | undefined> {
  return (await readStaticRoleSnapshot(storage, name))?.role;
}

/** The role with the bytes it was read from, for a write that must not overwrite another node's (a rotation's record). */
async function readStaticRoleSnapshot(storage: StorageView, name: string): Promise<{ role: StaticRole; raw: Buffer } | undefined> {
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

const owner = (name: string): AccountOwner => ({ kind: 'static-role', name });
const identities = (role: Pick<StaticRole, 'username' | 'dn' | 'resolved_dn'>): AccountIdentity[] =>
  [{ username: role.username, dn: role.resolved_dn || role.dn || undefined }];

export const rfc3339 = (ms: number): string => (ms > 0 ? new Date(ms).toISOString() : '0001-01-01T00:00:00Z');

// ---- rotation --------------------------------------------------------------------------------------

/**
 * Rotates one role now under its lock. On failure the role records the error and is rescheduled with
 * backoff; the error is rethrown for a manual caller.
 *
 * `scheduled` is the leader's schedule: it rotates only a role that is due (the schedule may be older than a rotation
 * by hand on another node) and only while this node leads (the fence). Undefined when there was nothing to rotate.
 */
export async function rotateStaticRole(engine: LdapEngine, name: string, { scheduled = false } = {}): Promise<StaticRole | undefined> {
  return engine.locks.run(staticRoleKey(name), async () => {
    const snapshot = await readStaticRoleSnapshot(engine.storage, name);
    if (!snapshot) {
      engine.scheduler.unschedule(name);
      return undefined;
    }
    const { role } = snapshot;
    const now = engine.clock.now();
    if (scheduled && role.next_rotation > now && (await readWal(engine.storage, staticRoleTarget(name))) === undefined) {
      engine.scheduler.schedule(name, role.next_rotation);
      return undefined;
    }
    let searchedDn: string | undefined;
    try {
      let rotated: StaticRole = role;
      const changed = await changePasswordWithWal(engine, {
        target: staticRoleTarget(name),
        account: { dn: role.dn || undefined, username: role.username },
        knownDn: role.resolved_dn || undefined,
        // A DN found by a new search is claimed before its entry changes: another role or set may manage it.
        found: async (dn) => {
          await engine.accounts.claim(owner(name), [{ dn }]);
          searchedDn = dn;
        },
        commit: (password, dn) => {
          const at = engine.clock.now();
          rotated = {
            ...role, resolved_dn: role.dn ? role.resolved_dn : dn, password, last_password: role.password, last_rotation: at,
            next_rotation: at + role.rotation_period * 1000, last_error: '', last_error_time: 0, failed_attempts: 0,
          };
          return [putStaticRoleOp(rotated)];
        },
        // Recorded over the role as read: an update or another rotation meanwhile fails this record (the WAL keeps the password).
        commitConditions: [{ key: staticRoleKey(name), expected: snapshot.raw }],
        fence: scheduled ? engine.ctx.system.fence() : undefined,
      });
      // The fence failed: this node no longer leads, and the leader's schedule has the role.
      if (!changed) return undefined;
      if (searchedDn !== undefined) await releaseStaleDn(engine, name, role.resolved_dn, searchedDn);
      engine.ctx.metrics.counter(LDAP_STATIC_ROTATIONS).inc({ result: 'success' });
      engine.scheduler.schedule(name, rotated.next_rotation);
      engine.ctx.logger.info({ role: name, scheduled }, 'static role rotated');
      return rotated;
    } catch (err) {
      // The claim of a newly found DN is only kept once the role records that DN.
      if (searchedDn !== undefined) await releaseStaleDn(engine, name, searchedDn, role.resolved_dn);
      // Another node rotated the role at the same time, with the same password (it found this change's WAL, or this
      // change found its): that rotation is this one's, recorded once.
      const now = await readStaticRole(engine.storage, name).catch(() => undefined);
      if (err instanceof ConflictError && now && now.last_rotation > role.last_rotation) {
        engine.scheduler.schedule(name, now.next_rotation);
        return now;
      }
      await recordFailure(engine, name, err);
      throw err;
    }
  });
}

/** Releases the registry claim of `stale` unless it names the same entry as `kept`; best effort (logged). */
async function releaseStaleDn(engine: LdapEngine, name: string, stale: string, kept: string): Promise<void> {
  if (!stale || (kept && dnEquals(stale, kept))) return;
  await engine.accounts.release(owner(name), [{ dn: stale }]).catch((err: unknown) => {
    engine.ctx.logger.warn({ role: name, err: { message: (err as Error).message } }, 'releasing the registry claim of a moved entry failed');
  });
}

async function recordFailure(engine: LdapEngine, name: string, err: unknown): Promise<void> {
  engine.ctx.metrics.counter(LDAP_STATIC_ROTATIONS).inc({ result: 'failure' });
  const now = engine.clock.now();
  const message = err instanceof StrongroomError ? err.message : 'internal error';
  let attempts = 1;
  let next = now + retryDelayMs(attempts, engine.options.retryBaseMs, engine.options.retryMaxMs);
  // Best effort: if storage is what failed, the in-memory schedule below still retries.
  await editStaticRole(engine.storage, name, (role) => {
    attempts = role.failed_attempts + 1;
    next = now + retryDelayMs(attempts, engine.options.retryBaseMs, engine.options.retryMaxMs);
    return { ...role, last_error: message, last_error_time: now, failed_attempts: attempts, next_rotation: next };
  }).catch(() => undefined);
  engine.ctx.logger.warn({ role: name, attempts, retry_in_ms: next - now, error: message }, 'static role rotation failed');
  engine.scheduler.schedule(name, next);
}

// ---- endpoint --------------------------------------------------------------------------------------

const roleFields = {
  username: field.string('Name of the existing entry, matched against userattr under userdn. Cannot change after creation.'),
  dn: field.string('DN of the entry; when set it is used instead of the username search. Cannot change after creation.'),
  rotation_period: field.duration('How often the password is rotated (duration or seconds, at least 5s).'),
  skip_import_rotation: field.bool('Do not rotate on creation; the password is unknown until the first rotation. Default from the config.'),
};

type RoleRequest = BackendRequest<typeof roleFields>;

function validatePeriod(seconds: number | undefined): number {
  if (seconds === undefined) throw new BadRequestError('rotation_period: rotation_period is required to create static accounts');
  if (seconds < MIN_ROTATION_PERIOD) throw new BadRequestError(`rotation_period: rotation_period must be ${MIN_ROTATION_PERIOD} seconds or more`);
  return seconds;
}

async function createRole(engine: LdapEngine, name: string, req: RoleRequest): Promise<void> {
  if (!req.has('username')) throw new BadRequestError('username: username is a required field to manage a static account');
  const username = (req.data.username ?? '').trim();
  if (!username) throw new BadRequestError('username: username must not be empty');
  const dn = (req.data.dn ?? '').trim();
  if (dn && !isValidDn(dn)) throw new BadRequestError(`dn: "${dn}" is not a valid DN`);
  const period = validatePeriod(req.has('rotation_period') ? req.data.rotation_period : undefined);

  const config = await readConfig(engine.storage);
  const skip = req.has('skip_import_rotation') ? req.data.skip_import_rotation === true : config?.skip_static_role_import_rotation ?? false;
  // Only an explicit skip works without a config (nothing touches the directory then).
  if (!config && !skip) throw missingConfigError();
  let resolvedDn = '';
  if (config) {
    const { client, bindAccount } = await engine.connections.get();
    // The entry must exist; resolving it also gives the DN the registry claims, spelled as the directory spells it.
    resolvedDn = (await client.resolveAccount({ dn: dn || undefined, username })).dn;
    // Without a config there is no bind account yet: the config write and every rotation check it then.
    const bind = await bindAccount();
    refuseBindAccount(bind, { dn: resolvedDn }, dn ? `dn: "${dn}"` : `username: "${username}"`);
    refuseBindAccount(bind, { username }, `username: "${username}"`);
  }

  const now = engine.clock.now();
  const role: StaticRole = {
    name, username, dn, resolved_dn: resolvedDn, rotation_period: period, password: '', last_password: '',
    last_rotation: 0, next_rotation: now + period * 1000, last_error: '', last_error_time: 0, failed_attempts: 0,
  };
  await engine.accounts.claim(owner(name), identities(role));
  if (skip) {
    try {
      if (!(await writeStaticRole(engine.storage, role, undefined))) throw new ConflictError(`the static role "${name}" was created at the same time by another request; read it`);
    } catch (err) {
      await engine.accounts.release(owner(name), identities(role));
      throw err;
    }
    engine.scheduler.schedule(name, role.next_rotation);
    return;
  }

  try {
    await changePasswordWithWal(engine, {
      target: staticRoleTarget(name),
      account: { dn: dn || resolvedDn || undefined, username },
      // The role is stored with the WAL, so a crash from here on leaves both and start-up finishes the import.
      prepare: [putStaticRoleOp(role)],
      commit: (password) => {
        const at = engine.clock.now();
        return [putStaticRoleOp({ ...role, password, last_rotation: at, next_rotation: at + period * 1000 })];
      },
    });
    engine.scheduler.schedule(name, (await readStaticRole(engine.storage, name))!.next_rotation);
  } catch (err) {
    // Unknown outcome (the modify may have landed): keep the pending role and its WAL; retries finish it.
    const unknownOutcome = err instanceof UnrecordedPasswordError || (err instanceof LdapProviderError && err.kind === 'connection');
    if (unknownOutcome && (await readStaticRole(engine.storage, name).catch(() => undefined))) {
      await recordFailure(engine, name, err);
      throw err;
    }
    // The directory refused (or was never reached): nothing changed there, so undo everything here.
    await engine.storage.transaction([{ type: 'delete', key: staticRoleKey(name) }, { type: 'delete', key: walKey(staticRoleTarget(name)) }]).catch(() => undefined);
    await engine.accounts.release(owner(name), identities(role)).catch(() => undefined);
    throw err;
  }
}

async function updateRole(engine: LdapEngine, role: StaticRole, req: RoleRequest): Promise<void> {
  if (req.has('username') && (req.data.username ?? '').trim() !== role.username) {
    throw new BadRequestError('username: cannot update static account username');
  }
  if (req.has('skip_import_rotation')) throw new BadRequestError('skip_import_rotation: skip_import_rotation has no effect on updates');
  const dn = req.has('dn') ? (req.data.dn ?? '').trim() : undefined;
  // "" clears the DN (the username search is used from then on); any other value must be the same entry.
  if (dn && !(isValidDn(dn) && role.dn && dnEquals(dn, role.dn))) throw new BadRequestError('dn: cannot update static account distinguished name (dn)');
  const period = req.has('rotation_period') ? validatePeriod(req.data.rotation_period) : undefined;
  const updated = await editStaticRole(engine.storage, role.name, (current) => {
    const next = { ...current };
    if (dn !== undefined) next.dn = dn ? current.dn : '';
    if (period !== undefined) {
      next.rotation_period = period;
      // A role waiting for a retry keeps its retry time; otherwise the period counts from the last rotation.
      if (!current.last_error) next.next_rotation = (current.last_rotation || engine.clock.now()) + period * 1000;
    }
    return next;
  });
  if (updated) engine.scheduler.schedule(role.name, updated.next_rotation);
}

async function deleteRole(engine: LdapEngine, name: string): Promise<void> {
  await engine.locks.run(staticRoleKey(name), async () => {
    const role = await readStaticRole(engine.storage, name);
    if (!role) return;
    engine.scheduler.unschedule(name);
    // The directory keeps the last password the server set; the WAL of an unfinished rotation goes too.
    await engine.storage.transaction([{ type: 'delete', key: staticRoleKey(name) }, { type: 'delete', key: walKey(staticRoleTarget(name)) }]);
    await engine.accounts.release(owner(name), identities(role));
  });
}

function readData(role: StaticRole): Record<string, unknown> {
  return {
    dn: role.dn,
    username: role.username,
    rotation_period: role.rotation_period,
    ...(role.last_rotation ? { last_service_rotation: rfc3339(role.last_rotation) } : {}),
    // Failures are visible until the next successful rotation.
    ...(role.last_error
      ? { last_rotation_error: role.last_error, last_rotation_error_time: rfc3339(role.last_error_time), failed_rotation_attempts: role.failed_attempts }
      : {}),
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
        description: 'Manage a static role: an existing account whose password is rotated on a period.',
        fields: roleFields,
        existenceCheck: async (req) => (await readStaticRole(engine.storage, req.params.name!.toLowerCase())) !== undefined,
        operations: {
          read: async (req) => {
            const role = await readStaticRole(engine.storage, req.params.name!.toLowerCase());
            return role ? { data: readData(role) } : undefined;
          },
          update: async (req) => {
            const name = req.params.name!.toLowerCase();
            await engine.locks.run(staticRoleKey(name), async () => {
              const existing = await readStaticRole(engine.storage, name);
              if (existing) await updateRole(engine, existing, req);
              else await createRole(engine, name, req);
            });
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
 * The leader's schedule from storage: every role at its stored time, a role with an unfinished rotation at once (its
 * WAL password finishes it). Runs when this node takes over, and on a shared store again every few seconds, since
 * roles are created, updated and rotated by hand on other nodes too. WALs of roles that no longer exist go.
 */
export async function scheduleStaticRoles(engine: LdapEngine): Promise<void> {
  const names = await listStaticRoleNames(engine.storage);
  const pending = new Set(await listWalTargets(engine.storage, PREFIX));
  const now = engine.clock.now();
  for (const name of names) {
    const role = await readStaticRole(engine.storage, name);
    if (!role) continue;
    engine.scheduler.schedule(name, pending.has(staticRoleTarget(name)) ? now : role.next_rotation);
    pending.delete(staticRoleTarget(name));
  }
  for (const target of pending) {
    const key = walKey(target);
    // Unless the role was created meanwhile (its WAL is written with it).
    if (await readStaticRole(engine.storage, target.slice(PREFIX.length))) continue;
    await engine.storage.transaction([{ type: 'delete', key }], [{ key: staticRoleKey(target.slice(PREFIX.length)), expected: undefined }], [engine.ctx.system.fence()]);
  }
}
