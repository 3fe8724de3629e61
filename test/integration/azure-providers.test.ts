// The Azure provider layer through the real SDKs (@azure/identity, microsoft-graph-client,
// arm-authorization) against this file's own emulator instance over HTTPS.
import { randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClientSecretCredential } from '@azure/identity';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AzureClientFactory, type AzureClientConfig } from '../../src/providers/azure/clients.ts';
import { resolveEnvironment } from '../../src/providers/azure/environments.ts';
import { AzureProviderError } from '../../src/providers/azure/errors.ts';
import { configureAzureLogging } from '../../src/providers/azure/logging.ts';
import { addManagedIdentity } from '../support/azure-emulator/managed-identity.ts';
import { BUILTIN_ROLES, seedTenant, type SeededTenant } from '../support/azure-emulator/seed.ts';
import { startEmulator, type Emulator } from '../support/azure-emulator/server.ts';

let emu: Emulator;
let tenant: SeededTenant;
let envFile: string;
const ENV_NAME = 'StrongroomEmulator';
const fastRetry = { baseDelayMs: 50, maxDelayMs: 400, deadlineMs: 15_000 };

beforeAll(async () => {
  emu = await startEmulator({ pageSize: 2 });
  tenant = seedTenant(emu.state, { groups: ['readers', "o'brien team"] });
  const dir = await mkdtemp(join(tmpdir(), 'azure-env-'));
  envFile = join(dir, 'environment.json');
  await writeFile(envFile, JSON.stringify(emu.environment(ENV_NAME)));
});
afterAll(async () => {
  await emu?.close();
});
afterEach(() => {
  emu.faults.clear();
});

function factory(): AzureClientFactory {
  return new AzureClientFactory({ env: { CLOUD_ENVIRONMENT_FILEPATH: envFile }, retry: fastRetry });
}

function adminConfig(overrides: Partial<AzureClientConfig> = {}): AzureClientConfig {
  return {
    tenantId: emu.tenantId, subscriptionId: tenant.subscriptionId, clientId: tenant.admin.appId,
    clientSecret: tenant.admin.clientSecret, environment: ENV_NAME, ...overrides,
  };
}

const subScope = (): string => `/subscriptions/${tenant.subscriptionId}`;

