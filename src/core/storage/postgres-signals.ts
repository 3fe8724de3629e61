/**
 * Wake-ups between the nodes of a cluster through PostgreSQL's LISTEN/NOTIFY (SharedStorage.signal/onSignal, and
 * onEventsCommitted). Best effort by design: a notification sent while a node's listening connection is down is
 * lost, so whoever relies on a signal also polls (the library queue looks again every 100 ms, the event feed every
 * second); a signal only makes that poll come sooner. One connection listens on both channels.
 */
import pg from 'pg';

const CHANNEL = 'strongroom_signal';
/** Sent by `strongroom_write` when a transaction that appended to the event log commits (postgres-schema.ts). */
export const EVENTS_CHANNEL = 'strongroom_events';
const CHANNELS = [CHANNEL, EVENTS_CHANNEL];
/** Before connecting again after the listening connection was lost. */
const RECONNECT_MS = 1000;
/** PostgreSQL refuses payloads from 8000 bytes; a longer one is not sent (the poll covers it). */
export const MAX_SIGNAL_PAYLOAD = 7900;

export class PostgresSignals {
  readonly #url: string;
  readonly #notify: (channel: string, payload: string) => Promise<void>;
  readonly #listeners = new Map<string, Set<(payload: string) => void>>(CHANNELS.map((c) => [c, new Set()]));
  #client: pg.Client | undefined;
  #connecting = false;
  #closed = false;

  /** `notify` sends through the store's own pool: a node's signals go out like its writes. */
  constructor(url: string, notify: (channel: string, payload: string) => Promise<void>) {
    this.#url = url;
    this.#notify = notify;
  }

  async send(payload: string): Promise<void> {
    if (Buffer.byteLength(payload) > MAX_SIGNAL_PAYLOAD) return;
    await this.#notify(CHANNEL, payload);
  }

  /** Hears `channel` (this class's own signals unless named) from every node until the returned function is called. */
  subscribe(listener: (payload: string) => void, channel = CHANNEL): () => void {
    const listeners = this.#listeners.get(channel)!;
    listeners.add(listener);
    void this.#connect();
    return () => listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.#closed = true;
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }

  async #connect(): Promise<void> {
    if (this.#client || this.#connecting || this.#closed) return;
    this.#connecting = true;
    const client = new pg.Client({ connectionString: this.#url, keepAlive: true, application_name: 'strongroom-signals' });
    client.on('notification', (message) => {
      if (message.payload === undefined) return;
      for (const listener of this.#listeners.get(message.channel) ?? []) listener(message.payload);
    });
    const lost = () => {
      if (this.#client === client) this.#client = undefined;
      void client.end().catch(() => undefined);
      if (!this.#closed) setTimeout(() => void this.#connect(), RECONNECT_MS).unref();
    };
    try {
      await client.connect();
      for (const channel of CHANNELS) await client.query(`LISTEN ${channel}`);
      client.on('error', lost);
      client.on('end', () => this.#client === client && lost());
      if (this.#closed) await client.end();
      else this.#client = client;
    } catch {
      lost();
    } finally {
      this.#connecting = false;
    }
  }
}
