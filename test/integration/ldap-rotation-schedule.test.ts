// Scheduled rotation of LDAP static roles (issue 20): cron schedules and windows, restarts, automation disabled, the
// per-role password policy, failures visible in the role, `LIST ldap/rotation-failures` and the metrics, and drift
// marks shown. Real slapd, a fake clock where timing matters. docs/rotation.md is the contract these tests read.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { markDrift } from '../../src/engines/ldap/drift-marks.ts';
import { configure, cred, ok, mountStorage } from '../support/ldap-engine.ts';
import { leaderChangeWalk } from '../support/leader-change.ts';
import { parseScrape, type Scrape } from '../support/prometheus.ts';
import { testServers, type TestServer } from '../support/server.ts';
import { alive, canBind, createIsolatedOu, ensureSlapdInstalled, startSlapd, stopSlapd, type IsolatedOu, type SlapdFacts } from '../support/slapd.ts';

const facts = inject('slapd');

const pool = testServers();
const server = pool.start;
afterEach(async () => {
  await pool.closeAll();
});

let ou: IsolatedOu;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 0 });
});
afterEach(async () => {
  await ou.cleanup();
});

const at = (iso: string): number => Date.parse(iso);
/** Friday noon UTC; the weekly schedule below falls on the Saturday after, 14 hours later. */
const FRIDAY = at('2031-01-03T12:00:00Z');
const WEEKLY = { rotation_schedule: '0 2 * * 6', rotation_window: '2h' };

const read = async (s: TestServer, name = 'app'): Promise<Record<string, any>> => {
  const r = await s.request('GET', `ldap/static-role/${name}`);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data;
};
const failures = async (s: TestServer): Promise<{ status: number; keys?: string[]; info?: Record<string, any> }> => {
  const r = await s.request('LIST', 'ldap/rotation-failures');
  return { status: r.status, keys: r.body?.data?.keys, info: r.body?.data?.key_info };
};
async function scrape(s: TestServer): Promise<Scrape> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } });
  expect(r.statusCode, r.body).toBe(200);
  return parseScrape(r.body);
}
const failingGauge = async (s: TestServer, kind: 'rotation' | 'drift') => (await scrape(s)).value('strongroom_ldap_rotation_failures', { mount: 'ldap/', kind });
const rotationsCounted = async (s: TestServer, result: 'success' | 'failure') =>
  (await scrape(s)).value('strongroom_ldap_static_role_rotations_total', { mount: 'ldap/', result }) ?? 0;

/** Real time for the scheduler's work to land after a fake-clock step (a directory round trip is not a timer). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 150));

/** Moves the clock to `iso` in steps no longer than `stepMs`, letting each step's rotations finish. */
async function advanceTo(clock: FakeClock, iso: string, stepMs = 15 * 60_000): Promise<void> {
  for (let guard = 0; clock.now() < at(iso) && guard < 10_000; guard++) {
    await clock.advance(Math.min(stepMs, at(iso) - clock.now()));
    await settle();
  }
}

/** A server on a fake clock at FRIDAY, configured for the test's OU. */
async function configuredAtFriday(): Promise<{ s: TestServer; clock: FakeClock }> {
  const clock = new FakeClock(FRIDAY);
  const s = await server({ clock });
  await configure(s, facts, ou);
  return { s, clock };
}

const dataDirectory = () => pool.dataDir('strongroom-schedule-');

