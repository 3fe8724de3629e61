// Automated rotation of the LDAP bind password (rotation_period, rotation_schedule, rotation_window,
// disable_automated_rotation on ldap/config): on time through the rotate-root path, inside its window, across
// restarts, and visible when it fails. Real slapd, a fake clock.
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { readConfig } from '../../src/engines/ldap/config-store.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { testServers, type TestServer } from '../support/server.ts';
import { configure, ok, mountStorage } from '../support/ldap-engine.ts';
import { parseScrape } from '../support/prometheus.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';
import { createDatabase } from '../support/postgres.ts';

const facts = inject('slapd');
const HOUR = 3_600_000;

let ou: IsolatedOu;
const pool = testServers();
const server = pool.start;
/** A data directory the servers of one test share, as restarts of one node (removed after the test). */
const dataDir = () => pool.dataDir('strongroom-root-schedule-');
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 0 });
});
afterEach(async () => {
  await pool.closeAll();
  await ou.cleanup();
});

const storedConfig = async (s: TestServer) => (await readConfig(mountStorage(s)))!;
const readBack = async (s: TestServer) => (await s.request('GET', 'ldap/config')).body.data;
async function scheduled(s: TestServer, result: 'success' | 'failure'): Promise<number> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } });
  return parseScrape(r.body).value('strongroom_root_rotations_scheduled_total', { mount: 'ldap/', result }) ?? 0;
}
/** A Friday, 12:00 UTC, near now; `0 2 * * 6` is then due 14 h later. */
function fridayNoon(): number {
  const d = new Date();
  d.setUTCHours(12, 0, 0, 0);
  while (d.getUTCDay() !== 5) d.setUTCDate(d.getUTCDate() + 1);
  return d.getTime();
}
/** Lets a server that just started run what is due now (it would have by now on a real clock). */
async function settle(clock: FakeClock): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await clock.advance(0);
    await new Promise((r) => setTimeout(r, 30));
  }
}

/**
 * The rotation that is due has landed: the stored bind password is no longer `before`. A fake clock runs a timer due
 * now only when moved, so `clock` (after a restart) is nudged by 0 ms while waiting.
 */
async function rotatedFrom(s: TestServer, before: string, clock?: FakeClock): Promise<string> {
  await vi.waitFor(async () => {
    await clock?.advance(0);
    expect((await storedConfig(s)).bindpass).not.toBe(before);
  }, { timeout: 5000 });
  return (await storedConfig(s)).bindpass;
}

