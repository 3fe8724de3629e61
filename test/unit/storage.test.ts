import { afterEach, describe, expect, it } from 'vitest';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { SqliteStorage } from '../../src/core/storage/sqlite.ts';

const dirs: string[] = [];
afterEach(() => {
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
});
const sqlitePath = () => {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-storage-'));
  dirs.push(dir);
  return join(dir, 'db.sqlite');
};
const b = (s: string) => Buffer.from(s);

// The contract every backend keeps is in test/integration/storage-contract.test.ts; these are SQLite's own.
describe('SqliteStorage durability and group commit', () => {
  it('"a listing sees a write queued before it, committed or not, and is not held back by queued writes of other folders"', async () => {
    const s = new SqliteStorage(sqlitePath());
    await s.put('w/1', b('1'));
    expect(await s.list('w/')).toEqual(['1']);
    const pending = s.put('w/2', b('2'));
    expect(await s.list('w/')).toEqual(['1', '2']);
    await pending;
    const elsewhere = s.put('other/x', b('x'));
    let listedFirst = false;
    const listing = s.list('w/').then((names) => {
      listedFirst = true;
      return names;
    });
    await Promise.race([listing, elsewhere]);
    expect(listedFirst).toBe(true);
    expect(await listing).toEqual(['1', '2']);
    await elsewhere;
    await s.close();
  });

  it('"a store made with the earlier WITHOUT ROWID table is moved to the rowid layout with every row"', async () => {
    const path = sqlitePath();
    const old = new DatabaseSync(path);
    old.exec('CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID');
    const insert = old.prepare('INSERT INTO kv (key, value) VALUES (?, ?)');
    for (let i = 0; i < 300; i++) insert.run(`k/${i}`, b(`v${i}`));
    old.close();

    const s = new SqliteStorage(path);
    expect((await s.list('k/')).length).toBe(300);
    expect((await s.get('k/123'))?.toString()).toBe('v123');
    await s.put('k/300', b('v300'));
    await s.close();

    const check = new DatabaseSync(path);
    const { sql } = check.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'kv'").get() as { sql: string };
    expect(sql).not.toMatch(/WITHOUT ROWID/i);
    expect((check.prepare('SELECT count(*) AS n FROM kv').get() as { n: number }).n).toBe(301);
    check.close();
  });

  it('"a store whose event log predates its kept count is counted when opened, and counted on from there"', async () => {
    const path = sqlitePath();
    const old = new DatabaseSync(path);
    old.exec('CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, value BLOB NOT NULL)');
    const insert = old.prepare('INSERT INTO events (at, value) VALUES (?, ?)');
    for (let i = 0; i < 7; i++) insert.run(Date.now(), b(`e${i}`));
    old.close();

    const s = new SqliteStorage(path);
    expect(await s.log.stats()).toEqual({ count: 7, last: 7 });
    await s.transaction([{ type: 'append', value: b('e7') }]);
    expect(await s.log.trim(0, 5)).toBe(3);
    expect(await s.log.stats()).toEqual({ count: 5, last: 8 });
    await s.close();
  });

  it('"an acknowledged write is there after reopening the file"', async () => {
    const path = sqlitePath();
    const s = new SqliteStorage(path);
    await Promise.all(Array.from({ length: 500 }, (_, i) => s.put(`k/${i}`, b(String(i)))));
    await s.close();
    const again = new SqliteStorage(path);
    expect((await again.list('k/')).length).toBe(500);
    expect((await again.get('k/499'))?.toString()).toBe('499');
    await again.close();
  });

  it('"a read straight after an unawaited write sees the write"', async () => {
    const s = new SqliteStorage(sqlitePath());
    const pending = s.put('fresh', b('v'));
    expect((await s.get('fresh'))?.toString()).toBe('v');
    await pending;
    await s.close();
  });

  it('"batches posted while a commit runs are committed in order: each guard sees every write queued before it"', async () => {
    const path = sqlitePath();
    const s = new SqliteStorage(path);
    // Each step is queued on a later turn than the last, so the 40 steps span several batches in flight at once;
    // every step's guard names the value the step before it wrote.
    const steps: Array<Promise<boolean | void>> = [];
    for (let i = 0; i < 40; i++) {
      steps.push(s.transaction([{ type: 'put', key: 'counter', value: b(String(i + 1)) }], [{ key: 'counter', expected: i === 0 ? undefined : b(String(i)) }]));
      steps.push(s.put(`log/${i}`, b(String(i))));
      await new Promise((r) => setImmediate(r));
    }
    expect(await Promise.all(steps)).toEqual(steps.map((_, i) => (i % 2 === 0 ? true : undefined)));
    await s.close();
    const again = new SqliteStorage(path);
    expect((await again.get('counter'))?.toString()).toBe('40');
    expect(await again.list('log/')).toHaveLength(40);
    await again.close();
  });
});

describe('SqliteStorage files at rest', () => {
  const mode = (path: string) => statSync(path).mode & 0o7777;

  it.each([['022', 0o022], ['000', 0o000]])('"a fresh store makes its directory 0700 and the database, -wal and -shm 0600" (umask %s)', async (_name, umask) => {
    const path = join(sqlitePath(), '..', 'made', 'here', 'db.sqlite');
    const previous = process.umask(umask);
    try {
      const s = new SqliteStorage(path);
      await s.put('k', b('v'));
      expect([mode(join(path, '..')), mode(path), mode(`${path}-wal`), mode(`${path}-shm`)]).toEqual([0o700, 0o600, 0o600, 0o600]);
      await s.close();
    } finally {
      process.umask(previous);
    }
  });

  it('"files an earlier run left readable (database, -wal, -shm 0644, directory 0755) are tightened at the next open"', async () => {
    const path = sqlitePath();
    await new SqliteStorage(path).close();
    chmodSync(path, 0o644);
    // A connection that stays open keeps -wal and -shm on disk, as a crashed run leaves them; they take the main file's mode.
    const leftover = new DatabaseSync(path);
    leftover.exec('PRAGMA journal_mode=WAL; INSERT INTO kv (key, value) VALUES (\'x\', x\'00\')');
    chmodSync(join(path, '..'), 0o755);
    expect([mode(`${path}-wal`), mode(`${path}-shm`)]).toEqual([0o644, 0o644]);
    const s = new SqliteStorage(path);
    expect([mode(join(path, '..')), mode(path), mode(`${path}-wal`), mode(`${path}-shm`)]).toEqual([0o700, 0o600, 0o600, 0o600]);
    expect((await s.get('x'))?.length).toBe(1);
    await s.close();
    leftover.close();
  });

  it('"a shared sticky directory (like /tmp) keeps its mode; the files in it are 0600 all the same"', async () => {
    const path = sqlitePath();
    chmodSync(join(path, '..'), 0o1777);
    const s = new SqliteStorage(path);
    await s.put('k', b('v'));
    expect([mode(join(path, '..')), mode(path), mode(`${path}-wal`), mode(`${path}-shm`)]).toEqual([0o1777, 0o600, 0o600, 0o600]);
    await s.close();
  });
});