describe('static-role/:name with rotation_schedule', () => {
  it('"a scheduled rotation runs at its occurrence (UTC), never before, and next at the following occurrence"', async () => {
    const { s, clock } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...WEEKLY });
    expect(await read(s)).toMatchObject({
      rotation_period: 0, rotation_schedule: '0 2 * * 6', rotation_window: 7200, disable_automated_rotation: false,
      next_rotation: '2031-01-04T02:00:00.000Z', drifted: false,
    });
    const first = await cred(s, 'app');
    expect(first).toMatchObject({ rotation_schedule: '0 2 * * 6', rotation_window: 7200, ttl: 14 * 3600 });

    await advanceTo(clock, '2031-01-04T01:59:59Z', 3 * 3600_000);
    expect((await cred(s, 'app')).password).toBe(first.password);
    await clock.advance(1000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(first.password), { timeout: 5000 });
    const role = await read(s);
    expect(role.last_service_rotation).toBe('2031-01-04T02:00:00.000Z');
    expect(role.next_rotation).toBe('2031-01-11T02:00:00.000Z');
    expect(await canBind(facts.url, ou.users[0]!.dn, (await cred(s, 'app')).password)).toBe(true);
  });

  it('"a rotation by hand keeps the schedule\'s occurrences; an update that changes the schedule starts from the next occurrence after the update"', async () => {
    const { s } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...WEEKLY });
    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect((await read(s)).next_rotation).toBe('2031-01-04T02:00:00.000Z');
    await ok(s, 'POST', 'ldap/static-role/app', { rotation_schedule: '30 13 * * *' });
    // The window stays (the update does not name it); the new schedule's first occurrence is today's 13:30.
    expect(await read(s)).toMatchObject({ rotation_schedule: '30 13 * * *', rotation_window: 7200, next_rotation: '2031-01-03T13:30:00.000Z' });
    // A period replaces the schedule and drops its window.
    await ok(s, 'POST', 'ldap/static-role/app', { rotation_period: '6h' });
    const role = await read(s);
    expect(role).toMatchObject({ rotation_period: 21600, rotation_schedule: '', rotation_window: 0 });
    expect(Date.parse(role.next_rotation)).toBe(Date.parse(role.last_service_rotation) + 6 * 3600_000);
  });

  it.each([
    ['0 2 * * 6', '2031-01-04T02:00:00.000Z'],
    ['0 2 * * sat', '2031-01-04T02:00:00.000Z'],
    ['0 2 * * SAT', '2031-01-04T02:00:00.000Z'],
    ['  0   2 * *  6 ', '2031-01-04T02:00:00.000Z'],
    ['@weekly', '2031-01-05T00:00:00.000Z'],
    ['@DAILY', '2031-01-04T00:00:00.000Z'],
    ['0 9-17/4 * jan mon-fri', '2031-01-03T13:00:00.000Z'],
    ['15,45 */6 1,15 * *', '2031-01-15T00:15:00.000Z'],
  ])('"standard cron spellings are accepted, in UTC": %j is next due at %s', async (schedule, next) => {
    const s = await server({ clock: new FakeClock(FRIDAY) });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_schedule: schedule, skip_import_rotation: true });
    expect((await read(s)).next_rotation).toBe(next);
  });
});

