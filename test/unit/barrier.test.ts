import { afterEach, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Barrier, open, seal, UnsealError, type BarrierOptions } from '../../src/core/barrier.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { SqliteStorage } from '../../src/core/storage/sqlite.ts';
import type { Storage, StorageCondition, StorageOp } from '../../src/core/storage/types.ts';

const key = () => randomBytes(32);

describe('Barrier', () => {
  it('"values are AES-256-GCM ciphertext at rest and read back as plaintext"', async () => {
    const raw = new MemoryStorage();
    const barrier = new Barrier(raw);
    await barrier.initialize(key());
    await barrier.put('secret/x', Buffer.from('hunter2'));
    expect((await raw.get('secret/x'))!.includes(Buffer.from('hunter2'))).toBe(false);
    expect((await barrier.get('secret/x'))!.toString()).toBe('hunter2');
  });

  it('"get hands out a copy of the plaintext, peek the bytes remembered for the ciphertext (to parse or compare, never to change)"', async () => {
    const barrier = new Barrier(new MemoryStorage());
    await barrier.initialize(key());
    const written = Buffer.from('hunter2');
    await barrier.put('secret/x', written);
    written.fill(0);
    const got = (await barrier.get('secret/x'))!;
    got.fill(0);
    expect((await barrier.get('secret/x'))!.toString()).toBe('hunter2');
    const peeked = (await barrier.peek('secret/x'))!;
    expect(peeked.toString()).toBe('hunter2');
    expect(await barrier.peek('secret/x')).toBe(peeked);
    expect(await barrier.get('secret/x')).not.toBe(peeked);
    expect(await barrier.peek('secret/none')).toBeUndefined();
  });

  it('"the storage path is bound as associated data: a ciphertext moved to another key does not open"', async () => {
    const raw = new MemoryStorage();
    const barrier = new Barrier(raw);
    await barrier.initialize(key());
    await barrier.put('a', Buffer.from('one'));
    await raw.put('b', (await raw.get('a'))!);
    await expect(barrier.get('b')).rejects.toThrow();
  });

  it('"a tampered ciphertext is rejected"', async () => {
    const raw = new MemoryStorage();
    const barrier = new Barrier(raw);
    await barrier.initialize(key());
    await barrier.put('a', Buffer.from('one'));
    const blob = (await raw.get('a'))!;
    blob[blob.length - 20] ^= 1;
    await raw.put('a', blob);
    await expect(barrier.get('a')).rejects.toThrow();
  });

  it('"a wrong unseal key is refused with UnsealError"', async () => {
    const raw = new MemoryStorage();
    await new Barrier(raw).initialize(key());
    await expect(new Barrier(raw).unseal(key())).rejects.toBeInstanceOf(UnsealError);
  });

  it('"rotation adds a term; values written under older terms still decrypt, also after unsealing again"', async () => {
    const raw = new MemoryStorage();
    const k = key();
    const barrier = new Barrier(raw);
    await barrier.initialize(k);
    await barrier.put('old', Buffer.from('before'));
    expect(await barrier.rotate()).toBe(2);
    await barrier.put('new', Buffer.from('after'));
    expect((await raw.get('new'))!.readUInt32BE(0)).toBe(2);
    const reopened = new Barrier(raw);
    await reopened.unseal(k);
    expect(reopened.term).toBe(2);
    expect((await reopened.get('old'))!.toString()).toBe('before');
    expect((await reopened.get('new'))!.toString()).toBe('after');
  });

  it('"compare-and-set conditions compare plaintext although ciphertexts differ per write"', async () => {
    const barrier = new Barrier(new MemoryStorage());
    await barrier.initialize(key());
    await barrier.put('slot', Buffer.from('free'));
    expect(await barrier.transaction([{ type: 'put', key: 'slot', value: Buffer.from('taken') }], [{ key: 'slot', expected: Buffer.from('free') }])).toBe(true);
    expect(await barrier.transaction([{ type: 'put', key: 'slot', value: Buffer.from('again') }], [{ key: 'slot', expected: Buffer.from('free') }])).toBe(false);
  });
});

/** Counts the keyring writes that reach the store below. */
class KeyringWrites extends MemoryStorage {
  count = 0;
  override async put(key: string, value: Buffer): Promise<void> {
    if (key === 'core/keyring') this.count++;
    return super.put(key, value);
  }
  override async transaction(ops: StorageOp[], conditions?: StorageCondition[]): Promise<boolean> {
    const applied = await super.transaction(ops, conditions);
    if (applied && ops.some((op) => op.type !== 'append' && op.key === 'core/keyring')) this.count++;
    return applied;
  }
}

