// Dual-account (blue/green) static roles (issue 27): two accounts per role, a rotation changes the standby and switches
// to it, the previous account keeps working through grace_period (or, with standby_action reset, stops at its end).
// Real slapd, a fake clock where timing matters, PostgreSQL for leader changes, a real process for kill -9.
// docs/rotation.md ("Dual-account roles") is the contract these tests read.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { readStaticRole } from '../../src/engines/ldap/static-role-store.ts';
import { holdingProxy } from '../support/holding-proxy.ts';
import { leaderChangeWalk } from '../support/leader-change.ts';
import { configure, cred, ok, mountStorage, ouConfig } from '../support/ldap-engine.ts';
import { startNode } from '../support/node-process.ts';
import { parseScrape } from '../support/prometheus.ts';
import { testServers, type TestServer } from '../support/server.ts';
import { canBind, createIsolatedOu, resetPassword, type IsolatedOu } from '../support/slapd.ts';

const facts = inject('slapd');

const pool = testServers();
const server = pool.start;
let ou: IsolatedOu;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 3, serviceAccounts: 0 });
});
afterEach(async () => {
  await pool.closeAll();
  await ou.cleanup();
});

const at = (iso: string): number => Date.parse(iso);
const T0 = at('2031-01-03T12:00:00Z');
const MINUTE = 60_000;
/** Account a is user0, account b user1; rotated hourly, 10 minutes of grace. */
const DUAL = { dual_account_mode: true, username_b: 'user1', rotation_period: '1h', grace_period: '10m' };

