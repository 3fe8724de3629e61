import { directChildren, type EventLog, type LogRecord, type Storage, type StorageCondition, type StorageOp } from './types.ts';

/** In-process storage for dev mode and tests; the same semantics as the durable backends. */
export class MemoryStorage implements Storage {
  readonly #data = new Map<string, Buffer>();
  #records: LogRecord[] = [];
  #lastSeq = 0;

  async get(key: string): Promise<Buffer | undefined> {
    return this.#data.get(key);
  }
  async put(key: string, value: Buffer): Promise<void> {
    this.#data.set(key, Buffer.from(value));
  }
  async delete(key: string): Promise<void> {
    this.#data.delete(key);
  }
  async list(prefix: string): Promise<string[]> {
    const keys = [...this.#data.keys()].filter((k) => k.startsWith(prefix)).sort();
    return directChildren(prefix, keys);
  }
  async transaction(ops: StorageOp[], conditions: StorageCondition[] = []): Promise<boolean> {
    for (const c of conditions) {
      const current = this.#data.get(c.key);
      if (!sameBytes(current, c.expected)) return false;
    }
    for (const op of ops) {
      if (op.type === 'put') this.#data.set(op.key, Buffer.from(op.value));
      else if (op.type === 'append') this.#records.push({ seq: ++this.#lastSeq, at: Date.now(), value: Buffer.from(op.value) });
      else this.#data.delete(op.key);
    }
    return true;
  }
  readonly log: EventLog = {
    read: async (after, limit) => this.#records.filter((r) => r.seq > after).slice(0, limit),
    trim: async (before, keep) => {
      const cut = Math.max(this.#records.filter((r) => r.at < before).length, this.#records.length - keep);
      this.#records = this.#records.slice(cut);
      return cut;
    },
    stats: async () => ({ count: this.#records.length, last: this.#lastSeq }),
    head: async () => this.#lastSeq,
  };
  async close(): Promise<void> {}
  // Nothing outside the process can break a map.
  get failure(): Error | undefined {
    return undefined;
  }
  onFailure(): void {}
}

export function sameBytes(a: Buffer | undefined, b: Buffer | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.equals(b);
}
