// Directory password writes are "possibly applied until proven otherwise" (docs/ldap.md "Directory writes",
// audit 2026-11-28 N2): one node against the real slapd behind a proxy that stalls, releases and cuts LDAP requests.
// The two-node reproduction with a paused leader is in ldap-directory-writes-cluster.test.ts.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { ROOT_GRACE_MS, readConfig } from '../../src/engines/ldap/config-store.ts';
import { readWal } from '../../src/engines/ldap/rotation.ts';
import { createLdapClient } from '../../src/providers/ldap/ldapts-client.ts';
import { configure, cred, ok, mountStorage } from '../support/ldap-engine.ts';
import { parseScrape } from '../support/prometheus.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startStallProxy, type Stall, type StallProxy } from '../support/stall-proxy.ts';
import { testServers, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
const pool = testServers();
let ou: IsolatedOu;
let proxy: StallProxy;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 0 });
  proxy = await startStallProxy(facts.host, facts.port);
});
afterEach(async () => {
  await pool.closeAll();
  await proxy.close();
  await ou.cleanup();
});

/** The request timeout the server is given: a held request fails after it. */
const TIMEOUT_S = 2;

async function verifications(s: TestServer, labels: Record<string, string>): Promise<number> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } });
  return parseScrape(r.body).value('strongroom_ldap_directory_verifications_total', { mount: 'ldap/', ...labels }) ?? 0;
}

/** A server on the proxy with a static role on user0 (created, so rotated once). */
async function world(opts: { clock?: FakeClock; hideAssertion?: boolean } = {}): Promise<TestServer> {
  proxy.hideAssertionControl = opts.hideAssertion ?? false;
  const s = await pool.start({ clock: opts.clock });
  await configure(s, facts, ou, { url: proxy.url, request_timeout: TIMEOUT_S });
  await ok(s, 'POST', 'ldap/static-role/app', { username: ou.users[0]!.name, rotation_period: '24h' });
  return s;
}

async function timed<T>(run: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await run();
  return { value, ms: Math.round(performance.now() - started) };
}

const bindpass = async (s: TestServer): Promise<string> => (await readConfig(mountStorage(s)))!.bindpass;

