// A slow subscriber (docs/events.md, "Slow subscribers"): a real WebSocket client (the `ws` package) that stops
// reading is closed by the server with code 4000 and a reason naming where to resume, once its unsent bytes pass the
// bound; resuming with after=<that sequence> delivers every later event once, so nothing is lost or repeated.
import { afterEach, describe, expect, it } from 'vitest';
import type WebSocket from 'ws';
import { subscriber, until } from '../support/events.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer | undefined;
const sockets: WebSocket[] = [];
afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  await s?.close().catch(() => undefined);
});

/** Commits `count` events of about 5 KB each in one transaction, through the outbox (the producers' write path). */
async function burst(server: TestServer, count: number): Promise<void> {
  const { outbox } = server.core.events;
  const filler = 'x'.repeat(1000);
  await server.core.systemView.commit(Array.from({ length: count }, (_, i) => outbox.prepare('test/bulk', { path: 'sys/test', n: String(i), a: filler, b: filler, c: filler, d: filler, e: filler })));
}

describe('GET sys/events/subscribe/:event_type: a subscriber that stops reading', () => {
  it('"past its bounded buffer it is closed with 4000 and \'subscriber too slow: resume with after=<sequence>\'; resuming there loses nothing and repeats nothing"', async () => {
    s = await startTestServer({ storage: 'sqlite', listen: true });
    const slow = await subscriber(s.url, sockets)('test/*', 'root');
    slow.ws.pause();
    const { counters } = s.core.events.outbox;
    // Until the server gives up on it: the kernel's socket buffers fill first, then the server's 1 MiB bound.
    for (let round = 0; counters.dropped === 0; round++) {
      expect(round, 'the server never closed the slow subscriber').toBeLessThan(200);
      await burst(s, 50);
      await new Promise((r) => setTimeout(r, 20));
    }
    await burst(s, 20);
    const last = s.core.events.feed.head;
    slow.ws.resume();
    const closed = await slow.closed;
    expect(closed.code).toBe(4000);
    const resumeAt = /^subscriber too slow: resume with after=(\d+)$/.exec(closed.reason)?.[1];
    expect(resumeAt, closed.reason).toBeDefined();
    const before = slow.events.map((e) => e.sequence as number);
    // Everything up to the resume point was handed over before the close frame.
    expect(before.at(-1)).toBe(Number(resumeAt));
    expect(before).toEqual(Array.from({ length: before.length }, (_, i) => before[0] + i));

    const resumed = await subscriber(s.url, sockets)('test/*', 'root', { after: resumeAt! });
    await until(() => resumed.events.at(-1)?.sequence === last, `the rest up to ${last}`, 30_000);
    const after = resumed.events.map((e) => e.sequence as number);
    expect(after[0]).toBe(Number(resumeAt) + 1);
    expect([...before, ...after]).toEqual(Array.from({ length: last - before[0] + 1 }, (_, i) => before[0] + i));
    expect(counters.dropped).toBe(1);
  });
});