describe('static-role/:name field rules', () => {
  let s: TestServer;
  beforeEach(async () => {
    s = await server({ clock: new FakeClock(FRIDAY) });
    await configure(s, facts, ou);
  });

  const CREATE: Array<[string, Record<string, unknown>, string[]]> = [
    ['period and schedule', { rotation_period: 60, rotation_schedule: '0 2 * * 6' }, ['rotation_period', 'rotation_schedule']],
    ['neither period nor schedule', {}, ['rotation_period', 'rotation_schedule']],
    ['an empty schedule alone', { rotation_schedule: '   ' }, ['rotation_period', 'rotation_schedule']],
    ['a zero period alone', { rotation_period: 0 }, ['rotation_period', 'rotation_schedule']],
    ['a period below 5 s', { rotation_period: 4 }, ['rotation_period']],
    ['a negative period', { rotation_period: -60 }, ['rotation_period']],
    ['a period that is no duration', { rotation_period: '1 week' }, ['rotation_period']],
    ['six cron fields (seconds)', { rotation_schedule: '0 0 2 * * 6' }, ['rotation_schedule']],
    ['four cron fields', { rotation_schedule: '0 2 * *' }, ['rotation_schedule']],
    ['cron-parser\'s L', { rotation_schedule: '0 2 L * *' }, ['rotation_schedule']],
    ['cron-parser\'s #', { rotation_schedule: '0 2 * * 6#1' }, ['rotation_schedule']],
    ['cron-parser\'s W', { rotation_schedule: '0 2 15W * *' }, ['rotation_schedule']],
    ['cron-parser\'s H', { rotation_schedule: 'H 2 * * *' }, ['rotation_schedule']],
    ['cron-parser\'s ?', { rotation_schedule: '0 2 ? * 6' }, ['rotation_schedule']],
    ['an hour of 25', { rotation_schedule: '0 25 * * *' }, ['rotation_schedule']],
    ['a minute of 60', { rotation_schedule: '60 2 * * *' }, ['rotation_schedule']],
    ['a full day name', { rotation_schedule: '0 2 * * Saturday' }, ['rotation_schedule']],
    ['a month name as a day', { rotation_schedule: '0 2 * * jan' }, ['rotation_schedule']],
    ['@reboot', { rotation_schedule: '@reboot' }, ['rotation_schedule']],
    ['a shell tail', { rotation_schedule: '0 2 * * 6; rm -rf /' }, ['rotation_schedule']],
    ['a line break', { rotation_schedule: '0 2 * * 6\n0 3 * * 6' }, ['rotation_schedule']],
    ['an overlong schedule', { rotation_schedule: `0 2 * * ${'6,'.repeat(100)}6` }, ['rotation_schedule']],
    ['a schedule as a list', { rotation_schedule: ['0 2 * * 6'] }, ['rotation_schedule']],
    ['a window below 1 h', { ...WEEKLY, rotation_window: 3599 }, ['rotation_window']],
    ['a negative window', { ...WEEKLY, rotation_window: -7200 }, ['rotation_window']],
    ['a window that is no duration', { ...WEEKLY, rotation_window: 'two hours' }, ['rotation_window']],
    ['a window with a period', { rotation_period: 3600, rotation_window: 7200 }, ['rotation_window']],
    ['a window alone', { rotation_window: 7200 }, ['rotation_window']],
    ['automation disabled by a non-boolean', { rotation_period: 60, disable_automated_rotation: 'maybe' }, ['disable_automated_rotation']],
    ['a password policy that does not exist', { rotation_period: 60, password_policy: 'nope' }, ['password_policy']],
    ['a password policy name past its bound', { rotation_period: 60, password_policy: 'p'.repeat(300) }, ['password_policy']],
  ];

  it.each(CREATE)('"each bad combination is a 400 naming the fields": create with %s', async (_, fields, named) => {
    const r = await s.request('POST', 'ldap/static-role/bad', { body: { username: 'user0', ...fields } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    for (const f of named) expect(r.body.errors[0]).toContain(f);
    expect((await s.request('GET', 'ldap/static-role/bad')).status).toBe(404);
    expect(await canBind(facts.url, ou.users[0]!.dn, ou.users[0]!.password)).toBe(true);
  });

  it.each([
    ['a window on a period role', { rotation_window: 7200 }, ['rotation_window']],
    ['period and schedule', { rotation_period: 60, rotation_schedule: '@daily' }, ['rotation_period', 'rotation_schedule']],
    ['the period cleared with nothing in its place', { rotation_period: 0 }, ['rotation_period', 'rotation_schedule']],
    ['automation re-enabled on a role that has neither', { disable_automated_rotation: false, rotation_period: '' }, ['rotation_period']],
    ['a bad schedule', { rotation_schedule: '0 2 * * 8' }, ['rotation_schedule']],
  ])('"each bad combination is a 400 naming the fields, and the role is unchanged": update with %s', async (_, fields, named) => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const before = await read(s);
    const r = await s.request('POST', 'ldap/static-role/app', { body: fields });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    for (const f of named) expect(r.body.errors[0]).toContain(f);
    expect(await read(s)).toEqual(before);
  });

  it('"an update keeps what it does not name"', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...WEEKLY });
    await ok(s, 'POST', 'ldap/static-role/app', { dn: '' });
    await ok(s, 'POST', 'ldap/static-role/app', { rotation_window: '3h' });
    expect(await read(s)).toMatchObject({ rotation_schedule: '0 2 * * 6', rotation_window: 10800, next_rotation: '2031-01-04T02:00:00.000Z' });
  });

  it('"records of earlier versions (rotation_period only) still load and keep their due time"', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const storage = mountStorage(s);
    const stored = (await storage.getJson('static-role/app', (raw) => raw as Record<string, unknown>))!;
    const old = Object.fromEntries(Object.entries(stored).filter(([k]) =>
      ['name', 'username', 'dn', 'resolved_dn', 'rotation_period', 'password', 'last_password', 'last_rotation', 'next_rotation', 'last_error', 'last_error_time', 'failed_attempts'].includes(k)));
    await storage.putJson('static-role/app', old);
    expect(await read(s)).toMatchObject({ rotation_period: 3600, rotation_schedule: '', disable_automated_rotation: false, next_rotation: new Date(old.next_rotation as number).toISOString() });
  });
});

