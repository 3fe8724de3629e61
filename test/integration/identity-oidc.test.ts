// The plugin identity token issuer: identity/oidc/config, named keys, the public discovery/JWKS documents
// (checked with jose's remote JWKS over a real socket, as a cloud directory would) and the tokens mounts get.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { wifBackends } from '../support/wif-probe.ts';

const clock = new FakeClock();
const storage = new MemoryStorage();
let s: TestServer;
let pluginIssuer: string;
const accessors: Record<string, string> = {};

beforeAll(async () => {
  s = await startTestServer({ listen: true, clock, storageInstance: storage, backends: wifBackends });
  expect((await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url } })).status).toBe(204);
  pluginIssuer = `${s.url}/v1/identity/oidc/plugins`;
  await s.request('POST', 'sys/mounts/wif', { body: { type: 'wif' } });
  await s.request('POST', 'sys/auth/wif', { body: { type: 'wif' } });
  accessors.secret = (await s.request('GET', 'sys/mounts/wif')).body.data.accessor;
  accessors.auth = (await s.request('GET', 'sys/auth/wif')).body.data.accessor;
});
afterAll(() => s.close());

const tokenFor = async (mount: string, body: Record<string, unknown>) => s.request('POST', `${mount}/token`, { body });
const mint = async (mount = 'wif', body: Record<string, unknown> = { audience: 'api://AzureADTokenExchange' }): Promise<{ token: string; ttl: number }> => {
  const r = await tokenFor(mount, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data;
};
/** What a relying party does: discovery → jwks_uri → verify, with a fresh key cache each time. */
async function verifyRemotely(token: string, audience = 'api://AzureADTokenExchange'): Promise<JWTPayload> {
  const discovery = await (await fetch(`${pluginIssuer}/.well-known/openid-configuration`)).json() as { issuer: string; jwks_uri: string };
  const { payload } = await jwtVerify(token, createRemoteJWKSet(new URL(discovery.jwks_uri)), { issuer: discovery.issuer, audience, currentDate: new Date(clock.now()) });
  return payload;
}
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'];

describe('identity/oidc/plugins/.well-known/openid-configuration', () => {
  it('"unauthenticated raw JSON (no envelope), cacheable (max-age: see oidc-cache.test.ts), naming the plugin issuer and its keys"', async () => {
    const res = await fetch(`${pluginIssuer}/.well-known/openid-configuration`);
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toMatch(/^max-age=\d+$/);
    expect(res.headers.get('content-type')).toContain('application/json');
    expect(await res.json()).toEqual({
      issuer: pluginIssuer,
      jwks_uri: `${pluginIssuer}/.well-known/keys`,
      response_types_supported: ['id_token'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256', 'RS384', 'RS512', 'ES256', 'ES384', 'ES512', 'EdDSA'],
    });
  });

  it('"other responses stay Cache-Control: no-store"', async () => {
    const res = await fetch(`${s.url}/v1/identity/oidc/config`, { headers: { 'x-service-token': 'root' } });
    expect(res.headers.get('cache-control')).toBe('no-store');
  });
});

describe('identity/oidc/plugins/.well-known/keys', () => {
  it('"tokens verify with jose\'s createRemoteJWKSet over the network"', async () => {
    const { token } = await mint();
    expect((await verifyRemotely(token)).sub).toBe(`plugin-identity:root:secret:${accessors.secret}`);
  });

  it('"only public key material: no d, p, q, dp, dq, qi; cacheable until the next key change"', async () => {
    await mint();
    const res = await fetch(`${pluginIssuer}/.well-known/keys`);
    expect(res.headers.get('cache-control')).toMatch(/^max-age=\d+$/);
    const { keys } = await res.json() as { keys: Array<Record<string, unknown>> };
    expect(keys.length).toBeGreaterThanOrEqual(2);
    for (const k of keys) {
      for (const m of PRIVATE_MEMBERS) expect(k).not.toHaveProperty(m);
      expect(k).toMatchObject({ use: 'sig', alg: expect.any(String), kid: expect.any(String) });
    }
  });

  it('"private keys are stored only through the barrier"', async () => {
    await mint();
    const { keys } = await (await fetch(`${pluginIssuer}/.well-known/keys`)).json() as { keys: Array<{ n?: string }> };
    const modulus = keys.find((k) => k.n)!.n!;
    for (const key of await allKeys(storage)) {
      const value = (await storage.get(key))!.toString('latin1');
      expect(value).not.toContain(modulus);
      expect(value).not.toContain('"d":');
    }
  });
});

async function allKeys(st: MemoryStorage, prefix = ''): Promise<string[]> {
  const out: string[] = [];
  for (const child of await st.list(prefix)) out.push(...(child.endsWith('/') ? await allKeys(st, prefix + child) : [prefix + child]));
  return out;
}

describe('plugin identity tokens', () => {
  it('"iss = issuer + /v1/identity/oidc/plugins, sub = plugin-identity:root:<class>:<accessor>, aud, iat = nbf = now, exp = now + ttl (3600 default), private mount claim"', async () => {
    const now = Math.floor(clock.now() / 1000);
    const secret = await mint();
    expect(secret.ttl).toBe(3600);
    expect(await verifyRemotely(secret.token)).toEqual({
      iss: pluginIssuer, sub: `plugin-identity:root:secret:${accessors.secret}`, aud: 'api://AzureADTokenExchange',
      iat: now, nbf: now, exp: now + 3600,
      strongroom: { class: 'secret', accessor: accessors.secret, path: 'wif/' },
    });
    const auth = await mint('auth/wif', { audience: 'aud-2', ttl: '15m' });
    expect(auth.ttl).toBe(900);
    expect(await verifyRemotely(auth.token, 'aud-2')).toMatchObject({
      sub: `plugin-identity:root:auth:${accessors.auth}`, exp: now + 900, strongroom: { class: 'auth', accessor: accessors.auth, path: 'auth/wif/' },
    });
    expect(decodeProtectedHeader(secret.token)).toMatchObject({ alg: 'RS256', typ: 'JWT', kid: expect.any(String) });
  });

  it('"audience must be shorter than 600 characters (else 400) and not empty"', async () => {
    expect((await tokenFor('wif', { audience: 'a'.repeat(599) })).status).toBe(200);
    const long = await tokenFor('wif', { audience: 'a'.repeat(600) });
    expect(long.status).toBe(400);
    expect(long.body.errors[0]).toBe('invalid value for field "identity_token_audience": must be shorter than 600 characters');
    expect((await tokenFor('wif', { audience: '' })).status).toBe(400);
  });

  it('"a mount signs with its identity_token_key tune option; a missing named key is a 400"', async () => {
    await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: 'ghost' } });
    const missing = await tokenFor('wif', { audience: 'x' });
    expect(missing.status).toBe(400);
    expect(missing.body.errors[0]).toContain('no OIDC key named "ghost"');
    await s.request('POST', 'identity/oidc/key/ec', { body: { algorithm: 'ES256' } });
    await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: 'ec' } });
    const { token } = await mint('wif', { audience: 'x' });
    expect(decodeProtectedHeader(token).alg).toBe('ES256');
    expect((await verifyRemotely(token, 'x')).sub).toBe(`plugin-identity:root:secret:${accessors.secret}`);
    await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: '' } });
  });

  it('"the TTL is capped at the key\'s verification_ttl, and the granted TTL is returned"', async () => {
    await s.request('POST', 'identity/oidc/key/short', { body: { rotation_period: '1h', verification_ttl: '10m' } });
    await s.request('POST', 'sys/auth/wif/tune', { body: { identity_token_key: 'short' } });
    const { token, ttl } = await mint('auth/wif', { audience: 'x', ttl: 3600 });
    expect(ttl).toBe(600);
    const p = await verifyRemotely(token, 'x');
    expect(p.exp! - p.iat!).toBe(600);
    await s.request('POST', 'sys/auth/wif/tune', { body: { identity_token_key: '' } });
  });
});

