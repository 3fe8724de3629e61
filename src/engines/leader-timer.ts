/**
 * One job the cluster's leader runs at a time it computes from storage (the automated rotation of an engine's own
 * credential, LDAP drift verification): armed for `next()`, run, then armed again for what `next()` says after the
 * run. `refresh` re-reads when something the time depends on may have changed (a config write here, or on a shared
 * store the leader's periodic refresh). Only between start() and stop(); never two runs at once.
 */
import type { Clock } from '../core/clock.ts';

export interface LeaderTimerJob {
  clock: Clock;
  /** When to run next (Unix ms; at once when past); undefined: not at all. */
  next(): Promise<number | undefined>;
  run(): Promise<void>;
  /** A failed run or read (logged by the owner); the timer carries on. */
  onError(err: unknown): void;
}

export class LeaderTimer {
  readonly #job: LeaderTimerJob;
  #leading = false;
  #cancel: (() => void) | undefined;
  #armedAt: number | undefined;
  #running: Promise<void> | undefined;

  constructor(job: LeaderTimerJob) {
    this.#job = job;
  }

  start(): Promise<void> {
    this.#leading = true;
    return this.refresh();
  }

  /** Step-down and shutdown: nothing more is armed; resolves once a run under way has finished. */
  async stop(): Promise<void> {
    this.#leading = false;
    this.#disarm();
    await this.#running;
  }

  /** Arms for `next()`; a no-op off the leader or during a run (it re-arms after). Never throws (onError). */
  async refresh(): Promise<void> {
    if (!this.#leading || this.#running) return;
    let at: number | undefined;
    try {
      at = await this.#job.next();
    } catch (err) {
      this.#job.onError(err);
      return;
    }
    if (!this.#leading || this.#running || at === this.#armedAt) return;
    this.#disarm();
    if (at === undefined) return;
    const { clock } = this.#job;
    this.#armedAt = at;
    this.#cancel = clock.setTimer(at - clock.now(), () => {
      this.#cancel = undefined;
      this.#armedAt = undefined;
      this.#running = this.#job.run().catch((err: unknown) => this.#job.onError(err)).finally(() => (this.#running = undefined));
      void this.#running.then(() => this.refresh());
    });
  }

  #disarm(): void {
    this.#cancel?.();
    this.#cancel = undefined;
    this.#armedAt = undefined;
  }
}