describe('credentials', () => {
  it('obtains a token with the client secret through the custom environment', async () => {
    const { credential, credentialKind, environment } = factory().get(adminConfig());
    expect(credentialKind).toBe('client-secret');
    expect(environment.custom).toBe(true);
    const token = await credential.getToken(`${emu.graphUrl}/.default`);
    expect(token?.token.split('.')).toHaveLength(3);
  });

  it('a wrong secret fails with a clear, scrubbed 502 naming AADSTS7000215', async () => {
    const secret = 'wrong-secret-value-123';
    const { graph } = factory().get(adminConfig({ clientSecret: secret }));
    const err = await graph.getApplication(tenant.admin.objectId).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AzureProviderError);
    const e = err as AzureProviderError;
    expect(e.status).toBe(502);
    expect(e.message).toContain('AADSTS7000215');
    expect(e.message).not.toContain(secret);
    expect(e.message).not.toMatch(/Trace ID/);
  });

  it('an unknown client id is AADSTS700016 and an expired secret AADSTS7000222', async () => {
    const unknown = await factory().get(adminConfig({ clientId: randomUUID() })).graph.getGroup(randomUUID()).catch((e: unknown) => e);
    expect((unknown as Error).message).toContain('AADSTS700016');
    const app = emu.state.applications.get(tenant.admin.objectId)!;
    const { secretText } = emu.state.addPassword(app, { startDateTime: emu.state.isoNow(-7_200_000), endDateTime: emu.state.isoNow(-3_600_000) });
    const expired = await factory().get(adminConfig({ clientSecret: secretText })).graph.getGroup(randomUUID()).catch((e: unknown) => e);
    expect((expired as Error).message).toContain('AADSTS7000222');
  });

  it('a client assertion goes through the verifyClientAssertion hook (default: refused)', async () => {
    const seen: string[] = [];
    const fed = await startEmulator({
      verifyClientAssertion: async ({ assertion, tokenEndpoint }) => {
        seen.push(tokenEndpoint);
        return assertion === 'trusted-assertion' ? { ok: true } : { ok: false, code: 70021, description: 'No matching federated identity record found for presented assertion.' };
      },
    });
    try {
      const t = seedTenant(fed.state);
      const dir = await mkdtemp(join(tmpdir(), 'azure-env-'));
      await writeFile(join(dir, 'e.json'), JSON.stringify(fed.environment('Fed')));
      const f = new AzureClientFactory({ env: { CLOUD_ENVIRONMENT_FILEPATH: join(dir, 'e.json') }, retry: fastRetry });
      const base = { tenantId: fed.tenantId, subscriptionId: t.subscriptionId, clientId: t.admin.appId, environment: 'Fed' };
      const ok = f.get({ ...base, getAssertion: async () => 'trusted-assertion', assertionKey: 'a' });
      expect(ok.credentialKind).toBe('client-assertion');
      expect((await ok.roles.findRoleDefinitionsByName(`/subscriptions/${t.subscriptionId}`, 'Owner'))).toHaveLength(1);
      const bad = await f.get({ ...base, getAssertion: async () => 'forged', assertionKey: 'b' }).graph.getGroup(randomUUID()).catch((e: unknown) => e);
      expect((bad as AzureProviderError).status).toBe(502);
      expect((bad as Error).message).toContain('AADSTS70021');
      expect(seen[0]).toBe(`${fed.url}/${fed.tenantId}/oauth2/v2.0/token`);
    } finally {
      await fed.close();
    }
  });

  it('ManagedIdentityCredential gets a token through IDENTITY_ENDPOINT/IDENTITY_HEADER', async () => {
    const mi = addManagedIdentity(emu.state, { resourceId: `${subScope()}/resourceGroups/rg/providers/Microsoft.Web/sites/app1` });
    const saved = { e: process.env.IDENTITY_ENDPOINT, h: process.env.IDENTITY_HEADER };
    process.env.IDENTITY_ENDPOINT = emu.managedIdentity.endpoint;
    process.env.IDENTITY_HEADER = emu.managedIdentity.header;
    try {
      const { credential, credentialKind } = factory().get(adminConfig({ clientId: undefined, clientSecret: undefined }));
      expect(credentialKind).toBe('managed-identity');
      const token = await credential.getToken(`${emu.armUrl}/.default`);
      const claims = JSON.parse(Buffer.from(token!.token.split('.')[1], 'base64url').toString()) as Record<string, unknown>;
      expect(claims.oid).toBe(mi.principalId);
      expect(claims.aud).toBe(emu.armUrl);
      expect(emu.requestLog.count({ path: '/msi/token', status: 200 })).toBeGreaterThan(0);
      // A wrong header is refused (MSAL caches the source per process, so ask the endpoint directly).
      const bad = await fetch(`${emu.managedIdentity.endpoint}?resource=${encodeURIComponent(emu.graphUrl)}&api-version=2019-08-01`, { headers: { 'X-IDENTITY-HEADER': 'nope' } });
      expect(bad.status).toBe(401);
    } finally {
      process.env.IDENTITY_ENDPOINT = saved.e;
      process.env.IDENTITY_HEADER = saved.h;
      if (saved.e === undefined) delete process.env.IDENTITY_ENDPOINT;
      if (saved.h === undefined) delete process.env.IDENTITY_HEADER;
    }
  });

  it('debug logging is redacted: no secret, token, client_secret= or Authorization value', async () => {
    const lines: string[] = [];
    expect(configureAzureLogging((l) => lines.push(l), { CLOUD_GO_SDK_LOG_LEVEL: 'DEBUG' })).toBe(true);
    try {
      const f = new AzureClientFactory({ env: { CLOUD_ENVIRONMENT_FILEPATH: envFile, CLOUD_GO_SDK_LOG_LEVEL: 'DEBUG' }, retry: fastRetry, logSink: (l) => lines.push(l) });
      const { roles, credential } = f.get(adminConfig());
      await roles.findRoleDefinitionsByName(subScope(), 'Reader');
      const token = (await credential.getToken(`${emu.armUrl}/.default`))!.token;
      const all = lines.join('\n');
      expect(lines.length).toBeGreaterThan(0);
      expect(all).not.toContain(tenant.admin.clientSecret);
      expect(all).not.toContain(token);
      expect(all).not.toMatch(/eyJ[\w-]+\.[\w-]+\./);
    } finally {
      configureAzureLogging(() => undefined, {});
    }
  });
});

