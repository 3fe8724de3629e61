/** Where a device's lines go. Calls never overlap (LineQueue serialises them). */
export interface Sink {
  /** Opens the target; refused at enable time, retried on the next write after a start or a reopen that failed. */
  open(): Promise<void>;
  /** Resolves once every line (each ends with a newline) has been handed to the target; rejects if any could not be. */
  write(lines: string[]): Promise<void>;
  /** SIGHUP: closes and opens the target again (a file renamed by log rotation is left behind, complete). */
  reopen(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The lines of one event-loop turn leave together at the turn's end (setImmediate): under load one system call
 * carries a burst of entries (on a small VM a write to a file costs ~12 µs, and a wake-up of another thread more),
 * while a lone request waits for no timer. Each caller's promise settles with its batch.
 */
export class LineQueue {
  readonly #sink: Sink;
  #tail: Promise<unknown> = Promise.resolve();
  #batch: { lines: string[]; written: PromiseWithResolvers<void> } | undefined;
  #closed = false;

  constructor(sink: Sink) {
    this.#sink = sink;
  }

  write(line: string): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('the device is disabled'));
    let batch = this.#batch;
    if (!batch) {
      const next = { lines: [] as string[], written: Promise.withResolvers<void>() };
      this.#batch = batch = next;
      setImmediate(() => {
        this.#batch = undefined;
        this.#then(() => this.#sink.write(next.lines)).then(next.written.resolve, next.written.reject);
      });
    }
    batch.lines.push(line);
    return batch.written.promise;
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

/**
 * A system error as its code and meaning ("ENOENT: no such file or directory", "ECONNREFUSED"), without the path or
 * address Node's message quotes: that is what the caller sent, and the answer and the audit entry quote no value.
 */
export function withoutTarget(err: unknown): Error {
  const e = err as NodeJS.ErrnoException;
  if (!e?.code) return e instanceof Error ? e : new Error(String(err));
  const meaning = new RegExp(`^${e.code}: ([^,]+)`).exec(e.message)?.[1];
  return new Error(meaning ? `${e.code}: ${meaning}` : e.code);
}
