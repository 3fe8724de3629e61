// Both cloud mounts without a client secret: each authenticates to the emulated directory with its own
// plugin identity token (sub = plugin-identity:root:<class>:<accessor>) through a federated identity
// credential, so the engine issues and revokes service principals and the auth method verifies a VM
// while no secret of ours is stored anywhere.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCloudAuth } from '../../src/auth/cloud/index.ts';
import { cloudSecretsEngine } from '../../src/engines/cloud/index.ts';
import type { EmulatedResource } from '../support/azure-emulator/arm-compute.ts';
import { seedApp, seedTenant, type SeededApp, type SeededTenant } from '../support/azure-emulator/seed.ts';
import { startEmulator, type Emulator } from '../support/azure-emulator/server.ts';
import { ENV_NAME, environmentFile, FAST_RETRY, READER_ROLE_ID } from '../support/cloud-engine.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const AUDIENCE = 'api://AzureADTokenExchange';
const RESOURCE = 'https://management.azure.com/';

let emu: Emulator;
let tenant: SeededTenant;
let verifier: SeededApp;
let vm: EmulatedResource;
let s: TestServer;
const subject: Record<string, string> = {};

async function trust(app: SeededApp, name: string, sub: string): Promise<void> {
  emu.state.applications.get(app.objectId)!.federatedIdentityCredentials.push({
    id: name, name, issuer: `${s.url}/v1/identity/oidc/plugins`, subject: sub, audiences: [AUDIENCE],
  });
}

const engineConfig = (audience = AUDIENCE) => ({
  subscription_id: tenant.subscriptionId, tenant_id: emu.tenantId, client_id: tenant.admin.appId, environment: ENV_NAME, identity_token_audience: audience,
});

const readerRole = () => ({ cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: `/subscriptions/${tenant.subscriptionId}` }]), ttl: '1h' });

beforeAll(async () => {
  emu = await startEmulator();
  tenant = seedTenant(emu.state);
  verifier = seedApp(emu.state, { displayName: 'strongroom-auth' });
  emu.state.assignRole(`/subscriptions/${tenant.subscriptionId}`, READER_ROLE_ID, verifier.servicePrincipalId);
  vm = emu.compute.addVirtualMachine({ subscriptionId: tenant.subscriptionId, resourceGroup: 'rg', location: 'eastus', name: 'web01' });
  const env = { CLOUD_ENVIRONMENT_FILEPATH: await environmentFile(emu, 'cloud-federation-env-') };
  s = await startTestServer({
    listen: true,
    backends: { secret: { cloud: cloudSecretsEngine({ env, retry: FAST_RETRY }) }, auth: { cloud: createCloudAuth({ envOptions: { env } }) } },
  });
  expect((await s.request('POST', 'identity/oidc/config', { body: { issuer: s.url } })).status).toBe(204);
  subject.secret = `plugin-identity:root:secret:${(await s.request('GET', 'sys/mounts/cloud')).body.data.accessor}`;
  subject.auth = `plugin-identity:root:auth:${(await s.request('GET', 'sys/auth/cloud')).body.data.accessor}`;
  await trust(tenant.admin, 'strongroom-cloud-engine', subject.secret);
  await trust(verifier, 'strongroom-cloud-auth', subject.auth);

  expect((await s.request('POST', 'cloud/config', { body: engineConfig() })).status).toBe(204);
  const auth = await s.request('POST', 'auth/cloud/config', {
    body: { tenant_id: emu.tenantId, resource: RESOURCE, environment: ENV_NAME, client_id: verifier.appId, identity_token_audience: AUDIENCE, retry_delay: '0s', max_retry_delay: '1s' },
  });
  expect(auth.status, JSON.stringify(auth.body)).toBe(204);
  // Both writes already need the directory: roles are resolved against ARM.
  expect((await s.request('POST', 'cloud/roles/fed', { body: readerRole() })).status).toBe(204);
  expect((await s.request('POST', 'auth/cloud/role/vm', { body: { bound_resource_groups: 'rg', token_policies: 'default' } })).status).toBe(204);
});
afterAll(async () => {
  await s?.close();
  await emu?.close();
});

