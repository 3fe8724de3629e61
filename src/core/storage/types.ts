import { StrongroomError } from '../errors.ts';

/**
 * A change applied by Storage.transaction; all of a transaction's operations land together or not at all. An `append`
 * adds a record to the store's event log (docs/events.md) under the next cluster-wide sequence number, assigned by the
 * store when the transaction commits, so log order is commit order.
 */
export type StorageOp = { type: 'put'; key: string; value: Buffer } | { type: 'delete'; key: string } | { type: 'append'; value: Buffer };

/** The operations of a transaction that write keys (everything but appends). */
export type KeyOp = Exclude<StorageOp, { type: 'append' }>;

export const isKeyOp = (op: StorageOp): op is KeyOp => op.type !== 'append';

/** A record of the event log: its sequence number, when the store committed it (ms since the epoch), its bytes. */
export interface LogRecord {
  seq: number;
  at: number;
  value: Buffer;
}

/**
 * The event log every store keeps beside its keys: records appended by transactions, numbered from 1 in commit order
 * with no gap a reader could see filled later (docs/events.md).
 */
export interface EventLog {
  /** Up to `limit` records with a sequence above `after`, in order. */
  read(after: number, limit: number): Promise<LogRecord[]>;
  /** Drops records committed before `before` (ms since the epoch) and all but the newest `keep`; returns how many. */
  trim(before: number, keep: number): Promise<number>;
  /** How many records the log holds, and the highest sequence ever assigned (0 when none). */
  stats(): Promise<{ count: number; last: number }>;
  /** The highest sequence ever assigned (0 when none): what a poll for new events reads, without counting the log. */
  head(): Promise<number>;
}

/** A compare-and-set guard: the transaction applies only if `key` currently holds `expected` (undefined = absent). */
export interface StorageCondition {
  key: string;
  expected: Buffer | undefined;
}

/**
 * The physical store. Keys are `/`-separated paths stored in the clear (they never hold secrets: tokens
 * appear only as salted hashes); values are opaque bytes (ciphertext once behind the barrier).
 */
export interface Storage {
  get(key: string): Promise<Buffer | undefined>;
  /**
   * As `get`, but the bytes may be shared with other readers (the barrier's remembered plaintext), so they must never
   * be changed: for readers that only parse or compare, on paths every request takes (a copy costs ~0.5 µs a read).
   * Stores without it are read with `get`.
   */
  peek?(key: string): Promise<Buffer | undefined>;
  put(key: string, value: Buffer): Promise<void>;
  delete(key: string): Promise<void>;
  /** Direct children of `prefix`: leaf names, and folder names with a trailing `/`, sorted. */
  list(prefix: string): Promise<string[]>;
  /** Returns false (and changes nothing) when a condition does not hold. */
  transaction(ops: StorageOp[], conditions?: StorageCondition[]): Promise<boolean>;
  /** The records `append` operations added (values as stored: the barrier's ciphertext below it). */
  readonly log: EventLog;
  close(): Promise<void>;
  /**
   * Set once the store can no longer write, for the rest of the process (e.g. the SQLite writer thread died).
   * Reads may still answer, from a state nothing can change any more: a revocation cannot land, so the server
   * must stop answering rather than serve it.
   */
  readonly failure: Error | undefined;
  /** Calls `listener` once with the failure: when it happens, or at once if it already has. */
  onFailure(listener: (err: Error) => void): void;
  /**
   * Set while the store cannot reach its database, and cleared by the store itself once it can again (PostgreSQL).
   * Unlike `failure` this passes: nothing acknowledged was lost, so the server keeps running and refuses requests
   * meanwhile. Stores that live in the process (memory, SQLite) cannot lose a connection and leave it out.
   */
  readonly unavailable?: StorageUnavailableError;
  /** Calls `listener` each time `unavailable` changes: with the error when the store is lost, undefined when it is back. */
  onAvailability?(listener: (unavailable: StorageUnavailableError | undefined) => void): void;
  /** Present when several server processes can share the store (PostgreSQL): what the cluster coordinates through. */
  readonly shared?: SharedStorage;
}

/**
 * What the nodes of a cluster coordinate through, beside the entries themselves (docs/ha.md). Stores that live in one
 * process (memory, SQLite) have a single node, which always leads, and leave it out.
 */
export interface SharedStorage {
  /** Writes of keys this predicate accepts move the change version, in their own transaction (set once, by the core). */
  trackChanges(isTracked: (key: string) => boolean): void;
  /** The change version as the database holds it now: different from an earlier answer once a tracked key was written. */
  changeVersion(): Promise<string>;
  /** Takes the leader lease for `node` for `ttlMs` when it is free or has lapsed: the new term, or undefined. */
  acquireLeadership(node: string, ttlMs: number): Promise<number | undefined>;
  /** Extends the lease `node` holds under `term`; false once someone else took it. */
  renewLeadership(node: string, term: number, ttlMs: number): Promise<boolean>;
  /** Lets the lease lapse now (a clean shutdown), so another node need not wait out its TTL. */
  releaseLeadership(node: string, term: number): Promise<void>;
  /** Wakes every node's `onSignal` listeners (this node's too) with `payload`; best effort, never a secret. */
  signal(payload: string): Promise<void>;
  /** Hears every node's signals until the returned function is called. */
  onSignal(listener: (payload: string) => void): () => void;
  /** Hears, best effort, that a transaction appending to the event log committed on any node (a reader's wake-up). */
  onEventsCommitted(listener: () => void): () => void;
}

/**
 * A storage call refused because the database cannot be reached or did not answer in time. A write that throws it
 * either landed entirely or not at all; requests answer 503 (it is a StrongroomError, so every error path renders
 * it as one) and may be retried.
 */
export class StorageUnavailableError extends StrongroomError {
  constructor(reason: string) {
    super(503, `storage is unavailable: ${reason}`);
  }
}

/** Why the store refuses requests right now, if it does: for good (`failure`) or until it is reachable again. */
export function storageRefusal(storage: Storage): Error | undefined {
  return storage.failure ?? storage.unavailable;
}

/** Folds keys under `prefix` into direct children, preserving order and dropping repeats. */
export function directChildren(prefix: string, keys: Iterable<string>): string[] {
  const out: string[] = [];
  let last = '';
  for (const key of keys) {
    const rest = key.slice(prefix.length);
    const slash = rest.indexOf('/');
    const child = slash === -1 ? rest : rest.slice(0, slash + 1);
    if (child !== last) out.push(child);
    last = child;
  }
  return out;
}
