// The Storage contract (src/core/storage/types.ts), run unchanged against every backend.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { PostgresStorage } from '../../src/core/storage/postgres.ts';
import { SqliteStorage } from '../../src/core/storage/sqlite.ts';
import type { Storage, StorageOp } from '../../src/core/storage/types.ts';
import { createDatabase, type TestDatabase } from '../support/postgres.ts';

const postgres = inject('postgres');
const stores: Storage[] = [];
const dirs: string[] = [];
const databases: TestDatabase[] = [];
afterEach(async () => {
  while (stores.length) await stores.pop()!.close();
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
  while (databases.length) await databases.pop()!.drop();
});

/** Each test gets an empty store of its own, closed (and its file or database removed) after it. */
const backends: Array<[string, () => Promise<Storage>]> = [
  ['memory', async () => new MemoryStorage()],
  ['sqlite', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'strongroom-contract-'));
    dirs.push(dir);
    return new SqliteStorage(join(dir, 'db.sqlite'));
  }],
  ['postgres', async () => {
    const db = await createDatabase(postgres);
    databases.push(db);
    return PostgresStorage.open(db.url);
  }],
];

const b = (s: string) => Buffer.from(s);
const text = (v: Buffer | undefined) => v?.toString();
const puts = (keys: string[]): StorageOp[] => keys.map((key) => ({ type: 'put', key, value: b(key) }));

