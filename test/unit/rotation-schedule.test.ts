// The schedule rules shared by static roles and root credentials: which field combinations are accepted, and when a
// due rotation runs (src/lib/rotation-schedule.ts).
import { describe, expect, it } from 'vitest';
import { nextDue, resolveSchedule, ScheduleError, shortestInterval, whenToRun, windowCloses, type RotationSchedule } from '../../src/lib/rotation-schedule.ts';

const at = (iso: string) => Date.parse(iso);
const resolve = (given: Parameters<typeof resolveSchedule>[0], current?: Parameters<typeof resolveSchedule>[0]) => resolveSchedule(given, { minPeriod: 5, current });
const refusal = (given: Parameters<typeof resolveSchedule>[0], current?: Parameters<typeof resolveSchedule>[0]): ScheduleError => {
  try {
    resolve(given, current);
  } catch (err) {
    if (err instanceof ScheduleError) return err;
    throw err;
  }
  throw new Error(`accepted ${JSON.stringify(given)}`);
};

describe('resolveSchedule', () => {
  it('"exactly one of rotation_period / rotation_schedule unless automation is disabled"', () => {
    expect(resolve({ rotation_period: 3600 }).schedule).toEqual({ kind: 'period', period: 3600 });
    expect(resolve({ rotation_schedule: '0 2 * * 6' }).schedule).toEqual({ kind: 'cron', schedule: '0 2 * * 6', window: 0 });
    expect(resolve({ disable_automated_rotation: true }).schedule).toEqual({ kind: 'manual' });
    expect(resolve({ disable_automated_rotation: true, rotation_period: 60 }).schedule).toEqual({ kind: 'manual' });
    expect(refusal({}).fields).toEqual(['rotation_period', 'rotation_schedule']);
    expect(refusal({ rotation_period: 60, rotation_schedule: '* * * * *' }).fields).toEqual(['rotation_period', 'rotation_schedule']);
  });

  it('"root credentials: automation is off unless configured" (optional)', () => {
    const optional = (given: Parameters<typeof resolveSchedule>[0], current?: Parameters<typeof resolveSchedule>[0]) => resolveSchedule(given, { minPeriod: 5, current, optional: true }).schedule;
    expect(optional({})).toEqual({ kind: 'manual' });
    // Clearing the period of a stored schedule turns automation off instead of being refused.
    expect(optional({ rotation_period: 0 }, { rotation_period: 3600 })).toEqual({ kind: 'manual' });
    expect(optional({ rotation_period: 3600 })).toEqual({ kind: 'period', period: 3600 });
    expect(() => optional({ rotation_window: 7200 })).toThrow(ScheduleError);
    expect(() => optional({ rotation_period: 60, rotation_schedule: '* * * * *' })).toThrow(ScheduleError);
  });

  it('"each bad combination is a 400 naming the fields"', () => {
    const cases: Array<[Parameters<typeof resolveSchedule>[0], string[]]> = [
      [{ rotation_period: 3600, rotation_window: 7200 }, ['rotation_window']],
      [{ rotation_schedule: '0 2 * * 6', rotation_window: 3599 }, ['rotation_window']],
      [{ rotation_schedule: '0 2 * * 6', rotation_window: 60 }, ['rotation_window']],
      [{ rotation_period: 4 }, ['rotation_period']],
      [{ rotation_period: 1 }, ['rotation_period']],
      [{ rotation_window: 3600 }, ['rotation_window']],
      [{ disable_automated_rotation: false }, ['rotation_period', 'rotation_schedule']],
    ];
    for (const [given, fields] of cases) expect(refusal(given).fields, JSON.stringify(given)).toEqual(fields);
  });

  it('"a standard 5-field cron, not an extension": hostile and non-standard spellings are refused', () => {
    for (const bad of ['* * * * * *', '*/5 * * * * *', '* * * *', '', ' ', '61 * * * *', '* 24 * * *', '0 0 30 2 *', '0 0 L * *', '0 0 * * 1#2', 'H 0 * * *', '? 0 * * *', '0 0 1W * *',
      '@every 1h', '@reboot', '@nonsense', '0 0 * FOO *', '0 0 * * FUNDAY', '0 0 * JAN MON ; rm', 'x'.repeat(200), '0\u00a00 * * *', '1-', '*/ * * * *', '0,,1 * * * *']) {
      if (bad.trim() === '') continue;
      expect(refusal({ rotation_schedule: bad }).fields, bad).toEqual(['rotation_schedule']);
    }
    for (const good of ['0 2 * * 6', '*/15 * * * *', '0 9-17 * * MON-FRI', '0 0 1 jan,jul *', '30 3 * * sun', '@weekly', '@DAILY', '0 0 1,15 * *', '5-10/2 * * * *']) {
      expect(resolve({ rotation_schedule: good }).schedule.kind, good).toBe('cron');
    }
  });

  it('"an update keeps what it does not name; giving a period or a schedule replaces the other"', () => {
    const current = { rotation_schedule: '0 2 * * 6', rotation_window: 7200 };
    expect(resolve({}, current).schedule).toEqual({ kind: 'cron', schedule: '0 2 * * 6', window: 7200 });
    expect(resolve({ rotation_period: 86400 }, current)).toMatchObject({ rotation_period: 86400, rotation_schedule: undefined, rotation_window: undefined });
    expect(resolve({ rotation_schedule: '0 3 * * 0' }, current).schedule).toEqual({ kind: 'cron', schedule: '0 3 * * 0', window: 7200 });
    expect(resolve({ rotation_schedule: '0 3 * * 0' }, { rotation_period: 60 }).rotation_period).toBeUndefined();
    expect(resolve({ disable_automated_rotation: true }, current)).toMatchObject({ rotation_schedule: '0 2 * * 6', schedule: { kind: 'manual' } });
    expect(resolve({ disable_automated_rotation: false }, { ...current, disable_automated_rotation: true }).schedule.kind).toBe('cron');
  });
});

