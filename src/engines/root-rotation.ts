/**
 * Automated rotation of an engine's own credential: the LDAP engine's bind password and the cloud engine's root
 * client secret. Off unless the operator configures it (`rotation_period` or `rotation_schedule` on the engine's
 * config, with the rules every rotation shares: lib/rotation-schedule.ts). The leader runs it through the engine's
 * own rotate-root path, so the write-ahead rules of that path hold for an automated rotation too.
 *
 * The schedule's state lives in the config record itself: a config write keeps it (it starts from the stored
 * record), a config delete removes it, and rotate-root records its success in the same write that records the new
 * credential. What is stored is the due time of the current occurrence and, after a failure, when the retry runs:
 * with whenToRun that is enough for a restart or a new leader to neither rotate early nor skip.
 */
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Clock } from '../core/clock.ts';
import { BadRequestError, StrongroomError } from '../core/errors.ts';
import { field } from '../core/fields.ts';
import { MAX_SCHEDULE_LENGTH, ScheduleError, nextDue, resolveSchedule, retryDelayMs, sameSchedule, scheduleReadFields, storedSchedule, storedScheduleFields, whenToRun } from '../lib/rotation-schedule.ts';
import type { MountMetrics } from '../core/framework.ts';
import { ROOT_ROTATIONS_SCHEDULED } from '../telemetry/families.ts';
import { LeaderTimer } from './leader-timer.ts';

/** An own credential rotated more often than this would mostly be rotating; it also keeps a typo (60 for 60d) harmless. */
export const MIN_ROOT_ROTATION_PERIOD = 60;

/** The retry backoff of a failed automated rotation, the static roles' defaults. */
export interface RetryBackoff {
  baseMs: number;
  maxMs: number;
}
export const DEFAULT_ROOT_BACKOFF: RetryBackoff = { baseMs: 10_000, maxMs: 15 * 60_000 };

/** Stored in the engine's config record (spread into its zod object). */
export const rootScheduleShape = {
  /** Seconds; 0 = none. */
  rotation_period: z.number().int().default(0),
  /** '' = none. */
  rotation_schedule: z.string().default(''),
  /** Seconds; 0 = none. */
  rotation_window: z.number().int().default(0),
  disable_automated_rotation: z.boolean().default(false),
  /** Unix ms the current occurrence of the schedule fell (or falls) due; 0 = no automated rotation. */
  root_rotation_due: z.number().default(0),
  /** Unix ms of the retry after a failure; 0 = none. */
  root_rotation_retry_at: z.number().default(0),
  /** Why the last automated rotation failed (never a secret); '' after a success. */
  root_rotation_error: z.string().default(''),
  root_rotation_error_time: z.number().default(0),
  root_rotation_failures: z.number().int().default(0),
};
export type RootScheduleState = z.infer<z.ZodObject<typeof rootScheduleShape>>;
/** A config without automated rotation. */
export const NO_ROOT_SCHEDULE: RootScheduleState = z.object(rootScheduleShape).parse({});

/** The request fields of a config write. */
export const rootScheduleFields = {
  rotation_period: field.duration(`Rotate the engine's own credential automatically this often (at least ${MIN_ROOT_ROTATION_PERIOD}s); 0 or absent: no automated rotation. Exclusive with rotation_schedule.`),
  rotation_schedule: field.string('Rotate the engine\'s own credential at each occurrence of this standard 5-field cron schedule (UTC). Exclusive with rotation_period.', { maxLength: MAX_SCHEDULE_LENGTH }),
  rotation_window: field.duration('With rotation_schedule: a rotation that cannot start within this long (at least 1h) of its occurrence waits for the next one.'),
  disable_automated_rotation: field.bool('Keep the schedule fields but rotate only by hand (rotate-root).'),
};
type ScheduleRequest = { [K in keyof typeof rootScheduleFields]?: K extends 'rotation_schedule' ? string : K extends 'disable_automated_rotation' ? boolean : number };

/**
 * The schedule fields a config write sent, applied to the stored state: a 400 naming the field for a bad value or
 * combination, nothing changed when the write names none of them. A changed schedule counts a period from the last
 * rotation (`lastRotation`, 0 when unknown: from now) and a cron schedule from its next occurrence; the same schedule
 * sent again (a re-applied config) keeps its due time and any retry.
 */
export function applyScheduleFields<T extends RootScheduleState>(sent: ScheduleRequest, stored: T, now: number, lastRotation: number): T {
  if (Object.values(sent).every((v) => v === undefined)) return stored;
  let resolved: ReturnType<typeof resolveSchedule>;
  try {
    resolved = resolveSchedule(sent, { minPeriod: MIN_ROOT_ROTATION_PERIOD, current: storedScheduleFields(stored), optional: true });
  } catch (err) {
    if (err instanceof ScheduleError) throw new BadRequestError(err.message);
    throw err;
  }
  const next: T = {
    ...stored,
    rotation_period: resolved.rotation_period ?? 0,
    rotation_schedule: resolved.rotation_schedule?.trim() ?? '',
    rotation_window: resolved.rotation_window ?? 0,
    disable_automated_rotation: resolved.disable_automated_rotation ?? false,
  };
  if (sameSchedule(storedSchedule(stored), resolved.schedule)) return next;
  const from = resolved.schedule.kind === 'period' && lastRotation > 0 ? lastRotation : now;
  return { ...next, root_rotation_due: nextDue(resolved.schedule, from) ?? 0, root_rotation_retry_at: 0 };
}

