// Drift detection (verify_period, drift_action, verify_rate on ldap/config): a password changed behind the server's
// back with ldappasswd is found by the leader's verification binds, shown and counted, and with drift_action rotate
// taken back; a directory that does not answer is not drift. Real slapd, a fake clock.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { readDriftMark } from '../../src/engines/ldap/drift-marks.ts';
import { writeWal } from '../../src/engines/ldap/rotation.ts';
import { canBind, createIsolatedOu, resetPassword, type IsolatedOu } from '../support/slapd.ts';
import { testServers, type TestServer } from '../support/server.ts';
import { configure, cred, ok, mountStorage } from '../support/ldap-engine.ts';
import { parseScrape } from '../support/prometheus.ts';
import { startTcpProxy } from '../support/tcp-proxy.ts';

const facts = inject('slapd');
const MINUTE = 60_000;

let ou: IsolatedOu;
const pool = testServers();
const server = (clock: FakeClock) => pool.start({ clock });
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 2 });
});
afterEach(async () => {
  await pool.closeAll();
  await ou.cleanup();
});

/** What an operator does outside the server: ldap-utils' ldappasswd as the directory admin. */
async function ldappasswd(dn: string, password: string): Promise<void> {
  await promisify(execFile)('ldappasswd', ['-x', '-H', facts.url, '-D', facts.rootDn, '-w', facts.rootPassword, '-s', password, dn]);
}
const mark = (s: TestServer, target: string) => readDriftMark(mountStorage(s), target);
async function metric(s: TestServer, name: string, labels: Record<string, string>): Promise<number> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } });
  return parseScrape(r.body).value(name, { mount: 'ldap/', ...labels }) ?? 0;
}
/** Moves the clock in steps of one paced bind (verify_rate 5/s) until `check` holds: a round needs one step per bind. */
async function until(clock: FakeClock, check: () => Promise<void>): Promise<void> {
  await vi.waitFor(async () => {
    await clock.advance(200);
    await check();
  }, { timeout: 8000, interval: 20 });
}

/** A server verifying every minute, a static role on user0 and a library set of svc0 and svc1 with svc1 lent. */
async function world(extra: Record<string, unknown> = {}, url = facts.url): Promise<{ s: TestServer; clock: FakeClock }> {
  const clock = new FakeClock(Date.now());
  const s = await server(clock);
  await configure(s, facts, ou, { url, verify_period: '1m', ...extra });
  await ok(s, 'POST', 'ldap/static-role/alice', { username: ou.users[0]!.name, rotation_period: '24h' });
  await ok(s, 'POST', 'ldap/library/team', { service_account_names: 'svc0, svc1' });
  // svc0 is lent first (the order of the set), then svc1; svc0 is checked in again, so svc1 stays lent.
  await ok(s, 'POST', 'ldap/library/team/check-out');
  await ok(s, 'POST', 'ldap/library/team/check-out');
  await ok(s, 'POST', 'ldap/library/team/check-in', { service_account_names: 'svc0' });
  return { s, clock };
}

