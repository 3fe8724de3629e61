// The operator console's security model (docs/console.md): the headers of every /ui/ answer, nothing but the build
// served, buttons from the token's capabilities with the API's 403 shown for a forged click, API strings rendered as
// text, and the token's life in the page (memory only, sessionStorage on request, renewal, idle drop).
import { describe, expect, inject, it } from 'vitest';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, ok } from '../support/ldap-engine.ts';
import { goTo, seriousViolations, signIn, type WatchedPage } from '../support/console-browser.ts';
import { consoleBrowser } from '../support/console-suite.ts';

const facts = inject('slapd');
const XSS = '<img src=x onerror=alert(1)>';
let s: TestServer;
let ou: IsolatedOu;

const pages = consoleBrowser({
  setUp: async () => {
    s = await startTestServer({ listen: true });
    ou = await createIsolatedOu(facts, { users: 3, serviceAccounts: 1 });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/other', { username: 'user1', rotation_period: '1h' });
  },
  tearDown: async () => {
    await s?.close();
    await ou?.cleanup();
  },
});

function open(): Promise<WatchedPage> {
  return pages.open(s.url);
}

async function tokenWith(policy: string, rules: string, extra: Record<string, unknown> = {}): Promise<{ token: string; accessor: string }> {
  await ok(s, 'PUT', `sys/policies/acl/${policy}`, { policy: rules });
  const r = await ok(s, 'POST', 'auth/token/create', { policies: [policy], no_default_policy: false, ...extra });
  return { token: r.auth.client_token, accessor: r.auth.accessor };
}

