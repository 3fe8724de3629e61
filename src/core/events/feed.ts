/**
 * Every node reads events from the store's log (docs/events.md), so a subscriber on any node sees every node's
 * events. The feed knows the highest sequence committed: at once after this node's own commits, at once after
 * another node's where the store says so (PostgreSQL's NOTIFY, `wakeUps`), and by a poll of the log as the fallback
 * for a notification lost; it wakes the readers waiting past it, each reading the log from its own cursor. The leader
 * trims the log to its retention.
 */
import type { Logger } from 'pino';
import type { EventLog } from '../storage/types.ts';
import type { DeliveredEvent } from './envelope.ts';

export interface FeedOptions {
  /** How often the log is polled for other nodes' events whose notification was lost (or where there is none). */
  pollMs: number;
  /** Records older than this are trimmed. */
  retentionMs: number;
  /** At most this many records are kept, whatever their age. */
  maxRecords: number;
  /** How often the leader trims. */
  trimEveryMs: number;
}

/**
 * How often the log's size (the metric) is counted exactly; between counts it grows by what the head moved. Counting reads the whole log (count(*) in SQL), so the poll that
 * runs after every commit of this node reads only the head: counted at each poll, a log of 100,000 records cost
 * ~1 ms of CPU per commit.
 */
const COUNT_EVERY_MS = 10_000;

export const FEED_DEFAULTS: FeedOptions = { pollMs: 1000, retentionMs: 24 * 3600_000, maxRecords: 1_000_000, trimEveryMs: 60_000 };

export class EventFeed {
  readonly #log: () => EventLog;
  readonly #options: FeedOptions;
  readonly #logger: Logger;
  readonly #leading: () => boolean;
  #head = 0;
  #size = 0;
  #waiters = new Set<() => void>();
  #stop: (() => void) | undefined;
  #polling = false;
  #pollAgain = false;
  #lastTrim = 0;
  #lastCount = 0;

  /** `wakeUps`: where the store tells of other nodes' commits (SharedStorage.onEventsCommitted), subscribed at start. */
  readonly #wakeUps: ((listener: () => void) => () => void) | undefined;

  constructor(log: () => EventLog, leading: () => boolean, logger: Logger, options: FeedOptions, wakeUps?: (listener: () => void) => () => void) {
    this.#wakeUps = wakeUps;
    this.#log = log;
    this.#leading = leading;
    this.#logger = logger;
    this.#options = options;
  }

  /** The highest sequence known committed. */
  get head(): number {
    return this.#head;
  }

  /** Records in the log at the last poll (the size metric). */
  get size(): number {
    return this.#size;
  }

  async start(): Promise<void> {
    if (this.#stop) return;
    await this.#poll();
    const timer = setInterval(() => void this.#poll(), this.#options.pollMs);
    timer.unref();
    const unsubscribe = this.#wakeUps?.(() => this.wake());
    this.#stop = () => {
      clearInterval(timer);
      unsubscribe?.();
    };
  }

  stop(): void {
    this.#stop?.();
    this.#stop = undefined;
    for (const wake of this.#waiters) wake();
  }

  /** An event this node wrote has committed: read the head now rather than at the next poll. */
  wake(): void {
    void this.#poll();
  }

  /** Up to `limit` events after `after`, in order. */
  async read(after: number, limit: number): Promise<DeliveredEvent[]> {
    const records = await this.#log().read(after, limit);
    return records.map((r) => ({ ...(JSON.parse(r.value.toString('utf8')) as DeliveredEvent), sequence: r.seq }));
  }

  /** Resolves once the head passes `after`, the signal aborts, or `maxWaitMs` passes (so callers can re-check). */
  changed(after: number, signal: AbortSignal, maxWaitMs: number): Promise<void> {
    if (this.#head > after || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#waiters.delete(check);
        resolve();
      };
      const check = () => {
        if (this.#head > after || !this.#stop) done();
      };
      const timer = setTimeout(done, maxWaitMs);
      signal.addEventListener('abort', done);
      this.#waiters.add(check);
    });
  }

  async #poll(): Promise<void> {
    // A wake-up during a poll may report a commit that poll read the head before: it polls once more after it.
    if (this.#polling) {
      this.#pollAgain = true;
      return;
    }
    this.#polling = true;
    try {
      const last = await this.#log().head();
      if (last > this.#head) {
        // Appended since (the log never gains a record below its head); the count below puts trims right.
        this.#size += last - this.#head;
        this.#head = last;
        for (const check of [...this.#waiters]) check();
      }
      await this.#trimWhenDue();
      await this.#countWhenDue();
    } catch (err) {
      // A sealed barrier or a lost database: the next poll tries again.
      this.#logger.debug({ err: { message: (err as Error).message } }, 'event log poll failed');
    } finally {
      this.#polling = false;
      if (this.#pollAgain) {
        this.#pollAgain = false;
        void this.#poll();
      }
    }
  }

  async #countWhenDue(): Promise<void> {
    const now = Date.now();
    if (now - this.#lastCount < COUNT_EVERY_MS) return;
    this.#lastCount = now;
    this.#size = (await this.#log().stats()).count;
  }

  /** Leader-only housekeeping; a trim by a former leader removes only what the new one would remove too. */
  async #trimWhenDue(): Promise<void> {
    const now = Date.now();
    if (!this.#leading() || now - this.#lastTrim < this.#options.trimEveryMs) return;
    this.#lastTrim = now;
    const dropped = await this.#log().trim(now - this.#options.retentionMs, this.#options.maxRecords);
    if (dropped > 0) this.#logger.info({ dropped }, 'event log trimmed to its retention');
  }
}