describe('key rotation', () => {
  it('"old public keys stay in the JWKS until tokens signed by them can no longer be valid, then drop out"', async () => {
    await s.request('POST', 'identity/oidc/key/rot', { body: { rotation_period: '1h', verification_ttl: '2h' } });
    await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: 'rot' } });
    try {
      const first = await mint('wif', { audience: 'x', ttl: '2h' });
      const kid1 = decodeProtectedHeader(first.token).kid;
      await clock.advance(3600_000 + 1000);
      const second = await mint('wif', { audience: 'x', ttl: '2h' });
      expect(decodeProtectedHeader(second.token).kid).not.toBe(kid1);
      // 1 h in: the first token is still valid and its key is still published.
      await expect(verifyRemotely(first.token, 'x')).resolves.toMatchObject({ aud: 'x' });
      await clock.advance(3600_000 - 2000);
      await expect(verifyRemotely(first.token, 'x')).resolves.toMatchObject({ aud: 'x' });
      // Past the first key's verification window: the first token has expired and its key is gone.
      await clock.advance(2 * 3600_000);
      const { keys } = await (await fetch(`${pluginIssuer}/.well-known/keys`)).json() as { keys: Array<{ kid: string }> };
      expect(keys.map((k) => k.kid)).not.toContain(kid1);
      expect(keys.map((k) => k.kid)).toContain(decodeProtectedHeader(second.token).kid);
    } finally {
      await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: '' } });
    }
  });

  it('"identity/oidc/key/:name/rotate starts signing with the next key at once"', async () => {
    await s.request('POST', 'identity/oidc/key/manual', { body: {} });
    await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: 'manual' } });
    try {
      const before = await mint('wif', { audience: 'x' });
      expect((await s.request('POST', 'identity/oidc/key/manual/rotate', { body: { verification_ttl: '1h' } })).status).toBe(204);
      const after = await mint('wif', { audience: 'x' });
      expect(decodeProtectedHeader(after.token).kid).not.toBe(decodeProtectedHeader(before.token).kid);
      await expect(verifyRemotely(before.token, 'x')).resolves.toBeTruthy();
      expect((await s.request('POST', 'identity/oidc/key/nope/rotate', { body: {} })).status).toBe(404);
    } finally {
      await s.request('POST', 'sys/mounts/wif/tune', { body: { identity_token_key: '' } });
    }
  });
});

