// The automated rotation of an engine's own credential: the state kept in its config (src/engines/root-rotation.ts)
// and the leader's timer (src/engines/leader-timer.ts). The engines' behaviour is proven against slapd and the Azure
// emulator (ldap-root-rotation-schedule, cloud-root-rotation-schedule).
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { BadRequestError } from '../../src/core/errors.ts';
import { LeaderTimer } from '../../src/engines/leader-timer.ts';
import { NO_ROOT_SCHEDULE, applyScheduleFields, failedState, rootRotationPlan, rotatedState } from '../../src/engines/root-rotation.ts';

const at = (iso: string) => Date.parse(iso);
const HOUR = 3_600_000;
const BACKOFF = { baseMs: 10_000, maxMs: 15 * 60_000 };

describe('applyScheduleFields', () => {
  it('"automation is off unless configured": no field, no schedule; clearing both turns it off', () => {
    expect(applyScheduleFields({}, NO_ROOT_SCHEDULE, 0, 0)).toBe(NO_ROOT_SCHEDULE);
    const on = applyScheduleFields({ rotation_period: 3600 }, NO_ROOT_SCHEDULE, 1000, 0);
    expect(on.root_rotation_due).toBe(1000 + HOUR);
    const off = applyScheduleFields({ rotation_period: 0 }, on, 2000, 0);
    expect(rootRotationPlan(off, 2000)).toBeUndefined();
  });

  it('"a period counts from the last rotation; a cron schedule from its next occurrence; the same schedule sent again keeps its due time"', () => {
    expect(applyScheduleFields({ rotation_period: 3600 }, NO_ROOT_SCHEDULE, 5 * HOUR, 4 * HOUR).root_rotation_due).toBe(5 * HOUR);
    const weekly = applyScheduleFields({ rotation_schedule: '0 2 * * 6' }, NO_ROOT_SCHEDULE, at('2031-01-01T00:00:00Z'), 0);
    expect(weekly.root_rotation_due).toBe(at('2031-01-04T02:00:00Z'));
    const failed = failedState(weekly, at('2031-01-04T02:00:00Z'), 'down', BACKOFF);
    expect(applyScheduleFields({ rotation_schedule: ' 0 2 * * 6 ' }, failed, at('2031-01-04T02:00:01Z'), 0)).toEqual(failed);
  });

  it.each([
    [{ rotation_period: 59 }, 'rotation_period'],
    [{ rotation_period: 3600, rotation_schedule: '@daily' }, 'rotation_schedule'],
    [{ rotation_window: 7200 }, 'rotation_window'],
    [{ rotation_schedule: '0 2 * * 6', rotation_window: 600 }, 'rotation_window'],
    [{ rotation_schedule: '0 2 L * *' }, 'rotation_schedule'],
  ])('"a 400 naming the field": %j names %s', (given, name) => {
    expect(() => applyScheduleFields(given, NO_ROOT_SCHEDULE, 0, 0)).toThrow(BadRequestError);
    expect(() => applyScheduleFields(given, NO_ROOT_SCHEDULE, 0, 0)).toThrow(name);
  });
});

describe('failedState / rotatedState', () => {
  const weekly = applyScheduleFields({ rotation_schedule: '0 2 * * 6', rotation_window: 3600 }, NO_ROOT_SCHEDULE, at('2031-01-01T00:00:00Z'), 0);

  it('"failures retry with the bounded backoff inside the window"', () => {
    const failed = failedState(weekly, at('2031-01-04T02:00:00Z'), 'down', BACKOFF);
    const plan = rootRotationPlan(failed, at('2031-01-04T02:00:00Z'))!;
    expect(plan.runAt - at('2031-01-04T02:00:00Z')).toBeGreaterThanOrEqual(5_000);
    expect(plan.runAt - at('2031-01-04T02:00:00Z')).toBeLessThanOrEqual(10_000);
    expect(failed).toMatchObject({ root_rotation_error: 'down', root_rotation_failures: 1 });
  });

  it('"never outside the window": a retry that would start after it waits for the next occurrence', () => {
    const late = failedState({ ...weekly, root_rotation_failures: 20 }, at('2031-01-04T02:55:00Z'), 'down', BACKOFF);
    expect(rootRotationPlan(late, at('2031-01-04T02:55:00Z'))).toEqual({ runAt: at('2031-01-11T02:00:00Z'), dueMs: at('2031-01-11T02:00:00Z') });
    expect(late.root_rotation_error).toBe('down');
  });

  it('"absent after a success": a rotation clears the error and plans the next occurrence', () => {
    const failed = failedState(weekly, at('2031-01-04T02:00:00Z'), 'down', BACKOFF);
    const done = rotatedState(failed, at('2031-01-04T02:00:09Z'));
    expect(done).toMatchObject({ root_rotation_error: '', root_rotation_failures: 0, root_rotation_retry_at: 0, root_rotation_due: at('2031-01-11T02:00:00Z') });
  });
});

describe('LeaderTimer', () => {
  function timer(clock: FakeClock, times: Array<number | undefined>, runs: number[], errors: unknown[] = []) {
    return new LeaderTimer({
      clock,
      next: async () => {
        const t = times.shift();
        if (t === -1) throw new Error('storage down');
        return t;
      },
      run: async () => void runs.push(clock.now()),
      onError: (err) => errors.push(err),
    });
  }

  it('"never before its time": runs at the time next() gives, then re-arms from next()', async () => {
    const clock = new FakeClock(0);
    const runs: number[] = [];
    const t = timer(clock, [1000, 5000, undefined], runs);
    await t.start();
    await clock.advance(999);
    expect(runs).toEqual([]);
    await clock.advance(1);
    await clock.advance(4000);
    expect(runs).toEqual([1000, 5000]);
    await clock.advance(100_000);
    expect(runs).toEqual([1000, 5000]);
  });

  it('"refresh re-reads"; "stop ends it"; a failing read goes to onError and the caller carries on', async () => {
    const clock = new FakeClock(0);
    const runs: number[] = [];
    const errors: unknown[] = [];
    const t = timer(clock, [1000, 300, -1, 2000], runs, errors);
    await t.start();
    await t.refresh();
    await clock.advance(500);
    expect(runs).toEqual([300]);
    expect(errors).toHaveLength(1);
    await t.refresh();
    await t.stop();
    await clock.advance(5000);
    expect(runs).toEqual([300]);
    await t.refresh();
    expect(runs).toEqual([300]);
  });
});