describe('GET /ui/*', () => {
  const get = (url: string, headers: Record<string, string> = {}) => s.app.inject({ method: 'GET', url, headers });

  it('the page and its assets carry a CSP stricter than Vault\'s, nosniff and no-referrer; the page is no-store', async () => {
    const page = await get('/ui/');
    expect(page.statusCode).toBe(200);
    const assets = [...page.body.matchAll(/(?:src|href)="([^":]+\.(?:js|css))"/g)].map((m) => m[1]);
    expect(assets).toHaveLength(2);
    for (const res of [page, ...(await Promise.all(assets.map((a) => get(`/ui/${a}`)))), await get('/ui/nothing-here.js')]) {
      const csp = String(res.headers['content-security-policy']);
      expect(csp).toContain("default-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).not.toMatch(/unsafe-(inline|eval)/);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['referrer-policy']).toBe('no-referrer');
    }
    expect(page.headers['cache-control']).toBe('no-store');
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
  });

  it('assets are served compressed when the client accepts it', async () => {
    const page = await get('/ui/', { 'accept-encoding': 'gzip, deflate, br' });
    expect(page.headers['content-encoding']).toBe('br');
    expect((await get('/ui/', { 'accept-encoding': 'gzip' })).headers['content-encoding']).toBe('gzip');
  });

  it('/ui redirects to /ui/', async () => {
    const res = await get('/ui');
    expect(res.statusCode).toBe(308);
    expect(res.headers.location).toBe('/ui/');
  });

  it.each([
    '/ui/../package.json', '/ui/%2e%2e/package.json', '/ui/..%2fpackage.json', '/ui/..%2f..%2fpackage.json', '/ui/main.ts', '/ui/src/main.ts',
    '/ui/build.ts', '/ui/%2e%2e%2fsrc%2fserver.ts', '/ui//etc/passwd', '/ui/dist/index.html', '/ui/.%2e/.%2e/.env',
  ])('only the build\'s files are served: %s is not', async (url) => {
    const res = await get(url);
    expect([404, 400]).toContain(res.statusCode);
    expect(res.body).not.toMatch(/import |"name": "strongroom"|root:/);
  });
});

describe('capabilities decide the buttons', () => {
  it('a token allowed to read roles and one password sees only Reveal on that role (no Rotate, Edit, Delete), and no Cloud screen', async () => {
    const { token } = await tokenWith('viewer', `
      path "ldap/static-role" { capabilities = ["list"] }
      path "ldap/static-role/*" { capabilities = ["read", "list"] }
      path "ldap/static-cred/app" { capabilities = ["read"] }`);
    const { page } = await open();
    await signIn(page, token);
    await goTo(page, 'LDAP static roles');
    expect(await page.getByRole('navigation').getByRole('button', { name: 'Cloud' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Rotate now' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Delete' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Edit' }).count()).toBe(0);
    expect(await page.locator('tr[data-role="app"]').getByRole('button', { name: 'Reveal' }).count()).toBe(1);
    expect(await page.locator('tr[data-role="other"]').getByRole('button', { name: 'Reveal' }).count()).toBe(0);
    expect(await seriousViolations(page)).toEqual([]);
  }, 60_000);

  it('a click the policy no longer allows gets the API\'s 403 shown as a clear message, and nothing rotates', async () => {
    const rules = (extra: string) => `
      path "ldap/static-role" { capabilities = ["list"] }
      path "ldap/static-role/*" { capabilities = ["read"] }${extra}`;
    const { token } = await tokenWith('operator', rules('\npath "ldap/rotate-role/app" { capabilities = ["update"] }'));
    const { page } = await open();
    await signIn(page, token);
    await goTo(page, 'LDAP static roles');
    const before = (await s.request('GET', 'ldap/static-cred/app')).body.data.password;
    await ok(s, 'PUT', 'sys/policies/acl/operator', { policy: rules('') });
    await page.locator('tr[data-role="app"]').getByRole('button', { name: 'Rotate now' }).click();
    const outcome = page.getByRole('alert');
    await outcome.waitFor();
    expect(await outcome.textContent()).toMatch(/^Permission denied \(403\): /);
    expect((await s.request('GET', 'ldap/static-cred/app')).body.data.password).toBe(before);
  }, 60_000);
});

describe('API strings are text', () => {
  it(`a mount description and a typed lease prefix of ${XSS} render as text: no image, no dialog`, async () => {
    await ok(s, 'POST', 'sys/mounts/xss', { type: 'ldap', description: XSS });
    const { token } = await tokenWith('xss', 'path "sys/*" { capabilities = ["read", "list"] }\npath "xss/*" { capabilities = ["read"] }');
    const { page } = await open();
    await signIn(page, token);
    await page.getByTestId('mounts-secret').getByText(XSS, { exact: true }).waitFor();
    await goTo(page, 'Leases');
    await page.getByLabel('Prefix').fill(XSS);
    await page.getByRole('button', { name: 'Browse' }).click();
    await expect.poll(() => page.getByTestId('prefix').textContent()).toBe(`${XSS}/`);
    expect(await page.locator('img').count()).toBe(0);
    // afterEach checks that no dialog opened and no CSP violation was reported.
  }, 60_000);
});

describe('Trusted Types', () => {
  it('an innerHTML write of a string is refused and reported as a CSP violation (the watcher every test relies on)', async () => {
    const page = (await open()).page;
    const thrown = await page.evaluate<string>("try { document.body.innerHTML = '<b>x</b>'; 'written' } catch (e) { e.name }");
    expect(thrown).toBe('TypeError');
    await expect.poll(() => pages.current!.incidents.some((i) => i.includes('CSP violation: require-trusted-types-for'))).toBe(true);
    pages.current!.incidents.length = 0;
  }, 60_000);
});

describe('the Events screen', () => {
  it('a token without read on sys/events/stream/* sees the API\'s 403 as a clear message; a revoked token\'s stream ends saying so', async () => {
    const { token } = await tokenWith('no-events', 'path "ldap/static-role" { capabilities = ["list"] }');
    const first = await open();
    await signIn(first.page, token);
    await goTo(first.page, 'Events');
    await expect.poll(() => first.page.getByTestId('stream').textContent(), { timeout: 15_000 }).toMatch(/^Permission denied \(403\): /);
    expect(first.incidents).toEqual([]);
    await first.context.close();
    pages.forget();

    const { token: watcher } = await tokenWith('events', 'path "sys/events/stream/*" { capabilities = ["read"] }\npath "ldap/*" { capabilities = ["subscribe"] subscribe_event_types = ["*"] }');
    const { page } = await open();
    await signIn(page, watcher);
    await goTo(page, 'Events');
    await expect.poll(() => page.getByTestId('stream').textContent(), { timeout: 15_000 }).toContain('Live');
    await ok(s, 'POST', 'auth/token/revoke', { token: watcher });
    await expect.poll(() => page.getByTestId('stream').textContent(), { timeout: 15_000 }).toMatch(/^Stream closed \(unauthorised\)/);
  }, 60_000);
});

describe('the token in the page', () => {
  const stored = (page: WatchedPage['page']) => page.evaluate<string>('JSON.stringify({ local: { ...localStorage }, session: { ...sessionStorage }, url: location.href, cookie: document.cookie })');

  it('without "remember" it is in no storage, cookie or URL, and a reload signs out', async () => {
    const { page } = await open();
    // The sign-in form passes axe too.
    expect(await seriousViolations(page)).toEqual([]);
    await signIn(page, 'root');
    expect(await stored(page)).not.toContain('root');
    await page.reload();
    await page.locator('#token').waitFor();
    expect(await stored(page)).not.toContain('root');
  }, 60_000);

  it('with "remember in this tab" it is in sessionStorage only, and a reload keeps the session', async () => {
    const { token } = await tokenWith('remember', 'path "sys/*" { capabilities = ["read"] }');
    const { page } = await open();
    await signIn(page, token, { remember: true });
    const where = JSON.parse(await stored(page));
    expect(Object.values(where.session)).toContain(token);
    expect(JSON.stringify(where.local)).not.toContain(token);
    await page.reload();
    await page.getByRole('button', { name: 'Sign out' }).waitFor();
  }, 60_000);

  it('is renewed at half its TTL while used, and dropped after 15 minutes idle', async () => {
    const { token } = await tokenWith('short', 'path "sys/*" { capabilities = ["read"] }', { ttl: '10m', renewable: true });
    const { page, context } = await open();
    await context.clock.install();
    await signIn(page, token);
    const renewed = page.waitForRequest((r) => r.url().endsWith('/v1/auth/token/renew-self'));
    await page.keyboard.press('Shift');
    await context.clock.fastForward('05:10');
    await renewed;
    await context.clock.fastForward('15:10');
    await page.getByText('Signed out after 15 minutes without use').waitFor();
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).status).toBe(200);
  }, 60_000);

  it('Sign out keeps the token valid unless "revoke the token" is ticked', async () => {
    const { token } = await tokenWith('signout', 'path "sys/*" { capabilities = ["read"] }');
    const { page } = await open();
    await signIn(page, token);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#token').waitFor();
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).status).toBe(200);
    await signIn(page, token);
    await page.getByRole('checkbox', { name: 'revoke the token' }).check();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.locator('#token').waitFor();
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).status).toBe(403);
  }, 60_000);
});

