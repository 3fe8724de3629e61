/**
 * When an automated rotation is due, for every kind of managed credential (static roles, bind accounts, root client
 * secrets): every `rotation_period` seconds after the last rotation, or at each occurrence of a standard 5-field cron
 * `rotation_schedule` (UTC), optionally only within `rotation_window` seconds of the occurrence; or never
 * (`disable_automated_rotation`, manual rotation only). Pure: callers keep the due time and the clock.
 *
 * The cron grammar is the standard one Vault's `rotation_schedule` takes (minute hour day-of-month month day-of-week,
 * numbers, `*`, ranges, lists, steps, month and day names, and the @yearly..@hourly descriptors); cron-parser's
 * extensions (a seconds field, L, W, #, H, ?) are refused so a schedule means the same here as anywhere else.
 */
import type { CronExpression } from 'cron-parser';
import { cronParser } from './first-use.ts';

/** A window shorter than this could close before a busy leader starts the rotation (Vault's minimum too). */
export const MIN_WINDOW_SECONDS = 3600;
export const MAX_SCHEDULE_LENGTH = 128;

export type RotationSchedule =
  | { kind: 'period'; period: number }
  /** `window` 0: no window, a due rotation may start at any time after its occurrence. */
  | { kind: 'cron'; schedule: string; window: number }
  | { kind: 'manual' };

/** The fields as a request or a stored record gives them; absent = not given. */
export interface ScheduleFields {
  rotation_period?: number;
  rotation_schedule?: string;
  rotation_window?: number;
  disable_automated_rotation?: boolean;
}

/** A bad combination or value; `fields` are the request fields it names (the caller answers 400). */
export class ScheduleError extends Error {
  readonly fields: string[];
  constructor(fields: string[], message: string) {
    super(`${fields.join(', ')}: ${message}`);
    this.fields = fields;
  }
}

const DESCRIPTORS: Record<string, string> = {
  '@yearly': '0 0 1 1 *', '@annually': '0 0 1 1 *', '@monthly': '0 0 1 * *', '@weekly': '0 0 * * 0', '@daily': '0 0 * * *', '@midnight': '0 0 * * *', '@hourly': '0 * * * *',
};
const MONTHS = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const DAYS = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];
const FIELD_NAMES = ['minute', 'hour', 'day of month', 'month', 'day of week'];
const NAMES: Array<string[] | undefined> = [undefined, undefined, undefined, MONTHS, DAYS];
const ITEM = /^(\*|\w+)(?:-(\w+))?(?:\/(\d+))?$/;

/** The expression cron-parser is given, or a ScheduleError naming `rotation_schedule`. */
function standardCron(text: string): string {
  const expr = text.trim();
  const fail = (why: string): never => {
    throw new ScheduleError(['rotation_schedule'], why);
  };
  if (expr.length > MAX_SCHEDULE_LENGTH) fail(`a schedule has at most ${MAX_SCHEDULE_LENGTH} characters`);
  if (expr.startsWith('@')) return DESCRIPTORS[expr.toLowerCase()] ?? fail(`"${expr}" is not one of ${Object.keys(DESCRIPTORS).join(', ')}`);
  const fields = expr.split(/[ \t]+/);
  if (fields.length !== 5) fail(`a schedule has 5 fields (minute hour day-of-month month day-of-week), not ${fields.length}`);
  fields.forEach((f, i) => {
    for (const item of f.split(',')) {
      const m = ITEM.exec(item);
      const words = m ? [m[1], m[2]].filter((w) => w !== undefined && w !== '*') : [];
      if (!m || words.some((w) => !/^\d+$/.test(w) && !NAMES[i]?.includes(w.toUpperCase()))) fail(`"${item}" is not a standard cron ${FIELD_NAMES[i]}`);
    }
  });
  return fields.join(' ');
}

function cron(text: string, fromMs: number): CronExpression {
  try {
    return cronParser().CronExpressionParser.parse(standardCron(text), { currentDate: new Date(fromMs), tz: 'UTC' });
  } catch (err) {
    if (err instanceof ScheduleError) throw err;
    throw new ScheduleError(['rotation_schedule'], `"${text.trim()}" is not a valid schedule (${(err as Error).message})`);
  }
}

