import { describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { Barrier, UnsealError } from '../../src/core/barrier.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';

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

describe('secureRandomBytes', () => {
  it('"never hands out the same bytes twice, across pool refills"', async () => {
    const { secureRandomBytes } = await import('../../src/core/random.ts');
    const seen = new Set<string>();
    for (let i = 0; i < 5000; i++) seen.add(secureRandomBytes(12).toString('hex'));
    expect(seen.size).toBe(5000);
    expect(secureRandomBytes(4096)).toHaveLength(4096);
  });
});
