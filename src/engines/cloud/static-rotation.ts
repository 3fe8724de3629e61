/**
 * The static roles' state machine (docs/cloud-static-roles.md): the first secret at creation, scheduled rotations
 * (seamless: a staged secret that starts one overlap before the current one expires; otherwise add, switch and
 * remove the old one at the end of the overlap), rotate-role (the old secret removed only after the grace period,
 * through a durable removal record) and the removals themselves.
 *
 * Every secret added is named in the creation WAL before the Graph call, and the role record that takes it over
 * releases that entry in the same transaction, so a secret is always reachable from storage: a failure, a lost
 * compare-and-set or a dead process leaves a WAL entry the leader's sweep rolls back. A secret is removed only
 * through a removal record of the role, and only at or after its time. Leader work is fenced by its term.
 */
import { ConflictError, NotFoundError, PermissionDeniedError } from '../../core/errors.ts';
import type { MountMetrics } from '../../core/framework.ts';
import { newUuid } from '../../core/ids.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import { retryDelayMs } from '../../lib/rotation-schedule.ts';
import { CLOUD_STATIC_ROTATIONS } from '../../telemetry/families.ts';
import { LeaderTimer } from '../leader-timer.ts';
import { isEngineApp } from './config.ts';
import type { CloudEngine, Connection } from './engine.ts';
import { cloudEvent } from './events.ts';
import {
  listStaticRoles, manualWindowEnd, nextAction, overlapMs, readStaticRole, readStaticSnapshot, rotationDue, seamlessFor, writeStaticRole,
  type Removal, type StaticRole, type StaticSecret,
} from './static-store.ts';

const RETRY_BASE_MS = 10_000;
const RETRY_MAX_MS = 15 * 60_000;
/** Steps one leader run may take on one role (removals, promotion, rotation, the promotion's removal). */
const MAX_STEPS = 4;

export const lockKey = (name: string): string => `static/${name}`;

/** 403 when the role's application is the one the engine signs in as (the config may have changed since the write). */
export function refuseOwnApp(conn: Connection, name: string, role: Pick<StaticRole, 'application_id'>): void {
  if (isEngineApp(conn.config, role.application_id)) {
    throw new PermissionDeniedError(`static role '${name}' targets the engine's own application (config client_id); it is neither served nor rotated`);
  }
}

export class StaticRotation {
  readonly #engine: CloudEngine;
  readonly #metrics: MountMetrics;
  readonly #timer: LeaderTimer;

