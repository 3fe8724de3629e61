// Workload identity federation end to end: Strongroom's plugin identity token, presented through
// @azure/identity's ClientAssertionCredential, is exchanged by the emulated Entra ID, which fetches our
// discovery document and keys over loopback and matches the app's federated identity credentials.
import { ClientAssertionCredential, ClientSecretCredential } from '@azure/identity';
import { SignJWT, decodeJwt, decodeProtectedHeader, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedApp, seedTenant, type SeededApp, type SeededTenant } from '../support/azure-emulator/seed.ts';
import { startEmulator, type Emulator } from '../support/azure-emulator/server.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { wifBackends } from '../support/wif-probe.ts';

const AUDIENCE = 'api://AzureADTokenExchange';
let emu: Emulator;
let tenant: SeededTenant;
let workload: SeededApp;
let s: TestServer;
let pluginIssuer: string;
const subjects: Record<'secret' | 'auth', string> = { secret: '', auth: '' };
/** Shifts the emulator's clock (assertion lifetime checks). */
let skewMs = 0;

const credentialOptions = () => ({ authorityHost: emu.url, disableInstanceDiscovery: true, retryOptions: { maxRetries: 0 } });

async function graphAs(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const admin = new ClientSecretCredential(emu.tenantId, tenant.admin.appId, tenant.admin.clientSecret, credentialOptions());
  const { token } = (await admin.getToken(`${emu.graphUrl}/.default`))!;
  const res = await fetch(`${emu.graphUrl}/v1.0/${path}`, {
    method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: res.status === 204 ? undefined : await res.json() };
}

const mint = async (mount: string, audience = AUDIENCE): Promise<string> => {
  const r = await s.request('POST', `${mount}/token`, { body: { audience } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data.token;
};

/** A fresh credential each time: the SDK caches access tokens per instance. */
const exchange = (appId: string, getAssertion: () => Promise<string>) =>
  new ClientAssertionCredential(emu.tenantId, appId, getAssertion, credentialOptions()).getToken(`${emu.graphUrl}/.default`);

beforeAll(async () => {
  emu = await startEmulator({ now: () => Date.now() + skewMs });
  tenant = seedTenant(emu.state);
  workload = seedApp(emu.state, { displayName: 'strongroom-federated', graphPermissions: ['Application.Read.All'] });
  s = await startTestServer({ listen: true, backends: wifBackends });
  await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url } });
  pluginIssuer = `${s.url}/v1/identity/oidc/plugins`;
  await s.request('POST', 'sys/mounts/wif', { body: { type: 'wif' } });
  await s.request('POST', 'sys/auth/wif', { body: { type: 'wif' } });
  subjects.secret = `plugin-identity:root:secret:${(await s.request('GET', 'sys/mounts/wif')).body.data.accessor}`;
  subjects.auth = `plugin-identity:root:auth:${(await s.request('GET', 'sys/auth/wif')).body.data.accessor}`;
  const created = await graphAs('POST', `applications/${workload.objectId}/federatedIdentityCredentials`, {
    name: 'strongroom-cloud-engine', issuer: pluginIssuer, subject: subjects.secret, audiences: [AUDIENCE],
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
});
afterAll(async () => {
  await s?.close();
  await emu?.close();
});

describe('Graph applications/{id}/federatedIdentityCredentials', () => {
  it('"create, list, read by id or name, delete"', async () => {
    const path = `applications/${workload.objectId}/federatedIdentityCredentials`;
    const created = await graphAs('POST', path, { name: 'temp-cred', issuer: 'https://issuer.example.com', subject: 'x', audiences: ['aud'] });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'temp-cred', issuer: 'https://issuer.example.com', subject: 'x', audiences: ['aud'] });
    expect((await graphAs('GET', path)).body.value.map((f: { name: string }) => f.name).sort()).toEqual(['strongroom-cloud-engine', 'temp-cred']);
    expect((await graphAs('GET', `${path}/temp-cred`)).body.id).toBe(created.body.id);
    expect((await graphAs('DELETE', `${path}/${created.body.id}`)).status).toBe(204);
    expect((await graphAs('GET', `${path}/temp-cred`)).status).toBe(404);
  });

  it.each([
    [{ name: 'a', issuer: 'https://i.example', subject: 's', audiences: ['a'] }, 'name'],
    [{ name: 'plain-http', issuer: 'http://i.example', subject: 's', audiences: ['a'] }, 'issuer'],
    [{ name: 'no-subject', issuer: 'https://i.example', subject: '', audiences: ['a'] }, 'subject'],
    [{ name: 'two-audiences', issuer: 'https://i.example', subject: 's', audiences: ['a', 'b'] }, 'audiences'],
    [{ name: 'long-audience', issuer: 'https://i.example', subject: 's', audiences: ['a'.repeat(601)] }, 'audiences'],
  ])('"invalid properties are a 400 naming the property": %j', async (body, property) => {
    const r = await graphAs('POST', `applications/${workload.objectId}/federatedIdentityCredentials`, body);
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain(`'${property}'`);
  });

  it('"the same issuer and subject twice is a conflict"', async () => {
    const r = await graphAs('POST', `applications/${workload.objectId}/federatedIdentityCredentials`, { name: 'again', issuer: pluginIssuer, subject: subjects.secret, audiences: [AUDIENCE] });
    expect(r.status).toBe(409);
  });
});

