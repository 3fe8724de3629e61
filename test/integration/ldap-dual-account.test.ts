// Dual-account (blue/green) static roles (issue 27): two accounts per role, a rotation changes the standby and switches
// to it, the previous account keeps working through grace_period (or, with standby_action reset, stops at its end).
// Real slapd, a fake clock where timing matters, PostgreSQL for leader changes, a real process for kill -9.
// docs/rotation.md ("Dual-account roles") is the contract these tests read.
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { readStaticRole } from '../../src/engines/ldap/static-roles.ts';
import { configure, cred, ok, mountStorage } from '../support/ldap-engine.ts';
import { createDatabase } from '../support/postgres.ts';
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
