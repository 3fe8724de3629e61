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

/** A user created for each lease and deleted with it. */
function dynamicLdif(o: IsolatedOu) {
  const dn = `cn={{.Username}},${o.usersDn}`;
  return {
    creation_ldif: `dn: ${dn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: {{.Username}}\nuserPassword: {{.Password}}\n`,
    deletion_ldif: `dn: ${dn}\nchangetype: delete\n`,
  };
}

const api = (method: string, path: string, body?: unknown) => full.server.request(method, path, body === undefined ? {} : { body });

beforeAll(async () => {
  full = await startFullServer({ listen: true });
  ou = await createIsolatedOu(facts, { users: 3, serviceAccounts: 3 });
  await configure(full.server, facts, ou);
  await ok(full.server, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
  await ok(full.server, 'POST', 'ldap/static-role/batch', { username: 'user1', rotation_schedule: '0 3 * * *' });
  await ok(full.server, 'POST', 'ldap/library/team', { service_account_names: ['svc0', 'svc1'], ttl: '1h', max_ttl: '2h' });
  await ok(full.server, 'POST', 'ldap/role/dyn', { ...dynamicLdif(ou), default_ttl: '1h', max_ttl: '2h' });
  await ok(full.server, 'POST', 'cloud/config', full.cloudConfig());
  await ok(full.server, 'POST', 'cloud/roles/reader', { cloud_roles: full.readerRoles(), ttl: '1h' });
  browser = await launchChromium();
}, 120_000);
afterAll(async () => {
  await browser?.close();
  await full?.close();
  await ou?.cleanup();
});
afterEach(async () => {
  await w.context.close();
  // Every screen ran without a dialog, a CSP violation or a console error.
  expect(w.incidents).toEqual([]);
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

  it('Reveal shows the password masked; Copy puts it on the clipboard still masked; Reveal shows the API\'s', async () => {
    const { page, context } = await open('LDAP static roles');
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: full.server.url });
    await page.locator('tr[data-role="app"]').getByRole('button', { name: 'Reveal' }).click();
    const secret = page.getByTestId('secret');
    expect(await secret.textContent()).toBe('••••••••••••');
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByRole('button', { name: 'Copied' }).waitFor();
    expect(await secret.textContent()).toBe('••••••••••••');
    expect(await page.evaluate<string>('navigator.clipboard.readText()')).toBe((await api('GET', 'ldap/static-cred/app')).body.data.password);
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

  it('Edit changes the rotation from a period to a schedule and back, and turns automation off (checked through the API)', async () => {
    await ok(full.server, 'POST', 'ldap/static-role/edited', { username: 'user2', rotation_period: '1h' });
    const { page } = await open('LDAP static roles');
    const row = page.locator('tr[data-role="edited"]');
    const edit = async (mode: string, value: string, off: boolean) => {
      await row.getByRole('button', { name: 'Edit' }).click();
      const form = row.getByRole('form', { name: 'Edit rotation' });
      await form.getByLabel('Rotate by').selectOption(mode);
      await form.getByLabel('Value').fill(value);
      await form.getByLabel('automation off').setChecked(off);
      await form.getByRole('button', { name: 'Save' }).click();
      await expect.poll(() => page.getByTestId('outcome').textContent()).toBe('Updated edited.');
      return (await api('GET', 'ldap/static-role/edited')).body.data;
    };
    expect(await edit('schedule', '0 4 * * 1', false)).toMatchObject({ rotation_schedule: '0 4 * * 1' });
    expect(await edit('period', '2h', true)).toMatchObject({ rotation_period: 7200, rotation_schedule: '', disable_automated_rotation: true });
    await expect.poll(() => row.textContent()).toContain('automation off');
    await ok(full.server, 'DELETE', 'ldap/static-role/edited');
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

describe('Library sets', () => {
  const status = async () => (await api('GET', 'ldap/library/team/status')).body.data;

  it('Check out lends an account (shown once); the row shows its borrower; Check in returns it (checked through the API)', async () => {
    const { page } = await open('Library sets');
    const set = page.locator('section[data-set="team"]');
    expect(await set.getByTestId('available').textContent()).toBe('2/2');
    await set.getByRole('button', { name: 'Check out' }).click();
    const onetime = page.getByTestId('onetime');
    await onetime.waitFor();
    expect(await onetime.textContent()).toContain('will not be shown again');
    const account = (await onetime.locator('dd').first().textContent())!;
    const lent = (await status())[account];
    expect(lent.available).toBe(false);
    const row = set.locator(`tr[data-account="${account}"]`);
    await expect.poll(() => row.textContent()).toContain(lent.borrower_accessor);
    expect(await row.textContent()).toContain(lent.lease_id);
    expect(await set.getByTestId('available').textContent()).toBe('1/2');
    await screenshot(page, 'library');
    expect(await seriousViolations(page)).toEqual([]);
    await row.getByRole('button', { name: 'Check in', exact: true }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent()).toBe(`Checked in ${account}.`);
    await expect.poll(async () => (await status())[account].available, { timeout: 15_000 }).toBe(true);
  }, 60_000);

  it('Force check-in takes back an account another token holds, after a confirmation', async () => {
    const other = await ok(full.server, 'POST', 'auth/token/create', { policies: ['root'] });
    const out = await full.server.request('POST', 'ldap/library/team/check-out', { token: other.auth.client_token, body: {} });
    const account = out.body.data.service_account_name;
    const { page } = await open('Library sets');
    const row = page.locator(`section[data-set="team"] tr[data-account="${account}"]`);
    expect(await row.textContent()).toContain(other.auth.accessor);
    await row.getByRole('button', { name: 'Force check-in' }).click();
    await row.getByRole('button', { name: 'Confirm force check-in' }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent()).toBe(`Checked in ${account} (forced).`);
    await expect.poll(async () => (await status())[account].available, { timeout: 15_000 }).toBe(true);
  }, 60_000);
});

describe('LDAP config', () => {
  it('shows the config without bindpass; Rotate root (confirmed) gives the bind account a new password', async () => {
    const { page } = await open('LDAP config');
    const text = (await page.getByTestId('ldap-config').textContent())!;
    expect(text).toContain(ou.engine.dn);
    expect(text).not.toContain('bindpass');
    expect(text).not.toContain(ou.engine.password);
    expect(await seriousViolations(page)).toEqual([]);
    await page.getByRole('button', { name: 'Rotate root' }).click();
    await page.getByRole('button', { name: 'Confirm rotate root' }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent(), { timeout: 15_000 }).toBe('Rotated the bind account\'s password.');
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
    expect((await api('GET', 'ldap/config')).body.data.last_bind_password_rotation).toBeTruthy();
  }, 60_000);
});

describe('LDAP dynamic roles and leases', () => {
  const leases = async () => (await api('LIST', 'sys/leases/lookup/ldap/creds/dyn/')).body?.data?.keys ?? [];

  it('Get credentials shows them once, masked; the lease exists in the API', async () => {
    const { page } = await open('LDAP dynamic roles');
    expect(await page.locator('section[data-role="dyn"]').textContent()).toContain('default ttl 3600s');
    expect(await seriousViolations(page)).toEqual([]);
    const before = (await leases()).length;
    await page.getByRole('button', { name: 'Get credentials' }).click();
    const onetime = page.getByTestId('onetime');
    await onetime.waitFor();
    expect(await onetime.textContent()).toContain('will not be shown again');
    expect(await onetime.getByTestId('secret').textContent()).toBe('••••••••••••');
    expect((await leases()).length).toBe(before + 1);
    await expect.poll(() => page.getByTestId('live').textContent()).toBe(String(before + 1));
  }, 60_000);

  it('Leases: browse by prefix, revoke one (confirmed), then revoke the prefix after typing it back', async () => {
    for (let i = 0; i < 3; i++) await ok(full.server, 'GET', 'ldap/creds/dyn');
    const { page } = await open('Leases');
    await page.getByLabel('Prefix').fill('ldap/creds/dyn');
    await page.getByRole('button', { name: 'Browse' }).click();
    await expect.poll(() => page.getByTestId('prefix').textContent()).toBe('ldap/creds/dyn/');
    const ids = await leases();
    await expect.poll(() => page.locator('li[data-lease]').count()).toBe(ids.length);
    expect(await seriousViolations(page)).toEqual([]);
    const first = page.locator(`li[data-lease="ldap/creds/dyn/${ids[0]}"]`);
    await first.getByRole('button', { name: 'Renew' }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent()).toBe(`Renewed ldap/creds/dyn/${ids[0]}.`);
    await first.getByRole('button', { name: 'Revoke' }).click();
    await first.getByRole('button', { name: 'Confirm revoke' }).click();
    await expect.poll(() => leases(), { timeout: 15_000 }).not.toContain(ids[0]);
    await page.getByRole('button', { name: 'Revoke prefix' }).click();
    const confirm = page.getByRole('button', { name: 'Confirm revoke prefix' });
    expect(await confirm.isDisabled()).toBe(true);
    await page.getByLabel('Type ldap/creds/dyn/ to confirm').fill('ldap/creds/');
    expect(await confirm.isDisabled()).toBe(true);
    await page.getByLabel('Type ldap/creds/dyn/ to confirm').fill('ldap/creds/dyn/');
    await confirm.click();
    await expect.poll(() => leases(), { timeout: 15_000 }).toEqual([]);
  }, 60_000);
});

describe('Cloud', () => {
  it('shows the config without the client secret; Get credentials shows them once and leases them', async () => {
    const { page } = await open('Cloud');
    const config = (await page.getByTestId('cloud-config').textContent())!;
    expect(config).toContain(full.cloudConfig().client_id as string);
    expect(config).not.toContain(full.cloudConfig().client_secret as string);
    expect(config).not.toContain('client_secret');
    expect(await seriousViolations(page)).toEqual([]);
    await page.locator('div[data-role="reader"]').getByRole('button', { name: 'Get credentials' }).click();
    const onetime = page.getByTestId('onetime');
    await onetime.waitFor({ timeout: 30_000 });
    expect(await onetime.textContent()).toContain('will not be shown again');
    expect((await api('LIST', 'sys/leases/lookup/cloud/creds/reader/')).body.data.keys.length).toBe(1);
  }, 60_000);

  it('Rotate root (confirmed) replaces the engine\'s client secret: its expiry appears in the API and on the screen', async () => {
    expect((await api('GET', 'cloud/config')).body.data.root_password_expiration_date).toBeUndefined();
    const { page } = await open('Cloud');
    await page.getByRole('button', { name: 'Rotate root' }).click();
    await page.getByRole('button', { name: 'Confirm rotate root' }).click();
    await expect.poll(() => page.getByTestId('outcome').textContent(), { timeout: 45_000 }).toBe('Rotated the engine\'s client secret.');
    const expiry = (await api('GET', 'cloud/config')).body.data.root_password_expiration_date;
    expect(expiry).toBeTruthy();
    await expect.poll(() => page.getByTestId('cloud-config').textContent()).toContain(expiry);
  }, 90_000);
});

describe('Audit devices and Activity', () => {
  it('Audit devices lists an enabled device with its path and type', async () => {
    await ok(full.server, 'POST', 'sys/audit/console-file', { type: 'file', options: { file_path: 'discard' } });
    const { page } = await open('Audit devices');
    const table = (await page.getByTestId('audit').textContent())!;
    expect(table).toContain('console-file/');
    expect(table).toContain('file');
    expect(await seriousViolations(page)).toEqual([]);
  }, 60_000);

  it('Activity draws its charts with uPlot from sys/metrics samples', async () => {
    const { page } = await open('Activity');
    await expect.poll(async () => Number(await page.getByTestId('samples').textContent())).toBeGreaterThan(0);
    expect(await page.locator('.uplot canvas').count()).toBe(3);
    expect(await seriousViolations(page)).toEqual([]);
  }, 60_000);
});