const dirs: string[] = [];
afterEach(() => {
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
});

/**
 * A store a restarted process can open again: the same map (whose writes land at once, so a restart there is also
 * a crash at that instant), or the same SQLite file after the last process closed it.
 */
const kinds: Array<[string, () => { storage: Storage; restart(): Promise<Storage> }]> = [
  ['memory', () => {
    const storage = new MemoryStorage();
    return { storage, restart: async () => storage };
  }],
  ['sqlite', () => {
    const dir = mkdtempSync(join(tmpdir(), 'strongroom-barrier-'));
    dirs.push(dir);
    const path = join(dir, 'db.sqlite');
    let storage = new SqliteStorage(path);
    return {
      storage,
      async restart() {
        await storage.close();
        return (storage = new SqliteStorage(path));
      },
    };
  }],
];

/** A barrier over a fresh store of `kind`, and a restart: a new barrier over the same store, unsealed again. */
async function opened(kind: () => { storage: Storage; restart(): Promise<Storage> }, options: BarrierOptions) {
  const k = key();
  const store = kind();
  const barrier = new Barrier(store.storage, options);
  await barrier.initialize(k);
  return {
    barrier,
    async restart(o: BarrierOptions = options): Promise<Barrier> {
      const again = new Barrier(await store.restart(), o);
      await again.unseal(k);
      return again;
    },
  };
}

/** Waits out a rotation the last seal started: it writes the keyring, then switches terms. */
async function settle(barrier: Barrier, { rotateAfterSeals }: { rotateAfterSeals: number }): Promise<void> {
  if (barrier.encryptions < rotateAfterSeals) return;
  const term = barrier.term;
  await expect.poll(() => barrier.term, { interval: 1 }).toBe(term + 1);
}

describe.each(kinds)('automatic key rotation (%s)', (_name, kind) => {
  const small = { rotateAfterSeals: 100, reservationBlock: 10 } satisfies BarrierOptions;

  it('"a term seals at most rotateAfterSeals values: 250 writes at a threshold of 100 add two terms; every value still reads, also after a restart"', async () => {
    const { barrier, restart } = await opened(kind, small);
    const termOf: number[] = [];
    for (let i = 0; i < 250; i++) {
      termOf.push(barrier.term);
      await barrier.put(`v/${i}`, Buffer.from(`value ${i}`));
      await settle(barrier, small);
    }
    expect(barrier.term).toBe(3);
    expect(termOf.filter((t) => t === 1)).toHaveLength(100);
    expect(termOf.filter((t) => t === 2)).toHaveLength(100);
    for (let i = 0; i < 250; i++) expect((await barrier.get(`v/${i}`))?.toString()).toBe(`value ${i}`);
    const again = await restart();
    expect(again.term).toBe(3);
    for (let i = 0; i < 250; i++) expect((await again.get(`v/${i}`))?.toString()).toBe(`value ${i}`);
    await again.close();
  });

  it('"writes racing a rotation lose no term: 600 concurrent writes and two manual rotations at a threshold of 100, then a restart reads every value"', async () => {
    const { barrier, restart } = await opened(kind, small);
    const writes: Array<Promise<unknown>> = [];
    for (let i = 0; i < 600; i++) {
      writes.push(i % 3 === 0
        ? barrier.transaction([{ type: 'put', key: `c/${i}`, value: Buffer.from(`cas ${i}`) }], [{ key: `c/${i}`, expected: undefined }])
        : barrier.put(`c/${i}`, Buffer.from(`cas ${i}`)));
      if (i === 150 || i === 151) writes.push(barrier.rotate());
      if (i % 50 === 0) await new Promise((r) => setImmediate(r));
    }
    await Promise.all(writes);
    await settle(barrier, small);
    // The two by hand and at least one by count (writes sealed while a rotation is under way count towards the
    // old term, so how many more varies).
    expect(barrier.term).toBeGreaterThanOrEqual(4);
    const again = await restart();
    // The last term may have reserved up to the threshold: then the restart replaced it.
    expect(again.term - barrier.term).toBeOneOf([0, 1]);
    for (let i = 0; i < 600; i++) expect((await again.get(`c/${i}`))?.toString()).toBe(`cas ${i}`);
    await again.close();
  });

  it('"a restart resumes the count from its reservation: a store reopened near the threshold rotates when the count reaches it, not a threshold later"', async () => {
    for (const before of [1, 9, 10, 11, 55, 73, 99]) {
      const { barrier, restart } = await opened(kind, small);
      for (let i = 0; i < before; i++) await barrier.put(`r/${i}`, Buffer.from('x'));
      expect(barrier.encryptions).toBe(before);
      const again = await restart();
      // The count resumes at most one block over what was sealed, never under it (at the threshold, the term was
      // replaced at the unseal).
      let writes = 0;
      while (again.term === 1) {
        await again.put(`after/${writes++}`, Buffer.from('y'));
        await settle(again, small);
      }
      expect({ before, writes }).toEqual({ before, writes: expect.toSatisfy((n: number) => n <= small.rotateAfterSeals - before && n > small.rotateAfterSeals - before - small.reservationBlock) });
      await again.close();
    }
  });
});