const userDn = (i: number) => ou.users[i]!.dn;
const binds = (i: number, password: string) => canBind(facts.url, userDn(i), password);
const read = async (s: TestServer, name = 'app'): Promise<Record<string, any>> => {
  const r = await s.request('GET', `ldap/static-role/${name}`);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data;
};
/** The role as stored: the passwords the server holds for both accounts (static-cred returns only the active one's). */
const stored = async (s: TestServer, name = 'app') => (await readStaticRole(mountStorage(s), name))!;
/** Real time for the scheduler's work to land after a fake-clock step (a directory round trip is not a timer). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 150));
async function metric(s: TestServer, name: string, labels: Record<string, string>): Promise<number | undefined> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } });
  return parseScrape(r.body).value(name, { mount: 'ldap/', ...labels });
}

async function dualRole(extra: Record<string, unknown> = {}): Promise<{ s: TestServer; clock: FakeClock }> {
  const clock = new FakeClock(T0);
  const s = await server({ clock });
  await configure(s, facts, ou, extra.config as Record<string, unknown> | undefined);
  delete extra.config;
  await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...DUAL, ...extra });
  return { s, clock };
}

describe('static-role/:name with dual_account_mode', () => {
  it('"creation sets both accounts\' passwords and makes a active": both bind, static-cred serves a', async () => {
    const { s } = await dualRole();
    const c = await cred(s, 'app');
    expect(c).toMatchObject({ username: 'user0', active_account: 'a', ttl: 3600 });
    expect(c).not.toHaveProperty('standby_username');
    const role = await stored(s);
    expect(role.password_b).not.toBe('');
    expect(role.password_b).not.toBe(c.password);
    expect(await binds(0, c.password)).toBe(true);
    expect(await binds(1, role.password_b)).toBe(true);
    expect(await binds(0, ou.users[0]!.password)).toBe(false);
    expect(await binds(1, ou.users[1]!.password)).toBe(false);
    expect(await read(s)).toMatchObject({
      username: 'user0', dual_account_mode: true, username_b: 'user1', dn_b: '', grace_period: 600, standby_action: 'keep',
      active_account: 'a', state: 'active', drifted: false, drifted_accounts: [],
    });
    expect(await read(s)).not.toHaveProperty('grace_period_end');
  });

  it('"a rotation changes the standby\'s password, then switches to it": the previous password binds through the grace, and after it (keep)', async () => {
    const { s, clock } = await dualRole();
    const before = await cred(s, 'app');
    const standbyBefore = (await stored(s)).password_b;
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const after = await cred(s, 'app');
    expect(after).toMatchObject({
      username: 'user1', active_account: 'b', standby_username: 'user0', last_password: before.password,
      grace_period_end: '2031-01-03T12:10:00.000Z', ttl: 3600,
    });
    expect(after.password).not.toBe(standbyBefore);
    expect(await binds(1, after.password)).toBe(true);
    expect(await binds(0, before.password)).toBe(true);
    expect((await stored(s)).password).toBe(before.password);
    expect(await read(s)).toMatchObject({ active_account: 'b', state: 'grace_period', grace_period_end: '2031-01-03T12:10:00.000Z' });
    expect(await metric(s, 'strongroom_ldap_dual_account_roles', { state: 'grace_period' })).toBe(1);

    await clock.advance(10 * MINUTE);
    await settle();
    expect(await read(s)).toMatchObject({ active_account: 'b', state: 'active' });
    const later = await cred(s, 'app');
    expect(later).not.toHaveProperty('standby_username');
    expect(later).not.toHaveProperty('grace_period_end');
    expect(later.last_password).toBe('');
    // keep: the previous account keeps its password until its next rotation.
    expect(await binds(0, before.password)).toBe(true);
    expect(await metric(s, 'strongroom_ldap_dual_account_roles', { state: 'active' })).toBe(1);

    // The schedule's rotation (a period after the manual one) switches back to a, with a new password.
    await clock.advance(50 * MINUTE);
    await vi.waitFor(async () => expect((await cred(s, 'app')).username).toBe('user0'), { timeout: 5000 });
    const back = await cred(s, 'app');
    expect(back.password).not.toBe(before.password);
    expect(await binds(0, back.password)).toBe(true);
    expect(await binds(1, after.password)).toBe(true);
  });

  it('"standby_action reset: at the end of the grace the previous account gets a fresh password that is never returned"', async () => {
    const { s, clock } = await dualRole({ standby_action: 'reset' });
    const before = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const after = await cred(s, 'app');
    await clock.advance(10 * MINUTE - 1000);
    await settle();
    expect(await binds(0, before.password)).toBe(true);
    expect(await read(s)).toMatchObject({ state: 'grace_period' });

    await clock.advance(1000);
    await vi.waitFor(async () => expect(await binds(0, before.password)).toBe(false), { timeout: 5000 });
    await vi.waitFor(async () => expect(await read(s)).toMatchObject({ state: 'active', active_account: 'b' }), { timeout: 5000 });
    const reset = (await stored(s)).password;
    expect(reset).not.toBe(before.password);
    expect(await binds(0, reset)).toBe(true);
    // Never returned: static-cred serves b's password, and no field holds a's new one.
    const served = await cred(s, 'app');
    expect(served.password).toBe(after.password);
    expect(JSON.stringify(served)).not.toContain(reset);
    expect(JSON.stringify(await read(s))).not.toContain(reset);
    // The reset is no rotation: the next switch stays a period after the last one.
    expect((await read(s)).next_rotation).toBe('2031-01-03T13:00:00.000Z');
  });

  it('"a manual rotate-role during a grace period is refused with 409 naming grace_period_end, unless force=true"', async () => {
    const { s } = await dualRole();
    const first = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const second = await cred(s, 'app');
    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBe(409);
    expect(r.body.errors.join(' ')).toContain('grace_period_end 2031-01-03T12:10:00.000Z');
    expect(r.body.errors.join(' ')).toContain('force=true');
    expect(await cred(s, 'app')).toEqual(second);
    expect((await read(s))).not.toHaveProperty('last_rotation_error');

    await ok(s, 'POST', 'ldap/rotate-role/app', { force: true });
    const forced = await cred(s, 'app');
    expect(forced).toMatchObject({ username: 'user0', active_account: 'a', standby_username: 'user1', last_password: second.password });
    expect(await binds(0, forced.password)).toBe(true);
    // force cuts off the clients still on the first password; the one served until now stays valid for the new grace.
    expect(await binds(0, first.password)).toBe(false);
    expect(await binds(1, second.password)).toBe(true);
  });

  it('"if setting the standby\'s password fails, nothing switches": the failure shows in the role, rotation-failures and metrics, and the retry switches', async () => {
    const { s, clock } = await dualRole();
    const before = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBeGreaterThanOrEqual(400);
    expect(await cred(s, 'app')).toMatchObject({ username: 'user0', password: before.password, active_account: 'a' });
    const role = await read(s);
    expect(role).toMatchObject({ active_account: 'a', state: 'active', last_rotation_error: { message: expect.any(String) } });
    const failures = (await s.request('LIST', 'ldap/rotation-failures')).body.data;
    expect(failures.key_info.app).toMatchObject({ kind: 'rotation', attempts: 1 });
    expect(await metric(s, 'strongroom_ldap_static_role_rotations_total', { result: 'failure' })).toBe(1);
    expect(await metric(s, 'strongroom_ldap_dual_account_roles', { state: 'active' })).toBe(1);
    expect(await binds(0, before.password)).toBe(true);

    await ok(s, 'POST', 'ldap/config', { bindpass: ou.engine.password });
    // The retry runs on the existing backoff (10-20 s after one failure).
    await clock.advance(20_000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).username).toBe('user1'), { timeout: 5000 });
    expect(await read(s)).not.toHaveProperty('last_rotation_error');
    expect(await binds(1, (await cred(s, 'app')).password)).toBe(true);
    expect(await binds(0, before.password)).toBe(true);
  });

  it('"drift verification checks both accounts; a drifted standby blocks the next switch and is reported"', async () => {
    const { s, clock } = await dualRole({ config: { verify_period: '1m' } });
    const before = await cred(s, 'app');
    await resetPassword(facts, userDn(1), 'reset-by-the-helpdesk');
    await vi.waitFor(async () => {
      await clock.advance(1000);
      expect((await read(s)).drifted_accounts).toEqual(['b']);
    }, { timeout: 10_000, interval: 20 });
    expect(await read(s)).toMatchObject({ drifted: true });
    const failures = (await s.request('LIST', 'ldap/rotation-failures')).body.data;
    expect(failures.key_info['app:b']).toMatchObject({ kind: 'drift' });
    expect(failures.keys).not.toContain('app');

    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBe(409);
    expect(r.body.errors.join(' ')).toContain('drifted');
    expect(await cred(s, 'app')).toMatchObject({ username: 'user0', password: before.password });
    expect(await binds(1, 'reset-by-the-helpdesk')).toBe(true);

    // force=true takes the standby back with a new password and switches to it; the mark clears with the commit.
    await ok(s, 'POST', 'ldap/rotate-role/app', { force: true });
    const after = await cred(s, 'app');
    expect(after.username).toBe('user1');
    expect(await binds(1, after.password)).toBe(true);
    expect(await read(s)).toMatchObject({ drifted: false, drifted_accounts: [] });
  });

  it('"drift_action rotate takes a drifted standby back without switching"', async () => {
    const { s, clock } = await dualRole({ config: { verify_period: '1m', drift_action: 'rotate' } });
    const before = await cred(s, 'app');
    await resetPassword(facts, userDn(1), 'reset-by-the-helpdesk');
    await vi.waitFor(async () => {
      await clock.advance(1000);
      expect(await metric(s, 'strongroom_ldap_drift_takebacks_total', { target: 'static_role', result: 'success' })).toBe(1);
    }, { timeout: 10_000, interval: 20 });
    expect(await cred(s, 'app')).toMatchObject({ username: 'user0', password: before.password });
    expect(await binds(1, 'reset-by-the-helpdesk')).toBe(false);
    expect(await binds(1, (await stored(s)).password_b)).toBe(true);
    expect(await read(s)).toMatchObject({ drifted: false, state: 'active', active_account: 'a' });
  });
});

describe('static-role/:name dual_account_mode field rules', () => {
  /**
   * Every refusal: a 400 naming the field first (the engine's rules as `<field>: ...`, a value the field's type refuses
   * as the framework's `invalid value for field "<field>"`), and nothing stored (no role, no claim).
   */
  async function refused(s: TestServer, path: string, body: Record<string, unknown>, fieldName: string): Promise<void> {
    const r = await s.request('POST', path, { body });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toMatch(new RegExp(`^(${fieldName}\\b|invalid value for field "${fieldName}")`));
  }

  it.each([
    ['the same account twice (username_b = username)', { username_b: 'user0' }, 'username_b'],
    ['the same account twice, in another case', { username_b: 'USER0' }, 'username_b'],
    ['the same entry twice by DN, spelled differently', { dn: 'DN_A', dn_b: 'DN_A_UPPER' }, 'dn_b'],
    ['account b by DN is account a found by username', { dn_b: 'DN_A' }, 'dn_b'],
    ['username_b owned by another role', { username_b: 'user2' }, 'username_b'],
    ['username_b owned by another role, in another case', { username_b: 'User2' }, 'username_b'],
    ['username_b missing', { username_b: undefined }, 'username_b'],
    ['username_b not in the directory', { username_b: 'nobody' }, 'username_b'],
    ['dn_b not a DN', { dn_b: 'not a dn' }, 'dn_b'],
    ['username_b is the engine\'s bind account', { username_b: 'engine' }, 'username_b'],
    ['grace_period equal to rotation_period', { grace_period: '1h' }, 'grace_period'],
    ['grace_period longer than rotation_period', { grace_period: '2h' }, 'grace_period'],
    ['grace_period not shorter than the schedule\'s interval', { rotation_period: undefined, rotation_schedule: '0 */6 * * *', grace_period: '6h' }, 'grace_period'],
    ['grace_period not shorter than the schedule\'s shortest interval', { rotation_period: undefined, rotation_schedule: '0 2,3 * * *', grace_period: '2h' }, 'grace_period'],
    ['grace_period missing', { grace_period: undefined }, 'grace_period'],
    ['standby_action unknown', { standby_action: 'delete' }, 'standby_action'],
    ['username_b without dual_account_mode', { dual_account_mode: false }, 'username_b'],
    ['grace_period without dual_account_mode', { dual_account_mode: undefined, username_b: undefined }, 'grace_period'],
  ])('creation refuses %s (400 naming the field, nothing stored)', async (_, change, fieldName) => {
    const clock = new FakeClock(T0);
    const s = await server({ clock });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/other', { username: 'user2', rotation_period: '1h' });
    const spelled: Record<string, string> = { DN_A: userDn(0), DN_A_UPPER: userDn(0).toUpperCase().replace(/,/g, ' , ') };
    const body: Record<string, unknown> = { username: 'user0', ...DUAL };
    for (const [k, v] of Object.entries(change)) {
      if (v === undefined) delete body[k];
      else body[k] = typeof v === 'string' && v in spelled ? spelled[v] : v;
    }
    await refused(s, 'ldap/static-role/app', body, fieldName);
    expect((await s.request('GET', 'ldap/static-role/app')).status).toBe(404);
    // Nothing claimed: both accounts can still be managed by a role of their own.
    await ok(s, 'POST', 'ldap/static-role/plain-a', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/plain-b', { username: 'user1', rotation_period: '1h' });
  });

  it.each([
    ['dual_account_mode turned off', { dual_account_mode: false }, 'dual_account_mode'],
    ['username_b changed', { username_b: 'user2' }, 'username_b'],
    ['dn_b changed', { dn_b: 'DN_C' }, 'dn_b'],
    ['grace_period made as long as the period', { grace_period: '1h' }, 'grace_period'],
    ['rotation_period made shorter than the grace', { rotation_period: '5m' }, 'grace_period'],
    ['a schedule whose interval is shorter than the grace', { rotation_schedule: '*/5 * * * *' }, 'grace_period'],
    ['standby_action unknown', { standby_action: 'RESET!' }, 'standby_action'],
  ])('an update of a dual-account role refuses %s (400 naming the field, nothing changed)', async (_, change, fieldName) => {
    const { s } = await dualRole();
    const before = await read(s);
    const body = Object.fromEntries(Object.entries(change).map(([k, v]) => [k, v === 'DN_C' ? userDn(2) : v]));
    await refused(s, 'ldap/static-role/app', body, fieldName);
    expect(await read(s)).toEqual(before);
  });

  it('"dual_account_mode is immutable after creation": a plain role cannot become dual (400 naming the field, nothing changed)', async () => {
    const clock = new FakeClock(T0);
    const s = await server({ clock });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const before = await read(s);
    await refused(s, 'ldap/static-role/app', { dual_account_mode: true, username_b: 'user1', grace_period: '10m' }, 'dual_account_mode');
    await refused(s, 'ldap/static-role/app', { grace_period: '10m' }, 'grace_period');
    expect(await read(s)).toEqual(before);
  });

  it('"an update may change grace_period and standby_action", checked against the schedule as it will be', async () => {
    const { s } = await dualRole();
    await ok(s, 'POST', 'ldap/static-role/app', { grace_period: '30m', standby_action: ' RESET ', dual_account_mode: true, username_b: 'user1' });
    expect(await read(s)).toMatchObject({ grace_period: 1800, standby_action: 'reset' });
    await ok(s, 'POST', 'ldap/static-role/app', { standby_action: 'Keep' });
    expect(await read(s)).toMatchObject({ standby_action: 'keep' });
    await ok(s, 'POST', 'ldap/static-role/app', { rotation_period: '2h', grace_period: '90m' });
    expect(await read(s)).toMatchObject({ rotation_period: 7200, grace_period: 5400 });
  });
});