describe('restarts', () => {
  const unsealKey = randomBytes(32).toString('base64');

  it('"a restart never rotates before its time, never skips a rotation that came due while the server was down (it runs at once inside its window), and one whose window closed waits for the next occurrence"', async () => {
    const dataDir = dataDirectory();
    const start = (iso: string) => {
      const clock = new FakeClock(at(iso));
      return server({ storage: 'sqlite', dataDir, unsealKey, clock }).then((s) => ({ s, clock }));
    };
    let { s, clock } = await start('2031-01-03T12:00:00Z');
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...WEEKLY });
    const p0 = (await cred(s, 'app')).password;
    await s.close();

    // Before its time: nothing happens, and it runs at its time.
    ({ s, clock } = await start('2031-01-04T01:00:00Z'));
    await clock.advance(1);
    await settle();
    expect((await cred(s, 'app')).password).toBe(p0);
    expect((await cred(s, 'app')).ttl).toBe(3600);
    await clock.advance(3600_000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(p0), { timeout: 5000 });
    const p1 = (await cred(s, 'app')).password;
    await s.close();

    // Down across the next occurrence, back inside its window: it runs once, at once.
    ({ s, clock } = await start('2031-01-11T03:00:00Z'));
    await clock.advance(1);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(p1), { timeout: 5000 });
    const p2 = (await cred(s, 'app')).password;
    expect((await read(s)).last_service_rotation).toBe('2031-01-11T03:00:00.001Z');
    await clock.advance(3600_000);
    await settle();
    expect((await cred(s, 'app')).password).toBe(p2);
    await s.close();

    // Down across the whole window of the next one: it waits for the occurrence after.
    ({ s, clock } = await start('2031-01-18T05:00:00Z'));
    await clock.advance(1);
    await settle();
    expect((await cred(s, 'app')).password).toBe(p2);
    expect((await read(s)).next_rotation).toBe('2031-01-25T02:00:00.000Z');
    await advanceTo(clock, '2031-01-25T01:59:00Z', 24 * 3600_000);
    expect((await cred(s, 'app')).password).toBe(p2);
    await advanceTo(clock, '2031-01-25T02:00:00Z');
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(p2), { timeout: 5000 });
    expect(await canBind(facts.url, ou.users[0]!.dn, (await cred(s, 'app')).password)).toBe(true);
  });
});

describe('leader changes (nodes on one PostgreSQL database)', () => {
  const postgres = inject('postgres');

  it('"a leader change never rotates a role before its time, and never skips one that came due while no node led: it runs once, as soon as a leader exists, inside its window"', async () => {
    await leaderChangeWalk(postgres, pool, FRIDAY, async ({ clock, node, leaderOf }) => {
      const first = await node();
      await leaderOf([first]);
      await configure(first, facts, ou);
      await ok(first, 'POST', 'ldap/static-role/app', { username: 'user0', ...WEEKLY });
      const p0 = (await cred(first, 'app')).password;

      // The leader stops; the clock passes the occurrence before another node leads.
      const second = await node();
      await first.close();
      await clock.advance(15 * 3600_000);
      expect(clock.now()).toBe(at('2031-01-04T03:00:00Z'));
      await leaderOf([second]);
      // The new leader's work starts just after it leads; a timer due now fires when the fake clock moves.
      await vi.waitFor(async () => {
        await clock.advance(1);
        expect((await cred(second, 'app')).password).not.toBe(p0);
      }, { timeout: 10_000, interval: 100 });
      expect((await read(second)).last_service_rotation).toMatch(/^2031-01-04T03:00:00/);
      await advanceTo(clock, '2031-01-04T05:00:00Z', 20 * 60_000);
      expect(await rotationsCounted(second, 'success')).toBe(1);
      const p1 = (await cred(second, 'app')).password;

      // Again, but the next leader arrives before the next occurrence: it waits for it.
      const third = await node();
      await second.close();
      await clock.advance(at('2031-01-11T01:00:00Z') - clock.now());
      await leaderOf([third]);
      await new Promise((resolve) => setTimeout(resolve, 500));
      await advanceTo(clock, '2031-01-11T01:59:00Z', 10 * 60_000);
      expect((await cred(third, 'app')).password).toBe(p1);
      expect((await read(third)).next_rotation).toBe('2031-01-11T02:00:00.000Z');
      await advanceTo(clock, '2031-01-11T02:00:00Z', 10 * 60_000);
      await vi.waitFor(async () => expect((await cred(third, 'app')).password).not.toBe(p1), { timeout: 10_000 });
      expect(await rotationsCounted(third, 'success')).toBe(1);
      expect(await canBind(facts.url, ou.users[0]!.dn, (await cred(third, 'app')).password)).toBe(true);
      await third.close();
    });
  });
});