describe('keyboard', () => {
  it('the screens are reached with Tab and Enter alone', async () => {
    const { page } = await open();
    await signIn(page, 'root');
    await page.getByRole('navigation').getByRole('button', { name: 'LDAP static roles' }).waitFor();
    await page.getByRole('navigation').getByRole('button', { name: 'Overview' }).focus();
    for (let i = 0; i < 10 && (await page.evaluate<string | undefined>('document.activeElement?.textContent')) !== 'Library sets'; i++) await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Library sets' }).waitFor();
  }, 60_000);

  it('a confirmation is answered by keyboard: Enter on Delete, Tab to its confirmation, Enter deletes', async () => {
    await ok(s, 'POST', 'ldap/static-role/bykeys', { username: 'user2', rotation_period: '1h' });
    const { page } = await open();
    await signIn(page, 'root');
    await goTo(page, 'LDAP static roles');
    await page.locator('tr[data-role="bykeys"]').getByRole('button', { name: 'Delete' }).focus();
    await page.keyboard.press('Enter');
    for (let i = 0; i < 5 && (await page.evaluate<string | undefined>('document.activeElement?.textContent')) !== 'Confirm delete'; i++) await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.getByTestId('outcome').textContent()).toBe('Deleted bykeys.');
    expect((await s.request('GET', 'ldap/static-role/bykeys')).status).toBe(404);
  }, 60_000);
});
