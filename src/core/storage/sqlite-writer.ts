/**
 * The SQLite writer thread. Every commit fsyncs (synchronous=FULL) and node:sqlite is synchronous, so
 * commits run here instead of blocking the request thread. Batches arrive one at a time, in order; each
 * guarded write's conditions are checked against the state left by the writes before it.
 */
import { DatabaseSync } from 'node:sqlite';
import { parentPort, workerData } from 'node:worker_threads';

interface WireOp { type: 'put' | 'delete'; key: string; value?: Uint8Array }
interface WireCondition { key: string; expected: Uint8Array | undefined }
export interface WriterRequest { id: number; batch: Array<{ ops: WireOp[]; conditions: WireCondition[] }> }
export type WriterReply = { id: number; outcomes: boolean[] } | { id: number; error: string };

const db = new DatabaseSync((workerData as { path: string }).path);
db.exec('PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;');
const getStmt = db.prepare('SELECT value FROM kv WHERE key = ?');
const putStmt = db.prepare('INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value');
const delStmt = db.prepare('DELETE FROM kv WHERE key = ?');

function holds(c: WireCondition): boolean {
  const row = getStmt.get(c.key) as { value: Uint8Array } | undefined;
  if (!row || !c.expected) return !row && !c.expected;
  return Buffer.from(row.value).equals(Buffer.from(c.expected.buffer, c.expected.byteOffset, c.expected.byteLength));
}

parentPort!.on('message', ({ id, batch }: WriterRequest) => {
  try {
    db.exec('BEGIN IMMEDIATE');
    const outcomes = batch.map(({ ops, conditions }) => {
      if (!conditions.every(holds)) return false;
      for (const op of ops) {
        if (op.type === 'put') putStmt.run(op.key, op.value!);
        else delStmt.run(op.key);
      }
      return true;
    });
    db.exec('COMMIT');
    parentPort!.postMessage({ id, outcomes } satisfies WriterReply);
  } catch (err) {
    try { db.exec('ROLLBACK'); } catch { /* a failed BEGIN left nothing to roll back */ }
    parentPort!.postMessage({ id, error: (err as Error).message } satisfies WriterReply);
  }
});