describe('restarts and leader changes in the middle of a grace', () => {
  const unsealKey = randomBytes(32).toString('base64');

  it('"a restart in the middle of a grace keeps the schedule": the grace ends (and resets) at its time, a reset missed while down runs at once, the next switch comes a period after the last', async () => {
    const dataDir = pool.dataDir('strongroom-dual-');
    const start = (ms: number) => {
      const clock = new FakeClock(ms);
      return server({ storage: 'sqlite', dataDir, unsealKey, clock }).then((s) => ({ s, clock }));
    };
    let { s, clock } = await start(T0);
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', ...DUAL, standby_action: 'reset' });
    const pa = (await cred(s, 'app')).password;
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const pb = (await cred(s, 'app')).password;
    await s.close();

    // Back inside the grace: nothing before its end, the reset at its end, no switch.
    ({ s, clock } = await start(T0 + 5 * MINUTE));
    await clock.advance(1);
    await settle();
    expect(await read(s)).toMatchObject({ state: 'grace_period', active_account: 'b', grace_period_end: '2031-01-03T12:10:00.000Z', next_rotation: '2031-01-03T13:00:00.000Z' });
    expect(await binds(0, pa)).toBe(true);
    await clock.advance(5 * MINUTE);
    await vi.waitFor(async () => expect(await binds(0, pa)).toBe(false), { timeout: 5000 });
    expect(await cred(s, 'app')).toMatchObject({ username: 'user1', password: pb });
    await s.close();

    // Down across the next switch: it runs once, at once, and its grace counts from it.
    ({ s, clock } = await start(at('2031-01-03T13:01:00Z')));
    await clock.advance(1);
    await vi.waitFor(async () => expect((await cred(s, 'app')).username).toBe('user0'), { timeout: 5000 });
    const pa2 = (await cred(s, 'app')).password;
    expect(await read(s)).toMatchObject({ state: 'grace_period', grace_period_end: '2031-01-03T13:11:00.001Z', next_rotation: '2031-01-03T14:01:00.001Z' });
    expect(await binds(1, pb)).toBe(true);
    await s.close();

    // Down across that grace's end: the reset it owes runs as soon as the server is back; the switch still waits.
    ({ s, clock } = await start(at('2031-01-03T13:30:00Z')));
    await clock.advance(1);
    await vi.waitFor(async () => expect(await binds(1, pb)).toBe(false), { timeout: 5000 });
    // Written to the directory first, recorded after (write-ahead): the record may land a moment later.
    await vi.waitFor(async () => expect(await read(s)).toMatchObject({ state: 'active', active_account: 'a', next_rotation: '2031-01-03T14:01:00.001Z' }), { timeout: 5000, interval: 50 });
    expect((await cred(s, 'app')).password).toBe(pa2);
    expect(await binds(0, pa2)).toBe(true);
  });

  describe('on PostgreSQL', () => {
    const postgres = inject('postgres');

    it('"every node serves the same active account; a leader change in the middle of a grace keeps the schedule": the new leader resets at the grace\'s end and switches at the due time', async () => {
      await leaderChangeWalk(postgres, pool, T0, async ({ clock, node, leaderOf }) => {
        const first = await node();
        await leaderOf([first]);
        await configure(first, facts, ou);
        await ok(first, 'POST', 'ldap/static-role/app', { username: 'user0', ...DUAL, standby_action: 'reset' });
        const pa = (await cred(first, 'app')).password;
        const second = await node();
        // A rotation by hand on the node that does not lead: both serve account b at once.
        await ok(second, 'POST', 'ldap/rotate-role/app');
        const served = await cred(second, 'app');
        expect(served.username).toBe('user1');
        expect(await cred(first, 'app')).toEqual(served);

        await first.close();
        await clock.advance(5 * MINUTE);
        await leaderOf([second]);
        await settle();
        expect(await binds(0, pa)).toBe(true);
        expect(await read(second)).toMatchObject({ state: 'grace_period', grace_period_end: '2031-01-03T12:10:00.000Z' });
        await vi.waitFor(async () => {
          await clock.advance(MINUTE);
          expect(await binds(0, pa)).toBe(false);
        }, { timeout: 10_000, interval: 200 });
        expect(clock.now()).toBeGreaterThanOrEqual(at('2031-01-03T12:10:00Z'));
        // The reset writes the directory first and records it after (write-ahead): the record may land a moment later.
        await vi.waitFor(async () => expect(await read(second)).toMatchObject({ state: 'active', active_account: 'b', next_rotation: '2031-01-03T13:00:00.000Z' }), { timeout: 5_000, interval: 50 });
        expect((await cred(second, 'app')).password).toBe(served.password);

        await clock.advance(at('2031-01-03T12:59:00Z') - clock.now());
        await settle();
        expect((await cred(second, 'app')).username).toBe('user1');
        await vi.waitFor(async () => {
          await clock.advance(30_000);
          expect((await cred(second, 'app')).username).toBe('user0');
        }, { timeout: 10_000, interval: 200 });
        expect(await binds(0, (await cred(second, 'app')).password)).toBe(true);
        expect(await binds(1, served.password)).toBe(true);
        await second.close();
      });
    });
  });
});

