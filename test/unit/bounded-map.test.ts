import { describe, expect, it } from 'vitest';
import { setBounded } from '../../src/core/bounded-map.ts';

describe('setBounded', () => {
  it('keeps at most the limit, dropping the oldest entries first', () => {
    const map = new Map<number, number>();
    for (let i = 0; i < 100; i++) setBounded(map, 32, i, i);
    expect(map.size).toBeLessThanOrEqual(32);
    expect(map.has(99)).toBe(true);
    expect(map.has(0)).toBe(false);
    const kept = [...map.keys()];
    expect(kept).toEqual([...kept].sort((a, b) => a - b));
  });

  it('replacing a present key evicts nothing', () => {
    const map = new Map([[1, 'a'], [2, 'b']]);
    setBounded(map, 2, 1, 'c');
    expect([...map.entries()]).toEqual([[1, 'c'], [2, 'b']]);
  });
});
