import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { StorageView } from '../../src/core/storage/view.ts';
import { TokenStore, type NewToken, type TokenEntry } from '../../src/core/tokens.ts';

const spec = (over: Partial<NewToken> = {}): NewToken => ({
  parent: '', policies: ['default'], path: 'auth/token/create', meta: {}, displayName: 'token', numUses: 0, ttl: 3600, explicitMaxTtl: 0,
  period: 0, renewable: true, entityId: '', boundCidrs: [], mountAccessor: '', internal: {}, ...over,
});

/** A chain of `depth` tokens, each the child of the one before; returns the raw tokens, root first. */
async function chain(store: TokenStore, depth: number, over: (i: number) => Partial<NewToken> = () => ({})): Promise<Array<{ token: string; entry: TokenEntry }>> {
  const out: Array<{ token: string; entry: TokenEntry }> = [];
  for (let i = 0; i < depth; i++) out.push(await store.create(spec({ parent: out.at(-1)?.entry.salted ?? '', ...over(i) })));
  return out;
}

/** A store of each kind on one storage: `warm` has just written what it reads, `cold` reads the storage (another node, or a restart). */
async function stores(cache: boolean) {
  const clock = new FakeClock();
  const view = new StorageView(new MemoryStorage(), 'token/');
  const warm = new TokenStore(view, clock, { cache });
  await warm.load();
  const cold = new TokenStore(view, clock, { cache });
  await cold.load();
  return { clock, view, warm, cold };
}

describe('TokenStore.lookup', () => {
  for (const cache of [true, false]) {
    for (const which of ['warm', 'cold'] as const) {
      const where = `${cache ? 'a cached store' : 'a shared store (no cache)'}, ${which}`;

      it(`"a live token with live ancestors is found" (${where})`, async () => {
        const s = await stores(cache);
        const tokens = await chain(s.warm, 5);
        for (const t of tokens) expect((await s[which].lookup(t.token))?.salted).toBe(t.entry.salted);
      });

      it(`"an expired ancestor refuses its whole tree" (${where})`, async () => {
        const s = await stores(cache);
        const tokens = await chain(s.warm, 4, (i) => ({ ttl: i === 1 ? 60 : 3600 }));
        await s.clock.advance(61_000);
        expect(await s[which].lookup(tokens[0]!.token)).toBeDefined();
        for (const t of tokens.slice(1)) expect(await s[which].lookup(t.token)).toBeUndefined();
      });

      it(`"a revoking or used-up token refuses its tree" (${where})`, async () => {
        const s = await stores(cache);
        const tokens = await chain(s.warm, 3);
        await s.warm.markRevoking(tokens[0]!.entry);
        const reader = which === 'warm' ? s.warm : new TokenStore(s.view, s.clock, { cache });
        await reader.load();
        for (const t of tokens) expect(await reader.lookup(t.token)).toBeUndefined();
      });

      it(`"a tree deeper than MAX_DEPTH is refused at lookup" (${where})`, async () => {
        const s = await stores(cache);
        const tokens = await chain(s.warm, TokenStore.MAX_DEPTH + 2);
        expect(await s[which].lookup(tokens[TokenStore.MAX_DEPTH]!.token)).toBeDefined();
        expect(await s[which].lookup(tokens[TokenStore.MAX_DEPTH + 1]!.token)).toBeUndefined();
      });
    }
  }

  for (const cache of [true, false]) {
    it(`"a missing ancestor means its revocation is under way: fail closed" (${cache ? 'cached' : 'shared'} store, read cold)`, async () => {
      const s = await stores(cache);
      const tokens = await chain(s.warm, 3);
      await s.view.delete(`id/${tokens[0]!.entry.salted}`);
      // `cold` has not read these tokens yet; a store that wrote them would still hold the deleted one (on its own
      // store only its own writes delete, and they refresh what it holds).
      expect(await s.cold.lookup(tokens[2]!.token)).toBeUndefined();
      expect(await s.cold.lookup(tokens[1]!.token)).toBeUndefined();
    });
  }

  it('"an unknown token is absent, and stays absent once remembered"', async () => {
    const s = await stores(true);
    expect(await s.warm.lookup('hvs.unknown')).toBeUndefined();
    expect(await s.warm.lookup('hvs.unknown')).toBeUndefined();
  });
});
