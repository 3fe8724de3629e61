import type { EventLog, SharedStorage, Storage, StorageCondition, StorageOp, StorageUnavailableError } from './types.ts';

/**
 * A store layered over another (the barrier's encryption, the metrics' timing): it supplies the data operations, and
 * everything else is the store below it, whose failure, availability and sharing it reports and which it closes.
 */
export abstract class LayeredStorage implements Storage {
  protected readonly inner: Storage;

  constructor(inner: Storage) {
    this.inner = inner;
  }

  abstract get(key: string): Promise<Buffer | undefined>;
  abstract put(key: string, value: Buffer): Promise<void>;
  abstract delete(key: string): Promise<void>;
  abstract list(prefix: string): Promise<string[]>;
  abstract transaction(ops: StorageOp[], conditions?: StorageCondition[]): Promise<boolean>;

  get log(): EventLog {
    return this.inner.log;
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  get failure(): Error | undefined {
    return this.inner.failure;
  }
  onFailure(listener: (err: Error) => void): void {
    this.inner.onFailure(listener);
  }
  get unavailable(): StorageUnavailableError | undefined {
    return this.inner.unavailable;
  }
  onAvailability(listener: (unavailable: StorageUnavailableError | undefined) => void): void {
    this.inner.onAvailability?.(listener);
  }
  get shared(): SharedStorage | undefined {
    return this.inner.shared;
  }
}