describe('the provider\'s conditional write (Assertion Control on entryCSN)', () => {
  const provider = (url: string) => createLdapClient({ url, binddn: ou.engine.dn, bindpass: ou.engine.password, userdn: ou.dn, request_timeout: TIMEOUT_S });

  it('"a write with the entry\'s state as read applies; one with a stale state is refused by slapd (122) and changes nothing"', async () => {
    const client = provider(facts.url);
    try {
      const user = ou.users[1]!;
      const guard = (await client.writeGuard(user.dn))!;
      expect(guard).toEqual({ attribute: 'entryCSN', value: expect.stringMatching(/^\d{14}\.\d{6}Z#/) });
      await client.setPassword(user.dn, 'first-guarded-pass', guard);
      expect(await canBind(facts.url, user.dn, 'first-guarded-pass')).toBe(true);
      await expect(client.setPassword(user.dn, 'stale-guarded-pass', guard)).rejects.toMatchObject({ ldapCode: 122, message: expect.stringContaining('assertionFailed') });
      expect(await canBind(facts.url, user.dn, 'first-guarded-pass')).toBe(true);
      expect(await canBind(facts.url, user.dn, 'stale-guarded-pass')).toBe(false);
    } finally {
      await client.close();
    }
  });

  it('"a directory that does not list the control in its rootDSE gets unconditional writes"', async () => {
    proxy.hideAssertionControl = true;
    const client = provider(proxy.url);
    try {
      expect(await client.writeGuard(ou.users[1]!.dn)).toBeUndefined();
    } finally {
      await client.close();
    }
  });
});

describe('ldap/rotate-role: a late static-role write (reproduction A)', () => {
  it('"a modify that timed out is never re-sent; held, rotated twice more and released, the served password still binds (slapd refuses the stale write)"', async () => {
    const s = await world();
    const user = ou.users[0]!;
    const before = proxy.modifies();
    proxy.arm('hold');
    const first = await timed(() => s.request('POST', 'ldap/rotate-role/app'));
    expect(first.value.status).toBe(502);
    expect(first.value.body.errors[0]).toContain('outcome is unknown');
    expect(proxy.modifies()).toBe(before);
    expect(proxy.holding()).toBe(true);
    // The unfinished change's WAL keeps its password; the next rotation applies it (conditionally), a third a new one.
    expect(await readWal(mountStorage(s), 'static-role/app')).toBeDefined();
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const served = (await cred(s, 'app')).password;
    expect(await canBind(facts.url, user.dn, served)).toBe(true);
    await proxy.release();
    expect(proxy.modifies()).toBe(before + 3);
    expect(await canBind(facts.url, user.dn, served)).toBe(true);
    expect((await cred(s, 'app')).password).toBe(served);
    console.log(`reproduction A: held modify answered after ${first.ms} ms (request_timeout ${TIMEOUT_S}s); the released write was refused by slapd`);
  });
});

describe('ldap/rotate-root: a late bind-account write (reproduction C)', () => {
  /** Holds a rotate-root's modify, rotates twice more, releases it: returns the passwords recorded after each. */
  async function lateRootWrite(s: TestServer): Promise<{ held: string; current: string }> {
    proxy.arm('hold');
    const r = await s.request('POST', 'ldap/rotate-root');
    expect(r.status).toBe(502);
    expect(r.body.errors[0]).toContain('outcome is unknown');
    await ok(s, 'POST', 'ldap/rotate-root');
    const held = await bindpass(s);
    await ok(s, 'POST', 'ldap/rotate-root');
    const current = await bindpass(s);
    await proxy.release();
    return { held, current };
  }

  it('"with the Assertion Control, slapd refuses the late write: the bind account still binds after the grace, and the old passwords are erased only after a verified bind"', async () => {
    const clock = new FakeClock(Date.now());
    const s = await world({ clock });
    const { held, current } = await lateRootWrite(s);
    expect(await canBind(facts.url, ou.engine.dn, current)).toBe(true);
    expect(await canBind(facts.url, ou.engine.dn, held)).toBe(false);
    expect((await readConfig(mountStorage(s)))!.unconfirmed_bind_passwords).toContain(ou.engine.password);
    await clock.advance(ROOT_GRACE_MS + 1000);
    await vi.waitFor(async () => expect(await verifications(s, { target: 'bind_account', outcome: 'grace_end', result: 'verified' })).toBe(1), { timeout: 15_000 });
    const config = (await readConfig(mountStorage(s)))!;
    expect([config.last_bind_password, config.unconfirmed_bind_passwords]).toEqual(['', []]);
    expect(await canBind(facts.url, ou.engine.dn, current)).toBe(true);
    await ok(s, 'POST', 'ldap/rotate-role/app');
  });

  it('"without the Assertion Control the late write lands; at the grace end the directory is repaired through a kept password, verified, and only then is anything erased"', async () => {
    const clock = new FakeClock(Date.now());
    const s = await world({ clock, hideAssertion: true });
    const { held, current } = await lateRootWrite(s);
    // The stale write undid the newer rotation: the directory has the older password, which the engine still keeps.
    expect(await canBind(facts.url, ou.engine.dn, held)).toBe(true);
    expect(await canBind(facts.url, ou.engine.dn, current)).toBe(false);
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const started = performance.now();
    await clock.advance(ROOT_GRACE_MS + 1000);
    await vi.waitFor(async () => expect(await verifications(s, { target: 'bind_account', outcome: 'grace_end', result: 'repaired' })).toBe(1), { timeout: 15_000 });
    await vi.waitFor(async () => expect((await readConfig(mountStorage(s)))!.last_bind_password).toBe(''), { timeout: 15_000 });
    console.log(`reproduction C without the Assertion Control: grace-end verification and repair took ${Math.round(performance.now() - started)} ms`);
    expect(await canBind(facts.url, ou.engine.dn, current)).toBe(true);
    expect(await canBind(facts.url, ou.engine.dn, held)).toBe(false);
    await ok(s, 'POST', 'ldap/rotate-role/app');
  });
});

/** Hostile variants of the class, on a static role: what the stalled or cut request does, and what must follow. */
interface Variant {
  name: string;
  stall: Stall;
  /** Status of the rotate-role that met it: a write a bind proves applied is recorded. */
  status: number;
  /** Verification counted after it: outcome and result. */
  counted: { outcome: string; result: string };
}

const variants: Variant[] = [
  { name: 'timeout on modify (held, never answered)', stall: 'hold', status: 502, counted: { outcome: 'unknown', result: 'verified' } },
  { name: 'connection reset after the modify reached slapd (applied, answer lost)', stall: 'reset-after-send', status: 204, counted: { outcome: 'unknown', result: 'pending' } },
  { name: 'connection reset before the modify was sent', stall: 'reset-before-send', status: 502, counted: { outcome: 'unknown', result: 'verified' } },
];

describe('ldap/rotate-role: hostile variants of a directory write whose outcome is unknown', () => {
  it.each(variants)('"$name: never re-sent, verified by a bind, and the next rotation leaves a password that binds"', async ({ stall, status, counted }) => {
    const s = await world();
    const user = ou.users[0]!;
    const before = proxy.modifies();
    proxy.arm(stall);
    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBe(status);
    if (status !== 204) expect(r.body.errors[0]).toContain('outcome is unknown');
    // At most the one modify, never a second copy on a new connection.
    expect(proxy.modifies() - before).toBeLessThanOrEqual(1);
    expect(await verifications(s, { target: 'static_role', ...counted })).toBe(1);
    // Whatever happened, what static-cred serves binds (the unfinished change is not recorded yet).
    expect(await canBind(facts.url, user.dn, (await cred(s, 'app')).password)).toBe(true);
    await proxy.release();
    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect(await canBind(facts.url, user.dn, (await cred(s, 'app')).password)).toBe(true);
    expect(await readWal(mountStorage(s), 'static-role/app')).toBeUndefined();
  });

  it('"a write the entry changed under (slapd answers assertionFailed, 122) is not applied; the recorded password is written again through the bind account, counted as repaired"', async () => {
    const s = await world();
    await ok(s, 'POST', 'ldap/config', { request_timeout: 30 });
    const user = ou.users[0]!;
    const served = (await cred(s, 'app')).password;
    proxy.arm('hold');
    const rotation = s.request('POST', 'ldap/rotate-role/app');
    await vi.waitFor(() => expect(proxy.holding()).toBe(true), { timeout: 10_000 });
    // Someone changes the entry while the write is in the network.
    await promisify(execFile)('ldappasswd', ['-x', '-H', facts.url, '-D', facts.rootDn, '-w', facts.rootPassword, '-s', 'changed-outside-1', user.dn]);
    await proxy.release();
    const r = await rotation;
    expect(r.status).toBe(502);
    expect(r.body.errors[0]).toContain('assertionFailed');
    expect(await verifications(s, { target: 'static_role', outcome: 'refused', result: 'repaired' })).toBe(1);
    expect(await canBind(facts.url, user.dn, served)).toBe(true);
    expect((await cred(s, 'app')).password).toBe(served);
  });
});