/** When the leader runs the next automated rotation (and the occurrence it belongs to); undefined when none is due. */
export function rootRotationPlan(state: RootScheduleState, now: number): { runAt: number; dueMs: number } | undefined {
  const schedule = storedSchedule(state);
  if (schedule.kind === 'manual' || !state.root_rotation_due) return undefined;
  // A pending retry is the earliest the occurrence may run again; whenToRun moves it past a closed window.
  return whenToRun(schedule, state.root_rotation_due, Math.max(now, state.root_rotation_retry_at));
}

/** The state a rotation at `at` (automated or rotate-root) leaves: the next occurrence, no error. */
export function rotatedState<T extends RootScheduleState>(state: T, at: number): T {
  return {
    ...state, root_rotation_due: nextDue(storedSchedule(state), at) ?? 0, root_rotation_retry_at: 0,
    root_rotation_error: '', root_rotation_error_time: 0, root_rotation_failures: 0,
  };
}

/** The state after an automated rotation failed at `now`: the error, and a retry with backoff inside the window. */
export function failedState<T extends RootScheduleState>(state: T, now: number, message: string, backoff: RetryBackoff): T {
  const failures = state.root_rotation_failures + 1;
  const schedule = storedSchedule(state);
  const retry = now + retryDelayMs(failures, backoff.baseMs, backoff.maxMs);
  const plan = schedule.kind === 'manual' || !state.root_rotation_due ? undefined : whenToRun(schedule, state.root_rotation_due, retry);
  return {
    ...state, root_rotation_error: message, root_rotation_error_time: now, root_rotation_failures: failures,
    root_rotation_due: plan?.dueMs ?? state.root_rotation_due, root_rotation_retry_at: plan?.runAt ?? 0,
  };
}

/** The read fields: the schedule as Vault shows it, `next_rotation` when automated, the last failure until a success. */
export function rootScheduleView(state: RootScheduleState, now: number): Record<string, unknown> {
  const plan = rootRotationPlan(state, now);
  return {
    ...scheduleReadFields(state),
    ...(plan ? { next_rotation: new Date(plan.runAt).toISOString() } : {}),
    ...(state.root_rotation_error
      ? { last_rotation_error: { message: state.root_rotation_error, time: new Date(state.root_rotation_error_time).toISOString() } }
      : {}),
  };
}

/** What one engine gives the timer. */
export interface RootRotationJob {
  clock: Clock;
  logger: Logger;
  metrics: MountMetrics;
  /** The stored schedule state; undefined without a config (or while the credential cannot be rotated automatically). */
  read(): Promise<RootScheduleState | undefined>;
  /**
   * Rotates through the engine's rotate-root path as fenced leader work, after checking under the engine's config
   * lock that it is still due (a rotate-root by hand elsewhere moves it). False when nothing was rotated.
   */
  rotate(): Promise<boolean>;
  /** Stores failedState (a fenced compare-and-set over the config as read). */
  recordFailure(message: string): Promise<void>;
}

/**
 * The least time between two runs. A run whose outcome could not be recorded (storage failing, or the fence refused
 * because this node no longer leads and has not been told yet) leaves the schedule due: without a floor it would run
 * again at once, in a loop.
 */
const MIN_RUN_GAP_MS = 5_000;

/** The leader's timer for one engine's own credential: armed at the plan's time, re-armed after each run. */
export function rootRotationTimer(job: RootRotationJob): LeaderTimer {
  let notBefore = 0;
  const warn = (err: unknown, what: string) => job.logger.warn({ err: { message: (err as Error)?.message } }, what);
  return new LeaderTimer({
    clock: job.clock,
    async next() {
      const state = await job.read();
      const plan = state && rootRotationPlan(state, job.clock.now());
      return plan && Math.max(plan.runAt, notBefore);
    },
    async run() {
      try {
        if (await job.rotate()) {
          job.metrics.counter(ROOT_ROTATIONS_SCHEDULED).inc({ result: 'success' });
          job.logger.info('automated root rotation done');
        }
      } catch (err) {
        job.metrics.counter(ROOT_ROTATIONS_SCHEDULED).inc({ result: 'failure' });
        // Provider errors are scrubbed of the credentials they used; anything else is not shown.
        const message = err instanceof StrongroomError ? err.message : 'internal error';
        job.logger.warn({ error: message }, 'automated root rotation failed; it is retried with backoff inside its window');
        await job.recordFailure(message).catch((e: unknown) => warn(e, 'recording a failed root rotation failed'));
      } finally {
        notBefore = job.clock.now() + MIN_RUN_GAP_MS;
      }
    },
    onError: (err) => warn(err, 'reading the root rotation schedule failed'),
  });
}
