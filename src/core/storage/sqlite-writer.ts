/**
 * The SQLite writer thread. Every commit fsyncs (synchronous=FULL) and node:sqlite is synchronous, so
 * commits run here instead of blocking the request thread. Batches arrive in order and those waiting when a
 * commit starts are committed together; each guarded write's conditions are checked against the state left by
 * the writes before it.
 */
import type * as sqlite from 'node:sqlite';
import type * as threads from 'node:worker_threads';

/** A value is `bytes[at, at + len)`; `len` -1 means absent (a delete, or a guard that expects no row). */
export interface WireSlice { key: string; at: number; len: number }
/**
 * Values travel packed into one transferred ArrayBuffer: posting Buffers one by one would structured-clone
 * each one's whole backing store, which for Node's pooled small Buffers is the 8 KiB pool slab.
 */
export interface WriterRequest {
  id: number;
  bytes: ArrayBuffer;
  batch: Array<{ ops: WireSlice[]; conditions: WireSlice[]; appends: WireSlice[]; trim?: { before: number; keep: number } }>;
}
/** One reply for the batches committed together: `outcomes[i]` belongs to `ids[i]`; an error fails them all. */
export type WriterReply = { ids: number[]; outcomes: boolean[][] } | { ids: number[]; error: string };

/**
 * The thread's whole program. It runs as the source text of this function (SqliteStorage starts it with `eval`), so it
 * must use nothing but its parameters: a worker that loads a TypeScript file first starts Node's type stripper in its
 * own environment, which doubled the thread's start (~90 vs ~40 ms of CPU) and delayed a start's first commit.
 */
export function runWriter({ DatabaseSync }: typeof sqlite, { parentPort, receiveMessageOnPort, workerData }: typeof threads): void {
  const db = new DatabaseSync((workerData as { path: string }).path);
  db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;');
  const getStmt = db.prepare('SELECT value FROM kv WHERE key = ?');
  const putStmt = db.prepare('INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value');
  const delStmt = db.prepare('DELETE FROM kv WHERE key = ?');
  const appendStmt = db.prepare('INSERT INTO events (at, value) VALUES (?, ?)');
  // Records older than `before`: those before the first one that is not, found from the oldest on, so a trim reads
  // what it removes and one record more instead of the whole log (`at` is the commit's clock, rising with `seq`;
  // should the clock step back, a record is only trimmed later than its age says, never earlier).
  const trimOldStmt = db.prepare('DELETE FROM events WHERE seq < coalesce((SELECT seq FROM events WHERE at >= ?1 ORDER BY seq LIMIT 1), (SELECT max(seq) FROM events) + 1)');
  // The newest `keep` stay: the oldest beyond them go, counted from the oldest end (events_count, sqlite.ts).
  const trimCountStmt = db.prepare('DELETE FROM events WHERE seq IN (SELECT seq FROM events ORDER BY seq LIMIT max(0, (SELECT n FROM events_count) - ?1))');

  /** Applies one posted batch inside the open transaction; a guarded write whose conditions fail writes nothing. */
  function apply({ bytes, batch }: WriterRequest): boolean[] {
    const holds = (c: WireSlice): boolean => {
      const row = getStmt.get(c.key) as { value: Uint8Array } | undefined;
      if (!row || c.len < 0) return !row && c.len < 0;
      return Buffer.from(row.value).equals(new Uint8Array(bytes, c.at, c.len));
    };
    const now = Date.now();
    return batch.map(({ ops, conditions, appends, trim }) => {
      if (trim) {
        trimOldStmt.run(trim.before);
        trimCountStmt.run(trim.keep);
        return true;
      }
      if (!conditions.every(holds)) return false;
      for (const op of ops) {
        if (op.len >= 0) putStmt.run(op.key, new Uint8Array(bytes, op.at, op.len));
        else delStmt.run(op.key);
      }
      for (const a of appends) appendStmt.run(now, new Uint8Array(bytes, a.at, a.len));
      return true;
    });
  }

  /**
   * Under load, commits start at least this far apart: what arrives in the meantime joins the next commit instead of
   * making one of its own. Every commit costs both threads a wake-up and a message, and the directory beside it
   * shares the same cores and disk. Measured on 2 cores against slapd: CPU per LDAP rotation -19% to -25%
   * (~450 -> ~340 us), rotations/s +1-9%; logins over HTTP unchanged at 2 ms (-12% at 8 ms, where 64 clients wait
   * on the longer commits).
   */
  const MIN_COMMIT_INTERVAL_MS = 2;
  /**
   * Under load means the last commit carried at least this many writes: a few clients writing one after another
   * (cloud credentials: four workers, several commits each) would only wait, with nothing joining them.
   */
  const LOADED_COMMIT_WRITES = 4;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  let lastStart = Number.NEGATIVE_INFINITY;
  let lastWrites = 0;

  const port = parentPort!;
  port.on('message', (first: WriterRequest) => {
    const wait = lastWrites >= LOADED_COMMIT_WRITES ? lastStart + MIN_COMMIT_INTERVAL_MS - performance.now() : 0;
    // Blocking is this thread's job: it does nothing else meanwhile, and the request thread keeps queueing.
    if (wait > 0) Atomics.wait(pause, 0, 0, wait);
    lastStart = performance.now();
    // Everything the request thread posted while the last commit ran (or while waiting) joins this one: one fsync for all of it.
    const requests = [first];
    for (let next = receiveMessageOnPort(port); next; next = receiveMessageOnPort(port)) requests.push(next.message as WriterRequest);
    const ids = requests.map((r) => r.id);
    lastWrites = requests.reduce((n, r) => n + r.batch.length, 0);
    try {
      db.exec('BEGIN IMMEDIATE');
      const outcomes = requests.map(apply);
      db.exec('COMMIT');
      port.postMessage({ ids, outcomes } satisfies WriterReply);
    } catch (err) {
      try { db.exec('ROLLBACK'); } catch { /* a failed BEGIN left nothing to roll back */ }
      port.postMessage({ ids, error: (err as Error).message } satisfies WriterReply);
    }
  });
}
