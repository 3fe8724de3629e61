/**
 * The server's events (docs/events.md): the outbox producers write through, the feed every subscriber reads, and the
 * webhooks the leader delivers to.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import type { MountEntry } from '../mounts.ts';
import type { Storage, StorageCondition } from '../storage/types.ts';
import type { StorageView } from '../storage/view.ts';
import type { PluginInfo } from './envelope.ts';
import { EventFeed, FEED_DEFAULTS, type FeedOptions } from './feed.ts';
import { EventOutbox } from './outbox.ts';
import { WEBHOOK_DEFAULTS, Webhooks, type WebhookOptions } from './webhooks.ts';

export interface EventsOptions {
  feed?: Partial<FeedOptions>;
  webhooks?: Partial<WebhookOptions>;
}

export class Events {
  readonly outbox: EventOutbox;
  readonly feed: EventFeed;
  readonly webhooks: Webhooks;

  /** `sealed`: the barrier, whose log opens the records; `sys`: where webhooks are kept. */
  constructor(sealed: Storage, sys: StorageView, cluster: { leading(): boolean; fence(): StorageCondition[] }, clock: Clock, logger: Logger, options: EventsOptions = {}) {
    const shared = sealed.shared;
    this.feed = new EventFeed(() => sealed.log, () => cluster.leading(), logger, { ...FEED_DEFAULTS, ...options.feed }, shared && ((listener) => shared.onEventsCommitted(listener)));
    this.outbox = new EventOutbox(clock, () => this.feed.wake());
    this.webhooks = new Webhooks(sys, this.feed, cluster, logger, this.outbox.counters, { ...WEBHOOK_DEFAULTS, ...options.webhooks });
  }

  async start(): Promise<void> {
    await this.feed.start();
    this.webhooks.start();
  }

  stop(): void {
    this.webhooks.stop();
    this.feed.stop();
  }
}

/** What an event says about the mount that produced it, as Vault's `plugin_info` does. */
export function pluginInfo(entry: Pick<MountEntry, 'class' | 'accessor' | 'path' | 'type'>): PluginInfo {
  return { mount_class: entry.class, mount_accessor: entry.accessor, mount_path: entry.path, plugin: entry.type };
}
