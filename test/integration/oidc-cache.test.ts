// How long a verifier may cache the plugin identity issuer's discovery document and keys.
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { CountingStorage } from '../support/counting-storage.ts';
import { createDatabase } from '../support/postgres.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const DISCOVERY = 'identity/oidc/plugins/.well-known/openid-configuration';
const KEYS = 'identity/oidc/plugins/.well-known/keys';
const DAY = 86400;

let clock: FakeClock;
let s: TestServer;
beforeEach(async () => {
  clock = new FakeClock();
  s = await startTestServer({ clock });
});
afterEach(() => s.close());

const cacheControl = async (path: string) => {
  const r = await s.request('GET', path, { token: null });
  expect(r.status, path).toBe(200);
  return r.headers['cache-control'];
};
const key = async (name: string, body: Record<string, unknown> = {}) => expect((await s.request('POST', `identity/oidc/key/${name}`, { body })).status).toBe(204);

describe('identity/oidc/plugins/.well-known/openid-configuration', () => {
  it('"Cache-Control: max-age until the next key rotation, counting down, at most a day"', async () => {
    expect(await cacheControl(DISCOVERY)).toBe(`max-age=${DAY}`);
    await key('default');
    expect(await cacheControl(DISCOVERY)).toBe(`max-age=${DAY}`);
    await clock.advance(3600_000);
    expect(await cacheControl(DISCOVERY)).toBe(`max-age=${DAY - 3600}`);
  });

  it('"a key rotating sooner than a day bounds it; a key rotating later than a day does not lift it past a day"', async () => {
    await key('slow', { rotation_period: '48h' });
    expect(await cacheControl(DISCOVERY)).toBe(`max-age=${DAY}`);
    await key('fast', { rotation_period: '10m', verification_ttl: '10m' });
    expect(await cacheControl(DISCOVERY)).toBe('max-age=600');
  });
});

describe('identity/oidc/plugins/.well-known/keys', () => {
  it('"no-store while there is no key (the first token creates one); then max-age until the next key rotation, at most a day"', async () => {
    expect(await cacheControl(KEYS)).toBe('no-store');
    await key('slow', { rotation_period: '48h' });
    expect(await cacheControl(KEYS)).toBe(`max-age=${DAY}`);
    await key('fast', { rotation_period: '10m', verification_ttl: '10m' });
    await clock.advance(60_000);
    expect(await cacheControl(KEYS)).toBe('max-age=540');
    // The rotation happens when the keys are next published; the count starts again from there.
    await clock.advance(540_000);
    expect(await cacheControl(KEYS)).toBe('max-age=600');
  });
});

describe('the identity mount\'s other answers', () => {
  it('"every other answer, errors included, keeps Cache-Control: no-store"', async () => {
    await key('default');
    for (const [method, path, status] of [['GET', 'identity/oidc/key/default', 200], ['GET', 'identity/oidc/config', 200], ['GET', 'identity/oidc/.well-known/keys', 404], ['POST', DISCOVERY, 405]] as const) {
      const r = await s.request(method, path);
      expect(r.status, path).toBe(status);
      expect(r.headers['cache-control'], path).toBe('no-store');
    }
  });
});

describe('the documents served from the server\'s cache (cheap for strangers)', () => {
  let counted: CountingStorage;
  let c: TestServer;
  beforeEach(async () => {
    counted = new CountingStorage(new MemoryStorage());
    c = await startTestServer({ clock, storageInstance: counted });
  });
  afterEach(() => c.close());

  const get = async (path: string) => {
    const r = await c.request('GET', path, { token: null });
    expect(r.status, path).toBe(200);
    return r.body;
  };
  const kids = async () => ((await get(KEYS)).keys as Array<{ kid: string }>).map((k) => k.kid).sort();

  it('"the OIDC discovery and keys documents are cached until the next key change": unauthenticated GETs read no storage once built', async () => {
    for (const name of ['a', 'b', 'c']) expect((await c.request('POST', `identity/oidc/key/${name}`)).status).toBe(204);
    const first = await kids();
    expect(first).toHaveLength(6);
    await get(DISCOVERY);
    counted.reset();
    for (let i = 0; i < 20; i++) {
      expect(await kids()).toEqual(first);
      await get(DISCOVERY);
    }
    expect(counted.requestReads()).toEqual([]);
  });

  it('"refreshed after a key rotation": by hand, by a new key, by a deleted key, by an issuer change, and by the clock reaching the next rotation', async () => {
    expect((await c.request('POST', 'identity/oidc/key/a', { body: { rotation_period: '1h', verification_ttl: '1h' } })).status).toBe(204);
    const before = await kids();
    expect((await c.request('POST', 'identity/oidc/key/a/rotate')).status).toBe(204);
    const rotated = await kids();
    // The retired signing key stays published; a new next key appears.
    expect(rotated).toHaveLength(3);
    expect(rotated.filter((k) => !before.includes(k))).toHaveLength(1);

    expect((await c.request('POST', 'identity/oidc/key/b')).status).toBe(204);
    expect(await kids()).toHaveLength(5);
    expect((await c.request('DELETE', 'identity/oidc/key/b')).status).toBe(204);
    expect(await kids()).toEqual(rotated);

    expect((await c.request('POST', 'identity/oidc/config', { body: { issuer: 'https://issuer.example:8200' } })).status).toBe(204);
    expect((await get(DISCOVERY)).issuer).toBe('https://issuer.example:8200/v1/identity/oidc/plugins');

    // The scheduled rotation comes with time, not with a write: the cache holds until that instant only.
    await clock.advance(3600_000);
    const later = await kids();
    expect(later.filter((k) => !rotated.includes(k))).toHaveLength(1);
  });
});

describe('the cached documents on a cluster', () => {
  it('"refreshed after a key rotation" made on another node: within the coherence bound (docs/ha.md), not at the next scheduled rotation', async () => {
    const db = await createDatabase(inject('postgres'));
    const unsealKey = randomBytes(32).toString('base64');
    const timings = { leaseTtlMs: 1500, renewMs: 200, pollMs: 100, heartbeatMs: 300, deadAfterMs: 2000 };
    const a = await startTestServer({ postgresUrl: db.url, unsealKey, cluster: timings });
    const b = await startTestServer({ postgresUrl: db.url, unsealKey, cluster: timings });
    try {
      expect((await a.request('POST', 'identity/oidc/key/shared')).status).toBe(204);
      const kids = async (s: TestServer) => ((await s.request('GET', KEYS, { token: null })).body.keys as Array<{ kid: string }>).map((k) => k.kid).sort();
      const before = await kids(a);
      expect(before).toHaveLength(2);
      expect((await b.request('POST', 'identity/oidc/key/shared/rotate')).status).toBe(204);
      const after = await kids(b);
      expect(after).toHaveLength(3);
      let seen: string[] = before;
      for (let i = 0; i < 100 && seen.length !== 3; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        seen = await kids(a);
      }
      expect(seen).toEqual(after);
    } finally {
      await a.close();
      await b.close();
      await db.drop();
    }
  });
});