describe('disable_automated_rotation', () => {
  it('"disable_automated_rotation leaves only manual rotation": no next_rotation, ttl 0, nothing rotates; rotate-role does; re-enabled, the schedule resumes', async () => {
    const { s, clock } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', disable_automated_rotation: true });
    const role = await read(s);
    expect(role).toMatchObject({ disable_automated_rotation: true, rotation_period: 0, rotation_schedule: '' });
    expect(role).not.toHaveProperty('next_rotation');
    const first = await cred(s, 'app');
    expect(first.ttl).toBe(0);
    await advanceTo(clock, '2031-12-31T00:00:00Z', 30 * 24 * 3600_000);
    expect((await cred(s, 'app')).password).toBe(first.password);

    await ok(s, 'POST', 'ldap/rotate-role/app');
    const manual = await cred(s, 'app');
    expect(manual.password).not.toBe(first.password);
    expect(await canBind(facts.url, ou.users[0]!.dn, manual.password)).toBe(true);

    // A period role switched off keeps its period but runs nothing; switched on, it runs from its last rotation.
    await ok(s, 'POST', 'ldap/static-role/app', { rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/app', { disable_automated_rotation: true });
    expect(await read(s)).toMatchObject({ rotation_period: 3600, disable_automated_rotation: true });
    await clock.advance(2 * 3600_000);
    await settle();
    expect((await cred(s, 'app')).password).toBe(manual.password);
    await ok(s, 'POST', 'ldap/static-role/app', { disable_automated_rotation: false });
    // Due an hour after the manual rotation, two hours ago: it runs now.
    await clock.advance(1);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(manual.password), { timeout: 5000 });
  }, 90_000); // ~24 s on a quiet machine: it walks a fake clock through real rotations against slapd

  it('"a failed rotate-role of a role without automation says to retry by hand, and nothing retries it"', async () => {
    const { s, clock } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', disable_automated_rotation: true });
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBe(502);
    expect(r.body.errors[0]).toMatch(/^unable to finish rotating credentials; automated rotation is disabled for this role, so retry manually: /);
    await clock.advance(3600_000);
    await settle();
    expect(await rotationsCounted(s, 'failure')).toBe(1);
    expect((await failures(s)).info?.app).toMatchObject({ kind: 'rotation', attempts: 1 });
  });
});

describe('static-role/:name password_policy', () => {
  it('"a per-role password_policy overrides the config\'s"; cleared, the config\'s applies again', async () => {
    const s = await server();
    await configure(s, facts, ou, { length: 20 });
    await ok(s, 'POST', 'sys/policies/password/digits', { policy: 'length = 24\nrule "charset" {\n  charset = "0123456789"\n}' });
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h', password_policy: 'digits' });
    expect((await read(s)).password_policy).toBe('digits');
    expect((await cred(s, 'app')).password).toMatch(/^\d{24}$/);
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const digits = (await cred(s, 'app')).password;
    expect(digits).toMatch(/^\d{24}$/);
    expect(await canBind(facts.url, ou.users[0]!.dn, digits)).toBe(true);
    await ok(s, 'POST', 'ldap/static-role/app', { password_policy: '' });
    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect((await cred(s, 'app')).password).toMatch(/^[A-Za-z0-9]{20}$/);
  });
});

/** Our own slapd, stopped and started again on the same ports and data while a server uses it. */
class OwnSlapd {
  facts!: SlapdFacts;
  async start(): Promise<void> {
    this.facts = await startSlapd();
  }
  async stop(): Promise<void> {
    process.kill(this.facts.pid, 'SIGTERM');
    for (let i = 0; i < 100 && alive(this.facts.pid); i++) await new Promise((r) => setTimeout(r, 50));
  }
  /** The same command line startSlapd used (test/support/slapd.ts), so the same ports and database. */
  async restart(): Promise<void> {
    const child = spawn(ensureSlapdInstalled(), ['-f', join(this.facts.dir, 'slapd.conf'), '-h', `${this.facts.url}/ ${this.facts.ldapsUrl}/`, '-d', '0'], { stdio: 'ignore' });
    child.unref();
    this.facts = { ...this.facts, pid: child.pid! };
    await vi.waitFor(async () => expect(await canBind(this.facts.url, this.facts.rootDn, this.facts.rootPassword)).toBe(true), { timeout: 10_000, interval: 100 });
  }
  async close(): Promise<void> {
    await stopSlapd(this.facts);
  }
}

describe('LIST ldap/rotation-failures', () => {
  const own = new OwnSlapd();
  let ownOu: IsolatedOu;
  beforeAll(async () => {
    await own.start();
    ownOu = await createIsolatedOu(own.facts, { users: 1, serviceAccounts: 0 });
  });
  afterAll(async () => {
    await own.close();
  });

  it('"a rotation failing against a stopped slapd shows in the role, in rotation-failures and in the metric, then recovers and clears from all three"', async () => {
    const clock = new FakeClock(FRIDAY);
    const s = await server({ clock });
    await configure(s, own.facts, ownOu, { request_timeout: 2 });
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const before = await cred(s, 'app');
    expect(await failures(s)).toMatchObject({ status: 404 });
    expect(await failingGauge(s, 'rotation')).toBe(0);

    await own.stop();
    try {
      await clock.advance(3600_000);
      await vi.waitFor(async () => expect(await rotationsCounted(s, 'failure')).toBe(1), { timeout: 10_000 });
      const role = await read(s);
      expect(role.last_rotation_error).toEqual({ message: expect.any(String), time: '2031-01-03T13:00:00.000Z' });
      expect(role.last_rotation_error.message).not.toContain(ownOu.engine.password);
      expect(role.last_rotation_error.message).not.toContain(before.password);
      expect(await failures(s)).toEqual({
        status: 200, keys: ['app'],
        info: { app: { kind: 'rotation', since: '2031-01-03T13:00:00.000Z', attempts: 1, last_error: role.last_rotation_error.message } },
      });
      expect(await failingGauge(s, 'rotation')).toBe(1);
      expect(await failingGauge(s, 'drift')).toBe(0);
      // The retry, with backoff (10-20 s for the second attempt), fails too and is counted.
      await clock.advance(20_000);
      await vi.waitFor(async () => expect((await failures(s)).info?.app.attempts).toBeGreaterThanOrEqual(2), { timeout: 10_000 });
      expect((await failures(s)).info?.app.since).toBe('2031-01-03T13:00:00.000Z');
      expect((await cred(s, 'app')).password).toBe(before.password);
    } finally {
      await own.restart();
    }

    await advanceTo(clock, '2031-01-03T13:20:00Z', 60_000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(before.password), { timeout: 10_000 });
    expect(await read(s)).not.toHaveProperty('last_rotation_error');
    expect(await failures(s)).toMatchObject({ status: 404 });
    expect(await failingGauge(s, 'rotation')).toBe(0);
    // The creation's rotation and the recovery.
    expect(await rotationsCounted(s, 'success')).toBe(2);
    expect(await canBind(own.facts.url, ownOu.users[0]!.dn, (await cred(s, 'app')).password)).toBe(true);
  });

  it('"a retry never starts outside the window of its occurrence": the role stays failed until the next occurrence, which rotates', async () => {
    const { s, clock } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...WEEKLY });
    const before = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    await advanceTo(clock, '2031-01-04T02:00:00Z', 4 * 3600_000);
    await vi.waitFor(async () => expect(await rotationsCounted(s, 'failure')).toBe(1), { timeout: 5000 });
    // Retries inside the window (02:00-04:00), each later than the one before.
    await advanceTo(clock, '2031-01-04T04:00:00Z', 5 * 60_000);
    const inWindow = await rotationsCounted(s, 'failure');
    expect(inWindow).toBeGreaterThan(3);
    await advanceTo(clock, '2031-01-04T04:30:00Z', 5 * 60_000);
    const closed = await rotationsCounted(s, 'failure');
    expect(closed - inWindow).toBeLessThanOrEqual(1);
    expect((await read(s)).next_rotation).toBe('2031-01-11T02:00:00.000Z');

    // The directory is reachable again, but the window is closed: nothing runs until the next occurrence.
    await ok(s, 'POST', 'ldap/config', { bindpass: ou.engine.password });
    await advanceTo(clock, '2031-01-11T01:59:00Z', 12 * 3600_000);
    expect(await rotationsCounted(s, 'failure')).toBe(closed);
    expect((await cred(s, 'app')).password).toBe(before.password);
    expect((await read(s)).last_rotation_error.time).toMatch(/^2031-01-04T0[34]:/);
    expect((await failures(s)).info?.app).toMatchObject({ kind: 'rotation', since: '2031-01-04T02:00:00.000Z', attempts: closed });
    await advanceTo(clock, '2031-01-11T02:00:00Z', 60_000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(before.password), { timeout: 5000 });
    expect((await read(s)).last_service_rotation).toBe('2031-01-11T02:00:00.000Z');
    expect(await failures(s)).toMatchObject({ status: 404 });
  });

  it('"a role that is deleted stops retrying"', async () => {
    const { s, clock } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    await clock.advance(3600_000);
    await vi.waitFor(async () => expect(await rotationsCounted(s, 'failure')).toBe(1), { timeout: 5000 });
    expect((await s.request('DELETE', 'ldap/static-role/app')).status).toBe(204);
    await advanceTo(clock, '2031-01-03T16:00:00Z', 5 * 60_000);
    expect(await rotationsCounted(s, 'failure')).toBe(1);
    expect(await failures(s)).toMatchObject({ status: 404 });
  });

  it('"drift marks are shown": the role reads drifted with drift_detected_at, rotation-failures lists kind drift, the gauge counts it, and a rotation clears the mark', async () => {
    const { s } = await configuredAtFriday();
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/org/other', { username: 'user1', rotation_period: '1h' });
    const storage = mountStorage(s);
    await markDrift(storage, 'static-role/app', at('2031-01-03T12:30:00Z'));
    await markDrift(storage, 'library/svc9', at('2031-01-03T12:40:00Z'), 'take-back failed');
    expect(await read(s)).toMatchObject({ drifted: true, drift_detected_at: '2031-01-03T12:30:00.000Z' });
    expect(await read(s, 'org/other')).toMatchObject({ drifted: false });
    expect(await read(s, 'org/other')).not.toHaveProperty('drift_detected_at');
    expect(await failures(s)).toEqual({
      status: 200, keys: ['app', 'library:svc9'],
      info: {
        app: { kind: 'drift', since: '2031-01-03T12:30:00.000Z', attempts: 1, last_error: '' },
        'library:svc9': { kind: 'drift', since: '2031-01-03T12:40:00.000Z', attempts: 1, last_error: 'take-back failed' },
      },
    });
    expect(await failingGauge(s, 'drift')).toBe(2);
    expect(await failingGauge(s, 'rotation')).toBe(0);

    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect(await read(s)).toMatchObject({ drifted: false });
    expect((await failures(s)).keys).toEqual(['library:svc9']);
    expect(await failingGauge(s, 'drift')).toBe(1);
  });

  it('"it is a path under the mount: policies govern it" (list capability needed; read is no list)', async () => {
    const s = await server();
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    expect((await s.request('POST', 'ldap/rotate-role/app')).status).toBe(502);
    const tokenFor = async (policy: string) => {
      const name = `p${randomBytes(4).toString('hex')}`;
      await ok(s, 'PUT', `sys/policies/acl/${name}`, { policy });
      return (await ok(s, 'POST', 'auth/token/create', { policies: [name] })).auth.client_token as string;
    };
    const lister = await tokenFor('path "ldap/rotation-failures" { capabilities = ["list"] }');
    const reader = await tokenFor('path "ldap/rotation-failures" { capabilities = ["read"] }');
    const other = await tokenFor('path "ldap/static-role/*" { capabilities = ["list", "read"] }');
    expect((await s.request('LIST', 'ldap/rotation-failures', { token: lister })).body.data.keys).toEqual(['app']);
    for (const token of [reader, other]) expect((await s.request('LIST', 'ldap/rotation-failures', { token })).status).toBe(403);
    expect((await s.request('GET', 'ldap/rotation-failures')).status).toBe(405);
    const spec = await s.request('GET', 'sys/internal/specs/openapi');
    expect(Object.keys(spec.body.paths)).toContain('/ldap/rotation-failures/');
  });
});
