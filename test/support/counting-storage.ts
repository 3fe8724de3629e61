import type { Storage, StorageCondition, StorageOp } from '../../src/core/storage/types.ts';

/**
 * Wraps a Storage and counts the work asked of it: calls of each kind, and the keys lists returned (a list of a
 * thousand keys is one call but not one unit of work). Tests of "this request does O(1) storage work" read `requestReads()`.
 */
export class CountingStorage implements Storage {
  readonly inner: Storage;
  calls = { get: 0, list: 0, put: 0, delete: 0, transaction: 0 };
  keysListed = 0;
  /** The keys read and the prefixes listed since the last `reset`, in order. */
  readKeys: string[] = [];

  constructor(inner: Storage) {
    this.inner = inner;
  }

  /**
   * The reads since the last `reset` outside the server's own timed work: the event webhooks' leader round lists
   * its webhooks every poll, whatever any request does, so a test of what requests cost leaves it out.
   */
  requestReads(): string[] {
    return this.readKeys.filter((key) => !key.includes('events/webhook/'));
  }

  reset(): void {
    this.calls = { get: 0, list: 0, put: 0, delete: 0, transaction: 0 };
    this.keysListed = 0;
    this.readKeys = [];
  }

  get(key: string) {
    this.calls.get++;
    this.readKeys.push(key);
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
    this.readKeys.push(prefix);
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