/**
 * The schedule the fields describe, checked: exactly one of rotation_period and rotation_schedule unless automated
 * rotation is disabled, a window only with a schedule and at least MIN_WINDOW_SECONDS, a period of at least
 * `minPeriod` seconds. `current` is the stored schedule an update starts from: a field not given keeps its value,
 * and giving one of period and schedule replaces the other. `optional`: neither period nor schedule is allowed and
 * means no automated rotation (root credentials, which rotate automatically only when the operator asks for it).
 */
export function resolveSchedule(given: ScheduleFields, { minPeriod, current, optional = false }: { minPeriod: number; current?: ScheduleFields; optional?: boolean }): ScheduleFields & { schedule: RotationSchedule } {
  const switched = given.rotation_period !== undefined || given.rotation_schedule !== undefined;
  const fields: ScheduleFields = {
    rotation_period: given.rotation_period ?? (switched ? undefined : current?.rotation_period),
    rotation_schedule: given.rotation_schedule ?? (switched ? undefined : current?.rotation_schedule),
    rotation_window: given.rotation_window ?? (given.rotation_schedule !== undefined || !switched ? current?.rotation_window : undefined),
    disable_automated_rotation: given.disable_automated_rotation ?? current?.disable_automated_rotation ?? false,
  };
  // An empty schedule or a zero period given on its own is "unset" (a client clearing it).
  if (fields.rotation_schedule !== undefined && fields.rotation_schedule.trim() === '') fields.rotation_schedule = undefined;
  if (fields.rotation_period === 0) fields.rotation_period = undefined;
  if (given.rotation_period !== undefined && given.rotation_schedule !== undefined && given.rotation_period > 0 && given.rotation_schedule.trim() !== '') {
    throw new ScheduleError(['rotation_period', 'rotation_schedule'], 'give a period or a schedule, not both');
  }
  const { rotation_period: period, rotation_schedule: schedule, rotation_window: window, disable_automated_rotation: disabled } = fields;
  if (window !== undefined && window !== 0) {
    if (schedule === undefined) throw new ScheduleError(['rotation_window'], 'a window applies to a rotation_schedule only');
    if (window < MIN_WINDOW_SECONDS) throw new ScheduleError(['rotation_window'], `a window is at least ${MIN_WINDOW_SECONDS} seconds (1h)`);
  }
  if (period !== undefined && period < minPeriod) throw new ScheduleError(['rotation_period'], `rotation_period must be ${minPeriod} seconds or more`);
  if (schedule !== undefined) cron(schedule, 0);
  if (disabled) return { ...fields, schedule: { kind: 'manual' } };
  if (period === undefined && schedule === undefined) {
    if (optional) return { ...fields, schedule: { kind: 'manual' } };
    throw new ScheduleError(['rotation_period', 'rotation_schedule'], 'one of rotation_period and rotation_schedule is required unless disable_automated_rotation is set');
  }
  return { ...fields, schedule: schedule !== undefined ? { kind: 'cron', schedule: schedule.trim(), window: window ?? 0 } : { kind: 'period', period: period! } };
}

/** The schedule fields as a record stores them: 0 and '' are "not set". */
export interface StoredScheduleFields {
  rotation_period: number;
  rotation_schedule: string;
  rotation_window: number;
  disable_automated_rotation: boolean;
}

/** A stored record's schedule fields as resolveSchedule and scheduleOf take them (0 and '' become absent). */
export function storedScheduleFields(s: StoredScheduleFields): ScheduleFields {
  return {
    rotation_period: s.rotation_period || undefined,
    rotation_schedule: s.rotation_schedule || undefined,
    rotation_window: s.rotation_window || undefined,
    disable_automated_rotation: s.disable_automated_rotation,
  };
}

/** A stored record's schedule fields as a read answers them, 0 and '' included (Vault's four, in its order). */
export function scheduleReadFields({ rotation_period, rotation_schedule, rotation_window, disable_automated_rotation }: StoredScheduleFields): StoredScheduleFields {
  return { rotation_period, rotation_schedule, rotation_window, disable_automated_rotation };
}

