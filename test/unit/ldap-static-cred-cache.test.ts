import { describe, expect, it } from 'vitest';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { StorageView } from '../../src/core/storage/view.ts';
import { StaticCredCache } from '../../src/engines/ldap/static-cred-cache.ts';
import { plannedRotation } from '../../src/engines/ldap/static-role-rotation.ts';
import { parseStaticRole, putStaticRoleOp, type StaticRole } from '../../src/engines/ldap/static-role-store.ts';

const T0 = Date.parse('2030-01-04T12:00:00Z');
const HOUR = 3600_000;

function role(over: Partial<StaticRole>): StaticRole {
  return parseStaticRole(Buffer.from(JSON.stringify({ name: 'app', username: 'svc', password: 'p1', last_rotation: T0, next_rotation: T0 + HOUR, rotation_period: 3600, ...over })));
}

async function store(storage: StorageView, r: StaticRole): Promise<void> {
  const op = putStaticRoleOp(r);
  if (op.type === 'put') await storage.put(op.key, op.value);
}

const expectedTtl = (r: StaticRole, now: number) => {
  const plan = plannedRotation(r, now);
  return plan ? Math.max(0, Math.round((plan.runAt - now) / 1000)) : 0;
};

describe('StaticCredCache (static-cred/:name answers)', () => {
  it('"a read sees the stored record as it is now": a rewrite by anyone (another node) is answered at once, a deletion is no role', async () => {
    const storage = new StorageView(new MemoryStorage(), 'ldap/');
    const cache = new StaticCredCache();
    const clock = { now: () => T0 };
    await store(storage, role({}));
    expect(await cache.read(storage, 'app', clock)).toMatchObject({ password: 'p1', last_password: '', ttl: 3600 });
    await store(storage, role({ password: 'p2', last_password: 'p1', last_rotation: T0 + 1000, next_rotation: T0 + 1000 + HOUR }));
    expect(await cache.read(storage, 'app', clock)).toMatchObject({ password: 'p2', last_password: 'p1', ttl: 3601 });
    await storage.delete('static-role/app');
    expect(await cache.read(storage, 'app', clock)).toBeUndefined();
  });

  it('"an answer is a copy": changing one never changes the next', async () => {
    const storage = new StorageView(new MemoryStorage(), 'ldap/');
    const cache = new StaticCredCache();
    await store(storage, role({}));
    const first = (await cache.read(storage, 'app', { now: () => T0 }))!;
    first.password = 'changed';
    expect((await cache.read(storage, 'app', { now: () => T0 }))!.password).toBe('p1');
  });

  // The kept plan must answer exactly what plannedRotation answers at every time, across due times, closed windows,
  // backoffs and roles without automation.
  const cases: Array<[string, Partial<StaticRole>]> = [
    ['period', {}],
    ['period, failing with a backoff past the due time', { next_rotation: T0 + 2 * HOUR, due_at: T0 + HOUR, failed_attempts: 2 }],
    ['cron with a window', { rotation_period: 0, rotation_schedule: '0 * * * *', rotation_window: 3600, next_rotation: T0 + HOUR }],
    ['cron with a short window whose occurrence passed', { rotation_period: 0, rotation_schedule: '30 */2 * * *', rotation_window: 3600, next_rotation: T0 + 30 * 60_000 }],
    ['cron without a window', { rotation_period: 0, rotation_schedule: '15 3 * * *', next_rotation: T0 + 15 * HOUR + 15 * 60_000 }],
    ['password the directory took but not recorded', { password_unrecorded: true, failed_attempts: 1, next_rotation: T0 + HOUR, due_at: T0 + HOUR }],
    ['no automation', { rotation_period: 0, disable_automated_rotation: true, next_rotation: 0 }],
  ];
  it.each(cases)('"ttl is what the plan says at every moment": %s', async (_name, over) => {
    const storage = new StorageView(new MemoryStorage(), 'ldap/');
    const cache = new StaticCredCache();
    const r = role(over);
    await store(storage, r);
    let now = T0;
    const clock = { now: () => now };
    for (const step of [0, 1, 999, 30 * 60_000, 29 * 60_000, 60_000, 1, 1, 15 * 60_000, HOUR, 90 * 60_000, 5 * HOUR, 1, 24 * HOUR]) {
      now += step;
      expect((await cache.read(storage, 'app', clock))!.ttl).toBe(expectedTtl(r, now));
    }
  });
});
