/** The lifecycle console test files share: one Chromium per file, each test's page checked and closed after it. */
import type { Browser } from 'playwright-core';
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { closeWatched, launchChromium, openConsole, type WatchedPage } from './console-browser.ts';

/** One Chromium for a test file, and the page the running test has open in it. */
export interface ConsoleBrowser {
  /** Opens the console at `baseUrl` in a new watched page: the running test's page, checked and closed after it. */
  open(baseUrl: string): Promise<WatchedPage>;
  /** The running test's page, if it has one open. */
  readonly current: WatchedPage | undefined;
  /** Forgets the running test's page (the test closed it itself). */
  forget(): void;
}

/**
 * The lifecycle console test files share: before the file, `setUp` (the server and directory the pages look at) and
 * then Chromium; after each test, its page closed, having seen no dialog, CSP violation or console error; after the
 * file, Chromium closed and then `tearDown`.
 */
export function consoleBrowser(world: { setUp: () => Promise<void>; tearDown: () => Promise<void> }): ConsoleBrowser {
  let browser: Browser | undefined;
  let watched: WatchedPage | undefined;
  beforeAll(async () => {
    await world.setUp();
    browser = await launchChromium();
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await world.tearDown();
  });
  afterEach(async () => {
    const w = watched;
    watched = undefined;
    expect(await closeWatched(w)).toEqual([]);
  });
  return {
    async open(baseUrl) {
      watched = await openConsole(browser!, baseUrl);
      return watched;
    },
    get current() {
      return watched;
    },
    forget() {
      watched = undefined;
    },
  };
}
