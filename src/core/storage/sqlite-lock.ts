import { DatabaseSync } from 'node:sqlite';
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { PRIVATE_FILE_MODE, privateFiles } from './file-modes.ts';

/**
 * One SQLite store, one server. The store's process holds an exclusive transaction open on a lock database beside it
 * (`<store>-lock`) for as long as it runs: SQLite takes an OS file lock for it, which the kernel drops when the process
 * ends however it ends (kill -9 included), so a lock can never outlive its holder. The holder's pid goes into
 * `<store>-lock.pid` only to name it in the refusal; a pid file left by a killed process is simply overwritten.
 */
export class StoreInUseError extends Error {}

export interface StoreLock {
  release(): void;
}

export function lockStore(path: string): StoreLock {
  const lockPath = `${path}-lock`;
  const pidPath = `${lockPath}.pid`;
  closeSync(openSync(lockPath, 'a', PRIVATE_FILE_MODE));
  const db = new DatabaseSync(lockPath);
  try {
    // No waiting: a store in use is refused at once, not after a timeout. Nothing is ever written, so the lock
    // database needs no journal file beside it.
    db.exec('PRAGMA busy_timeout=0; PRAGMA journal_mode=MEMORY; BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if ((err as { errcode?: number }).errcode !== 5 /* SQLITE_BUSY */) throw err;
    throw new StoreInUseError(`the store ${path} is in use by another Strongroom process${holder(pidPath)}; one SQLite store serves one server (stop that one first, or use PostgreSQL storage for several nodes)`);
  }
  writeFileSync(pidPath, `${process.pid}\n`, { mode: PRIVATE_FILE_MODE });
  // Owner-only like the store's other files, also when an earlier run left them looser.
  privateFiles(lockPath, pidPath);
  return {
    release() {
      if (!db.isOpen) return;
      db.close();
    },
  };
}

function holder(pidPath: string): string {
  try {
    const pid = readFileSync(pidPath, 'utf8').trim();
    return /^\d+$/.test(pid) ? ` (pid ${pid})` : '';
  } catch {
    return '';
  }
}
