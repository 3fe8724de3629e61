// The console's rotation-health views against real failures: a static role whose rotation fails (its account was
// deleted from the directory) and one whose password drifted (reset behind the server's back, found by the
// leader's verification binds). Real slapd, a fake server clock, headless Chromium.
import { describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { createIsolatedOu, deleteSubtree, resetPassword, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, ok } from '../support/ldap-engine.ts';
import { goTo, signIn } from '../support/console-browser.ts';
import { consoleBrowser } from '../support/console-suite.ts';

const facts = inject('slapd');
let s: TestServer;
let ou: IsolatedOu;

const pages = consoleBrowser({ setUp, tearDown: async () => {
  await s?.close();
  await ou?.cleanup();
} });

async function setUp(): Promise<void> {
  const clock = new FakeClock(Date.now());
  s = await startTestServer({ listen: true, clock });
  ou = await createIsolatedOu(facts, { users: 3, serviceAccounts: 0 });
  await configure(s, facts, ou, { verify_period: '1m' });
  await ok(s, 'POST', 'ldap/static-role/fine', { username: 'user0', rotation_period: '24h' });
  await ok(s, 'POST', 'ldap/static-role/drifty', { username: 'user1', rotation_period: '24h' });
  await ok(s, 'POST', 'ldap/static-role/broken', { username: 'user2', rotation_period: '24h' });
  // broken: its account is gone, so a rotation fails and is recorded.
  await deleteSubtree(facts, ou.users[2].dn);
  expect((await s.request('POST', 'ldap/rotate-role/broken', { body: {} })).status).toBeGreaterThanOrEqual(400);
  // drifty: its password reset by hand; the next verification round (every minute of the server's clock) finds it.
  await resetPassword(facts, ou.users[1].dn, 'set-behind-the-servers-back');
  await clock.advance(60_000);
  await vi.waitFor(async () => {
    await clock.advance(200);
    expect((await s.request('GET', 'ldap/static-role/drifty')).body.data.drifted).toBe(true);
  }, { timeout: 15_000, interval: 20 });
}

describe('rotation health', () => {
  it('badges say failing ×n with the error, drifted since when, OK otherwise; the filters narrow to each', async () => {
    const { page } = await pages.open(s.url);
    await signIn(page, 'root');
    await goTo(page, 'LDAP static roles');
    const failures = (await s.request('LIST', 'ldap/rotation-failures')).body.data.key_info;
    const broken = (await page.locator('tr[data-role="broken"]').textContent())!;
    expect(broken).toContain(`failing ×${failures.broken.attempts}`);
    expect(broken).toContain((await s.request('GET', 'ldap/static-role/broken')).body.data.last_rotation_error.message);
    expect(await page.locator('tr[data-role="drifty"]').textContent()).toContain('drifted since');
    expect(await page.locator('tr[data-role="fine"]').textContent()).toContain('OK');
    await page.getByRole('radio', { name: 'failing' }).check();
    expect(await page.locator('tr[data-role]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-role')))).toEqual(['broken']);
    await page.getByRole('radio', { name: 'drifted' }).check();
    expect(await page.locator('tr[data-role]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-role')))).toEqual(['drifty']);
    await goTo(page, 'LDAP config');
    expect(await page.getByText(/rotation failure\(s\) or drifted account\(s\)/).textContent()).toMatch(/broken.*drifty|drifty.*broken/);
  }, 60_000);
});
