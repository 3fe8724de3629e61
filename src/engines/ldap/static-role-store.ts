/** The stored static role (`static-role/<name>`): its schema, typed storage helpers and the accounts it manages. */
import { z } from 'zod';
import { ConflictError } from '../../core/errors.ts';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import type { AccountIdentity, AccountOwner } from './accounts.ts';
import { accountIdentity, dualAccountShape, managedAccounts } from './dual-account.ts';

/** Role and set names: a word character, optionally followed by [\w-./]* ending in a word character. */
export const NAME_PATTERN = '\\w(?:[\\w\\-./]*\\w)?';
export const MIN_ROTATION_PERIOD = 5;

export const STATIC_ROLE_PREFIX = 'static-role/';
const PREFIX = STATIC_ROLE_PREFIX;

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
  return raw && { role: parseStaticRole(raw), raw };
}

export const parseStaticRole = (raw: Buffer): StaticRole => staticRoleSchema.parse(JSON.parse(raw.toString('utf8')));

export function putStaticRoleOp(role: StaticRole): StorageOp {
  return { type: 'put', key: staticRoleKey(role.name), value: jsonBytes(staticRoleSchema.parse(role)) };
}

/** Writes the role over exactly `expected` (undefined: where there is none); false when it changed meanwhile. */
export async function writeStaticRole(storage: StorageView, role: StaticRole, expected: Buffer | undefined, alongside: PreparedWrite[] = []): Promise<boolean> {
  return storage.transaction([putStaticRoleOp(role)], [{ key: staticRoleKey(role.name), expected }], alongside);
}

/**
 * Applies `edit` to the role as stored, by compare-and-set: another node may record a rotation at any moment, and a
 * write built on the role read before it would put the previous password back. Undefined when there is no role.
 */
export async function editStaticRole(storage: StorageView, name: string, edit: (role: StaticRole) => StaticRole, alongside: (role: StaticRole) => PreparedWrite[] = () => []): Promise<StaticRole | undefined> {
  for (let attempt = 0; attempt < 8; attempt++) {
    const current = await readStaticRoleSnapshot(storage, name);
    if (!current) return undefined;
    const next = edit(current.role);
    if (await writeStaticRole(storage, next, current.raw, alongside(next))) return next;
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

export const staticRoleOwner = (name: string): AccountOwner => ({ kind: 'static-role', name });
/** The directory account a role manages, by every name stored for it. */
export const staticRoleAccount = (role: Pick<StaticRole, 'username' | 'dn' | 'resolved_dn'>): AccountIdentity =>
  ({ username: role.username, dn: role.resolved_dn || role.dn || undefined });
export const staticRoleIdentities = (role: StaticRole): AccountIdentity[] => managedAccounts(role).map((id) => accountIdentity(role, id));

export const rfc3339 = (ms: number): string => (ms > 0 ? new Date(ms).toISOString() : '0001-01-01T00:00:00Z');