/** Applies a keyring write at once but, while `hold` is set, answers it only on `release()`: a commit in flight. */
class SlowKeyringCommit extends MemoryStorage {
  hold = false;
  release: (() => void) | undefined;
  override async transaction(ops: StorageOp[], conditions?: StorageCondition[]): Promise<boolean> {
    const applied = await super.transaction(ops, conditions);
    if (ops.some((op) => op.type !== 'append' && op.key === 'core/keyring') && this.hold) {
      this.hold = false;
      await new Promise<void>((resolve) => (this.release = resolve));
    }
    return applied;
  }
}

describe('rotation and the keyring', () => {
  it('"a write racing a rotation\'s keyring cannot drop the new term: its own keyring is refused, it adopts the stored one and lands"', async () => {
    const raw = new SlowKeyringCommit();
    const k = key();
    // A block of one: every write carries the keyring.
    const barrier = new Barrier(raw, { rotateAfterSeals: 1000, reservationBlock: 1 });
    await barrier.initialize(k);
    await barrier.put('first', Buffer.from('1'));
    raw.hold = true;
    const rotation = barrier.rotate();
    await expect.poll(() => raw.release).toBeDefined();
    await barrier.put('during', Buffer.from('2'));
    // The keyring that landed holds term 2, so the racing write found it and switched.
    expect(barrier.term).toBe(2);
    raw.release!();
    expect(await rotation).toBe(2);
    await barrier.put('after', Buffer.from('3'));

    const again = new Barrier(raw);
    await again.unseal(k);
    expect(again.term).toBe(2);
    for (const [key, value] of [['first', '1'], ['during', '2'], ['after', '3']]) expect((await again.get(key))?.toString()).toBe(value);
  });

  it('"concurrent rotations add one term each, in turn"', async () => {
    const barrier = new Barrier(new MemoryStorage());
    const k = key();
    await barrier.initialize(k);
    expect(await Promise.all([barrier.rotate(), barrier.rotate(), barrier.rotate()])).toEqual([2, 3, 4]);
  });
});

describe('the seal count in the keyring', () => {
  it('"the count is not written per seal: one keyring write per reservation block and one per rotation"', async () => {
    const raw = new KeyringWrites();
    const barrier = new Barrier(raw, { rotateAfterSeals: 100, reservationBlock: 10 });
    await barrier.initialize(key());
    raw.count = 0;
    for (let i = 0; i < 250; i++) {
      await barrier.put(`v/${i}`, Buffer.from('x'));
      await settle(barrier, { rotateAfterSeals: 100 });
    }
    // Blocks 10..250 of each term (9 + 9 + 4) and two rotations.
    expect(raw.count).toBe(24);

    const quiet = new KeyringWrites();
    const defaults = new Barrier(quiet);
    await defaults.initialize(key());
    quiet.count = 0;
    for (let i = 0; i < 1000; i++) await defaults.put(`v/${i}`, Buffer.from('x'));
    expect(quiet.count).toBe(0);
  });

  it('"a reservation riding on a compare-and-set that fails is carried again by the next write"', async () => {
    const raw = new MemoryStorage();
    const k = key();
    const barrier = new Barrier(raw, { rotateAfterSeals: 1000, reservationBlock: 10 });
    await barrier.initialize(k);
    await barrier.put('slot', Buffer.from('taken'));
    for (let i = 1; i < 10; i++) await barrier.put(`v/${i}`, Buffer.from('x'));
    // Seal 11 would raise the reservation to 20, but its guard fails: nothing lands, the keyring included.
    expect(await barrier.transaction([{ type: 'put', key: 'slot', value: Buffer.from('mine') }], [{ key: 'slot', expected: undefined }])).toBe(false);
    await barrier.put('v/12', Buffer.from('x'));
    const again = new Barrier(raw, { rotateAfterSeals: 1000, reservationBlock: 10 });
    await again.unseal(k);
    expect(again.encryptions).toBe(20);
  });

  it('"a keyring from before the count is taken as used up: its term is replaced when the store is unsealed"', async () => {
    const raw = new MemoryStorage();
    const k = key();
    const first = new Barrier(raw);
    await first.initialize(k);
    await first.put('before', Buffer.from('x'));
    // The keyring as the earlier version stored it: no seals_reserved.
    const rootKey = open(() => k, 'core/root-key', (await raw.get('core/root-key'))!);
    const ring = JSON.parse(open(() => rootKey, 'core/keyring', (await raw.get('core/keyring'))!).toString()) as Array<Record<string, unknown>>;
    for (const e of ring) delete e.seals_reserved;
    await raw.put('core/keyring', seal(rootKey, 0, 'core/keyring', Buffer.from(JSON.stringify(ring))));

    const upgraded = new Barrier(raw);
    await upgraded.unseal(k);
    expect(upgraded.term).toBe(2);
    expect(upgraded.encryptions).toBe(0);
    expect((await upgraded.get('before'))?.toString()).toBe('x');
  });
});

