/**
 * The outbox (docs/events.md): an event is an `append` committed in the same storage transaction as the change that
 * caused it, so neither can land without the other, a crash included. Producers call `prepare` where they build their
 * transaction and pass the result alongside their own writes.
 */
import type { Clock } from '../clock.ts';
import type { PreparedWrite, StorageView } from '../storage/view.ts';
import { buildEvent, type EventMetadata, type PluginInfo } from './envelope.ts';

/** What the server counts about events (sys/metrics). */
export interface EventCounters {
  published: number;
  delivered: number;
  dropped: number;
  webhookFailures: number;
  subscribers: number;
}

export class EventOutbox {
  readonly counters: EventCounters = { published: 0, delivered: 0, dropped: 0, webhookFailures: 0, subscribers: 0 };
  readonly #clock: Clock;
  /** Called after an event this node wrote has committed: local readers need not wait for their next poll. */
  readonly #committed: () => void;

  constructor(clock: Clock, committed: () => void) {
    this.#clock = clock;
    this.#committed = committed;
  }

  /** The event as a write to commit with the change it reports (`StorageView.transaction`'s `alongside`). */
  prepare(eventType: string, metadata: EventMetadata, plugin?: PluginInfo): PreparedWrite {
    const event = buildEvent(eventType, metadata, plugin, this.#clock.now());
    return {
      ops: [{ type: 'append', value: Buffer.from(JSON.stringify(event)) }],
      committed: () => {
        this.counters.published++;
        this.#committed();
      },
    };
  }

  /** An event that reports no stored change of its own (an audit device failing): committed alone. */
  publish(view: StorageView, eventType: string, metadata: EventMetadata, plugin?: PluginInfo): Promise<void> {
    return view.commit([this.prepare(eventType, metadata, plugin)]);
  }
}