describe('cloud/ with identity_token_audience', () => {
  it('"issues and revokes a service principal with no client secret configured"', async () => {
    const creds = await s.request('GET', 'cloud/creds/fed');
    expect(creds.status, JSON.stringify(creds.body)).toBe(200);
    const appId = creds.body.data.client_id;
    expect(emu.state.objectsForAppId(appId).roleAssignments).toHaveLength(1);
    expect((await s.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.body.lease_id } })).status).toBe(204);
    expect(emu.state.objectsForAppId(appId).application).toBeUndefined();
    // The engine's own calls were client-assertion token requests, never a secret.
    const config = (await s.request('GET', 'cloud/config')).body.data;
    expect(config).toMatchObject({ identity_token_audience: AUDIENCE });
    expect(config).not.toHaveProperty('client_secret');
  });

  it('"rotate-root on a federated config is a 400 explaining why"', async () => {
    const r = await s.request('POST', 'cloud/rotate-root', { body: {} });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('workload identity federation');
  });

  it('"an audience the federated credential does not allow is refused by the directory: 502 naming AADSTS700212"', async () => {
    await s.request('POST', 'cloud/config', { body: { identity_token_audience: 'api://NotTrusted' } });
    try {
      const r = await s.request('GET', 'cloud/creds/fed');
      expect(r.status).toBe(502);
      expect(r.body.errors.join(' ')).toContain('AADSTS700212');
    } finally {
      await s.request('POST', 'cloud/config', { body: engineConfig() });
    }
  });

  it('"a mount whose subject has no federated credential is refused: 502 naming AADSTS700213"', async () => {
    await s.request('POST', 'sys/mounts/cloud2', { body: { type: 'cloud' } });
    await s.request('POST', 'cloud2/config', { body: engineConfig() });
    // Roles are resolved against ARM when written, so that is where the refusal surfaces.
    const r = await s.request('POST', 'cloud2/roles/fed', { body: readerRole() });
    expect(r.status).toBe(502);
    expect(r.body.errors.join(' ')).toContain(`AADSTS700213: No matching federated identity record found for presented assertion subject '${subject.secret.replace(/:[^:]+$/, '')}`);
  });
});

describe('auth/cloud/ with identity_token_audience', () => {
  it('"verifies a VM with ARM using a federated credential"', async () => {
    const jwt = await emu.miTokens.mint({ audience: RESOURCE, identity: vm.systemIdentity!, hostResourceId: vm.id });
    const r = await s.request('POST', 'auth/cloud/login', { token: null, body: { role: 'vm', jwt, subscription_id: tenant.subscriptionId, resource_group_name: 'rg', vm_name: 'web01' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(emu.requestLog.count({ service: 'arm', path: '/virtualMachines/web01' })).toBeGreaterThan(0);
  });

  it('"an audience the federated credential does not allow: login answers 502 naming AADSTS700212"', async () => {
    await s.request('POST', 'auth/cloud/config', { body: { identity_token_audience: 'api://NotTrusted' } });
    try {
      const jwt = await emu.miTokens.mint({ audience: RESOURCE, identity: vm.systemIdentity!, hostResourceId: vm.id });
      const r = await s.request('POST', 'auth/cloud/login', { token: null, body: { role: 'vm', jwt, subscription_id: tenant.subscriptionId, resource_group_name: 'rg', vm_name: 'web01' } });
      expect(r.status).toBe(502);
      expect(r.body.errors.join(' ')).toContain('AADSTS700212');
    } finally {
      await s.request('POST', 'auth/cloud/config', { body: { identity_token_audience: AUDIENCE } });
    }
  });
});
