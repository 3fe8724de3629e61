// The login JWT verifier's key-set and claim rules, with a key set served by a fake fetch (the integration
// suite proves the same verifier against the emulator's directory).
import { generateKeyPairSync, sign as rsaSign, type KeyObject } from 'node:crypto';
import { exportJWK, SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { JwtVerifier } from '../../src/auth/cloud/jwt-verifier.ts';
import { FakeClock } from '../../src/core/clock.ts';

const TENANT = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const ISSUER = `https://sts.example/${TENANT}/`;
const AUD = 'https://management.example/';
const rsa = (bits = 2048) => generateKeyPairSync('rsa', { modulusLength: bits });
const main = rsa();

async function verifierFor(keys: Array<Record<string, unknown>>, clock = new FakeClock(Date.now()), opts: { tenantId?: string; issuer?: string } = {}) {
  const docs: Record<string, unknown> = {
    'https://d.example/.well-known/openid-configuration': { issuer: opts.issuer ?? ISSUER, jwks_uri: 'https://d.example/keys' },
    'https://d.example/keys': { keys },
  };
  const fetch = (async (url: string) => new Response(JSON.stringify(docs[url]), { status: 200 })) as unknown as typeof globalThis.fetch;
  return new JwtVerifier({ discoveryUrl: 'https://d.example/.well-known/openid-configuration', tenantId: opts.tenantId ?? TENANT, audience: AUD, clock, fetch });
}

/** Signed by hand: jose refuses to produce these tokens (small keys, unknown crit). */
function signRaw(header: Record<string, unknown>, claims: Record<string, unknown>, key: KeyObject): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const input = `${b64({ alg: 'RS256', kid: 'k1', ...header })}.${b64({ iss: ISSUER, tid: TENANT, aud: AUD, exp: Math.floor(Date.now() / 1000) + 600, oid: 'o', ...claims })}`;
  return `${input}.${rsaSign('sha256', Buffer.from(input), key).toString('base64url')}`;
}

const jwk = async (key: KeyObject, extra: Record<string, unknown>) => ({ ...(await exportJWK(key)), ...extra });

function sign(claims: Record<string, unknown>, opts: { key?: KeyObject } = {}) {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ iss: ISSUER, tid: TENANT, aud: AUD, exp: now + 600, oid: 'o', ...claims })
    .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
    .sign(opts.key ?? main.privateKey);
}

