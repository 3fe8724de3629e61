/** Where a device's lines go. Calls never overlap (LineQueue serialises them). */
export interface Sink {
  /** Opens the target; refused at enable time, retried on the next write after a start or a reopen that failed. */
  open(): Promise<void>;
  /** Resolves once every line has been handed to the target; rejects if any could not be. */
  write(lines: Buffer[]): Promise<void>;
  /** SIGHUP: closes and opens the target again (a file renamed by log rotation is left behind, complete). */
  reopen(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Lines handed in while a write is under way leave together in the next one: under load one system call (and one
 * wake-up of the thread pool, which on a small VM costs more than the call) carries a burst of entries, while a
 * lone request waits for no timer. Each caller's promise settles with its own batch.
 */
export class LineQueue {
  readonly #sink: Sink;
  #tail: Promise<unknown> = Promise.resolve();
  #batch: Buffer[] | undefined;
  #batchWritten: Promise<void> | undefined;
  #closed = false;

  constructor(sink: Sink) {
    this.#sink = sink;
  }

  write(line: Buffer): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('the device is disabled'));
    if (!this.#batch) {
      const batch: Buffer[] = [];
      this.#batch = batch;
      this.#batchWritten = this.#then(() => {
        // From here on new lines start the next batch.
        if (this.#batch === batch) this.#batch = undefined;
        return this.#sink.write(batch);
      });
    }
    this.#batch.push(line);
    return this.#batchWritten!;
  }

  /** After every line queued so far, so none of them lands in the new file and none is lost. */
  reopen(): Promise<void> {
    return this.#then(() => this.#sink.reopen());
  }

  close(): Promise<void> {
    this.#closed = true;
    return this.#then(() => this.#sink.close());
  }

  #then<T>(op: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(op);
    this.#tail = run.catch(() => undefined);
    return run;
  }
}
