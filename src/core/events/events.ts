/** The server's events (docs/events.md): the outbox producers write through, and the feed every subscriber reads. */
import type { Logger } from 'pino';
import type { Clock } from '../clock.ts';
import type { MountEntry } from '../mounts.ts';
import type { Storage } from '../storage/types.ts';
import type { PluginInfo } from './envelope.ts';
import { EventFeed, FEED_DEFAULTS, type FeedOptions } from './feed.ts';
import { EventOutbox } from './outbox.ts';

export class Events {
  readonly outbox: EventOutbox;
  readonly feed: EventFeed;

  /** `sealed`: the barrier, whose log opens the records. */
  constructor(sealed: Storage, leading: () => boolean, clock: Clock, logger: Logger, options: Partial<FeedOptions> = {}) {
    this.feed = new EventFeed(() => sealed.log, leading, logger, { ...FEED_DEFAULTS, ...options });
    this.outbox = new EventOutbox(clock, () => this.feed.wake());
  }
}

/** What an event says about the mount that produced it, as Vault's `plugin_info` does. */
export function pluginInfo(entry: Pick<MountEntry, 'class' | 'accessor' | 'path' | 'type'>): PluginInfo {
  return { mount_class: entry.class, mount_accessor: entry.accessor, mount_path: entry.path, plugin: entry.type };
}