describe('secureRandomBytes', () => {
  it('"never hands out the same bytes twice, across pool refills"', async () => {
    const { secureRandomBytes } = await import('../../src/core/random.ts');
    const seen = new Set<string>();
    for (let i = 0; i < 5000; i++) seen.add(secureRandomBytes(12).toString('hex'));
    expect(seen.size).toBe(5000);
    expect(secureRandomBytes(4096)).toHaveLength(4096);
  });
});

/** Two barriers over one store: two nodes of a cluster, each with its own keyring in memory. */
async function twoNodes(options: BarrierOptions = {}) {
  const raw = new MemoryStorage();
  const k = key();
  const a = new Barrier(raw, options);
  await a.initialize(k);
  const b = new Barrier(raw, options);
  await b.unseal(k);
  return { raw, k, a, b };
}

/** Terms of every stored value below `prefix`, counted. */
async function termsOf(raw: Storage, prefix: string): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for (const name of await raw.list(prefix)) {
    const term = (await raw.get(prefix + name))!.readUInt32BE(0);
    out.set(term, (out.get(term) ?? 0) + 1);
  }
  return out;
}

describe('the keyring across nodes', () => {
  it('"of two nodes initialising an empty store at once, one writes the keyring; the other is told so and unseals it"', async () => {
    const raw = new MemoryStorage();
    const k = key();
    const [a, b] = [new Barrier(raw), new Barrier(raw)];
    const won = await Promise.all([a.initialize(k), b.initialize(k)]);
    expect([...won].sort()).toEqual([false, true]);
    const loser = won[0] ? b : a;
    await loser.unseal(k);
    await a.put('x', Buffer.from('from a'));
    expect((await b.get('x'))?.toString()).toBe('from a');
    await expect(new Barrier(raw).unseal(key())).rejects.toBeInstanceOf(UnsealError);
  });

  it('"a term rotated on one node: the other reads values sealed under it (reading the keyring once) and seals under it from then on"', async () => {
    const { raw, a, b } = await twoNodes();
    expect(await a.rotate()).toBe(2);
    await a.put('new', Buffer.from('sealed under 2'));
    expect(b.term).toBe(1);
    expect((await b.get('new'))?.toString()).toBe('sealed under 2');
    expect(b.term).toBe(2);
    await b.put('from-b', Buffer.from('y'));
    expect((await raw.get('from-b'))!.readUInt32BE(0)).toBe(2);
  });

  it('"two nodes reserve seals in turn: the term is replaced once their seals together reach the threshold, and no write drops a term"', async () => {
    const options = { rotateAfterSeals: 100, reservationBlock: 10 };
    const { raw, k, a, b } = await twoNodes(options);
    const writes: Array<Promise<unknown>> = [];
    for (let i = 0; i < 300; i++) {
      const node = i % 2 ? a : b;
      writes.push(i % 5 === 0 ? node.transaction([{ type: 'put', key: `v/${i}`, value: Buffer.from(String(i)) }], [{ key: `v/${i}`, expected: undefined }]) : node.put(`v/${i}`, Buffer.from(String(i))));
      if (i % 20 === 0) await Promise.all(writes.splice(0));
    }
    await Promise.all(writes);
    const terms = await termsOf(raw, 'v/');
    // Counted together, each full term sealed about the threshold, not the threshold on each node (about twice it).
    // The margin is the 20 writes of a batch: those already sealed when a rotation lands count towards the old term.
    expect(terms.size).toBeGreaterThanOrEqual(3);
    for (const term of [1, 2]) expect(terms.get(term)).toBeLessThanOrEqual(options.rotateAfterSeals + 20);
    const again = new Barrier(raw, options);
    await again.unseal(k);
    for (let i = 0; i < 300; i++) expect((await again.get(`v/${i}`))?.toString()).toBe(String(i));
  });
});