describe('POST ldap/config: automated rotation of the bind password', () => {
  it('"automation is off unless configured": the fields read back as zero values and nothing rotates', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    await configure(s, facts, ou);
    expect(await readBack(s)).toMatchObject({ rotation_period: 0, rotation_schedule: '', rotation_window: 0, disable_automated_rotation: false });
    expect((await readBack(s)).next_rotation).toBeUndefined();
    await clock.advance(30 * 24 * HOUR);
    expect((await storedConfig(s)).bindpass).toBe(ou.engine.password);
  });

  it('"rotation_period": rotates through rotate-root on time, never before; the new password binds and the old does not', async () => {
    const t0 = Date.now();
    const clock = new FakeClock(t0);
    const s = await server({ clock });
    await configure(s, facts, ou, { rotation_period: '1h' });
    expect(await readBack(s)).toMatchObject({ rotation_period: 3600, next_rotation: new Date(t0 + HOUR).toISOString() });
    await clock.advance(HOUR - 1000);
    expect((await storedConfig(s)).bindpass).toBe(ou.engine.password);
    await clock.advance(1000);
    const first = await rotatedFrom(s, ou.engine.password);
    expect(await canBind(facts.url, ou.engine.dn, first)).toBe(true);
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
    // The previous password is kept for the grace period like any rotate-root's, and nobody sees the new one.
    expect((await storedConfig(s)).last_bind_password).toBe(ou.engine.password);
    const read = await readBack(s);
    expect(JSON.stringify(read)).not.toContain(first);
    expect(read.next_rotation).toBe(new Date(t0 + 2 * HOUR).toISOString());
    expect(read.last_rotation_error).toBeUndefined();
    expect(await scheduled(s, 'success')).toBe(1);
    // The next one counts from this one.
    await clock.advance(HOUR);
    expect(await canBind(facts.url, ou.engine.dn, await rotatedFrom(s, first))).toBe(true);
    expect(await scheduled(s, 'success')).toBe(2);
  });

  it('"a rotate-root by hand moves the next automated rotation": the period counts from it', async () => {
    const t0 = Date.now();
    const clock = new FakeClock(t0);
    const s = await server({ clock });
    await configure(s, facts, ou, { rotation_period: '1h' });
    await clock.advance(HOUR / 2);
    await ok(s, 'POST', 'ldap/rotate-root');
    const manual = (await storedConfig(s)).bindpass;
    expect((await readBack(s)).next_rotation).toBe(new Date(t0 + HOUR / 2 + HOUR).toISOString());
    await clock.advance(HOUR / 2);
    expect((await storedConfig(s)).bindpass).toBe(manual);
    await clock.advance(HOUR / 2);
    await rotatedFrom(s, manual);
  });

  it('"disable_automated_rotation leaves only manual rotation"', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    await configure(s, facts, ou, { rotation_period: '1h', disable_automated_rotation: true });
    expect(await readBack(s)).toMatchObject({ rotation_period: 3600, disable_automated_rotation: true });
    expect((await readBack(s)).next_rotation).toBeUndefined();
    await clock.advance(3 * HOUR);
    expect((await storedConfig(s)).bindpass).toBe(ou.engine.password);
    await ok(s, 'POST', 'ldap/rotate-root');
    expect(await canBind(facts.url, ou.engine.dn, (await storedConfig(s)).bindpass)).toBe(true);
    // Enabled again: the period counts from the last rotation.
    await ok(s, 'POST', 'ldap/config', { disable_automated_rotation: false });
    expect((await readBack(s)).next_rotation).toBe(new Date((await storedConfig(s)).last_bind_password_rotation + HOUR).toISOString());
  });

  it('"a config write that does not touch these fields keeps them", and the same schedule sent again keeps its due time', async () => {
    const t0 = Date.now();
    const clock = new FakeClock(t0);
    const s = await server({ clock });
    await configure(s, facts, ou, { rotation_schedule: '0 2 * * 6', rotation_window: '2h' });
    const before = await readBack(s);
    await clock.advance(60_000);
    await ok(s, 'POST', 'ldap/config', { url: facts.url, request_timeout: 6 });
    await ok(s, 'POST', 'ldap/config', { rotation_schedule: '0 2 * * 6' });
    const after = await readBack(s);
    expect(after).toMatchObject({ rotation_schedule: '0 2 * * 6', rotation_window: 7200, rotation_period: 0, next_rotation: before.next_rotation });
    expect((await storedConfig(s)).bindpass).toBe(ou.engine.password);
    // A period replaces the schedule (and its window).
    await ok(s, 'POST', 'ldap/config', { rotation_period: '2h' });
    expect(await readBack(s)).toMatchObject({ rotation_period: 7200, rotation_schedule: '', rotation_window: 0, next_rotation: new Date(t0 + 60_000 + 2 * HOUR).toISOString() });
  });

  it('"a rotation that cannot start within the window waits for the next occurrence; inside it, a restart runs it at once"', async () => {
    const friday = fridayNoon();
    const saturday2am = friday + 14 * HOUR;
    const [dir, unsealKey] = [dataDir(), randomBytes(32).toString('base64')];
    const s1 = await server({ clock: new FakeClock(friday), storage: 'sqlite', dataDir: dir, unsealKey });
    await configure(s1, facts, ou, { rotation_schedule: '0 2 * * 6', rotation_window: '1h' });
    expect((await readBack(s1)).next_rotation).toBe(new Date(saturday2am).toISOString());
    await s1.close();

    // Down over the whole window: at 03:30 the occurrence is gone, the next Saturday is due, nothing rotates now.
    const lateClock = new FakeClock(saturday2am + 90 * 60_000);
    const late = await server({ clock: lateClock, storage: 'sqlite', dataDir: dir, unsealKey });
    expect((await readBack(late)).next_rotation).toBe(new Date(saturday2am + 7 * 24 * HOUR).toISOString());
    await settle(lateClock);
    expect((await storedConfig(late)).bindpass).toBe(ou.engine.password);
    await late.close();

    // Back at 02:30 of the next Saturday (inside that window): it runs once, at once.
    const clock = new FakeClock(saturday2am + 7 * 24 * HOUR + 30 * 60_000);
    const inside = await server({ clock, storage: 'sqlite', dataDir: dir, unsealKey });
    const rotated = await rotatedFrom(inside, ou.engine.password, clock);
    expect(await canBind(facts.url, ou.engine.dn, rotated)).toBe(true);
    expect((await readBack(inside)).next_rotation).toBe(new Date(saturday2am + 14 * 24 * HOUR).toISOString());
    expect(await scheduled(inside, 'success')).toBe(1);
  });

  it('"a restart never rotates before its time, and never skips one that came due while no node was leader"', async () => {
    const t0 = Date.now();
    const [dir, unsealKey] = [dataDir(), randomBytes(32).toString('base64')];
    const s1 = await server({ clock: new FakeClock(t0), storage: 'sqlite', dataDir: dir, unsealKey });
    await configure(s1, facts, ou, { rotation_period: '1h' });
    await s1.close();

    // Restarted half-way: nothing at start, the rotation at its time.
    const clock2 = new FakeClock(t0 + HOUR / 2);
    const early = await server({ clock: clock2, storage: 'sqlite', dataDir: dir, unsealKey });
    await settle(clock2);
    expect((await storedConfig(early)).bindpass).toBe(ou.engine.password);
    await clock2.advance(HOUR / 2 - 1000);
    expect((await storedConfig(early)).bindpass).toBe(ou.engine.password);
    await clock2.advance(1000);
    const first = await rotatedFrom(early, ou.engine.password);
    await early.close();

    // Down when the next one fell due: it runs once as soon as the server leads again.
    const clock3 = new FakeClock(t0 + 3 * HOUR);
    const late = await server({ clock: clock3, storage: 'sqlite', dataDir: dir, unsealKey });
    const second = await rotatedFrom(late, first, clock3);
    expect(await canBind(facts.url, ou.engine.dn, second)).toBe(true);
    expect((await readBack(late)).next_rotation).toBe(new Date(t0 + 4 * HOUR).toISOString());
    await settle(clock3);
    expect((await storedConfig(late)).bindpass).toBe(second);
    expect(await scheduled(late, 'success')).toBe(1);
  });

  it('"a failure shows in the config read and the metric, then recovers": the directory stopped, then back', async () => {
    const t0 = Date.now();
    const clock = new FakeClock(t0);
    const proxy = await startTcpProxy(facts.host, facts.port);
    try {
      const s = await server({ clock });
      await configure(s, facts, ou, { url: proxy.url, rotation_period: '1h' });
      await proxy.stop();
      await clock.advance(HOUR);
      await vi.waitFor(async () => expect((await readBack(s)).last_rotation_error).toBeDefined(), { timeout: 5000 });
      const read = await readBack(s);
      expect(read.last_rotation_error).toEqual({ message: expect.stringContaining(proxy.url.replace('ldap://', '')), time: new Date(t0 + HOUR).toISOString() });
      expect(JSON.stringify(read)).not.toContain(ou.engine.password);
      // The retry comes with the bounded backoff (first delay 5-10 s), not at the next period.
      const retry = Date.parse(read.next_rotation);
      expect(retry - (t0 + HOUR)).toBeGreaterThanOrEqual(5_000);
      expect(retry - (t0 + HOUR)).toBeLessThanOrEqual(10_000);
      expect(await scheduled(s, 'failure')).toBe(1);
      expect((await storedConfig(s)).bindpass).toBe(ou.engine.password);

      await proxy.start();
      await clock.advance(10_000);
      const rotated = await rotatedFrom(s, ou.engine.password);
      expect(await canBind(facts.url, ou.engine.dn, rotated)).toBe(true);
      const after = await readBack(s);
      expect(after.last_rotation_error).toBeUndefined();
      expect(Date.parse(after.next_rotation)).toBe((await storedConfig(s)).last_bind_password_rotation + HOUR);
      expect(await scheduled(s, 'success')).toBe(1);
      expect(await scheduled(s, 'failure')).toBe(1);
    } finally {
      await proxy.stop();
    }
  });

  it.each<[Record<string, unknown>, string]>([
    [{ rotation_period: 30 }, 'rotation_period'],
    [{ rotation_period: -1 }, 'rotation_period'],
    [{ rotation_period: 'soon' }, 'rotation_period'],
    [{ rotation_period: '1h', rotation_schedule: '0 2 * * 6' }, 'rotation_schedule'],
    [{ rotation_schedule: '* * * * * *' }, 'rotation_schedule'],
    [{ rotation_schedule: '0 0 L * *' }, 'rotation_schedule'],
    [{ rotation_schedule: '0 0 * * MON#1' }, 'rotation_schedule'],
    [{ rotation_schedule: '61 * * * *' }, 'rotation_schedule'],
    [{ rotation_schedule: `0 ${'1,'.repeat(100)}2 * * *` }, 'rotation_schedule'],
    [{ rotation_schedule: '0 2 * * 6\n0 3 * * *' }, 'rotation_schedule'],
    [{ rotation_schedule: ['0 2 * * 6'] }, 'rotation_schedule'],
    [{ rotation_window: '2h' }, 'rotation_window'],
    [{ rotation_schedule: '0 2 * * 6', rotation_window: 60 }, 'rotation_window'],
    [{ rotation_period: '1h', rotation_window: '2h' }, 'rotation_window'],
    [{ disable_automated_rotation: 'maybe' }, 'disable_automated_rotation'],
    [{ verify_period: 30 }, 'verify_period'],
    [{ verify_period: '400d' }, 'verify_period'],
    [{ verify_period: -60 }, 'verify_period'],
    [{ verify_rate: 0 }, 'verify_rate'],
    [{ verify_rate: 1000 }, 'verify_rate'],
    [{ verify_rate: 'fast' }, 'verify_rate'],
    [{ drift_action: 'delete' }, 'drift_action'],
    [{ drift_action: '' }, 'drift_action'],
  ])('"every input bounded": %j is a 400 naming %s and changes nothing', async (body, name) => {
    const s = await server();
    await configure(s, facts, ou);
    const before = await storedConfig(s);
    const r = await s.request('POST', 'ldap/config', { body });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain(name);
    expect(await storedConfig(s)).toEqual(before);
  });
});

