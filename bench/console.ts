/**
 * The operator console (docs/console.md): the bytes of its first load, compressed as the server sends them, and the
 * time Chromium takes to make the overview usable. BENCH_CONSOLE_RUNS sets how many fresh browser contexts are timed.
 */
import { launchChromium } from '../test/support/console-browser.ts';
import { startTestServer } from '../test/support/server.ts';

const RUNS = Number(process.env.BENCH_CONSOLE_RUNS ?? 7);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Every file of the first load (the page and the assets it names), in bytes as sent with each encoding. */
async function firstLoad(base: string): Promise<Record<'br' | 'gzip' | 'identity', number>> {
  const sizes = { br: 0, gzip: 0, identity: 0 };
  const page = await (await fetch(`${base}/ui/`)).text();
  const files = ['', ...[...page.matchAll(/(?:src|href)="([^":]+)"/g)].map((m) => m[1])];
  for (const encoding of ['br', 'gzip', 'identity'] as const) {
    for (const file of files) {
      // Content-Length is the encoded size: the bytes that cross the wire for this encoding.
      const res = await fetch(`${base}/ui/${file}`, { headers: { 'accept-encoding': encoding } });
      sizes[encoding] += Number(res.headers.get('content-length') ?? (await res.arrayBuffer()).byteLength);
    }
  }
  return sizes;
}

export async function benchConsole(): Promise<string[]> {
  const server = await startTestServer({ listen: true });
  const browser = await launchChromium();
  try {
    const sizes = await firstLoad(server.url);
    const toLogin: number[] = [];
    const toOverview: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const context = await browser.newContext();
      const page = await context.newPage();
      const start = performance.now();
      await page.goto(`${server.url}/ui/`);
      await page.locator('#token').waitFor();
      toLogin.push(performance.now() - start);
      const signedIn = performance.now();
      await page.locator('#token').fill('root');
      await page.keyboard.press('Enter');
      await page.getByTestId('mounts-secret').getByText('ldap/').waitFor();
      await page.getByTestId('node').waitFor();
      toOverview.push(performance.now() - signedIn);
      await context.close();
    }
    const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`;
    return [
      `first load of /ui/ (page, script, stylesheet): ${kb(sizes.br)} brotli, ${kb(sizes.gzip)} gzip, ${kb(sizes.identity)} uncompressed (goal <= 200 KB compressed)`,
      `cold load to an interactive login form (fresh context, median of ${RUNS}): ${median(toLogin).toFixed(0)} ms`,
      `sign-in to the overview with its mounts and node state shown (median of ${RUNS}): ${median(toOverview).toFixed(0)} ms (goal <= 1 s together)`,
    ];
  } finally {
    await browser.close();
    await server.close();
  }
}