describe('Graph', () => {
  it('creates app → SP → password, and the new secret obtains a token; deletes purge', async () => {
    const { graph } = factory().get(adminConfig());
    const app = await graph.createApplication({ displayName: `strongroom-${randomUUID()}`, tags: ['team:a'] });
    expect(await graph.findApplicationByAppId(app.appId)).toMatchObject({ id: app.id, tags: ['team:a'] });
    const sp = await graph.createServicePrincipal(app.appId);
    const pw = await graph.addApplicationPassword(app.id, { displayName: 'p1', endDateTime: new Date(Date.now() + 3_600_000) });
    const cred = new ClientSecretCredential(emu.tenantId, app.appId, pw.secretText, { authorityHost: emu.url, disableInstanceDiscovery: true });
    expect((await cred.getToken(`${emu.armUrl}/.default`))?.token).toBeTruthy();

    expect(await graph.removeApplicationPassword(app.id, pw.keyId)).toBe(true);
    expect(await graph.removeApplicationPassword(app.id, pw.keyId)).toBe(false);
    expect(await graph.deleteServicePrincipal(sp.id, { permanently: true })).toBe(true);
    expect(await graph.deleteApplication(app.id, { permanently: true })).toBe(true);
    expect(await graph.deleteApplication(app.id)).toBe(false);
    expect(emu.state.deletedItems.has(app.id)).toBe(false);
    expect(emu.state.deletedItems.has(sp.id)).toBe(false);
  });

  it('adds and removes group members idempotently; finds groups by escaped display name', async () => {
    const { graph } = factory().get(adminConfig());
    const [group] = await graph.findGroupsByDisplayName("o'brien team");
    expect(group?.id).toBe(tenant.groups["o'brien team"]);
    await graph.addGroupMember(group.id, tenant.admin.servicePrincipalId);
    await graph.addGroupMember(group.id, tenant.admin.servicePrincipalId);
    expect(emu.state.groups.get(group.id)!.members.has(tenant.admin.servicePrincipalId)).toBe(true);
    expect(await graph.removeGroupMember(group.id, tenant.admin.servicePrincipalId)).toBe(true);
    expect(await graph.removeGroupMember(group.id, tenant.admin.servicePrincipalId)).toBe(false);
    expect(await graph.getGroup(randomUUID())).toBeUndefined();
  });

  it('follows @odata.nextLink across pages', async () => {
    const gid = emu.state.addGroup('big').id;
    for (let i = 0; i < 5; i++) emu.state.groups.get(gid)!.members.add(emu.state.createServicePrincipal({ appId: randomUUID(), displayName: `m${i}` }).id);
    for (let i = 0; i < 3; i++) emu.state.addGroup('dup');
    const before = emu.requestLog.count({ path: `/v1.0/groups/${gid}/members` });
    const { graph } = factory().get(adminConfig());
    expect(await graph.listGroupMembers(gid)).toHaveLength(5);
    expect(emu.requestLog.count({ path: `/v1.0/groups/${gid}/members` }) - before).toBe(3);
    expect(await graph.findGroupsByDisplayName('dup')).toHaveLength(3);
  });

  it('retries 429 honouring Retry-After and 5xx, then succeeds', async () => {
    const { graph } = factory().get(adminConfig());
    emu.faults.throttle({ service: 'graph', path: `/v1.0/groups/${tenant.groups.readers}` }, 2, 1);
    const t0 = Date.now();
    expect((await graph.getGroup(tenant.groups.readers))?.displayName).toBe('readers');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1900);
    emu.faults.fail({ service: 'graph', path: '/v1.0/groups' }, 2, 503);
    expect(await graph.findGroupsByDisplayName('readers')).toHaveLength(1);
  });

  it('reports throttling that outlives the deadline as 429', async () => {
    const f = new AzureClientFactory({ env: { CLOUD_ENVIRONMENT_FILEPATH: envFile }, retry: { ...fastRetry, deadlineMs: 500 } });
    emu.faults.throttle({ service: 'graph', path: '/v1.0/groups' }, 10, 2);
    const err = await f.get(adminConfig()).graph.getGroup(tenant.groups.readers).catch((e: unknown) => e);
    expect((err as AzureProviderError).status).toBe(429);
  });

  it('a lost create-service-principal answer does not create a second one', async () => {
    const { graph } = factory().get(adminConfig());
    const app = await graph.createApplication({ displayName: `strongroom-${randomUUID()}` });
    emu.faults.fail({ service: 'graph', method: 'POST', path: /^\/v1\.0\/servicePrincipals$/, when: 'after' }, 1, 500);
    const sp = await graph.createServicePrincipal(app.appId);
    expect([...emu.state.servicePrincipals.values()].filter((s) => s.appId === app.appId)).toHaveLength(1);
    expect(sp.appId).toBe(app.appId);
    await graph.deleteApplication(app.id, { permanently: true });
  });

  it('a lost addPassword answer leaves exactly one password', async () => {
    const { graph } = factory().get(adminConfig());
    const app = await graph.createApplication({ displayName: `strongroom-${randomUUID()}` });
    emu.faults.fail({ service: 'graph', path: `/v1.0/applications/${app.id}/addPassword`, when: 'after' }, 1, 503);
    await graph.addApplicationPassword(app.id, { displayName: 'lease-1', endDateTime: new Date(Date.now() + 60_000) });
    expect(emu.state.applications.get(app.id)!.passwordCredentials).toHaveLength(1);
    await graph.deleteApplication(app.id, { permanently: true });
  });
});

