/**
 * Static roles as stored: the application whose client secret the role owns, the secret served now, the one staged
 * to start before it expires, the secrets waiting for their delayed removal, and the failure state. Also the times
 * the state machine acts at (docs/cloud-static-roles.md), so the leader's timer and the reads agree.
 */
import { z } from 'zod';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';

const secretSchema = z.object({
  key_id: z.string(),
  /** Unique per secret (`strongroom-static-<uuid>`), or the directory's name for an imported one. */
  display_name: z.string(),
  /** '' for a secret imported without its value: static-creds refuses until the first rotation. */
  client_secret: z.string(),
  /** Unix ms. */
  start: z.number(),
  end: z.number(),
});
export type StaticSecret = z.infer<typeof secretSchema>;

const removalSchema = z.object({
  key_id: z.string(),
  /** Unix ms; the leader removes the secret from the application at or after it. */
  remove_at: z.number(),
  /** `manual`: replaced by rotate-role (a second one inside the window is refused without force). */
  reason: z.enum(['manual', 'rotation', 'import', 'unstarted']),
});
export type Removal = z.infer<typeof removalSchema>;

const failureSchema = z.object({ since: z.number(), time: z.number(), attempts: z.number().int(), message: z.string(), retry_at: z.number() });

export const staticRoleSchema = z.object({
  application_object_id: z.string(),
  /** appId, resolved at write time: static-creds' client_id and the own-app check. */
  application_id: z.string(),
  rotation_period: z.number().int().positive(),
  metadata: z.record(z.string(), z.string()),
  defer_initial_creds: z.boolean(),
  /** null: the config's seamless_rotation. */
  seamless_rotation: z.boolean().nullable(),
  /** Seconds; -1: no overlap. */
  rotation_grace_period: z.number().int(),
  current: secretSchema.nullable(),
  staged: secretSchema.nullable(),
  removals: z.array(removalSchema),
  /** Unix ms of the next scheduled rotation while nothing is staged (0: none planned). */
  next_rotation: z.number(),
  last_rotation: z.number(),
  failure: failureSchema.nullable(),
});
export type StaticRole = z.infer<typeof staticRoleSchema>;

export const DEFAULT_ROTATION_PERIOD = 17_520 * 3600;
export const MIN_ROTATION_PERIOD = 720 * 3600;
export const DEFAULT_GRACE = 300;

const PREFIX = 'static-roles/';
const key = (name: string) => `${PREFIX}${name}`;

export async function readStaticRole(storage: StorageView, name: string): Promise<StaticRole | undefined> {
  return (await readStaticSnapshot(storage, name))?.role;
}

/** The role with the bytes it was read from, which a guarded write expects unchanged. */
export async function readStaticSnapshot(storage: StorageView, name: string): Promise<{ role: StaticRole; raw: Buffer } | undefined> {
  const raw = await storage.get(key(name));
  return raw && { role: staticRoleSchema.parse(JSON.parse(raw.toString('utf8'))), raw };
}

export const listStaticRoles = (storage: StorageView): Promise<string[]> => storage.list(PREFIX);

/**
 * Writes the role over `expected` (the bytes read; undefined: it must not exist), with `also` (a WAL entry's
 * release) and `fence` (leader work) in the same transaction. False when the role changed meanwhile or the fence failed.
 */
export function writeStaticRole(storage: StorageView, name: string, role: StaticRole, expected: Buffer | undefined, also: StorageOp[] = [], fence: PreparedWrite[] = []): Promise<boolean> {
  return storage.transaction([{ type: 'put', key: key(name), value: jsonBytes(staticRoleSchema.parse(role)) }, ...also], [{ key: key(name), expected }], fence);
}

export function deleteStaticRole(storage: StorageView, name: string, expected: Buffer, event: PreparedWrite): Promise<boolean> {
  return storage.transaction([{ type: 'delete', key: key(name) }], [{ key: key(name), expected }], [event]);
}

/** The overlap: the grace period, 0 for -1 (none). */
export const overlapMs = (r: Pick<StaticRole, 'rotation_grace_period'>): number => Math.max(r.rotation_grace_period, 0) * 1000;

export const seamlessFor = (r: Pick<StaticRole, 'seamless_rotation'>, configDefault: boolean): boolean => r.seamless_rotation ?? configDefault;

/**
 * When the rotation replacing `current` is due: seamless, two overlaps before it expires (the staged secret then
 * starts one overlap before the expiry); otherwise one overlap before it (the old one is removed at its expiry).
 */
export function rotationDue(current: StaticSecret, r: Pick<StaticRole, 'rotation_grace_period'>, seamless: boolean): number {
  return current.end - (seamless ? 2 : 1) * overlapMs(r);
}

/** The secret static-creds serves at `now`: the staged one once its start has passed. */
export function servedSecret(r: Pick<StaticRole, 'current' | 'staged'>, now: number): StaticSecret | null {
  return r.staged && r.staged.start <= now ? r.staged : r.current;
}

/** The end of the latest manual rotation's grace period, if it is still running. */
export function manualWindowEnd(r: Pick<StaticRole, 'removals'>, now: number): number | undefined {
  const ends = r.removals.filter((x) => x.reason === 'manual' && x.remove_at > now).map((x) => x.remove_at);
  return ends.length ? Math.max(...ends) : undefined;
}

/** The next rotation step (a rotation, the promotion of a staged secret, or a failing step's retry); undefined: none planned. */
export function nextRotation(r: StaticRole): number | undefined {
  if (r.failure) return r.failure.retry_at;
  if (r.staged) return r.current ? r.current.end : r.staged.start;
  return r.next_rotation || undefined;
}

/** When the leader must next act on the role: a removal or the next rotation step. A failing role waits for its retry. */
export function nextAction(r: StaticRole): number | undefined {
  const step = nextRotation(r);
  if (r.failure) return step;
  const times = [...r.removals.map((x) => x.remove_at), ...(step === undefined ? [] : [step])];
  return times.length ? Math.min(...times) : undefined;
}

const rfc3339 = (ms: number): string => new Date(ms).toISOString();

/** The role read: fields and state, never a secret value. */
export function staticRoleView(r: StaticRole, configSeamless: boolean, now: number): Record<string, unknown> {
  const window = manualWindowEnd(r, now);
  const next = nextRotation(r);
  return {
    application_object_id: r.application_object_id,
    client_id: r.application_id,
    rotation_period: r.rotation_period,
    metadata: r.metadata,
    defer_initial_creds: r.defer_initial_creds,
    seamless_rotation: seamlessFor(r, configSeamless),
    rotation_grace_period: r.rotation_grace_period,
    secret_id: r.current?.key_id ?? '',
    expiration: r.current ? rfc3339(r.current.end) : '',
    staged_secret_id: r.staged?.key_id ?? '',
    staged_start: r.staged ? rfc3339(r.staged.start) : '',
    pending_removals: r.removals.map((x) => ({ secret_id: x.key_id, remove_at: rfc3339(x.remove_at), reason: x.reason })),
    ...(window ? { manual_rotation_window_ends: rfc3339(window) } : {}),
    ...(r.last_rotation ? { last_rotation: rfc3339(r.last_rotation) } : {}),
    ...(next !== undefined ? { next_rotation: rfc3339(next) } : {}),
    ...(r.failure ? { last_rotation_error: { message: r.failure.message, time: rfc3339(r.failure.time) } } : {}),
  };
}
