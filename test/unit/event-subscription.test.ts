// The subscription loop (src/core/events/subscription.ts) over a real event log in memory: the bounded buffer and
// where it tells a slow subscriber to resume, and the token re-check.
import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { systemClock } from '../../src/core/clock.ts';
import { Events } from '../../src/core/events/events.ts';
import { parseFilter } from '../../src/core/events/filter.ts';
import { runSubscription, type SubscriberSink } from '../../src/core/events/subscription.ts';
import type { DeliveredEvent } from '../../src/core/events/envelope.ts';
import { Acl } from '../../src/core/policy/acl.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { StorageView } from '../../src/core/storage/view.ts';

async function withEvents(count: number) {
  const storage = new MemoryStorage();
  const view = new StorageView(storage, '');
  const events = new Events(storage, view, { leading: () => true, fence: () => [] }, systemClock, pino({ level: 'silent' }), { feed: { pollMs: 20 } });
  await events.feed.start();
  for (let i = 0; i < count; i++) await events.outbox.publish(view, 'ldap/rotate', { path: `rotate-role/r${i}`, name: `r${i}` });
  return events;
}

function sink(bufferedAfter: number) {
  const sent: DeliveredEvent[] = [];
  const closed: Array<{ kind: string; reason: string }> = [];
  const s: SubscriberSink = {
    send: (e) => sent.push(e),
    // A transport whose reader stopped: everything after the first `bufferedAfter` events stays unsent.
    buffered: () => (sent.length >= bufferedAfter ? 2 << 20 : 0),
    close: (kind, reason) => closed.push({ kind, reason }),
  };
  return { sent, closed, s };
}

describe('runSubscription', () => {
  it('"past its buffer a subscriber is closed with the sequence to resume after, and resuming there loses nothing"', async () => {
    const events = await withEvents(10);
    const slow = sink(4);
    await runSubscription(events.feed, { pattern: '*', filter: parseFilter(''), after: 0 }, async () => Acl.root(), slow.s, new AbortController().signal, events.outbox.counters);
    expect(slow.sent.map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
    expect(slow.closed).toEqual([{ kind: 'overflow', reason: 'subscriber too slow: resume with after=4' }]);
    expect(events.outbox.counters.dropped).toBe(1);
    const resumed = sink(Number.POSITIVE_INFINITY);
    const done = new AbortController();
    const run = runSubscription(events.feed, { pattern: '*', filter: parseFilter(''), after: 4 }, async () => Acl.root(), resumed.s, done.signal, events.outbox.counters);
    await expect.poll(() => resumed.sent.length).toBe(6);
    done.abort();
    await run;
    expect(resumed.sent.map((e) => e.sequence)).toEqual([5, 6, 7, 8, 9, 10]);
    expect(events.outbox.counters.subscribers).toBe(0);
    events.feed.stop();
  });

  it('"a token that is no longer valid ends the subscription before any further event"', async () => {
    const events = await withEvents(3);
    const sub = sink(Number.POSITIVE_INFINITY);
    await runSubscription(events.feed, { pattern: '*', filter: parseFilter(''), after: 0 }, async () => undefined, sub.s, new AbortController().signal, events.outbox.counters);
    expect(sub.sent).toEqual([]);
    expect(sub.closed).toEqual([{ kind: 'unauthorised', reason: 'the token is no longer valid' }]);
    events.feed.stop();
  });
});