describe('leader changes (nodes on one PostgreSQL database)', () => {
  const postgres = inject('postgres');
  const timings = { leaseTtlMs: 1500, renewMs: 200, pollMs: 100, heartbeatMs: 300, deadAfterMs: 2000 };

  it('"a leader change never rotates the bind password before its time, and never skips a rotation that came due while no node led: it runs once, as soon as a leader exists, inside its window"', async () => {
    const db = await createDatabase(postgres);
    try {
      const friday = fridayNoon();
      const saturday2am = friday + 14 * HOUR;
      const clock = new FakeClock(friday);
      const unsealKey = randomBytes(32).toString('base64');
      const node = () => server({ postgresUrl: db.url, unsealKey, clock, cluster: timings });
      const leads = (n: TestServer) => vi.waitFor(() => expect(n.core.cluster.leading).toBe(true), { timeout: 10_000, interval: 50 });
      const first = await node();
      await leads(first);
      await configure(first, facts, ou, { rotation_schedule: '0 2 * * 6', rotation_window: '2h' });

      // The next leader takes over before the occurrence: nothing rotates until 02:00.
      const second = await node();
      await first.close();
      await clock.advance(13 * HOUR);
      await leads(second);
      await settle(clock);
      expect((await storedConfig(second)).bindpass).toBe(ou.engine.password);
      await clock.advance(saturday2am - clock.now() - 60_000);
      expect((await storedConfig(second)).bindpass).toBe(ou.engine.password);
      await clock.advance(60_000);
      const rotated = await rotatedFrom(second, ou.engine.password, clock);
      expect(await canBind(facts.url, ou.engine.dn, rotated)).toBe(true);

      // That leader stops and no node leads through the next occurrence; one that leads inside its window runs it once.
      const third = await node();
      await second.close();
      await clock.advance(saturday2am + 7 * 24 * HOUR + 30 * 60_000 - clock.now());
      await leads(third);
      const again = await rotatedFrom(third, rotated, clock);
      expect(await canBind(facts.url, ou.engine.dn, again)).toBe(true);
      expect(await canBind(facts.url, ou.engine.dn, rotated)).toBe(false);
      expect((await readBack(third)).next_rotation).toBe(new Date(saturday2am + 14 * 24 * HOUR).toISOString());
      await settle(clock);
      expect((await storedConfig(third)).bindpass).toBe(again);
      expect(await scheduled(third, 'success')).toBe(1);
    } finally {
      await pool.closeAll();
      await db.drop();
    }
  });
});
