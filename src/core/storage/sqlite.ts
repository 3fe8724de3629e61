import { DatabaseSync, type StatementSync } from 'node:sqlite';
import { closeSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import { setBounded } from '../bounded-map.ts';
import { PRIVATE_FILE_MODE, privateDir, privateFiles } from './file-modes.ts';
import { runWriter, type WireSlice, type WriterReply, type WriterRequest } from './sqlite-writer.ts';
import { directChildren, isKeyOp, type EventLog, type KeyOp, type LogRecord, type Storage, type StorageCondition, type StorageOp } from './types.ts';

/** Keys a listing reads per statement. */
const LIST_BATCH = 1000;

interface Pending {
  ops: StorageOp[];
  conditions: StorageCondition[];
  /** A trim of the event log (docs/events.md) rather than a write: it goes through the writer like one. */
  trim?: { before: number; keep: number };
  resolve: (applied: boolean) => void;
  reject: (err: unknown) => void;
}

/**
 * The embedded default. Every commit fsyncs (synchronous=FULL), so an acknowledged write survives a crash or
 * power loss. Writes are grouped: everything queued while a commit runs goes into the next transaction (one
 * fsync for many writes), and commits run on a writer thread (sqlite-writer.ts) so the fsync never blocks
 * request handling. Reads run here on their own connection (WAL mode lets them proceed during a commit) and
 * see queued writes through an overlay, so a caller always reads what it just wrote.
 */
export class SqliteStorage implements Storage {
  readonly #db: DatabaseSync;
  readonly #getStmt: StatementSync;
  readonly #rangeStmt: StatementSync;
  readonly #skipStmt: StatementSync;
  readonly #logStmt: StatementSync;
  readonly #logStatsStmt: StatementSync;
  readonly #writer: Worker;
  /** Batches posted to the writer and not yet answered, oldest first. */
  #flights: Array<{ id: number; batch: Pending[] }> = [];
  /**
   * Two batches in flight: while the writer commits one, the next already waits in its queue, so it starts the
   * next commit the moment an fsync ends instead of idling until this thread reads the reply (measured: the
   * writer idled ~4.5 ms per 3.5 ms commit under login load). More would only split the same writes into more,
   * smaller commits; the writer joins whatever has queued up into one transaction anyway.
   */
  static readonly MAX_IN_FLIGHT = 2;
  #nextId = 0;
  #drained: Array<() => void> = [];
  #failure: Error | undefined;
  #failureListeners: Array<(err: Error) => void> = [];
  #queue: Pending[] = [];
  /**
   * Committed values by key (null = known absent). This process is the store's only writer, so the cache is
   * exact; it saves a SQLite read on the hot paths (token and policy lookups on every request).
   */
  readonly #cache = new Map<string, Buffer | null>();
  static readonly CACHE_LIMIT = 50_000;
  /**
   * The values of the latest writes to keys not in `#cache` (null = deleted), exact for the same reason: a record read
   * back soon after it was written (a lease revoked by the CI job that asked for it) costs no SQLite read, and the
   * barrier finds the plaintext it sealed instead of decrypting. Few and small (a larger value is read from SQLite), so
   * they die young and hold at most a few MiB (with the plaintexts the barrier keeps beside them).
   */
  readonly #written = new Map<string, Buffer | null>();
  static readonly WRITTEN_LIMIT = 256;
  static readonly WRITTEN_MAX_BYTES = 16 * 1024;
  #overlay = new Map<string, Buffer | null>();
  /**
   * Small folders' listings, dropped when a commit writes a key under them (exact for the same reason as the cache).
   * A waiting check-out looks at its set's queue several times a cycle; scanning it each time cost ~100 us.
   */
  readonly #listings = new Map<string, string[]>();
  static readonly LISTING_LIMIT = 1024;
  static readonly LISTING_MAX_CHILDREN = 256;
  #scheduled = false;
  readonly #lastStmt: StatementSync;

  constructor(path: string) {
    privateDir(dirname(path));
    // SQLite gives the -wal and -shm files it creates the main file's mode, so the main file is made owner-only
    // before SQLite opens it; files an earlier run left (made under another umask or by an older version) are
    // tightened on every start.
    closeSync(openSync(path, 'a', PRIVATE_FILE_MODE));
    privateFiles(path, `${path}-wal`, `${path}-shm`);
    this.#db = new DatabaseSync(path);
    this.#db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;');
    // A rowid table: values are barrier ciphertexts of hundreds of bytes, and a WITHOUT ROWID table stores them
    // inside the key's B-tree, so every random-key insert dirtied (and fsynced) a full leaf plus overflow pages.
    // Measured ~76 vs ~28 us per 800-byte row at 64 rows per commit.
    this.#db.exec('CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)');
    toRowidTable(this.#db);
    // The event log: AUTOINCREMENT never reuses a sequence, even after every record was trimmed, and the single writer
    // thread assigns them in commit order.
    this.#db.exec('CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, value BLOB NOT NULL)');
    countEvents(this.#db);
    this.#logStmt = this.#db.prepare('SELECT seq, at, value FROM events WHERE seq > ? ORDER BY seq LIMIT ?');
    this.#logStatsStmt = this.#db.prepare("SELECT (SELECT n FROM events_count) AS count, (SELECT seq FROM sqlite_sequence WHERE name = 'events') AS last");
    this.#getStmt = this.#db.prepare('SELECT value FROM kv WHERE key = ?');
    this.#lastStmt = this.#db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'events'");
    this.#rangeStmt = this.#db.prepare(`SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key LIMIT ${LIST_BATCH}`);
    // The first key of each child from ?1 on, below ?2 (?3: the prefix's length in characters), as `list` steps.
    this.#skipStmt = this.#db.prepare(`WITH RECURSIVE skip(key) AS (
        SELECT (SELECT key FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key LIMIT 1)
        UNION ALL
        SELECT (SELECT kv.key FROM kv WHERE kv.key < ?2 AND kv.key >= CASE instr(substr(skip.key, ?3 + 1), '/') WHEN 0 THEN skip.key || char(0)
          ELSE substr(skip.key, 1, ?3 + instr(substr(skip.key, ?3 + 1), '/') - 1) || '0' END ORDER BY kv.key LIMIT 1)
        FROM skip WHERE skip.key IS NOT NULL LIMIT ${LIST_BATCH})
      SELECT key FROM skip WHERE key IS NOT NULL`);
    this.#writer = new Worker(`(${runWriter})(require('node:sqlite'), require('node:worker_threads'))`, { eval: true, workerData: { path } });
    // Referenced only while a commit is outstanding: an idle store never keeps the process alive.
    this.#writer.unref();
    this.#writer.on('message', (reply: WriterReply) => this.#committed(reply));
    this.#writer.on('error', (err) => this.#fail(err));
    this.#writer.on('exit', (code) => this.#fail(new Error(`the SQLite writer thread exited (${code})`)));
  }

  /** Not an async function: every request reads here, mostly from memory, and the frame cost more than the read. */
  get(key: string): Promise<Buffer | undefined> {
    const pending = this.#overlay.get(key);
    if (pending !== undefined) return Promise.resolve(pending ?? undefined);
    try {
      return Promise.resolve(this.#readCommitted(key));
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  put(key: string, value: Buffer): Promise<void> {
    // Not copied: the barrier hands over a fresh ciphertext, and keeping that object lets its remembered
    // plaintext be found when the key is read back.
    return this.#enqueue([{ type: 'put', key, value }], []).then(() => undefined);
  }

  delete(key: string): Promise<void> {
    return this.#enqueue([{ type: 'delete', key }], []).then(() => undefined);
  }

  transaction(ops: StorageOp[], conditions: StorageCondition[] = []): Promise<boolean> {
    // A guarded write joins the group commit too: its conditions are checked in queue order inside the
    // batch, so it is decided exactly as if alone, without one fsync (and a blocked event loop) per CAS.
    return this.#enqueue(ops, conditions);
  }

  async list(prefix: string): Promise<string[]> {
    // Committed keys, like get(); queued writes are seen through the overlay, so only a listing whose folder has some
    // waits for them to commit. Waiting for every queued write (as every listing once did) tied each listing to the
    // whole server's commits: under load a check-in waited on unrelated commits before it could pick the next waiter.
    if (this.#overlayHolds(prefix)) await this.#drain();
    const listed = this.#listings.get(prefix);
    if (listed) return listed.slice();
    const end = prefix + '\uffff';
    const children: string[] = [];
    let from = prefix;
    let skip = false;
    // Reads a batch at a time, each starting past the last child found (past a folder: at its name with '0' for the
    // '/', the first string after every key in it), so a folder with millions of entries costs one batch and many
    // small folders are read in bulk. Folders of many entries each (the lease time index at 1M leases: ~20 a minute)
    // would still cost a row per entry: once a batch finds 8 rows or more a child, the rest is read one row per child,
    // each a seek past the child before (a skip scan; a seek costs about what reading 5 rows does). Measured on the
    // time index of 1M leases: 2.4 s -> 0.6 s.
    for (;;) {
      const rows = (skip ? this.#skipStmt.all(from, end, [...prefix].length) : this.#rangeStmt.all(from, end)) as Array<{ key: string }>;
      const found = directChildren(prefix, rows.map((r) => r.key));
      children.push(...found);
      if (rows.length < LIST_BATCH) break;
      const last = found.at(-1)!;
      skip ||= rows.length >= 8 * found.length;
      from = prefix + (last.endsWith('/') ? `${last.slice(0, -1)}0` : `${last}\u0000`);
    }
    if ((prefix === '' || prefix.endsWith('/')) && children.length <= SqliteStorage.LISTING_MAX_CHILDREN) {
      setBounded(this.#listings, SqliteStorage.LISTING_LIMIT, prefix, children.slice());
    }
    return children;
  }

  readonly log: EventLog = {
    // Committed records only, as get() reads: a sequence is assigned when its commit lands, and the events of a
    // caller's own writes are committed before its write resolves.
    read: async (after, limit) => {
      const rows = this.#logStmt.all(after, limit) as Array<{ seq: number; at: number; value: Uint8Array }>;
      return rows.map((r): LogRecord => ({ seq: Number(r.seq), at: Number(r.at), value: Buffer.from(r.value) }));
    },
    trim: async (before, keep) => {
      const { count } = await this.log.stats();
      await new Promise<boolean>((resolve, reject) => this.#push({ ops: [], conditions: [], trim: { before, keep }, resolve, reject }));
      return count - (await this.log.stats()).count;
    },
    // Committed records only, one snapshot: the triggers keep the count with each commit, so no wait for writes in
    // flight (under steady writes that wait could last as long as they do, and the feed asks every 10 s).
    stats: async () => {
      const { count, last } = this.#logStatsStmt.get() as { count: number; last: number | null };
      return { count: Number(count), last: Number(last ?? 0) };
    },
    // Committed records only, as get() reads: no wait for writes in flight.
    head: async () => Number((this.#lastStmt.get() as { seq: number } | undefined)?.seq ?? 0),
  };

  get failure(): Error | undefined {
    return this.#failure;
  }

  onFailure(listener: (err: Error) => void): void {
    if (this.#failure) listener(this.#failure);
    else this.#failureListeners.push(listener);
  }

  async close(): Promise<void> {
    await this.#drain();
    this.#writer.removeAllListeners('exit');
    await this.#writer.terminate();
    this.#db.close();
  }

  #overlayHolds(prefix: string): boolean {
    for (const key of this.#overlay.keys()) if (key.startsWith(prefix)) return true;
    return false;
  }

  /** Resolves once every write queued so far is committed (or failed). */
  #drain(): Promise<void> {
    if (this.#flights.length === 0 && this.#queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  #readCommitted(key: string): Buffer | undefined {
    const cached = this.#cache.get(key);
    if (cached !== undefined) return cached ?? undefined;
    const written = this.#written.get(key);
    if (written !== undefined) return written ?? undefined;
    const row = this.#getStmt.get(key) as { value: Uint8Array } | undefined;
    const value = row ? Buffer.from(row.value) : undefined;
    this.#remember(key, value ?? null);
    return value;
  }

  #remember(key: string, value: Buffer | null): void {
    this.#written.delete(key);
    setBounded(this.#cache, SqliteStorage.CACHE_LIMIT, key, value);
  }

  #enqueue(ops: StorageOp[], conditions: StorageCondition[]): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.#push({ ops, conditions, resolve, reject });
      if (conditions.length === 0) for (const op of ops) if (isKeyOp(op)) this.#overlay.set(op.key, op.type === 'put' ? op.value : null);
    });
  }

  #push(pending: Pending): void {
    if (this.#failure) return pending.reject(this.#failure);
    this.#queue.push(pending);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => this.#flush());
    }
  }

  #flush(): void {
    this.#scheduled = false;
    if (this.#flights.length >= SqliteStorage.MAX_IN_FLIGHT || this.#queue.length === 0) return;
    const batch = this.#queue;
    this.#queue = [];
    const id = ++this.#nextId;
    this.#flights.push({ id, batch });
    if (this.#flights.length === 1) this.#writer.ref();
    this.#writer.postMessage(...packBatch(id, batch));
  }

  /** The writer answers the batches it committed together in one reply, in the order they were posted. */
  #committed(reply: WriterReply): void {
    for (const [i, id] of reply.ids.entries()) {
      const flight = this.#flights[0];
      if (!flight || flight.id !== id) continue;
      this.#flights.shift();
      if ('error' in reply) {
        // Nothing of the batch landed: forget what it would have written.
        this.#cache.clear();
        this.#listings.clear();
        this.#written.clear();
        for (const p of flight.batch) for (const op of p.ops) if (isKeyOp(op)) this.#settleOverlay(op);
        for (const p of flight.batch) p.reject(new Error(`storage commit failed: ${reply.error}`));
        continue;
      }
      const outcomes = reply.outcomes[i]!;
      flight.batch.forEach((p, j) => {
        for (const op of p.ops) {
          if (!isKeyOp(op)) continue;
          // Only keys already cached are refreshed: caching every written value (4 per login) kept churning
          // thousands of Buffers through the old generation, and what is read back comes in on its first read.
          if (outcomes[j]) {
            if (this.#listings.size > 0) this.#unlist(op.key);
            const value = op.type === 'put' ? op.value : null;
            // A key is in at most one of the two, so neither ever holds a value older than the other's.
            if (this.#cache.has(op.key)) this.#remember(op.key, value);
            else if (!value || value.length <= SqliteStorage.WRITTEN_MAX_BYTES) setBounded(this.#written, SqliteStorage.WRITTEN_LIMIT, op.key, value);
            else this.#written.delete(op.key);
          }
          this.#settleOverlay(op);
        }
      });
      flight.batch.forEach((p, j) => p.resolve(outcomes[j]!));
    }
    if (this.#flights.length === 0) this.#writer.unref();
    if (this.#queue.length > 0) this.#flush();
    else if (this.#flights.length === 0) for (const resolve of this.#drained.splice(0)) resolve();
  }

  /** Drops the listings a committed write of `key` may have changed: those of each folder above it. */
  #unlist(key: string): void {
    this.#listings.delete('');
    for (let slash = key.indexOf('/'); slash !== -1; slash = key.indexOf('/', slash + 1)) this.#listings.delete(key.slice(0, slash + 1));
  }

  /** Drops an overlay entry once its write is settled, unless a later queued write replaced it. */
  #settleOverlay(op: KeyOp): void {
    const current = this.#overlay.get(op.key);
    if (current === undefined) return;
    if (op.type === 'put' ? current === op.value : current === null) this.#overlay.delete(op.key);
  }

  #fail(err: Error): void {
    if (this.#failure) return;
    this.#failure = err;
    const pending = [...this.#flights.flatMap((f) => f.batch), ...this.#queue];
    this.#flights = [];
    this.#queue = [];
    this.#overlay.clear();
    this.#cache.clear();
    this.#written.clear();
    for (const p of pending) p.reject(err);
    for (const resolve of this.#drained.splice(0)) resolve();
    for (const listener of this.#failureListeners.splice(0)) listener(err);
  }
}

/**
 * Stores created with the earlier WITHOUT ROWID table get the rowid layout at their first open, before the writer
 * thread starts: one transaction copies every row, so an interrupted copy leaves the old table as it was.
 */
function toRowidTable(db: DatabaseSync): void {
  const table = db.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'kv'").get() as { sql: string };
  if (!/WITHOUT\s+ROWID/i.test(table.sql)) return;
  migrateOnce(db, `CREATE TABLE kv_rowid (key TEXT PRIMARY KEY, value BLOB NOT NULL);
    INSERT INTO kv_rowid (key, value) SELECT key, value FROM kv ORDER BY key;
    DROP TABLE kv;
    ALTER TABLE kv_rowid RENAME TO kv;`);
}

/** Runs a schema change in one transaction: an interrupted one leaves the store as it was. */
function migrateOnce(db: DatabaseSync, sql: string): void {
  db.exec('BEGIN IMMEDIATE');
  try {
    db.exec(sql);
    db.exec('COMMIT');
  } catch (err) {
    db.exec('ROLLBACK');
    throw err;
  }
}

/**
 * The event log's size, kept by triggers in a one-row table: `count(*)` reads every record (~1 s at 1M events), and
 * the event feed asks at start and on every poll (docs/events.md). An older store's log is counted once, here.
 */
function countEvents(db: DatabaseSync): void {
  if (db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events_count'").get()) return;
  migrateOnce(db, `CREATE TABLE events_count (n INTEGER NOT NULL);
    INSERT INTO events_count (n) SELECT count(*) FROM events;
    CREATE TRIGGER events_counted AFTER INSERT ON events BEGIN UPDATE events_count SET n = n + 1; END;
    CREATE TRIGGER events_uncounted AFTER DELETE ON events BEGIN UPDATE events_count SET n = n - 1; END;`);
}

/** The writer's request for a batch, with every value copied once into a single buffer that is transferred. */
function packBatch(id: number, batch: Pending[]): [WriterRequest, ArrayBuffer[]] {
  let size = 0;
  for (const p of batch) {
    for (const op of p.ops) if (op.type !== 'delete') size += op.value.length;
    for (const c of p.conditions) if (c.expected) size += c.expected.length;
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  const slice = (key: string, value: Buffer | undefined): WireSlice => {
    if (!value) return { key, at: 0, len: -1 };
    bytes.set(value, at);
    at += value.length;
    return { key, at: at - value.length, len: value.length };
  };
  const wire = batch.map((p) => ({
    ops: p.ops.filter(isKeyOp).map((op) => slice(op.key, op.type === 'put' ? op.value : undefined)),
    conditions: p.conditions.map((c) => slice(c.key, c.expected)),
    appends: p.ops.flatMap((op) => (op.type === 'append' ? [slice('', op.value)] : [])),
    trim: p.trim,
  }));
  return [{ id, bytes: bytes.buffer, batch: wire }, [bytes.buffer]];
}