describe('ARM authorization', () => {
  it('looks up role definitions by name and id, without // paths', async () => {
    const { roles } = factory().get(adminConfig());
    const [reader, ...rest] = await roles.findRoleDefinitionsByName(subScope(), 'reader');
    expect(rest).toHaveLength(0);
    expect(reader.name).toBe(BUILTIN_ROLES[2].name);
    expect(await roles.getRoleDefinition(reader.id)).toMatchObject({ roleName: 'Reader' });
    expect(await roles.getRoleDefinition(`${subScope()}/providers/Microsoft.Authorization/roleDefinitions/${randomUUID()}`)).toBeUndefined();
    expect(await roles.findRoleDefinitionsByName(subScope(), "nobody's role")).toEqual([]);
    expect(emu.requestLog.filter({ service: 'arm' }).some((e) => e.path.startsWith('//'))).toBe(false);
  });

  it('creates, reads and deletes a role assignment; a duplicate is the same assignment', async () => {
    const { roles } = factory().get(adminConfig());
    const def = (await roles.findRoleDefinitionsByName(subScope(), 'Storage Blob Data Owner'))[0];
    const scope = `${subScope()}/resourceGroups/rg1`;
    const ra = await roles.createRoleAssignment({ scope, name: randomUUID(), roleDefinitionId: def.id, principalId: tenant.admin.servicePrincipalId });
    expect(ra.id.toLowerCase()).toBe(`${scope}/providers/Microsoft.Authorization/roleAssignments/${ra.name}`.toLowerCase());
    const again = await roles.createRoleAssignment({ scope, name: randomUUID(), roleDefinitionId: def.id, principalId: tenant.admin.servicePrincipalId });
    expect(again.id).toBe(ra.id);
    expect(await roles.getRoleAssignment(ra.id)).toMatchObject({ principalId: tenant.admin.servicePrincipalId });
    expect(await roles.deleteRoleAssignment(ra.id)).toBe(true);
    expect(await roles.deleteRoleAssignment(ra.id)).toBe(false);
    expect(await roles.getRoleAssignment(ra.id)).toBeUndefined();
  });

  it('a missing subscription is a 400 not-found; an unauthorised caller a 502', async () => {
    const { roles, graph } = factory().get(adminConfig());
    const err = await roles.findRoleDefinitionsByName(`/subscriptions/${randomUUID()}`, 'Reader').catch((e: unknown) => e);
    expect((err as AzureProviderError).status).toBe(400);
    expect((err as AzureProviderError).code).toBe('SubscriptionNotFound');
    // A fresh app has no role on the subscription.
    const app = await graph.createApplication({ displayName: `strongroom-${randomUUID()}` });
    await graph.createServicePrincipal(app.appId);
    const pw = await graph.addApplicationPassword(app.id, { displayName: 'x', endDateTime: new Date(Date.now() + 60_000) });
    const denied = await factory().get(adminConfig({ clientId: app.appId, clientSecret: pw.secretText })).roles.findRoleDefinitionsByName(subScope(), 'Reader').catch((e: unknown) => e);
    expect((denied as AzureProviderError).status).toBe(502);
    expect((denied as AzureProviderError).code).toBe('AuthorizationFailed');
    await graph.deleteApplication(app.id, { permanently: true });
  });

  it('retries a role assignment through a ~3 s replication delay without a second SP', async () => {
    const { graph, roles } = factory().get(adminConfig());
    emu.faults.replicationDelay({ servicePrincipalToArm: 3000, servicePrincipalToGroups: 1000, applicationToServicePrincipal: 500 });
    const app = await graph.createApplication({ displayName: `strongroom-${randomUUID()}` });
    const sp = await graph.createServicePrincipal(app.appId);
    await graph.addGroupMember(tenant.groups.readers, sp.id);
    const def = (await roles.findRoleDefinitionsByName(subScope(), 'Contributor'))[0];
    const t0 = Date.now();
    const ra = await roles.createRoleAssignment({ scope: subScope(), name: randomUUID(), roleDefinitionId: def.id, principalId: sp.id });
    expect(Date.now() - t0).toBeGreaterThan(1000);
    expect(emu.requestLog.count({ service: 'arm', method: 'PUT', status: 400 })).toBeGreaterThan(0);
    const left = emu.state.objectsForAppId(app.appId);
    expect([...emu.state.servicePrincipals.values()].filter((s) => s.appId === app.appId)).toHaveLength(1);
    expect(left.roleAssignments.map((r) => r.id)).toEqual([ra.id]);
    expect(left.groups.map((g) => g.id)).toEqual([tenant.groups.readers]);
    await roles.deleteRoleAssignment(ra.id);
    await graph.deleteApplication(app.id, { permanently: true });
    const after = emu.state.objectsForAppId(app.appId);
    expect(after.application ?? after.servicePrincipal ?? after.roleAssignments[0] ?? after.groups[0]).toBeUndefined();
  }, 30_000);

  it('retries 5xx on ARM', async () => {
    const { roles } = factory().get(adminConfig());
    emu.faults.fail({ service: 'arm', path: '/roleDefinitions' }, 2, 500);
    emu.faults.throttle({ service: 'arm', path: '/roleDefinitions' }, 1, 1);
    expect(await roles.findRoleDefinitionsByName(subScope(), 'Owner')).toHaveLength(1);
  });
});

describe('client cache and environments', () => {
  it('caches clients per config and rebuilds when the config changes', () => {
    const f = factory();
    const a = f.get(adminConfig());
    expect(f.get(adminConfig())).toBe(a);
    expect(f.get(adminConfig({ clientSecret: 'other-secret' }))).not.toBe(a);
    f.invalidate();
    expect(f.get(adminConfig())).not.toBe(a);
  });

  it('the custom environment file resolves by name; an unknown name is a 400 naming the field', () => {
    const env = resolveEnvironment(ENV_NAME.toLowerCase(), { env: { CLOUD_ENVIRONMENT_FILEPATH: envFile } });
    expect(env).toMatchObject({ activeDirectoryEndpoint: emu.url, microsoftGraphEndpoint: emu.graphUrl, resourceManagerEndpoint: emu.armUrl, custom: true });
    const err = (() => { try { factory().get(adminConfig({ environment: 'AzureGermanCloud' })); } catch (e) { return e; } })();
    expect((err as AzureProviderError).status).toBe(400);
    expect((err as Error).message).toMatch(/^environment: /);
  });
});