describe('token endpoint with a plugin identity token as client_assertion', () => {
  it('"a matching federated credential yields an access token for the app, usable against Graph"', async () => {
    const access = await exchange(workload.appId, () => mint('wif'));
    expect(decodeJwt(access.token)).toMatchObject({ appid: workload.appId, appidacr: '2', aud: emu.graphUrl });
    const res = await fetch(`${emu.graphUrl}/v1.0/applications/${workload.objectId}/federatedIdentityCredentials`, { headers: { authorization: `Bearer ${access.token}` } });
    expect(res.status).toBe(200);
  });

  it('"wrong audience → AADSTS700212"', async () => {
    await expect(exchange(workload.appId, () => mint('wif', 'api://SomethingElse'))).rejects.toThrow(/AADSTS700212.*api:\/\/SomethingElse/);
  });

  it('"wrong subject (the auth mount has no credential yet) → AADSTS700213, until one is registered"', async () => {
    await expect(exchange(workload.appId, () => mint('auth/wif'))).rejects.toThrow(new RegExp(`AADSTS700213.*${subjects.auth}`));
    const path = `applications/${workload.objectId}/federatedIdentityCredentials`;
    await graphAs('POST', path, { name: 'strongroom-cloud-auth', issuer: pluginIssuer, subject: subjects.auth, audiences: [AUDIENCE] });
    try {
      await expect(exchange(workload.appId, () => mint('auth/wif'))).resolves.toMatchObject({ token: expect.any(String) });
    } finally {
      await graphAs('DELETE', `${path}/strongroom-cloud-auth`);
    }
  });

  it('"an issuer no credential names → AADSTS700211; an app without federated credentials → AADSTS70021"', async () => {
    await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url.replace('127.0.0.1', 'localhost') } });
    try {
      await expect(exchange(workload.appId, () => mint('wif'))).rejects.toThrow(/AADSTS700211/);
    } finally {
      await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url } });
    }
    await expect(exchange(tenant.admin.appId, () => mint('wif'))).rejects.toThrow(/AADSTS70021\b/);
  });

  it('"a token signed by another key under our kid fails signature validation → AADSTS700027"', async () => {
    const genuine = await mint('wif');
    const { privateKey } = await generateKeyPair('RS256');
    const forged = await new SignJWT(decodeJwt(genuine)).setProtectedHeader(decodeProtectedHeader(genuine) as { alg: string }).sign(privateKey);
    await expect(exchange(workload.appId, async () => forged)).rejects.toThrow(/AADSTS700027/);
  });

  it('"an expired assertion → AADSTS700024"', async () => {
    const token = await mint('wif');
    skewMs = 2 * 3600_000;
    try {
      await expect(exchange(workload.appId, async () => token)).rejects.toThrow(/AADSTS700024/);
    } finally {
      skewMs = 0;
    }
  });

  it('"an unreachable issuer → AADSTS50166"', async () => {
    await s.request('POST', 'identity/oidc/config', { body: { issuer: 'http://127.0.0.1:9' } });
    const path = `applications/${workload.objectId}/federatedIdentityCredentials`;
    await graphAs('POST', path, { name: 'dead-issuer', issuer: 'http://127.0.0.1:9/v1/identity/oidc/plugins', subject: subjects.secret, audiences: [AUDIENCE] });
    try {
      await expect(exchange(workload.appId, () => mint('wif'))).rejects.toThrow(/AADSTS50166/);
    } finally {
      await graphAs('DELETE', `${path}/dead-issuer`);
      await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url } });
    }
  });
});