describe('JwtVerifier: key set', () => {
  it('a token signed by a published RS256 key verifies, with its claims returned', async () => {
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1', use: 'sig' })]);
    expect((await v.verify(await sign({ aud: ['other', AUD] }))).oid).toBe('o');
  });

  it.each([
    ['an encryption key ("use": "enc")', { use: 'enc' }],
    ['a key for another algorithm', { alg: 'RS512' }],
    ['a key whose key_ops exclude verify', { key_ops: ['encrypt'] }],
  ])('%s is not a signing key', async (_name, extra) => {
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1', ...extra })]);
    await expect(v.verify(await sign({}))).rejects.toThrow(/key id is not one of the tenant's signing keys/);
  });

  it('a kid published twice is refused rather than guessed', async () => {
    const other = rsa();
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1' }), await jwk(other.publicKey, { kid: 'k1' })]);
    await expect(v.verify(await sign({}))).rejects.toThrow(/key id/);
  });

  it('a key below 2048 bits is not used', async () => {
    const small = rsa(1024);
    const v = await verifierFor([await jwk(small.publicKey, { kid: 'k1' })]);
    await expect(v.verify(signRaw({}, {}, small.privateKey))).rejects.toThrow(/key id/);
  });

  it('a signature by another key under a published kid fails verification', async () => {
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1' })]);
    await expect(v.verify(await sign({}, { key: rsa().privateKey }))).rejects.toThrow(/signature verification failed/);
  });

  it('a "crit" header parameter is refused (none is processed here)', async () => {
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1' })]);
    await expect(v.verify(signRaw({ crit: ['x-custom'], 'x-custom': 1 }, {}, main.privateKey))).rejects.toThrow(/critical header/);
  });
});

describe('JwtVerifier: claims', () => {
  const now = () => Math.floor(Date.now() / 1000);
  it.each([
    ['no iss', { iss: undefined }, /issuer/],
    ['no aud', { aud: undefined }, /audience/],
    ['an audience list without the resource', { aud: ['a', 'b'] }, /audience/],
    ['no exp', { exp: undefined }, /no expiry/],
    ['a string exp', { exp: String(now() + 600) }, /no expiry/],
    ['exp more than the skew in the past', { exp: now() - 3600 }, /expired/],
    ['nbf more than the skew in the future', { nbf: now() + 3600 }, /not yet valid/],
    ['a string nbf', { nbf: 'soon' }, /not yet valid/],
    ['a string iat', { iat: 'now' }, /iat/],
  ])('%s is refused', async (_name, claims, message) => {
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1' })]);
    await expect(v.verify(await sign(claims))).rejects.toThrow(message);
  });

  it('exp and nbf within the 60 s skew are accepted, one second beyond it refused', async () => {
    const t = Math.floor(Date.now() / 1000);
    const v = await verifierFor([await jwk(main.publicKey, { kid: 'k1' })], new FakeClock(t * 1000));
    expect((await v.verify(await sign({ exp: t - 59, nbf: t + 60 }))).oid).toBe('o');
    await expect(v.verify(await sign({ exp: t - 60 }))).rejects.toThrow(/expired/);
    await expect(v.verify(await sign({ nbf: t + 61 }))).rejects.toThrow(/not yet valid/);
  });
});

describe('JwtVerifier: tenant (tid)', () => {
  const OTHER = 'f8cdef31-a31e-4b4a-93e4-5f571e91255a';
  const key = () => jwk(main.publicKey, { kid: 'k1' });

  it.each([
    ['another tenant under the right issuer', { tid: OTHER }, /JWT tenant \(tid\) is not the configured tenant/],
    ['no tid', { tid: undefined }, /JWT has no tenant \(tid\) claim/],
    ['a tid that is not a string', { tid: [TENANT] }, /not the configured tenant/],
    ['the tenant with extra characters', { tid: `${TENANT} ` }, /not the configured tenant/],
  ])('"a token from another tenant is refused": %s', async (_name, claims, message) => {
    const v = await verifierFor([await key()]);
    const refused = v.verify(await sign(claims));
    await expect(refused).rejects.toMatchObject({ status: 403 });
    await expect(refused).rejects.toThrow(message);
    await expect(refused).rejects.not.toThrow(OTHER);
  });

  it('"tenant ids compare case-insensitively": an upper-case tid, or an upper-case configured tenant, is the same tenant', async () => {
    expect((await (await verifierFor([await key()])).verify(await sign({ tid: TENANT.toUpperCase() }))).oid).toBe('o');
    expect((await (await verifierFor([await key()], undefined, { tenantId: TENANT.toUpperCase() })).verify(await sign({}))).oid).toBe('o');
  });

  it('"a tenant configured by domain is bound by the tenant id its issuer names"', async () => {
    const v = await verifierFor([await key()], undefined, { tenantId: 'contoso.example' });
    expect((await v.verify(await sign({}))).oid).toBe('o');
    await expect(v.verify(await sign({ tid: OTHER }))).rejects.toThrow(/not the configured tenant/);
  });

  it('a tenant configured by domain whose issuer names no tenant id refuses every login as an upstream failure', async () => {
    const issuer = 'https://sts.example/contoso/';
    const v = await verifierFor([await key()], undefined, { tenantId: 'contoso.example', issuer });
    await expect(v.verify(await sign({ iss: issuer }))).rejects.toMatchObject({ status: 502 });
  });
});
