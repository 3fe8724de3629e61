/**
 * Drift marks: an account whose directory password no longer opens a bind with the password the server holds
 * (someone reset it outside the server). Written by drift verification (drift.ts) on the leader, shown by the static
 * role read and `rotation-failures`, and removed by whatever makes the held password true again: a rotation of that
 * account (its commit deletes the mark in the same transaction) or a verification that binds again.
 *
 * `drift/<target>`, where target is the rotation target of rotation.ts (`static-role/<name>`,
 * `library/<account>`, accountWalTarget), so one account has at most one mark.
 */
import { z } from 'zod';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type StorageView } from '../../core/storage/view.ts';

const PREFIX = 'drift/';

const driftMarkSchema = z.object({
  target: z.string(),
  /** Unix ms of the first failed verification bind since the password was last known good. */
  detected_at: z.number(),
  /** Verifications that found the drift, and with `drift_action: rotate` the take-backs tried since. */
  attempts: z.number().int(),
  /** Why the last take-back failed (never a secret); empty when none failed. */
  last_error: z.string().default(''),
});
export type DriftMark = z.infer<typeof driftMarkSchema>;

export const driftKey = (target: string): string => PREFIX + target;

/** The op a rotation of `target` adds to its commit: a password the server just set is the directory's. */
export const clearDriftOp = (target: string): StorageOp => ({ type: 'delete', key: driftKey(target) });

export async function readDriftMark(storage: StorageView, target: string): Promise<DriftMark | undefined> {
  return storage.getJson(driftKey(target), (raw) => driftMarkSchema.parse(raw));
}

/** The write that records a failed verification over `current` (the mark as read): the first detection time is kept. */
export function markDriftOp(current: DriftMark | undefined, target: string, at: number, lastError = ''): { op: StorageOp; mark: DriftMark } {
  const mark = driftMarkSchema.parse({ target, detected_at: current?.detected_at ?? at, attempts: (current?.attempts ?? 0) + 1, last_error: lastError });
  return { op: { type: 'put', key: driftKey(target), value: jsonBytes(mark) }, mark };
}

/** Records a failed verification; the first detection time is kept. */
export async function markDrift(storage: StorageView, target: string, at: number, lastError = ''): Promise<DriftMark> {
  const { op, mark } = markDriftOp(await readDriftMark(storage, target), target, at, lastError);
  await storage.transaction([op]);
  return mark;
}

/** Every mark below `prefix` (e.g. "static-role/"). */
export async function listDriftMarks(storage: StorageView, prefix = ''): Promise<DriftMark[]> {
  const marks: DriftMark[] = [];
  for (const key of await storage.listRecursive(driftKey(prefix))) {
    const mark = await readDriftMark(storage, key.slice(PREFIX.length));
    if (mark) marks.push(mark);
  }
  return marks;
}