describe('identity/oidc/key/:name', () => {
  it('"RS256, 24h rotation_period and verification_ttl by default; updates change only the fields sent"', async () => {
    expect((await s.request('POST', 'identity/oidc/key/k1', { body: {} })).status).toBe(204);
    expect((await s.request('GET', 'identity/oidc/key/k1')).body.data).toEqual({ algorithm: 'RS256', rotation_period: 86400, verification_ttl: 86400 });
    await s.request('POST', 'identity/oidc/key/k1', { body: { verification_ttl: '48h' } });
    expect((await s.request('GET', 'identity/oidc/key/k1')).body.data).toEqual({ algorithm: 'RS256', rotation_period: 86400, verification_ttl: 172800 });
    expect((await s.request('LIST', 'identity/oidc/key')).body.data.keys).toContain('k1');
  });

  it.each([
    [{ rotation_period: '30s' }, 'invalid value for field "rotation_period": must be at least one minute'],
    [{ rotation_period: '1h', verification_ttl: '11h' }, 'invalid value for field "verification_ttl": cannot be longer than 10x rotation_period'],
    [{ algorithm: 'HS256' }, 'invalid value for field "algorithm"'],
  ])('"bad key settings are a 400 naming the field": %j', async (body, message) => {
    const r = await s.request('POST', 'identity/oidc/key/bad', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain(message);
    expect((await s.request('GET', 'identity/oidc/key/bad')).status).toBe(404);
  });

  it('"a key referenced by a mount\'s identity_token_key cannot be deleted"', async () => {
    await s.request('POST', 'identity/oidc/key/used', { body: {} });
    await s.request('POST', 'sys/auth/wif/tune', { body: { identity_token_key: 'used' } });
    const refused = await s.request('DELETE', 'identity/oidc/key/used');
    expect(refused.status).toBe(400);
    expect(refused.body.errors[0]).toContain('auth/wif/');
    await s.request('POST', 'sys/auth/wif/tune', { body: { identity_token_key: '' } });
    expect((await s.request('DELETE', 'identity/oidc/key/used')).status).toBe(204);
    expect((await s.request('GET', 'identity/oidc/key/used')).status).toBe(404);
  });

  it('"key management needs a token"', async () => {
    expect((await s.request('GET', 'identity/oidc/key/k1', { token: null })).status).toBe(403);
  });
});

describe('identity/oidc/config', () => {
  it.each([
    'https://example.com/path', 'https://example.com?x=1', 'https://example.com#f', 'ftp://example.com', 'example.com', 'https://user:pw@example.com',
  ])('"invalid issuer, which must include only a scheme, host, and optional port": %s', async (issuer) => {
    const r = await s.request('POST', 'identity/oidc/config', { body: { issuer } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['invalid issuer, which must include only a scheme, host, and optional port (e.g. https://example.com:8200)']);
    expect((await s.request('GET', 'identity/oidc/config')).body.data.issuer).toBe(s.url);
  });

  it('"scheme, host and optional port are accepted; a trailing slash is dropped"', async () => {
    await s.request('POST', 'identity/oidc/config', { body: { issuer: 'https://vault.example.com:8200/' } });
    expect((await s.request('GET', 'identity/oidc/config')).body.data.issuer).toBe('https://vault.example.com:8200');
    const doc = await (await fetch(`${pluginIssuer}/.well-known/openid-configuration`)).json() as { issuer: string };
    expect(doc.issuer).toBe('https://vault.example.com:8200/v1/identity/oidc/plugins');
    await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url } });
  });

  it('"the default issuer is STRONGROOM_API_ADDR, else http://<STRONGROOM_ADDR>"', async () => {
    for (const [env, expected] of [
      [{ STRONGROOM_API_ADDR: 'https://sr.example.com:8200' }, 'https://sr.example.com:8200'],
      [{ STRONGROOM_ADDR: '127.0.0.1:8300' }, 'http://127.0.0.1:8300'],
    ] as const) {
      const other = await startTestServer({ env });
      try {
        expect((await other.request('GET', 'identity/oidc/config')).body.data.issuer).toBe('');
        const doc = await other.request('GET', 'identity/oidc/plugins/.well-known/openid-configuration', { token: null });
        expect(doc.body.issuer).toBe(`${expected}/v1/identity/oidc/plugins`);
      } finally {
        await other.close();
      }
    }
  });

  it('"STRONGROOM_API_ADDR with a path is refused at start-up"', async () => {
    await expect(startTestServer({ env: { STRONGROOM_API_ADDR: 'https://sr.example.com/vault' } })).rejects.toThrow(/STRONGROOM_API_ADDR/);
  });
});

describe('restart', () => {
  it('"keys survive a restart: a token signed before still verifies after"', async () => {
    const unsealKey = Buffer.alloc(32, 7).toString('base64');
    const dataDir = mkdtempSync(join(tmpdir(), 'strongroom-oidc-'));
    const first = await startTestServer({ storage: 'sqlite', unsealKey, dataDir, backends: wifBackends });
    await first.request('POST', 'sys/mounts/wif', { body: { type: 'wif' } });
    const { token } = (await first.request('POST', 'wif/token', { body: { audience: 'x' } })).body.data;
    await first.close();
    const second = await startTestServer({ storage: 'sqlite', unsealKey, dataDir, listen: true, backends: wifBackends });
    try {
      const keys = createRemoteJWKSet(new URL(`${second.url}/v1/identity/oidc/plugins/.well-known/keys`));
      await expect(jwtVerify(token, keys, { audience: 'x' })).resolves.toBeTruthy();
    } finally {
      await second.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
