import { isKeyOp, type KeyOp, type Storage, type StorageCondition, type StorageOp } from '../../src/core/storage/types.ts';

/** Wraps a Storage; each `failNext(match)` makes one later transaction with a matching op fail as a full disk would. */
export class FaultyStorage implements Storage {
  readonly inner: Storage;
  readonly #armed: Array<(op: KeyOp) => boolean> = [];

  constructor(inner: Storage) {
    this.inner = inner;
  }

  failNext(match: (op: KeyOp) => boolean): void {
    this.#armed.push(match);
  }

  get(key: string) { return this.inner.get(key); }
  put(key: string, value: Buffer) { return this.inner.put(key, value); }
  delete(key: string) { return this.inner.delete(key); }
  list(prefix: string) { return this.inner.list(prefix); }
  get log() { return this.inner.log; }
  close() { return this.inner.close(); }
  get failure() { return this.inner.failure; }
  onFailure(listener: (err: Error) => void) { this.inner.onFailure(listener); }

  async transaction(ops: StorageOp[], conditions?: StorageCondition[]) {
    const hit = this.#armed.findIndex((match) => ops.filter(isKeyOp).some(match));
    if (hit >= 0) {
      this.#armed.splice(hit, 1);
      throw new Error('disk I/O error (injected)');
    }
    return this.inner.transaction(ops, conditions);
  }
}