  constructor(engine: CloudEngine, metrics: MountMetrics) {
    this.#engine = engine;
    this.#metrics = metrics;
    this.#timer = new LeaderTimer({
      clock: engine.clock,
      next: () => this.#nextTime(),
      run: () => this.#runDue(),
      onError: (err) => engine.logger.warn({ err: (err as Error).message }, 'static role rotation run failed'),
    });
  }

  lead(): Promise<void> {
    return this.#timer.start();
  }

  stop(): Promise<void> {
    return this.#timer.stop();
  }

  /** A role changed: re-arm for the earliest action (a no-op off the leader). */
  refresh(): Promise<void> {
    return this.#timer.refresh();
  }

  /** Adds a secret on the role's application, named in the WAL first; the caller commits or compensates `walId`. */
  async addSecret(conn: Connection, role: Pick<StaticRole, 'application_object_id'>, start: number, end: number): Promise<{ secret: StaticSecret; walId: string }> {
    const e = this.#engine;
    const displayName = `strongroom-static-${newUuid()}`;
    const walId = await e.wal.begin({ kind: 'password', created_at: 0, app_object_id: role.application_object_id, display_name: displayName });
    try {
      const startNow = start <= e.clock.now();
      const added = await conn.clients.graph.addApplicationPassword(role.application_object_id, {
        displayName, endDateTime: new Date(end), startDateTime: startNow ? undefined : new Date(start),
      });
      return { walId, secret: { key_id: added.keyId, display_name: displayName, client_secret: added.secretText, start: startNow ? e.clock.now() : start, end: Date.parse(added.endDateTime) || end } };
    } catch (err) {
      await e.wal.compensate(walId, conn.clients);
      throw err;
    }
  }

  /**
   * Stores `next` over the bytes read, releasing `walId` in the same transaction; the added secret is taken away
   * again when that fails. False when the role changed meanwhile (or, with a fence, this node no longer leads).
   */
  async commit(conn: Connection, name: string, next: StaticRole, raw: Buffer | undefined, walId: string | undefined, fence: PreparedWrite[] = []): Promise<boolean> {
    const e = this.#engine;
    let ok = false;
    try {
      ok = await writeStaticRole(e.storage, name, next, raw, walId ? [e.wal.releaseOp(walId)] : [], fence);
    } finally {
      if (!ok && walId) await e.wal.compensate(walId, conn.clients);
    }
    return ok;
  }

  /** rotate-role: a new secret from now; the ones served so far are removed after the grace period. */
  async manual(name: string, force: boolean): Promise<void> {
    const e = this.#engine;
    await e.locks.run(lockKey(name), async () => {
      const snap = await readStaticSnapshot(e.storage, name);
      if (!snap) throw new NotFoundError(`static role '${name}' does not exist`);
      const r = snap.role;
      const conn = await e.connect();
      refuseOwnApp(conn, name, r);
      const now = e.clock.now();
      const window = manualWindowEnd(r, now);
      if (window !== undefined && !force) {
        throw new ConflictError(`the previous manual rotation's grace period runs until ${new Date(window).toISOString()}; its secret is still served until then. Retry after it, or send force=true`);
      }
      const { secret, walId } = await this.addSecret(conn, r, now, now + r.rotation_period * 1000);
      const removeAt = now + overlapMs(r);
      const removals: Removal[] = [...r.removals];
      for (const old of [r.current, r.staged]) {
        if (!old || removals.some((x) => x.key_id === old.key_id)) continue;
        // A staged secret that has not started was never served: it goes at once.
        const unstarted = old === r.staged && old.start > now;
        removals.push({ key_id: old.key_id, remove_at: unstarted ? now : removeAt, reason: unstarted ? 'unstarted' : 'manual' });
      }
      const next: StaticRole = { ...r, current: secret, staged: null, removals, last_rotation: now, failure: null, next_rotation: rotationDue(secret, r, seamlessFor(r, conn.config.seamless_rotation)) };
      if (!(await this.commit(conn, name, next, snap.raw, walId, [rotateEvent(e, name, 'update')]))) throw new ConflictError(`static role '${name}' changed during the rotation; retry`);
      await this.#removeDue(conn, name, []);
    }).finally(() => this.refresh());
  }

  async #nextTime(): Promise<number | undefined> {
    let earliest: number | undefined;
    for (const name of await listStaticRoles(this.#engine.storage)) {
      const role = await readStaticRole(this.#engine.storage, name);
      const at = role && nextAction(role);
      if (at !== undefined && (earliest === undefined || at < earliest)) earliest = at;
    }
    return earliest;
  }

  async #runDue(): Promise<void> {
    const e = this.#engine;
    for (const name of await listStaticRoles(e.storage)) {
      const role = await readStaticRole(e.storage, name);
      const at = role && nextAction(role);
      if (at === undefined || at > e.clock.now() || !e.system.leading()) continue;
      try {
        const rotated = await e.locks.run(lockKey(name), () => this.#step(name));
        if (rotated) this.#metrics.counter(CLOUD_STATIC_ROTATIONS).inc({ result: 'success' });
      } catch (err) {
        this.#metrics.counter(CLOUD_STATIC_ROTATIONS).inc({ result: 'failure' });
        await this.#recordFailure(name, (err as Error).message);
      }
    }
  }

  /** The leader's due steps on one role, fenced; true when a rotation (a new secret) happened. */
  async #step(name: string): Promise<boolean> {
    const e = this.#engine;
    const fence = [e.system.fence()];
    const conn = await e.connect();
    let rotated = false;
    for (let i = 0; i < MAX_STEPS; i++) {
      const snap = await readStaticSnapshot(e.storage, name);
      if (!snap) return rotated;
      const r = snap.role;
      refuseOwnApp(conn, name, r);
      const now = e.clock.now();
      if (r.failure && r.failure.retry_at > now) return rotated;
      if (r.removals.some((x) => x.remove_at <= now)) {
        if (!(await this.#removeDue(conn, name, fence))) return rotated;
        continue;
      }
      if (r.staged && (!r.current || r.current.end <= now)) {
        // Promotion at the end of the overlap: only the secret the staged one replaces goes.
        const removals = r.current && r.current.key_id !== r.staged.key_id ? [...r.removals, { key_id: r.current.key_id, remove_at: now, reason: 'rotation' as const }] : r.removals;
        const seamless = seamlessFor(r, conn.config.seamless_rotation);
        const next: StaticRole = { ...r, current: r.staged, staged: null, removals, failure: null, next_rotation: rotationDue(r.staged, r, seamless) };
        if (!(await this.commit(conn, name, next, snap.raw, undefined, fence))) return rotated;
        continue;
      }
      if (r.staged || !r.next_rotation || r.next_rotation > now) {
        // Nothing left that failed (the role was changed meanwhile): the failure is over.
        if (r.failure) await this.commit(conn, name, { ...r, failure: null }, snap.raw, undefined, fence);
        return rotated;
      }
      if (!(await this.#rotate(conn, name, r, snap.raw, now, fence))) return rotated;
      rotated = true;
    }
    return rotated;
  }

  /** A scheduled rotation (or its retry): stage the next secret, or switch to a new one when there is no room to. */
  async #rotate(conn: Connection, name: string, r: StaticRole, raw: Buffer, now: number, fence: PreparedWrite[]): Promise<boolean> {
    const overlap = overlapMs(r);
    const period = r.rotation_period * 1000;
    const seamless = seamlessFor(r, conn.config.seamless_rotation);
    if (seamless && r.current && overlap > 0 && now < r.current.end - overlap) {
      const start = r.current.end - overlap;
      const { secret, walId } = await this.addSecret(conn, r, start, start + period);
      return this.commit(conn, name, { ...r, staged: secret, next_rotation: 0, last_rotation: now, failure: null }, raw, walId, [...fence, rotateEvent(this.#engine, name, 'periodic')]);
    }
    const { secret, walId } = await this.addSecret(conn, r, now, now + period);
    const removals = r.current ? [...r.removals, { key_id: r.current.key_id, remove_at: now + overlap, reason: 'rotation' as const }] : r.removals;
    return this.commit(conn, name, { ...r, current: secret, removals, next_rotation: rotationDue(secret, r, seamless), last_rotation: now, failure: null }, raw, walId, [...fence, rotateEvent(this.#engine, name, 'periodic')]);
  }

  /** Removes the secrets whose removal time has come, then drops their records; false when the role changed meanwhile. */
  async #removeDue(conn: Connection, name: string, fence: PreparedWrite[]): Promise<boolean> {
    const e = this.#engine;
    const snap = await readStaticSnapshot(e.storage, name);
    if (!snap) return false;
    const now = e.clock.now();
    const due = snap.role.removals.filter((x) => x.remove_at <= now);
    if (!due.length) return true;
    const serving = new Set([snap.role.current?.key_id, snap.role.staged?.key_id]);
    for (const x of due) {
      // Never a secret the role still serves (a record left by an import of that same secret).
      if (!serving.has(x.key_id)) await conn.clients.graph.removeApplicationPassword(snap.role.application_object_id, x.key_id);
    }
    const next = { ...snap.role, removals: snap.role.removals.filter((x) => x.remove_at > now), failure: null };
    return this.commit(conn, name, next, snap.raw, undefined, fence);
  }

  /** Records a failed step over the role as read, fenced; retried with the static roles' backoff. */
  async #recordFailure(name: string, message: string): Promise<void> {
    const e = this.#engine;
    e.logger.warn({ role: name, err: message }, 'static role rotation failed; will retry');
    await e.locks.run(lockKey(name), async () => {
      const snap = await readStaticSnapshot(e.storage, name);
      if (!snap) return;
      const now = e.clock.now();
      const attempts = (snap.role.failure?.attempts ?? 0) + 1;
      const failure = { since: snap.role.failure?.since ?? now, time: now, attempts, message, retry_at: now + retryDelayMs(attempts, RETRY_BASE_MS, RETRY_MAX_MS) };
      const event = cloudEvent(e.system, 'rotate-fail', { operation: 'periodic', path: `rotate-role/${name}`, name, error: message, attempts });
      await writeStaticRole(e.storage, name, { ...snap.role, failure }, snap.raw, [], [e.system.fence(), event]);
    });
  }
}

/** `azure/rotate`: a new secret recorded on a static role (by hand, or staged or switched to on schedule). */
const rotateEvent = (e: Pick<CloudEngine, 'system'>, name: string, operation: 'update' | 'periodic'): PreparedWrite =>
  cloudEvent(e.system, 'rotate', { operation, path: `rotate-role/${name}`, name });