describe('POST ldap/config verify_period: drift detection', () => {
  it('"a failed bind marks the role": drifted in its read, kind drift in rotation-failures, counted; a bind that works again clears it', async () => {
    const { s, clock } = await world();
    expect(await s.request('GET', 'ldap/config').then((r) => r.body.data)).toMatchObject({ verify_period: 60, drift_action: 'report', verify_rate: 5 });
    const held = (await cred(s, 'alice')).password;
    await ldappasswd(ou.users[0]!.dn, 'reset-by-the-helpdesk-1');
    await ldappasswd(ou.serviceAccounts[0]!.dn, 'reset-by-the-helpdesk-2');
    // Lent: its borrower holds the password; it is not verified.
    await ldappasswd(ou.serviceAccounts[1]!.dn, 'reset-by-the-helpdesk-3');

    await clock.advance(MINUTE - 1000);
    expect(await mark(s, 'static-role/alice')).toBeUndefined();
    await until(clock, async () => {
      expect(await mark(s, 'static-role/alice')).toBeDefined();
      expect(await mark(s, 'library/svc0')).toBeDefined();
    });
    expect(await mark(s, 'library/svc1')).toBeUndefined();
    const role = (await s.request('GET', 'ldap/static-role/alice')).body.data;
    expect(role.drifted).toBe(true);
    expect(Date.parse(role.drift_detected_at)).toBeGreaterThanOrEqual(clock.now() - 2000);
    const failures = (await s.request('LIST', 'ldap/rotation-failures')).body.data;
    expect(failures.key_info.alice).toMatchObject({ kind: 'drift', attempts: 1 });
    expect(failures.keys).toContain('library:svc0');
    expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'drifted' })).toBe(1);
    expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'library', result: 'drifted' })).toBe(1);
    // report: nothing is changed in the directory.
    expect((await cred(s, 'alice')).password).toBe(held);
    expect(await canBind(facts.url, ou.users[0]!.dn, 'reset-by-the-helpdesk-1')).toBe(true);

    // Someone puts the held password back: the next round finds it binds and clears the mark.
    await resetPassword(facts, ou.users[0]!.dn, held);
    await clock.advance(MINUTE - 1000);
    await until(clock, async () => {
      expect(await mark(s, 'static-role/alice')).toBeUndefined();
      expect((await mark(s, 'library/svc0'))?.attempts).toBe(2);
    });
    expect((await s.request('GET', 'ldap/static-role/alice')).body.data.drifted).toBe(false);
    expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'verified' })).toBeGreaterThanOrEqual(1);
  });

  it('"with drift_action rotate the server takes the account back": a new password through the bind account, which binds, and the mark clears', async () => {
    const { s, clock } = await world({ drift_action: 'rotate' });
    const held = (await cred(s, 'alice')).password;
    await ldappasswd(ou.users[0]!.dn, 'reset-by-the-helpdesk-1');
    await ldappasswd(ou.serviceAccounts[0]!.dn, 'reset-by-the-helpdesk-2');
    await clock.advance(MINUTE - 1000);
    await until(clock, async () => {
      expect(await metric(s, 'strongroom_ldap_drift_takebacks_total', { target: 'static_role', result: 'success' })).toBe(1);
      expect(await metric(s, 'strongroom_ldap_drift_takebacks_total', { target: 'library', result: 'success' })).toBe(1);
    });
    const taken = (await cred(s, 'alice')).password;
    expect(taken).not.toBe(held);
    expect(await canBind(facts.url, ou.users[0]!.dn, taken)).toBe(true);
    expect(await canBind(facts.url, ou.users[0]!.dn, 'reset-by-the-helpdesk-1')).toBe(false);
    expect(await mark(s, 'static-role/alice')).toBeUndefined();
    expect(await mark(s, 'library/svc0')).toBeUndefined();
    expect((await s.request('GET', 'ldap/static-role/alice')).body.data.drifted).toBe(false);
    expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'drifted' })).toBe(1);
    // The library account was taken back without being lent: a check-out gets a password that binds.
    expect(await canBind(facts.url, ou.serviceAccounts[0]!.dn, 'reset-by-the-helpdesk-2')).toBe(false);
    const out = (await s.request('POST', 'ldap/library/team/check-out')).body.data;
    expect(out.service_account_name).toBe('svc0');
    expect(await canBind(facts.url, ou.serviceAccounts[0]!.dn, out.password)).toBe(true);
  });

  it('"a directory outage is not drift": verification errors are counted, nothing is marked', async () => {
    const proxy = await startTcpProxy(facts.host, facts.port);
    try {
      const { s, clock } = await world({ drift_action: 'rotate' }, proxy.url);
      const held = (await cred(s, 'alice')).password;
      await proxy.stop();
      await clock.advance(MINUTE - 1000);
      await until(clock, async () => expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'error' })).toBe(1));
      await clock.advance(1000);
      expect(await mark(s, 'static-role/alice')).toBeUndefined();
      expect(await mark(s, 'library/svc0')).toBeUndefined();
      expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'drifted' })).toBe(0);
      expect(await metric(s, 'strongroom_ldap_drift_takebacks_total', { target: 'static_role', result: 'success' })).toBe(0);
      expect((await cred(s, 'alice')).password).toBe(held);
      // Back: the next round verifies.
      await proxy.start();
      await clock.advance(MINUTE - 2000);
      await until(clock, async () => expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'verified' })).toBe(1));
    } finally {
      await proxy.stop();
    }
  });

  it('"roles with a rotation in progress (a WAL present) are skipped that round"', async () => {
    const { s, clock } = await world();
    await writeWal(mountStorage(s), {
      id: 'pending', target: 'static-role/alice', new_password: 'Wal-Password-Being-Applied-1', password_source: 'length:64', dn: '', created: clock.now(),
    });
    // The rotation under way has reached the directory, not yet the role's record.
    await resetPassword(facts, ou.users[0]!.dn, 'Wal-Password-Being-Applied-1');
    await clock.advance(MINUTE - 1000);
    await until(clock, async () => expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'library', result: 'verified' })).toBe(1));
    await clock.advance(1000);
    expect(await mark(s, 'static-role/alice')).toBeUndefined();
    expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'drifted' })).toBe(0);
  });

  it('"off by default": without verify_period nothing binds', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server(clock);
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/alice', { username: ou.users[0]!.name, rotation_period: '24h' });
    await ldappasswd(ou.users[0]!.dn, 'reset-by-the-helpdesk-1');
    for (let i = 0; i < 20; i++) await clock.advance(30 * MINUTE);
    expect(await mark(s, 'static-role/alice')).toBeUndefined();
    expect(await metric(s, 'strongroom_ldap_drift_verifications_total', { target: 'static_role', result: 'drifted' })).toBe(0);
    // Turned on by a config write: the leader starts verifying.
    await ok(s, 'POST', 'ldap/config', { verify_period: '1m' });
    await clock.advance(MINUTE - 1000);
    await until(clock, async () => expect(await mark(s, 'static-role/alice')).toBeDefined());
  });
});