/** The schedule of a stored record. */
export const storedSchedule = (s: StoredScheduleFields): RotationSchedule => scheduleOf(storedScheduleFields(s));

/** Whether two schedules rotate alike (both built by scheduleOf or resolveSchedule). */
export const sameSchedule = (a: RotationSchedule, b: RotationSchedule): boolean => JSON.stringify(a) === JSON.stringify(b);

/** The schedule of stored fields already checked by resolveSchedule. */
export function scheduleOf(fields: ScheduleFields): RotationSchedule {
  if (fields.disable_automated_rotation) return { kind: 'manual' };
  if (fields.rotation_schedule) return { kind: 'cron', schedule: fields.rotation_schedule, window: fields.rotation_window ?? 0 };
  return fields.rotation_period ? { kind: 'period', period: fields.rotation_period } : { kind: 'manual' };
}

/**
 * The first due time after a rotation (or a creation) at `fromMs`: the period later, or the schedule's next
 * occurrence strictly after it. Undefined for manual rotation.
 */
export function nextDue(s: RotationSchedule, fromMs: number): number | undefined {
  if (s.kind === 'manual') return undefined;
  if (s.kind === 'period') return fromMs + s.period * 1000;
  return cron(s.schedule, fromMs).next().getTime();
}

/** How far ahead shortestInterval looks: four years and a bit, so a leap day's occurrence is seen. */
const INTERVAL_HORIZON_MS = 1470 * 24 * 3600_000;
const INTERVAL_SAMPLES = 1000;

/**
 * Seconds between the two closest due times of a schedule from `fromMs` on (the period itself; a cron schedule's
 * closest pair among its next occurrences, at most INTERVAL_SAMPLES of them within about four years); Infinity
 * for manual rotation or a schedule that occurs once in that time. What must outlast anything that has to end
 * before the next rotation (a dual-account role's grace period).
 */
export function shortestInterval(s: RotationSchedule, fromMs: number): number {
  if (s.kind === 'manual') return Number.POSITIVE_INFINITY;
  if (s.kind === 'period') return s.period;
  const expr = cron(s.schedule, fromMs);
  let shortest = Number.POSITIVE_INFINITY;
  let previous = expr.next().getTime();
  for (let i = 1; i < INTERVAL_SAMPLES; i++) {
    const at = expr.next().getTime();
    if (at - fromMs > INTERVAL_HORIZON_MS) break;
    shortest = Math.min(shortest, (at - previous) / 1000);
    previous = at;
  }
  return shortest;
}

/** The last moment a rotation due at `dueMs` may start (Infinity without a window). */
export function windowCloses(s: RotationSchedule, dueMs: number): number {
  return s.kind === 'cron' && s.window > 0 ? dueMs + s.window * 1000 : Number.POSITIVE_INFINITY;
}

/**
 * When a rotation due at `dueMs` runs, seen at `nowMs`: at its time; at once when it came due while no one could run
 * it and its window is still open (so a restart or a leader change never skips it, and never runs it early); else at
 * the next occurrence, which is then its due time. Also what a retry at `nowMs` does: it may not start outside the
 * window of the occurrence it belongs to.
 */
export function whenToRun(s: RotationSchedule, dueMs: number, nowMs: number): { runAt: number; dueMs: number } | undefined {
  if (s.kind === 'manual') return undefined;
  if (nowMs <= dueMs) return { runAt: dueMs, dueMs };
  if (s.kind === 'period' || nowMs < windowCloses(s, dueMs)) return { runAt: nowMs, dueMs };
  // Its window closed; a later occurrence that has come whose window is still open runs now in its place.
  const latest = cron(s.schedule, nowMs + 1).prev().getTime();
  if (latest > dueMs && nowMs < windowCloses(s, latest)) return { runAt: nowMs, dueMs: latest };
  const next = nextDue(s, nowMs)!;
  return { runAt: next, dueMs: next };
}

/**
 * Delay before retry number `attempt` (1-based): base * 2^(attempt-1), capped at max, then "equal
 * jitter" (half fixed, half random) so many failing accounts do not retry in lock-step.
 */
export function retryDelayMs(attempt: number, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  const exp = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 30));
  return Math.round(exp / 2 + random() * (exp / 2));
}
