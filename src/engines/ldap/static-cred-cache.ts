/**
 * The answer of `static-cred/:name` kept per role, keyed by the bytes the role was read from. A read still fetches
 * the role from storage every time (the stored record is the truth: a rotation, an update or a deletion on any node
 * of a cluster is seen by the next read, with nothing to invalidate), and parses it, checks it against the schema and
 * formats it again only when those bytes changed: a hot read skipped ~5 µs of JSON, schema and date work per request
 * (docs/benchmarks.md).
 *
 * A verification (the refusal to serve a role on the bind account) runs when the entry is made and again whenever the
 * bytes under its key (the config) change; a check that refused is run again on the next read.
 *
 * A dual-account role's credential depends on the clock (which account is active, whether a grace runs): it is
 * formatted at every read (dual-account.ts servedCredential), the rest of the answer is kept.
 *
 * `ttl` depends on the clock: the planned rotation is kept with the time until which it holds (see planHolds), so a
 * read computes no schedule (a cron occurrence costs tens of µs) while the plan stands.
 */
import { setBounded } from '../../core/bounded-map.ts';
import type { StorageView } from '../../core/storage/view.ts';
import { servedCredential } from './dual-account.ts';
import { plannedRotation } from './static-role-rotation.ts';
import { parseStaticRole, rfc3339, staticRoleKey, type StaticRole } from './static-role-store.ts';

/** Roles whose answer is kept; past it the oldest go (a read then parses again, nothing else changes). */
const LIMIT = 4096;

interface Entry {
  raw: Buffer;
  role: StaticRole;
  /** The answer without `ttl`. */
  data: Record<string, unknown>;
  plan: { runAt: number } | undefined;
  /** The plan holds for any time up to this (Infinity: whatever the time). */
  planUntil: number;
  /** The bytes under the verification's key when the role last passed it (EMPTY: nothing stored there). */
  verifiedAt: Buffer | undefined;
}

/** A check of the role that depends on another stored record, run again when that record changes. */
export interface Verification {
  key: string;
  check(role: StaticRole): Promise<void>;
}

const EMPTY = Buffer.alloc(0);

/**
 * Until when `plan`, computed at `now`, is what plannedRotation would answer (without a write-ahead entry): a
 * role without automation never has a plan; a plan whose attempt runs at the role's stored due time keeps it until
 * that time comes (plannedRotation answers the due time while neither the clock nor the backoff has passed it).
 * Any other plan (an overdue or failing role) is computed again at the next read.
 */
function planHolds(role: StaticRole, plan: { runAt: number } | undefined, now: number): number {
  if (!plan) return Number.POSITIVE_INFINITY;
  return plan.runAt === role.due_at && now <= role.due_at ? role.due_at : now;
}

export class StaticCredCache {
  readonly #entries = new Map<string, Entry>();

  /** The answer for role `name` as stored now; undefined when there is no such role. */
  async read(storage: StorageView, name: string, clock: { now(): number }, verification?: Verification): Promise<Record<string, unknown> | undefined> {
    // Peeked (see Storage.peek): the entry keeps the bytes to compare and parse, and never changes them.
    const raw = await storage.peek(staticRoleKey(name));
    if (!raw) {
      this.#entries.delete(name);
      return undefined;
    }
    let entry = this.#entries.get(name);
    if (!entry || !entry.raw.equals(raw)) {
      const role = parseStaticRole(raw);
      entry = { raw, role, data: answer(role), plan: undefined, planUntil: Number.NEGATIVE_INFINITY, verifiedAt: undefined };
      setBounded(this.#entries, LIMIT, name, entry);
    }
    if (verification) {
      const against = (await storage.peek(verification.key)) ?? EMPTY;
      if (!entry.verifiedAt?.equals(against)) {
        await verification.check(entry.role);
        entry.verifiedAt = against;
      }
    }
    const now = clock.now();
    if (now > entry.planUntil) {
      entry.plan = plannedRotation(entry.role, now);
      entry.planUntil = planHolds(entry.role, entry.plan, now);
    }
    // Seconds until the password changes next; 0 when only a rotation by hand changes it (as Vault answers).
    const ttl = entry.plan ? Math.max(0, Math.round((entry.plan.runAt - now) / 1000)) : 0;
    return entry.role.dual_account_mode ? { ...entry.data, ...servedCredential(entry.role, now), ttl } : { ...entry.data, ttl };
  }
}

function answer(role: StaticRole): Record<string, unknown> {
  return {
    ...(role.dual_account_mode ? {} : servedCredential(role, 0)),
    last_service_rotation: rfc3339(role.last_rotation),
    rotation_period: role.rotation_period,
    ...(role.rotation_schedule ? { rotation_schedule: role.rotation_schedule, rotation_window: role.rotation_window } : {}),
  };
}
