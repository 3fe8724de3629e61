// How long a verifier may cache the plugin identity issuer's discovery document and keys.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
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
