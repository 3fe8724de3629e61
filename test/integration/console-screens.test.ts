// The operator console's screens in headless Chromium against a real server, slapd and the Azure emulator: each
// screen's main path clicked through, its effect checked through the API, axe-core run on it.
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startFullServer, type FullServer } from '../support/full-server.ts';
import { configure, ok } from '../support/ldap-engine.ts';
import { goTo, launchChromium, openConsole, screenshot, seriousViolations, signIn, type WatchedPage } from '../support/console-browser.ts';

const facts = inject('slapd');
let full: FullServer;
let ou: IsolatedOu;
let browser: Browser;
let w: WatchedPage;

const api = (method: string, path: string, body?: unknown) => full.server.request(method, path, body === undefined ? {} : { body });

beforeAll(async () => {
  full = await startFullServer({ listen: true });
  ou = await createIsolatedOu(facts, { users: 3, serviceAccounts: 3 });
  await configure(full.server, facts, ou);
  await ok(full.server, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
  await ok(full.server, 'POST', 'ldap/static-role/batch', { username: 'user1', rotation_schedule: '0 3 * * *' });
  await ok(full.server, 'POST', 'ldap/library/team', { service_account_names: ['svc0', 'svc1'], ttl: '1h', max_ttl: '2h' });
  browser = await launchChromium();
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await full?.close();
  await ou?.cleanup();
});
afterEach(async () => {
  // Every screen ran without a dialog, a CSP violation or a console error.
  expect(w.incidents).toEqual([]);
  await w.context.close();
});

async function open(screen?: string): Promise<WatchedPage> {
  w = await openConsole(browser, full.server.url);
  await signIn(w.page, 'root');
  if (screen) await goTo(w.page, screen);
  return w;
}

describe('Overview', () => {
  it('shows the mounts, the node\'s role and its seal state; axe finds nothing serious', async () => {
    const { page } = await open();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await expect.poll(() => page.getByTestId('mounts-secret').textContent()).toContain('ldap/');
    expect(await page.getByTestId('mounts-secret').textContent()).toContain('cloud/');
    expect(await page.getByTestId('mounts-auth').textContent()).toContain('auth/cloud/');
    expect(await page.getByTestId('node').textContent()).toContain('unsealed');
    expect(await page.getByTestId('role').textContent()).toContain('active');
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'overview');
  }, 60_000);
});

describe('LDAP static roles', () => {
  it('lists each role with its schedule and OK badge; Rotate now rotates it (checked through the API)', async () => {
    const { page } = await open('LDAP static roles');
    const before = (await api('GET', 'ldap/static-cred/app')).body.data;
    const row = page.locator('tr[data-role="app"]');
    expect(await row.textContent()).toContain('every 3600s');
    expect(await page.locator('tr[data-role="batch"]').textContent()).toContain('schedule 0 3 * * *');
    expect(await row.textContent()).toContain('OK');
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'static-roles');
    await row.getByRole('button', { name: 'Rotate now' }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent()).toBe('Rotated app.');
    const after = (await api('GET', 'ldap/static-cred/app')).body.data;
    expect(after.password).not.toBe(before.password);
    expect(after.last_password).toBe(before.password);
    expect(await canBind(facts.url, ou.users[0].dn, after.password)).toBe(true);
  }, 60_000);

  it('Reveal shows the password masked until Reveal is pressed, and it is the API\'s', async () => {
    const { page } = await open('LDAP static roles');
    await page.locator('tr[data-role="app"]').getByRole('button', { name: 'Reveal' }).click();
    const secret = page.getByTestId('secret');
    expect(await secret.textContent()).toBe('••••••••••••');
    await page.getByRole('button', { name: 'Reveal', pressed: false }).first().click();
    const { password } = (await api('GET', 'ldap/static-cred/app')).body.data;
    expect(await secret.textContent()).toBe(password);
  }, 60_000);

  it('the "failing" and "drifted" filters show only such roles', async () => {
    const { page } = await open('LDAP static roles');
    await page.getByRole('radio', { name: 'failing' }).check();
    expect(await page.locator('tr[data-role]').count()).toBe(0);
    await page.getByText('No static roles failing.').waitFor();
    await page.getByRole('radio', { name: 'drifted' }).check();
    await page.getByText('No static roles drifted.').waitFor();
    await page.getByRole('radio', { name: 'all' }).check();
    expect(await page.locator('tr[data-role]').count()).toBe(2);
  }, 60_000);

  it('Delete asks first, then deletes the role (checked through the API)', async () => {
    await ok(full.server, 'POST', 'ldap/static-role/doomed', { username: 'user2', rotation_period: '1h' });
    const { page } = await open('LDAP static roles');
    const row = page.locator('tr[data-role="doomed"]');
    await row.getByRole('button', { name: 'Delete' }).click();
    expect((await api('GET', 'ldap/static-role/doomed')).status).toBe(200);
    await row.getByRole('button', { name: 'Confirm delete' }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent()).toBe('Deleted doomed.');
    expect((await api('GET', 'ldap/static-role/doomed')).status).toBe(404);
  }, 60_000);
});
