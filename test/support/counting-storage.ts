import type { Storage, StorageCondition, StorageOp } from '../../src/core/storage/types.ts';

/**
 * Wraps a Storage and counts the work asked of it: calls of each kind, and the keys lists returned (a list of a
 * thousand keys is one call but not one unit of work). Tests of "this request does O(1) storage work" read `reads`.
 */
export class CountingStorage implements Storage {
  readonly inner: Storage;
  calls = { get: 0, list: 0, put: 0, delete: 0, transaction: 0 };
  keysListed = 0;

  constructor(inner: Storage) {
    this.inner = inner;
  }

  /** Gets, lists and keys listed since the last `reset`. */
  get reads(): number {
    return this.calls.get + this.calls.list + this.keysListed;
  }

  reset(): void {
    this.calls = { get: 0, list: 0, put: 0, delete: 0, transaction: 0 };
    this.keysListed = 0;
  }

  get(key: string) {
    this.calls.get++;
    return this.inner.get(key);
  }
  put(key: string, value: Buffer) {
    this.calls.put++;
    return this.inner.put(key, value);
  }
  delete(key: string) {
    this.calls.delete++;
    return this.inner.delete(key);
  }
  async list(prefix: string) {
    this.calls.list++;
    const keys = await this.inner.list(prefix);
    this.keysListed += keys.length;
    return keys;
  }
  transaction(ops: StorageOp[], conditions?: StorageCondition[]) {
    this.calls.transaction++;
    return this.inner.transaction(ops, conditions);
  }
  close() { return this.inner.close(); }
  get failure() { return this.inner.failure; }
  get log() { return this.inner.log; }
  onFailure(listener: (err: Error) => void) { this.inner.onFailure(listener); }
}