describe('kill -9 in the middle of a switch (a real process)', () => {
  it('"kill -9 between the directory write and the storage commit replays correctly": the password the directory took is recorded and switched to, and static-cred never serves one the directory does not have', async () => {
    const proxy = await holdingProxy(facts.host, facts.port);
    const storage = `sqlite:${join(pool.dataDir('strongroom-dual-kill-'), 'strongroom.db')}`;
    const key = randomBytes(32).toString('base64');
    let node = await startNode(storage, key);
    try {
      const config = await node.request('POST', 'ldap/config', { body: ouConfig(facts, ou, { url: proxy.url }) });
      expect(config.status, JSON.stringify(config.body)).toBe(204);
      const created = await node.request('POST', 'ldap/static-role/app', { body: { username: 'user0', ...DUAL } });
      expect(created.status, JSON.stringify(created.body)).toBe(204);
      const before = (await node.request('GET', 'ldap/static-cred/app')).body.data;
      expect(before.username).toBe('user0');

      const held = proxy.holdNextModify();
      const rotating = node.request('POST', 'ldap/rotate-role/app').catch(() => undefined);
      await vi.waitFor(() => held, { timeout: 10_000 });
      // The directory has account b's new password; storage has only the write-ahead entry.
      await node.kill();
      await rotating;
      const written = proxy.sent();
      proxy.release();

      node = await startNode(storage, key);
      const seen: Array<{ username: string; password: string }> = [];
      await vi.waitFor(async () => {
        const served = (await node.request('GET', 'ldap/static-cred/app')).body.data;
        seen.push({ username: served.username, password: served.password });
        expect(served.username).toBe('user1');
      }, { timeout: 15_000, interval: 50 });
      for (const { username, password } of seen) expect(await binds(username === 'user0' ? 0 : 1, password), username).toBe(true);
      const after = seen.at(-1)!;
      // The replay applied the password written before the kill (the write-ahead entry's), not a new one.
      expect(written.includes(Buffer.from(after.password))).toBe(true);
      expect(await binds(0, before.password)).toBe(true);
      const role = (await node.request('GET', 'ldap/static-role/app')).body.data;
      expect(role).toMatchObject({ active_account: 'b', state: 'grace_period' });
      expect(role).not.toHaveProperty('last_rotation_error');
    } finally {
      await node.kill();
      await proxy.close();
    }
  });
});