describe('nextDue', () => {
  it('"rotation_period counts from the last rotation; rotation_schedule is the next occurrence, in UTC"', () => {
    expect(nextDue({ kind: 'period', period: 60 }, 1000)).toBe(61_000);
    const weekly: RotationSchedule = { kind: 'cron', schedule: '0 2 * * 6', window: 0 };
    expect(new Date(nextDue(weekly, at('2026-11-24T12:00:00Z'))!).toISOString()).toBe('2026-11-28T02:00:00.000Z');
    // Strictly after: a rotation at the occurrence itself is due a week later.
    expect(new Date(nextDue(weekly, at('2026-11-28T02:00:00Z'))!).toISOString()).toBe('2026-12-05T02:00:00.000Z');
    expect(nextDue({ kind: 'manual' }, 0)).toBeUndefined();
  });
});

describe('whenToRun', () => {
  const weekly: RotationSchedule = { kind: 'cron', schedule: '0 2 * * 6', window: 7200 };
  const due = at('2026-11-28T02:00:00Z');
  it('"never rotates before its time"', () => {
    expect(whenToRun(weekly, due, at('2026-11-27T00:00:00Z'))).toEqual({ runAt: due, dueMs: due });
  });
  it('"a due rotation runs once as soon as a leader exists (inside its window)"', () => {
    const now = at('2026-11-28T03:59:00Z');
    expect(whenToRun(weekly, due, now)).toEqual({ runAt: now, dueMs: due });
    expect(windowCloses(weekly, due)).toBe(at('2026-11-28T04:00:00Z'));
  });
  it('"a scheduled rotation that cannot start within the window waits for the next occurrence"', () => {
    const next = at('2026-12-05T02:00:00Z');
    expect(whenToRun(weekly, due, at('2026-11-28T04:00:00Z'))).toEqual({ runAt: next, dueMs: next });
    expect(whenToRun(weekly, due, at('2026-12-01T00:00:00Z'))).toEqual({ runAt: next, dueMs: next });
  });
  it('"a later occurrence whose window is open runs now in place of a missed one"', () => {
    const now = at('2026-12-05T03:00:00Z');
    expect(whenToRun(weekly, due, now)).toEqual({ runAt: now, dueMs: at('2026-12-05T02:00:00Z') });
  });
  it('"without a window a due rotation runs whenever a leader exists; a period never waits"', () => {
    const now = at('2026-12-20T00:00:00Z');
    expect(whenToRun({ ...weekly, window: 0 }, due, now)).toEqual({ runAt: now, dueMs: due });
    expect(whenToRun({ kind: 'period', period: 60 }, 1000, 500_000)).toEqual({ runAt: 500_000, dueMs: 1000 });
    expect(whenToRun({ kind: 'manual' }, 1000, 500_000)).toBeUndefined();
  });
});

describe('shortestInterval', () => {
  const cron = (schedule: string): RotationSchedule => ({ kind: 'cron', schedule, window: 0 });
  const from = at('2031-01-03T12:00:00Z');
  it.each([
    ['a period is itself', { kind: 'period', period: 3600 } as RotationSchedule, 3600],
    ['manual rotation has none', { kind: 'manual' } as RotationSchedule, Number.POSITIVE_INFINITY],
    ['every six hours', cron('0 */6 * * *'), 6 * 3600],
    ['uneven hours: the closest pair', cron('0 2,3 * * *'), 3600],
    ['every minute', cron('* * * * *'), 60],
    ['weekly', cron('0 2 * * 6'), 7 * 86400],
    ['the 31st and the 1st of the next month', cron('0 0 1,31 * *'), 86400],
    ['yearly', cron('@yearly'), 365 * 86400],
  ])('"the seconds between the two closest due times": %s', (_, schedule, seconds) => {
    expect(shortestInterval(schedule, from)).toBe(seconds);
  });
});
