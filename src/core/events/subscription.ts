/**
 * One subscriber's delivery, whatever carries it (WebSocket, Server-Sent Events): read the log from the subscriber's
 * cursor, keep the events its pattern, filter and ACL let through, hand them over while its buffer has room, and wait
 * for more. The token is looked up again before every batch and at least every `recheckMs` while idle, so a revoked
 * token stops receiving within that time and its connection is closed.
 */
import type { Acl } from '../policy/acl.ts';
import { eventPath, type DeliveredEvent } from './envelope.ts';
import type { EventFeed } from './feed.ts';
import type { EventFilter } from './filter.ts';
import { globMatches } from './glob.ts';
import type { EventCounters } from './outbox.ts';

export interface SubscriptionSpec {
  /** The event type glob from the URL. */
  pattern: string;
  filter: EventFilter;
  /** Deliver events after this sequence; undefined: only events committed from now on. */
  after: number | undefined;
}

/** The transport's side. */
export interface SubscriberSink {
  send(event: DeliveredEvent): void;
  /** Bytes handed over and not yet written to the network. */
  buffered(): number;
  /** Ends the subscription: `reason` is sent to the client where the transport can carry one. */
  close(kind: 'overflow' | 'unauthorised', reason: string): void;
}

export interface SubscriptionLimits {
  /** A subscriber whose unsent bytes pass this is closed (a slow reader must not hold the server's memory). */
  maxBufferedBytes: number;
  recheckMs: number;
  batch: number;
}

export const SUBSCRIPTION_DEFAULTS: SubscriptionLimits = { maxBufferedBytes: 1 << 20, recheckMs: 1000, batch: 100 };

/**
 * Runs until `signal` aborts (the client went away) or the subscription is closed by the server. `authorise` answers
 * the token's ACL now, or undefined once the token is no longer valid.
 */
export async function runSubscription(
  feed: EventFeed, spec: SubscriptionSpec, authorise: () => Promise<Acl | undefined>, sink: SubscriberSink,
  signal: AbortSignal, counters: EventCounters, limits: SubscriptionLimits = SUBSCRIPTION_DEFAULTS,
): Promise<void> {
  let cursor = spec.after ?? feed.head;
  counters.subscribers++;
  try {
    while (!signal.aborted) {
      const acl = await authorise();
      if (!acl) return sink.close('unauthorised', 'the token is no longer valid');
      const events = await feed.read(cursor, limits.batch);
      for (const event of events) {
        if (signal.aborted) return;
        if (globMatches(spec.pattern, event.data.event_type) && acl.allowSubscribe(eventPath(event), event.data.event_type) && spec.filter(event)) {
          if (sink.buffered() > limits.maxBufferedBytes) {
            counters.dropped++;
            return sink.close('overflow', `subscriber too slow: resume with after=${cursor}`);
          }
          sink.send(event);
          counters.delivered++;
        }
        cursor = event.sequence;
      }
      if (events.length < limits.batch) await feed.changed(cursor, signal, limits.recheckMs);
    }
  } finally {
    counters.subscribers--;
  }
}
