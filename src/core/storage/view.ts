import type { KeyOp, Storage, StorageCondition, StorageOp } from './types.ts';

/**
 * Writes a store prepared without committing them (keys already qualified by its view), and what the store
 * must do once they have landed. Writes from several stores commit together through `StorageView.commit`.
 */
export interface PreparedWrite {
  ops: StorageOp[];
  /** Guards (keys qualified) the writes need to hold when they land, e.g. "the issuing token is not being revoked". */
  conditions?: StorageCondition[];
  committed(): void;
}

/**
 * A storage window under a fixed prefix, with JSON helpers. Each mount gets its own view so two mounts of
 * the same engine can never see each other's data.
 */
export class StorageView {
  readonly #inner: Storage;
  readonly prefix: string;

  constructor(inner: Storage, prefix: string) {
    this.#inner = inner;
    this.prefix = prefix;
  }

  sub(prefix: string): StorageView {
    return new StorageView(this.#inner, this.prefix + prefix);
  }

  get(key: string): Promise<Buffer | undefined> {
    return this.#inner.get(this.prefix + key);
  }
  /** See Storage.peek: bytes that may be shared, for a reader that only parses or compares them. */
  peek(key: string): Promise<Buffer | undefined> {
    return this.#inner.peek ? this.#inner.peek(this.prefix + key) : this.#inner.get(this.prefix + key);
  }
  put(key: string, value: Buffer): Promise<void> {
    return this.#inner.put(this.prefix + key, value);
  }
  delete(key: string): Promise<void> {
    return this.#inner.delete(this.prefix + key);
  }
  list(prefix = ''): Promise<string[]> {
    return this.#inner.list(this.prefix + prefix);
  }
  /**
   * Writes `ops` if every condition holds, together with `alongside` (writes other stores prepared, e.g. a lease):
   * all of them land or none. Each prepared write's `committed` runs once they have landed.
   */
  async transaction(ops: StorageOp[], conditions: StorageCondition[] = [], alongside: PreparedWrite[] = []): Promise<boolean> {
    const all = alongside.length === 0 ? this.qualify(ops) : [...this.qualify(ops), ...alongside.flatMap((w) => w.ops)];
    const guards = conditions.map((c) => ({ ...c, key: this.prefix + c.key }));
    for (const w of alongside) if (w.conditions) guards.push(...w.conditions);
    const applied = await this.#inner.transaction(all, guards);
    if (applied) for (const w of alongside) w.committed();
    return applied;
  }

  /** The same operations with this view's prefix, for a `PreparedWrite` (appends name no key). */
  qualify<T extends StorageOp>(ops: T[]): T[] {
    return ops.map((op) => (op.type === 'append' ? op : { ...op, key: this.prefix + (op as KeyOp).key }));
  }

  /**
   * Commits prepared writes (from views over the same storage) in one transaction: all land or none. A guard that
   * does not hold is a GuardError (nothing was written).
   */
  async commit(writes: PreparedWrite[]): Promise<void> {
    if (!(await this.transaction([], [], writes))) throw new GuardError();
  }

  async getJson<T>(key: string, parse?: (raw: unknown) => T): Promise<T | undefined> {
    // Parsed and let go: the bytes need no copy of their own.
    const raw = await this.peek(key);
    if (raw === undefined) return undefined;
    const value: unknown = JSON.parse(raw.toString('utf8'));
    return parse ? parse(value) : (value as T);
  }
  putJson(key: string, value: unknown): Promise<void> {
    return this.put(key, Buffer.from(JSON.stringify(value)));
  }

  /** Every key below `prefix`, depth-first (folders expanded). */
  async listRecursive(prefix = ''): Promise<string[]> {
    const out: string[] = [];
    for (const child of await this.list(prefix)) {
      if (child.endsWith('/')) out.push(...(await this.listRecursive(prefix + child)));
      else out.push(prefix + child);
    }
    return out;
  }

  /** Deletes everything below this view (used when a mount is disabled). */
  async clear(): Promise<void> {
    for (const key of await this.listRecursive()) await this.delete(key);
  }
}

/** A prepared write's guard did not hold when it was committed (see PreparedWrite.conditions). */
export class GuardError extends Error {
  constructor() {
    super('a guarded write found its guard changed');
  }
}

export const jsonBytes = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));