describe.each(backends)('Storage contract (%s)', (_name, open) => {
  const make = async () => {
    const s = await open();
    stores.push(s);
    return s;
  };

  it('"get returns what put wrote, a later put replaces it; delete removes it; an absent key reads undefined"', async () => {
    const s = await make();
    expect(await s.get('a/b')).toBeUndefined();
    await s.put('a/b', b('1'));
    expect(text(await s.get('a/b'))).toBe('1');
    await s.put('a/b', b('2'));
    expect(text(await s.get('a/b'))).toBe('2');
    await s.delete('a/b');
    expect(await s.get('a/b')).toBeUndefined();
    await s.delete('never/written');
  });

  it('"values are opaque bytes: every byte value comes back unchanged"', async () => {
    const s = await make();
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    await s.put('bytes', all);
    expect((await s.get('bytes'))?.equals(all)).toBe(true);
  });

  it('"list returns direct children, folders with a trailing slash, sorted"', async () => {
    const s = await make();
    for (const k of ['p/x', 'p/d/1', 'p/d/2', 'p/a', 'p/e/f/g', 'q/z']) await s.put(k, b(k));
    expect(await s.list('p/')).toEqual(['a', 'd/', 'e/', 'x']);
    expect(await s.list('p/d/')).toEqual(['1', '2']);
    expect(await s.list('none/')).toEqual([]);
    expect(await s.list('')).toEqual(['p/', 'q/']);
  });

  it('"list keeps a key and a folder apart when their names sort next to each other, and takes names literally"', async () => {
    const s = await make();
    const names = ['a', 'a-x', 'a/1', 'a/2/3', 'a0', 'a.b', '100%', '1_0', "it's \"quoted\"", 'back\\slash', 'ünï', 'sp ace', '{br,ace}'];
    await s.transaction(puts(names.map((n) => `n/${n}`)));
    expect(await s.list('n/')).toEqual(['1_0', '100%', 'a', 'a-x', 'a.b', 'a/', 'a0', 'back\\slash', "it's \"quoted\"", 'sp ace', '{br,ace}', 'ünï'].sort());
    expect(await s.list('n/a/')).toEqual(['1', '2/']);
    expect(await s.list('n/1')).toEqual(['00%', '_0']);
  });

  it('"list returns each child once, in order, when folders hold many keys each (as the lease time index does)", after a prefix of multi-byte characters', async () => {
    const s = await make();
    // 300 folders of 20 keys, then folders whose names sort next to their keys' ('f-0007/' and 'f-0007.x'), then leaves.
    const folders = Array.from({ length: 300 }, (_, i) => Array.from({ length: 20 }, (_, j) => `tïmé/f-${String(i).padStart(4, '0')}/${j}`)).flat();
    const neighbours = ['tïmé/f-0007.x', 'tïmé/f-0007/ü/deep', 'tïmé/f-02990', 'tïmé/f-0299/ü'];
    const leaves = Array.from({ length: 1500 }, (_, i) => `tïmé/leaf-${String(i).padStart(4, '0')}`);
    const all = [...folders, ...neighbours, ...leaves];
    for (let i = 0; i < all.length; i += 500) await s.transaction(puts(all.slice(i, i + 500)));
    const expected = [...new Set(all.map((k) => { const rest = k.slice('tïmé/'.length); return rest.includes('/') ? rest.slice(0, rest.indexOf('/') + 1) : rest; }))].sort();
    expect(expected).toHaveLength(300 + 2 + 1500);
    expect(await s.list('tïmé/')).toEqual(expected);
    expect(await s.list('tïmé/f-0007/')).toEqual([...Array.from({ length: 20 }, (_, j) => String(j)), 'ü/'].sort());
  });

  it('"list reads a folder of thousands of keys whole: leaves, many small folders, and a folder holding thousands itself"', async () => {
    const s = await make();
    const leaves = Array.from({ length: 2500 }, (_, i) => `big/leaf-${String(i).padStart(4, '0')}`);
    const folders = Array.from({ length: 1200 }, (_, i) => `big/dir-${String(i).padStart(4, '0')}/${i % 3}/x`);
    const deep = Array.from({ length: 2500 }, (_, i) => `big/dir-0600/deep/${i}`);
    const all = [...leaves, ...folders, ...deep];
    for (let i = 0; i < all.length; i += 500) await s.transaction(puts(all.slice(i, i + 500)));
    const listed = await s.list('big/');
    expect(listed).toHaveLength(3700);
    expect(listed.slice(0, 2)).toEqual(['dir-0000/', 'dir-0001/']);
    expect(listed.slice(-1)).toEqual(['leaf-2499']);
    expect(await s.list('big/dir-0005/')).toEqual(['2/']);
    expect(await s.list('big/dir-0600/')).toEqual(['0/', 'deep/']);
    expect(await s.list('big/dir-0600/deep/')).toHaveLength(2500);
  });

  it('"list sees every committed change of its folder at once, when read again after each: puts, deletes, nested keys, guarded writes"', async () => {
    const s = await make();
    const steps: Array<[() => Promise<unknown>, string[]]> = [
      [() => s.put('l/a', b('a')), ['a']],
      [() => s.transaction(puts(['l/d/1'])), ['a', 'd/']],
      [() => s.transaction(puts(['l/b']), [{ key: 'l/a', expected: b('a') }]), ['a', 'b', 'd/']],
      [() => s.transaction(puts(['l/c']), [{ key: 'l/a', expected: b('not a') }]), ['a', 'b', 'd/']],
      [() => s.transaction([{ type: 'delete', key: 'l/d/1' }]), ['a', 'b']],
      [() => s.delete('l/a'), ['b']],
      [() => s.transaction([{ type: 'put', key: 'l/e/f/g', value: b('g') }, { type: 'delete', key: 'l/b' }]), ['e/']],
    ];
    for (const [change, expected] of steps) {
      await s.list('l/');
      await s.list('');
      await change();
      expect(await s.list('l/')).toEqual(expected);
      expect(await s.list('')).toEqual(expected.length > 0 ? ['l/'] : []);
    }
    expect(await s.list('l/e/f/')).toEqual(['g']);
    await s.delete('l/e/f/g');
    expect(await s.list('l/e/f/')).toEqual([]);
    expect(await s.list('l/')).toEqual([]);
  });

  it('"a listing handed out cannot be changed by its caller"', async () => {
    const s = await make();
    await s.put('w/1', b('1'));
    (await s.list('w/')).push('tampered');
    expect(await s.list('w/')).toEqual(['1']);
  });

  it('"a transaction applies all of its operations only when every condition holds"', async () => {
    const s = await make();
    await s.put('slot', b('free'));
    expect(await s.transaction([{ type: 'put', key: 'slot', value: b('taken') }, { type: 'put', key: 'owner', value: b('me') }], [{ key: 'slot', expected: b('free') }])).toBe(true);
    expect(await s.transaction([{ type: 'put', key: 'slot', value: b('stolen') }, { type: 'delete', key: 'owner' }], [{ key: 'slot', expected: b('free') }])).toBe(false);
    expect(text(await s.get('slot'))).toBe('taken');
    expect(text(await s.get('owner'))).toBe('me');
    expect(await s.transaction([{ type: 'put', key: 'new', value: b('1') }], [{ key: 'new', expected: undefined }])).toBe(true);
    expect(await s.transaction([{ type: 'put', key: 'new', value: b('2') }], [{ key: 'new', expected: undefined }])).toBe(false);
  });

  it('"a condition may guard a key the transaction does not write, present or absent"', async () => {
    const s = await make();
    const lease = [{ type: 'put' as const, key: 'lease/1', value: b('l') }];
    await s.put('revoking/t', b('yes'));
    expect(await s.transaction(lease, [{ key: 'revoking/t', expected: undefined }])).toBe(false);
    expect(await s.get('lease/1')).toBeUndefined();
    await s.delete('revoking/t');
    expect(await s.transaction(lease, [{ key: 'revoking/t', expected: undefined }, { key: 'token/t', expected: undefined }])).toBe(true);
    expect(text(await s.get('lease/1'))).toBe('l');
  });

  it('"operations on one key apply in order: the last one wins"', async () => {
    const s = await make();
    expect(await s.transaction([{ type: 'put', key: 'k1', value: b('a') }, { type: 'delete', key: 'k1' }])).toBe(true);
    expect(await s.transaction([{ type: 'delete', key: 'k2' }, { type: 'put', key: 'k2', value: b('b') }, { type: 'put', key: 'k2', value: b('c') }])).toBe(true);
    expect(await s.get('k1')).toBeUndefined();
    expect(text(await s.get('k2'))).toBe('c');
  });

  it('"a transaction of hundreds of keys lands whole, or not at all when a condition fails"', async () => {
    const s = await make();
    const keys = Array.from({ length: 300 }, (_, i) => `many/${i}`);
    expect(await s.transaction(puts(keys), [{ key: 'gate', expected: b('open') }])).toBe(false);
    expect(await s.list('many/')).toEqual([]);
    await s.put('gate', b('open'));
    expect(await s.transaction([...puts(keys), { type: 'delete', key: 'gate' }], [{ key: 'gate', expected: b('open') }])).toBe(true);
    expect(await s.list('many/')).toHaveLength(300);
    expect(await s.get('gate')).toBeUndefined();
  });

  it('"concurrent compare-and-set on one key: exactly one wins"', async () => {
    const s = await make();
    const results = await Promise.all(Array.from({ length: 32 }, (_, i) => s.transaction([{ type: 'put', key: 'lock', value: b(String(i)) }], [{ key: 'lock', expected: undefined }])));
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(text(await s.get('lock'))).toBe(String(results.indexOf(true)));
  });

  it('"concurrent read-modify-write with compare-and-set loses no update"', async () => {
    const s = await make();
    await s.put('counter', b('0'));
    const increment = async () => {
      for (let attempt = 0; attempt < 100; attempt++) {
        const current = await s.get('counter');
        if (await s.transaction([{ type: 'put', key: 'counter', value: b(String(Number(text(current)) + 1)) }], [{ key: 'counter', expected: current }])) return;
      }
      throw new Error('no attempt won');
    };
    await Promise.all(Array.from({ length: 20 }, increment));
    expect(text(await s.get('counter'))).toBe('20');
  });
  it('"a key read back after writes reads the latest committed value: overwritten, deleted, a refused guarded write, hundreds of other keys between"', async () => {
    const s = await make();
    await s.put('k', b('one'));
    expect(text(await s.get('k'))).toBe('one');
    await s.put('k', b('two'));
    expect(text(await s.get('k'))).toBe('two');
    expect(await s.transaction([{ type: 'put', key: 'k', value: b('refused') }], [{ key: 'k', expected: b('one') }])).toBe(false);
    expect(text(await s.get('k'))).toBe('two');
    await Promise.all(Array.from({ length: 600 }, (_, i) => s.put(`other/${i}`, b(String(i)))));
    expect(text(await s.get('k'))).toBe('two');
    expect(text(await s.get('other/0'))).toBe('0');
    await s.delete('k');
    expect(await s.get('k')).toBeUndefined();
    await Promise.all(Array.from({ length: 600 }, (_, i) => s.put(`more/${i}`, b(String(i)))));
    expect(await s.get('k')).toBeUndefined();
    await s.put('k', b('three'));
    await s.put('other/0', b('changed'));
    expect([text(await s.get('k')), text(await s.get('other/0'))]).toEqual(['three', 'changed']);
    // A large value replacing a small one just written, and a small one replacing it again.
    const large = Buffer.alloc(64 * 1024, 'x');
    for (const key of ['k', 'fresh']) {
      await s.put(key, b('small'));
      expect(text(await s.get(key))).toBe('small');
      await s.put(key, large);
      expect((await s.get(key))!.equals(large)).toBe(true);
      await s.put(key, b('small again'));
      expect(text(await s.get(key))).toBe('small again');
    }
  });

  const append = (value: string): StorageOp => ({ type: 'append', value: b(value) });
  const logged = async (s: Storage) => (await s.log.read(0, 10_000)).map((r) => [r.seq, text(r.value)]);

  it('"an append lands with its transaction, or not at all when a condition fails"', async () => {
    const s = await make();
    expect(await s.transaction([...puts(['k']), append('first')], [{ key: 'k', expected: undefined }])).toBe(true);
    expect(await s.transaction([...puts(['k']), append('lost')], [{ key: 'k', expected: undefined }])).toBe(false);
    expect(await s.transaction([append('second'), append('third')])).toBe(true);
    expect(await logged(s)).toEqual([[1, 'first'], [2, 'second'], [3, 'third']]);
    expect(await s.log.stats()).toEqual({ count: 3, last: 3 });
    expect((await s.log.read(1, 1)).map((r) => text(r.value))).toEqual(['second']);
  });

  it('"concurrent appending transactions get sequences 1..n, each once, in the order a reader sees them"', async () => {
    const s = await make();
    await Promise.all(Array.from({ length: 60 }, (_, i) => s.transaction([...puts([`c/${i}`]), append(`e${i}`)])));
    const seqs = (await s.log.read(0, 1000)).map((r) => r.seq);
    expect(seqs).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    expect(new Set((await s.log.read(0, 1000)).map((r) => text(r.value))).size).toBe(60);
  });

  it('"stats count every committed record, asked before, between and after appends, a refused guarded write and trims"', async () => {
    const s = await make();
    const count = async () => (await s.log.stats()).count;
    expect(await count()).toBe(0);
    await s.transaction([append('a'), append('b')]);
    expect(await count()).toBe(2);
    expect(await s.transaction([...puts(['g']), append('lost')], [{ key: 'g', expected: b('other') }])).toBe(false);
    // Asked while those are committing: whatever it answers then, the count once they landed includes each once.
    const landing = Promise.all(Array.from({ length: 10 }, (_, i) => s.transaction([append(`c${i}`)])));
    expect(await count()).toBeLessThanOrEqual(12);
    await landing;
    expect(await count()).toBe(12);
    expect(await s.log.trim(0, 5)).toBe(7);
    expect(await count()).toBe(5);
    await s.transaction([append('after')]);
    expect(await s.log.stats()).toEqual({ count: 6, last: 13 });
  });

  it('"trim drops records older than the cut-off and all but the newest `keep`; sequences are never reused"', async () => {
    const s = await make();
    for (let i = 0; i < 5; i++) await s.transaction([append(`e${i}`)]);
    expect(await s.log.trim(0, 3)).toBe(2);
    expect((await logged(s)).map(([seq]) => seq)).toEqual([3, 4, 5]);
    expect(await s.log.trim(Date.now() + 60_000, 100)).toBe(3);
    await s.transaction([append('after')]);
    expect(await logged(s)).toEqual([[6, 'after']]);
    expect(await s.log.stats()).toEqual({ count: 1, last: 6 });
  });
});
