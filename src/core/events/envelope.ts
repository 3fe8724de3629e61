/**
 * Events as Vault sends them (docs/events.md): a CloudEvents 1.0 JSON envelope whose `data` holds the event type, the
 * plugin that produced it and its metadata, plus Strongroom's `sequence`, the event's place in the cluster's log.
 */
import { newUuid } from '../ids.ts';

/** Where an event comes from: the mount that produced it (absent for the server's own events). */
export interface PluginInfo {
  mount_class: string;
  mount_accessor: string;
  mount_path: string;
  plugin: string;
}

/** Metadata values are strings (Vault's are), bounded, and never a secret: every producer names its fields. */
export type EventMetadata = Record<string, string>;

export interface CloudEvent {
  id: string;
  source: string;
  specversion: '1.0';
  type: '*';
  datacontenttype: 'application/cloudevents';
  time: string;
  data: {
    event: { id: string; metadata: EventMetadata };
    event_type: string;
    plugin_info?: PluginInfo;
    /** The same object as `event.metadata`, at the level the readers look for it. */
    metadata: EventMetadata;
  };
}

/** An event as delivered: the envelope and its sequence in the cluster's log. */
export type DeliveredEvent = CloudEvent & { sequence: number };

export const EVENT_SOURCE = 'strongroom';
/** A metadata value past this many characters is cut: no producer needs more, and a bound keeps the log small. */
export const MAX_METADATA_VALUE = 1024;

export function buildEvent(eventType: string, metadata: EventMetadata, plugin: PluginInfo | undefined, now: number): CloudEvent {
  const id = newUuid();
  const bounded: EventMetadata = {};
  for (const [k, v] of Object.entries(metadata)) bounded[k] = v.length > MAX_METADATA_VALUE ? v.slice(0, MAX_METADATA_VALUE) : v;
  return {
    id,
    source: EVENT_SOURCE,
    specversion: '1.0',
    type: '*',
    datacontenttype: 'application/cloudevents',
    time: new Date(now).toISOString(),
    data: { event: { id, metadata: bounded }, event_type: eventType, ...(plugin ? { plugin_info: plugin } : {}), metadata: bounded },
  };
}

/**
 * The path an event is authorised against (`subscribe` capability): the mount's path joined with the metadata's
 * `path`, which producers give relative to their mount as Vault's do; the server's own events name a full path.
 */
export function eventPath(event: CloudEvent): string {
  const relative = event.data.metadata.path ?? '';
  return (event.data.plugin_info?.mount_path ?? '') + relative;
}
