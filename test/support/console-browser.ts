// Drives the operator console (/ui/) in Debian's headless Chromium through playwright-core, and watches every page
// for what must never happen there: a dialog (an injected script ran), a CSP violation or a console error.
import { mkdirSync, writeFileSync } from 'node:fs';
import AxeBuilder from '@axe-core/playwright';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { expect } from 'vitest';

export const CHROMIUM = process.env.STRONGROOM_CHROMIUM ?? '/usr/bin/chromium';
export const SCREENSHOTS = new URL('../../docs/screenshots/', import.meta.url);

export function launchChromium(): Promise<Browser> {
  // --no-sandbox: CI runs as root in a container, where Chromium's sandbox cannot start.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

export interface WatchedPage {
  page: Page;
  context: BrowserContext;
  /** Messages of dialogs opened, CSP violations and console errors, in order. */
  incidents: string[];
}

/** Closes a watched page (none: nothing to do) and returns what it saw: dialogs, CSP violations, console errors. */
export async function closeWatched(w: WatchedPage | undefined): Promise<string[]> {
  if (!w) return [];
  await w.context.close();
  return w.incidents;
}

export async function openConsole(browser: Browser, baseUrl: string): Promise<WatchedPage> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const incidents: string[] = [];
  // Runs before the page's own scripts (injected by the browser, so the CSP does not apply to it).
  await context.addInitScript({
    content: "document.addEventListener('securitypolicyviolation', (e) => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));",
  });
  const page = await context.newPage();
  page.on('dialog', (d) => {
    incidents.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  page.on('console', (m) => {
    // The browser logs every 4xx answer as an error; the screens show those themselves (an empty LIST is a 404).
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) incidents.push(`console error: ${m.text()}`);
  });
  page.on('pageerror', (err) => incidents.push(`page error: ${err.message}`));
  await page.goto(`${baseUrl}/ui/`);
  return { page, context, incidents };
}

/** Signs in through the login form, by keyboard only (Tab order, typing, Enter). */
export async function signIn(page: Page, token: string, opts: { remember?: boolean } = {}): Promise<void> {
  await page.locator('#token').focus();
  await page.keyboard.type(token);
  if (opts.remember) {
    await page.keyboard.press('Tab');
    await page.keyboard.press('Space');
  }
  await page.keyboard.press('Enter');
  await expect.poll(() => page.getByRole('button', { name: 'Sign out' }).count(), { timeout: 15_000 }).toBe(1);
}

export async function goTo(page: Page, screen: string): Promise<void> {
  await page.getByRole('navigation').getByRole('button', { name: screen, exact: true }).click();
  await page.getByRole('heading', { level: 1, name: screen }).waitFor();
  await page.getByText('Loading…').waitFor({ state: 'detached' });
}

/** axe-core's serious and critical violations on the page as it is now. */
export async function seriousViolations(page: Page): Promise<string[]> {
  const result = await new AxeBuilder({ page }).analyze();
  return result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
}

/**
 * A full-page screenshot; written to docs/screenshots/<name>.png (the README's) only with
 * STRONGROOM_UPDATE_SCREENSHOTS=1, so an ordinary test run leaves the checkout unchanged.
 */
export async function screenshot(page: Page, name: string): Promise<void> {
  const png = await page.screenshot({ fullPage: true });
  expect(png.subarray(1, 4).toString()).toBe('PNG');
  if (process.env.STRONGROOM_UPDATE_SCREENSHOTS !== '1') return;
  mkdirSync(SCREENSHOTS, { recursive: true });
  writeFileSync(new URL(`${name}.png`, SCREENSHOTS), png);
}
