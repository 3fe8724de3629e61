/**
 * When rotations run: an in-memory due-time map armed on the injected clock, drained by a bounded pool so
 * rotations of different accounts run concurrently (Vault runs them one at a time under a global lock);
 * failures come back with exponential backoff and jitter instead of a fixed 10 s forever.
 *
 * Knows nothing of passwords or storage (rotation.ts), so the engine state in engine.ts can hold a
 * scheduler without importing the code that needs that state.
 */
import type { Logger } from 'pino';
import type { Clock } from '../../core/clock.ts';

// The retry policy is the one every rotation shares (root credentials too): lib/rotation-schedule.ts.
export { retryDelayMs } from '../../lib/rotation-schedule.ts';

// ---- scheduler -------------------------------------------------------------------------------------

export interface SchedulerOptions {
  clock: Clock;
  logger: Logger;
  /** At most this many `run` calls at once. */
  concurrency: number;
  /** Rotates one item; it reschedules itself (success or failure) through `schedule`. */
  run(name: string): Promise<void>;
}

/**
 * Due times by name, one timer for the earliest, a bounded pool for the work. An item is never run
 * twice at once; rescheduling an item that is running takes effect after it finishes.
 *
 * It runs on the cluster's leader only, between start() and stop(); stopped, it ignores what it is given, and the
 * leader that starts next schedules every role from storage.
 */
export class RotationScheduler {
  readonly #opts: SchedulerOptions;
  readonly #due = new Map<string, number>();
  readonly #queued = new Set<string>();
  readonly #queue: string[] = [];
  readonly #running = new Set<string>();
  #cancel: (() => void) | undefined;
  #armedAt = Number.POSITIVE_INFINITY;
  #stopped = true;
  #idle: Array<() => void> = [];

  constructor(opts: SchedulerOptions) {
    this.#opts = opts;
  }

  schedule(name: string, at: number): void {
    if (this.#stopped) return;
    this.#due.set(name, at);
    // The armed timer already fires by then (and #fire re-arms for the rest): skip the scan of every due
    // time, which each rotation of a large set of roles paid when rescheduling itself a period ahead.
    if (at >= this.#armedAt) return;
    this.#arm();
  }

  unschedule(name: string): void {
    this.#due.delete(name);
    if (this.#queued.delete(name)) this.#queue.splice(this.#queue.indexOf(name), 1);
  }

  dueAt(name: string): number | undefined {
    return this.#due.get(name);
  }

  get size(): number {
    return this.#due.size;
  }

  start(): void {
    this.#stopped = false;
  }

  stop(): void {
    this.#stopped = true;
    this.#cancel?.();
    this.#cancel = undefined;
    this.#armedAt = Number.POSITIVE_INFINITY;
    this.#due.clear();
    this.#queue.length = 0;
    this.#queued.clear();
  }

  /** Resolves when nothing is queued or running (tests, shutdown). */
  idle(): Promise<void> {
    if (this.#running.size === 0 && this.#queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  #arm(): void {
    let earliest = Number.POSITIVE_INFINITY;
    for (const [name, at] of this.#due) if (!this.#running.has(name) && at < earliest) earliest = at;
    if (earliest >= this.#armedAt || earliest === Number.POSITIVE_INFINITY) return;
    this.#cancel?.();
    this.#armedAt = earliest;
    this.#cancel = this.#opts.clock.setTimer(Math.max(0, earliest - this.#opts.clock.now()), () => {
      this.#cancel = undefined;
      this.#armedAt = Number.POSITIVE_INFINITY;
      this.#fire();
    });
  }

  #fire(): void {
    if (this.#stopped) return;
    const now = this.#opts.clock.now();
    const due = [...this.#due].filter(([name, at]) => at <= now && !this.#running.has(name) && !this.#queued.has(name)).sort((a, b) => a[1] - b[1]);
    for (const [name] of due) {
      this.#due.delete(name);
      this.#queued.add(name);
      this.#queue.push(name);
    }
    this.#pump();
    this.#arm();
  }

  #pump(): void {
    while (!this.#stopped && this.#running.size < this.#opts.concurrency && this.#queue.length > 0) {
      const name = this.#queue.shift()!;
      this.#queued.delete(name);
      this.#running.add(name);
      this.#opts.run(name)
        .catch((err: unknown) => this.#opts.logger.error({ err: { message: (err as Error)?.message }, item: name }, 'scheduled rotation failed'))
        .finally(() => {
          this.#running.delete(name);
          this.#pump();
          this.#arm();
          if (this.#running.size === 0 && this.#queue.length === 0) for (const resolve of this.#idle.splice(0)) resolve();
        });
    }
  }
}
