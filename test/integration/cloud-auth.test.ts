// The cloud auth method through the real HTTP API, verifying tokens minted by this file's emulator
// (v1 discovery + JWKS) and resources through @azure/arm-compute and @azure/arm-msi over HTTPS.
import { createHmac, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmulatedResource, UserAssignedIdentity } from '../support/azure-emulator/arm-compute.ts';
import { seedApp, seedTenant, type SeededTenant } from '../support/azure-emulator/seed.ts';
import { startEmulator, type Emulator } from '../support/azure-emulator/server.ts';
import type { MintInput } from '../support/azure-emulator/managed-identity-tokens.ts';
import { ENV_NAME, environmentFile, READER_ROLE_ID } from '../support/cloud-engine.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const RESOURCE = 'https://management.azure.com/';
const RG = 'rg-app';

let emu: Emulator;
let tenant: SeededTenant;
let server: TestServer;
let sub: string;
let web01: EmulatedResource;
let web: EmulatedResource;
let pool: EmulatedResource;
let poolIdentity: UserAssignedIdentity;
let flex: EmulatedResource;
let flexIdentity: UserAssignedIdentity;
let site: EmulatedResource;
let strayIdentity: UserAssignedIdentity;
let appSp: { principalId: string; clientId: string };
let otherSp: { principalId: string; clientId: string };

const mint = (input: Partial<MintInput> & Pick<MintInput, 'identity'>): Promise<string> => emu.miTokens.mint({ audience: RESOURCE, ...input });
const nowSec = (): number => Math.floor(Date.now() / 1000);

async function login(body: Record<string, unknown>, path = 'auth/cloud/login') {
  return server.request('POST', path, { body, token: null });
}

beforeAll(async () => {
  emu = await startEmulator();
  tenant = seedTenant(emu.state, { groups: ['deployers', 'others'] });
  sub = tenant.subscriptionId;
  process.env.CLOUD_ENVIRONMENT_FILEPATH = await environmentFile(emu, 'cloud-auth-env-');

  // The server's own identity only reads compute resources: Reader on the subscription.
  const verifierApp = seedApp(emu.state, { displayName: 'strongroom-auth' });
  emu.state.assignRole(`/subscriptions/${sub}`, READER_ROLE_ID, verifierApp.servicePrincipalId);

  const place = { subscriptionId: sub, resourceGroup: RG, location: 'eastus' };
  web01 = emu.compute.addVirtualMachine({ ...place, name: 'web01' });
  web = emu.compute.addVirtualMachine({ ...place, name: 'web' });
  poolIdentity = emu.compute.addUserAssignedIdentity({ ...place, name: 'pool-id' });
  pool = emu.compute.addScaleSet({ ...place, name: 'pool', orchestration: 'Uniform', systemAssigned: false, userAssigned: [poolIdentity] });
  flexIdentity = emu.compute.addUserAssignedIdentity({ ...place, resourceGroup: 'rg-identities', name: 'flex-id' });
  flex = emu.compute.addScaleSet({ ...place, name: 'flex', orchestration: 'Flexible', systemAssigned: false, userAssigned: [flexIdentity] });
  site = emu.compute.addResource({ ...place, namespace: 'Microsoft.Web', type: 'sites', name: 'api' });
  strayIdentity = emu.compute.addUserAssignedIdentity({ ...place, name: 'stray-id' });
  const app = seedApp(emu.state, { displayName: 'ci-runner' });
  appSp = { principalId: app.servicePrincipalId, clientId: app.appId };
  const other = seedApp(emu.state, { displayName: 'someone-else' });
  otherSp = { principalId: other.servicePrincipalId, clientId: other.appId };

  server = await startTestServer();
  const config = await server.request('POST', 'auth/cloud/config', {
    body: {
      tenant_id: emu.tenantId, resource: RESOURCE, environment: ENV_NAME, client_id: verifierApp.appId, client_secret: verifierApp.clientSecret,
      retry_delay: '0s', max_retry_delay: '1s',
    },
  });
  expect(config.status).toBe(204);
  const policy = await server.request('POST', 'sys/policies/acl/mounts-reader', { body: { policy: 'path "sys/mounts" { capabilities = ["read"] }' } });
  expect(policy.status).toBe(204);
});

afterAll(async () => {
  await server?.close();
  await emu?.close();
});

async function role(name: string, body: Record<string, unknown>): Promise<void> {
  const res = await server.request('POST', `auth/cloud/role/${name}`, { body: { token_policies: 'mounts-reader', ...body } });
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
}

function expectDenied(res: { status: number; body: any }, check: RegExp, secrets: string[] = []): void {
  expect(res.status, JSON.stringify(res.body)).toBe(403);
  const text = res.body.errors.join(' ');
  expect(text).toMatch(check);
  for (const s of secrets) expect(text).not.toContain(s);
}

describe('config', () => {
  it('read never returns client_secret; identity_token_audience with client_secret is a 400', async () => {
    const read = await server.request('GET', 'auth/cloud/config');
    expect(read.status).toBe(200);
    expect(read.body.data).toMatchObject({ tenant_id: emu.tenantId, resource: RESOURCE, environment: ENV_NAME, max_retries: 3 });
    expect(read.body.data).not.toHaveProperty('client_secret');
    const both = await server.request('POST', 'auth/cloud/config', { body: { identity_token_audience: 'api://strongroom' } });
    expect(both.status).toBe(400);
    expect(both.body.errors[0]).toMatch(/only one of 'client_secret' or 'identity_token_audience'/);
  });

  it('an unknown environment and a malformed tenant are 400s naming the field', async () => {
    const env = await server.request('POST', 'auth/cloud/config', { body: { environment: 'AzureGermanCloud' } });
    expect(env.status).toBe(400);
    expect(env.body.errors[0]).toMatch(/field "environment"/);
    const t = await server.request('POST', 'auth/cloud/config', { body: { tenant_id: 'not a tenant' } });
    expect(t.status).toBe(400);
    expect(t.body.errors[0]).toMatch(/field "tenant_id"/);
  });
});

describe('role/:name', () => {
  it('a role needs at least one bound constraint, and more than wildcards when nothing is verified with ARM', async () => {
    const none = await server.request('POST', 'auth/cloud/role/empty', { body: { token_policies: 'x' } });
    expect(none.status).toBe(400);
    expect(none.body.errors[0]).toMatch(/at least one bound constraint/);
    const stars = await server.request('POST', 'auth/cloud/role/stars', { body: { bound_service_principal_ids: '*', bound_group_ids: '*' } });
    expect(stars.status).toBe(400);
    expect(stars.body.errors[0]).toMatch(/bound_service_principal_ids/);
  });

  it('reads back lists given as comma strings, lists roles, and rejects bad token fields by name', async () => {
    await role('Listed', { bound_group_ids: 'a, b', token_ttl: '1h', token_max_ttl: '2h' });
    const read = await server.request('GET', 'auth/cloud/role/listed');
    expect(read.body.data).toMatchObject({ bound_group_ids: ['a', 'b'], token_ttl: 3600, token_max_ttl: 7200, token_policies: ['mounts-reader'] });
    const list = await server.request('LIST', 'auth/cloud/role');
    expect(list.body.data.keys).toContain('listed');
    const bad = await server.request('POST', 'auth/cloud/role/listed', { body: { token_ttl: '3h' } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0]).toMatch(/token_ttl/);
    const cidr = await server.request('POST', 'auth/cloud/role/listed', { body: { token_bound_cidrs: '10.0.0.0/33' } });
    expect(cidr.status).toBe(400);
    expect(cidr.body.errors[0]).toMatch(/token_bound_cidrs/);
    expect((await server.request('DELETE', 'auth/cloud/role/listed')).status).toBe(204);
  });

  it('"no login can mint root": a refused write leaves the role as it was, and its login gets the old policies', async () => {
    await role('escalate', { bound_service_principal_ids: appSp.principalId });
    for (const token_policies of ['ROOT', ['default', ' root '], 'default,response-wrapping']) {
      const res = await server.request('POST', 'auth/cloud/role/escalate', { body: { token_policies } });
      expect(res.status, JSON.stringify(token_policies)).toBe(400);
      expect(res.body.errors[0]).toContain('"token_policies"');
    }
    const res = await login({ role: 'escalate', jwt: await mint({ identity: appSp }) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth.policies).toEqual(['default', 'mounts-reader']);
    expect((await server.request('POST', 'sys/auth/escalated', { token: res.body.auth.client_token, body: { type: 'cloud' } })).status).toBe(403);
  });
});

describe('login', () => {
  it('SP-bound role: a token for the bound principal logs in, passes ACL for its policies and gets 403 elsewhere', async () => {
    await role('ci', { bound_service_principal_ids: appSp.principalId });
    const res = await login({ role: 'ci', jwt: await mint({ identity: appSp }) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const auth = res.body.auth;
    expect(auth.policies).toEqual(['default', 'mounts-reader']);
    expect(auth.renewable).toBe(true);
    expect(auth.accessor).toBeTruthy();
    expect(auth.entity_id).toBeTruthy();
    expect(auth.metadata).toEqual({ role: 'ci', app_id: appSp.clientId });
    expect((await server.request('GET', 'sys/mounts', { token: auth.client_token })).status).toBe(200);
    expect((await server.request('GET', 'sys/policies/acl', { token: auth.client_token })).status).toBe(403);
    const again = await login({ role: 'ci', jwt: await mint({ identity: appSp }) });
    expect(again.body.auth.entity_id).toBe(auth.entity_id);
    const self = await server.request('GET', 'auth/token/lookup-self', { token: auth.client_token });
    expect(self.body.data.display_name).toBe(`cloud-${appSp.principalId}`);
  });

  it('a role or config change applies to the next login (parsed roles and config are cached between writes)', async () => {
    await role('cached', { bound_service_principal_ids: appSp.principalId });
    const jwt = await mint({ identity: appSp });
    expect((await login({ role: 'cached', jwt })).body.auth.policies).toEqual(['default', 'mounts-reader']);
    await role('cached', { bound_service_principal_ids: appSp.principalId, token_policies: 'other', token_no_default_policy: true });
    expect((await login({ role: 'cached', jwt })).body.auth.policies).toEqual(['other']);
    await role('cached', { bound_service_principal_ids: otherSp.principalId });
    expectDenied(await login({ role: 'cached', jwt }), /service principal/i);
    const resource = await server.request('POST', 'auth/cloud/config', { body: { resource: 'https://vault.example/' } });
    expect(resource.status).toBe(204);
    expectDenied(await login({ role: 'cached', jwt: await mint({ identity: otherSp }) }), /audience/);
    expect((await server.request('POST', 'auth/cloud/config', { body: { resource: RESOURCE } })).status).toBe(204);
    expect((await login({ role: 'cached', jwt: await mint({ identity: otherSp }) })).status).toBe(200);
    expect((await server.request('DELETE', 'auth/cloud/role/cached')).status).toBe(204);
    const gone = await login({ role: 'cached', jwt: await mint({ identity: otherSp }) });
    expect(gone.status).toBe(400);
    expect(gone.body.errors[0]).toMatch(/field "role"/);
  });

  it('group-bound role: one matching groups claim value is enough; none is a 403', async () => {
    await role('deployers', { bound_group_ids: tenant.groups.deployers });
    const ok = await login({ role: 'deployers', jwt: await mint({ identity: otherSp, groups: [tenant.groups.others, tenant.groups.deployers] }) });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const no = await login({ role: 'deployers', jwt: await mint({ identity: otherSp, groups: [tenant.groups.others] }) });
    expectDenied(no, /groups not authorized/, [tenant.groups.others, otherSp.principalId]);
  });

  it('principal not bound: 403 naming the check, not the object id', async () => {
    await role('ci', { bound_service_principal_ids: appSp.principalId });
    const res = await login({ role: 'ci', jwt: await mint({ identity: otherSp }) });
    expectDenied(res, /service principal not authorized/, [otherSp.principalId]);
  });

  it('VM role: the VM\'s system-assigned identity logs in; metadata records the verified resource', async () => {
    await role('vm', { bound_resource_groups: RG, bound_locations: 'eastus' });
    const res = await login({ role: 'vm', jwt: await mint({ identity: web01.systemIdentity!, hostResourceId: web01.id }), subscription_id: sub, resource_group_name: RG, vm_name: 'web01' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth.metadata).toMatchObject({ role: 'vm', subscription_id: sub, resource_group_name: RG, vm_name: 'web01' });
    expect(emu.requestLog.count({ service: 'arm', path: '/virtualMachines/web01' })).toBeGreaterThan(0);
  });

  it('VM whose identity differs: a user-assigned identity not attached to the VM is refused by ARM verification', async () => {
    await role('vm', { bound_resource_groups: RG });
    const jwt = await mint({ identity: strayIdentity.identity, userAssignedResourceId: strayIdentity.id, hostResourceId: web01.id });
    expectDenied(await login({ role: 'vm', jwt, subscription_id: sub, resource_group_name: RG, vm_name: 'web01' }), /not an identity of the named virtual machine/);
    const otherVm = await mint({ identity: web.systemIdentity!, hostResourceId: web.id });
    expectDenied(await login({ role: 'vm', jwt: otherVm, subscription_id: sub, resource_group_name: RG, vm_name: 'web01' }), /does not name vm_name/);
  });

  it('"web" vs "web01": a token from web01 cannot log in as vm web, nor rg "rg" match "rg-app"', async () => {
    await role('vm', { bound_resource_groups: [RG, 'rg'] });
    const jwt = await mint({ identity: web01.systemIdentity!, hostResourceId: web01.id });
    expectDenied(await login({ role: 'vm', jwt, subscription_id: sub, resource_group_name: RG, vm_name: 'web' }), /does not name vm_name/);
    expectDenied(await login({ role: 'vm', jwt, subscription_id: sub, resource_group_name: 'rg', vm_name: 'web01' }), /does not name vm_name/);
  });

  it('uniform VMSS: the scale set\'s user-assigned identity logs in with vmss_name; bound_scale_sets applies', async () => {
    await role('pool', { bound_scale_sets: 'pool', bound_resource_groups: RG });
    const jwt = await mint({ identity: poolIdentity.identity, userAssignedResourceId: poolIdentity.id, hostResourceId: `${pool.id}/virtualMachines/3` });
    const res = await login({ role: 'pool', jwt, subscription_id: sub, resource_group_name: RG, vmss_name: 'pool' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth.metadata.vmss_name).toBe('pool');
    await role('other-pool', { bound_scale_sets: 'pool2', bound_resource_groups: RG });
    expectDenied(await login({ role: 'other-pool', jwt, subscription_id: sub, resource_group_name: RG, vmss_name: 'pool' }), /scale set not authorized/);
  });

  it('flexible VMSS: an instance "flex_<id>" logs in; the identity\'s principal id is read through arm-msi', async () => {
    await role('flex', { bound_scale_sets: 'flex' });
    const instance = emu.compute.addVirtualMachine({ subscriptionId: sub, resourceGroup: RG, name: 'flex_a1b2c3d4', systemAssigned: false, userAssigned: [flexIdentity], scaleSet: flex }).id;
    const jwt = await mint({ identity: flexIdentity.identity, userAssignedResourceId: flexIdentity.id, hostResourceId: instance });
    emu.requestLog.clear();
    const res = await login({ role: 'flex', jwt, subscription_id: sub, resource_group_name: RG, vmss_name: 'flex' });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(emu.requestLog.count({ service: 'arm', path: '/userAssignedIdentities/flex-id' })).toBe(1);
    expect(flex.orchestration).toBe('Flexible');
    const lookalike = await mint({ identity: flexIdentity.identity, userAssignedResourceId: flexIdentity.id, hostResourceId: instance.replace('flex_', 'flexible_') });
    expectDenied(await login({ role: 'flex', jwt: lookalike, subscription_id: sub, resource_group_name: RG, vmss_name: 'flex' }), /not an instance of vmss_name/);
  });

  it('flexible VMSS: "a VM outside the scale set that carries its identity and follows its naming is not an instance"', async () => {
    await role('flex-only', { bound_scale_sets: 'flex' });
    const rogue = emu.compute.addVirtualMachine({ subscriptionId: sub, resourceGroup: RG, name: 'flex_rogue', systemAssigned: false, userAssigned: [flexIdentity] });
    const jwt = await mint({ identity: flexIdentity.identity, userAssignedResourceId: flexIdentity.id, hostResourceId: rogue.id });
    expectDenied(await login({ role: 'flex-only', jwt, subscription_id: sub, resource_group_name: RG, vmss_name: 'flex' }), /not a member of vmss_name/);
    // A claimed instance that does not exist at all is refused the same way.
    const ghost = await mint({ identity: flexIdentity.identity, userAssignedResourceId: flexIdentity.id, hostResourceId: rogue.id.replace('flex_rogue', 'flex_ghost') });
    expectDenied(await login({ role: 'flex-only', jwt: ghost, subscription_id: sub, resource_group_name: RG, vmss_name: 'flex' }), /not a member of vmss_name/);
  });

  it('resource_id role: an App Service identity logs in; the API version comes from the provider (newest stable)', async () => {
    await role('site', { bound_resource_groups: RG, bound_locations: 'eastus' });
    const jwt = await mint({ identity: site.systemIdentity!, hostResourceId: site.id });
    const res = await login({ role: 'site', jwt, subscription_id: sub, resource_group_name: RG, resource_id: site.id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth.metadata.resource_id).toBe(site.id);
    expect(emu.requestLog.filter({ service: 'arm', path: '/sites/api' }).some((e) => e.query.includes('2023-12-01'))).toBe(true);
    expectDenied(await login({ role: 'site', jwt, subscription_id: sub, resource_group_name: RG, resource_id: web01.id }), /does not name resource_id/);
  });

  it('resource_id naming a user-assigned identity: a workload presenting that identity\'s own token logs in (AKS workload identity); another identity\'s token does not', async () => {
    await role('uai', { bound_resource_groups: RG });
    // No host claim: the token was obtained by federation, not on a VM, so xms_mirid names the identity alone.
    const jwt = await mint({ identity: strayIdentity.identity, userAssignedResourceId: strayIdentity.id });
    const res = await login({ role: 'uai', jwt, subscription_id: sub, resource_group_name: RG, resource_id: strayIdentity.id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth.metadata.resource_id).toBe(strayIdentity.id);
    const others = await mint({ identity: poolIdentity.identity, userAssignedResourceId: poolIdentity.id });
    expectDenied(await login({ role: 'uai', jwt: others, subscription_id: sub, resource_group_name: RG, resource_id: strayIdentity.id }), /does not name resource_id/);
    // Bound to another resource group: the identity's own placement is checked like any resource's.
    await role('uai-elsewhere', { bound_resource_groups: 'rg-identities' });
    expectDenied(await login({ role: 'uai-elsewhere', jwt, subscription_id: sub, resource_group_name: RG, resource_id: strayIdentity.id }), /resource group/);
  });

  it('missing subscription_id/resource_group_name with resource bounds is a 400 naming the fields', async () => {
    await role('vm', { bound_resource_groups: RG });
    const jwt = await mint({ identity: web01.systemIdentity!, hostResourceId: web01.id });
    const res = await login({ role: 'vm', jwt, vm_name: 'web01' });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/subscription_id.*resource_group_name/);
    const noTarget = await login({ role: 'vm', jwt, subscription_id: sub, resource_group_name: RG });
    expect(noTarget.status).toBe(400);
    expect(noTarget.body.errors[0]).toMatch(/vm_name/);
    const badSub = await login({ role: 'vm', jwt, subscription_id: 'nope', resource_group_name: RG, vm_name: 'web01' });
    expect(badSub.status).toBe(400);
    expect(badSub.body.errors[0]).toMatch(/field "subscription_id"/);
  });

  it('missing role or jwt and an unknown role are 400s naming the field', async () => {
    expect((await login({ jwt: 'x.y.z' })).body.errors.join()).toMatch(/"role"/);
    expect((await login({ role: 'ci' })).body.errors.join()).toMatch(/"jwt"/);
    const unknown = await login({ role: 'nope', jwt: await mint({ identity: appSp }) });
    expect(unknown.status).toBe(400);
    expect(unknown.body.errors[0]).toMatch(/field "role"/);
  });
});

describe('login: forged tokens', () => {
  const b64 = (v: unknown): string => Buffer.from(JSON.stringify(v)).toString('base64url');

  beforeAll(async () => {
    await role('forged', { bound_service_principal_ids: appSp.principalId });
  });

  async function expectForgedDenied(jwt: string, check: RegExp): Promise<void> {
    const res = await login({ role: 'forged', jwt });
    expect(res.status, JSON.stringify(res.body)).toBe(403);
    const text = res.body.errors.join(' ');
    expect(text).toMatch(check);
    expect(text).not.toContain(appSp.principalId);
    expect(text).not.toContain(jwt.slice(0, 20));
  }

  it('a genuine token logs in (the corpus below differs from it in one respect each)', async () => {
    expect((await login({ role: 'forged', jwt: await mint({ identity: appSp }) })).status).toBe(200);
  });

  it('alg none', async () => {
    const [, payload] = (await mint({ identity: appSp })).split('.');
    await expectForgedDenied(`${b64({ alg: 'none', typ: 'JWT' })}.${payload}.`, /algorithm/);
  });

  it('HS256 signed with the public key', async () => {
    const jwk = emu.miTokens.publicJwks()[0];
    const [, payload] = (await mint({ identity: appSp })).split('.');
    const input = `${b64({ alg: 'HS256', typ: 'JWT', kid: jwk.kid })}.${payload}`;
    const sig = createHmac('sha256', JSON.stringify(jwk)).update(input).digest('base64url');
    await expectForgedDenied(`${input}.${sig}`, /algorithm/);
  });

  it('wrong aud', async () => {
    await expectForgedDenied(await mint({ identity: appSp, audience: 'https://graph.microsoft.com' }), /audience/);
    await expectForgedDenied(await mint({ identity: appSp, audience: RESOURCE.replace(/\/$/, '') }), /audience/);
  });

  it('wrong iss / tenant', async () => {
    await expectForgedDenied(await mint({ identity: appSp, issuer: `https://sts.windows.net/${randomUUID()}/` }), /issuer/);
    await expectForgedDenied(await mint({ identity: appSp, issuer: `https://login.microsoftonline.com/${emu.tenantId}/v2.0` }), /issuer/);
    const foreign = await startEmulator();
    try {
      await expectForgedDenied(await foreign.miTokens.mint({ identity: appSp, audience: RESOURCE }), /key id/);
    } finally {
      await foreign.close();
    }
  });

  it.each([
    ['another tenant', () => ({ tid: randomUUID() }), /tenant \(tid\) is not the configured tenant/],
    ['no tid at all', () => ({ tid: undefined }), /no tenant \(tid\) claim/],
  ])('"a token whose tid is not the configured tenant is refused, even under the right issuer": %s', async (_name, claims, check) => {
    const jwt = await mint({ identity: appSp, claims: claims() });
    expect(JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString()).iss).toBe(emu.miTokens.issuer);
    await expectForgedDenied(jwt, check);
  });

  it.each([
    ['the configured tenant', () => emu.tenantId],
    ['the configured tenant in upper case (GUIDs compare case-insensitively)', () => emu.tenantId.toUpperCase()],
  ])('a token whose tid is %s logs in', async (_name, tid) => {
    const res = await login({ role: 'forged', jwt: await mint({ identity: appSp, claims: { tid: tid() } }) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  });

  it('"a tenant configured by domain name is bound by the tenant id its issuer names"', async () => {
    expect((await server.request('POST', 'sys/auth/cloud-by-domain', { body: { type: 'cloud' } })).status).toBe(204);
    const config = await server.request('POST', 'auth/cloud-by-domain/config', { body: { tenant_id: emu.state.tenantDomain, resource: RESOURCE, environment: ENV_NAME } });
    expect(config.status).toBe(204);
    expect((await server.request('POST', 'auth/cloud-by-domain/role/forged', { body: { bound_service_principal_ids: appSp.principalId } })).status).toBe(204);
    const ok = await login({ role: 'forged', jwt: await mint({ identity: appSp }) }, 'auth/cloud-by-domain/login');
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    const other = await login({ role: 'forged', jwt: await mint({ identity: appSp, claims: { tid: randomUUID() } }) }, 'auth/cloud-by-domain/login');
    expectDenied(other, /tenant \(tid\) is not the configured tenant/);
  });

  it('expired beyond the skew allowance (but accepted within it)', async () => {
    const t = nowSec();
    await expectForgedDenied(await mint({ identity: appSp, issuedAtSec: t - 7200, expiresAtSec: t - 300 }), /expired/);
    expect((await login({ role: 'forged', jwt: await mint({ identity: appSp, issuedAtSec: t - 7200, expiresAtSec: t - 20 }) })).status).toBe(200);
  });

  it('nbf in the future', async () => {
    await expectForgedDenied(await mint({ identity: appSp, notBeforeSec: nowSec() + 600 }), /not yet valid/);
  });

  it('unknown kid, and a flood of random kids refreshes the keys at most once', async () => {
    const before = emu.requestLog.count({ service: 'login', path: '/discovery/keys' });
    for (let i = 0; i < 25; i++) await expectForgedDenied(await mint({ identity: appSp, kid: randomUUID() }), /key id/);
    expect(emu.requestLog.count({ service: 'login', path: '/discovery/keys' }) - before).toBeLessThanOrEqual(1);
  });

  it('tampered payload', async () => {
    const [h, p, s] = (await mint({ identity: otherSp })).split('.');
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString());
    await expectForgedDenied(`${h}.${b64({ ...claims, oid: appSp.principalId })}.${s}`, /signature/);
  });

  it('oversized and malformed tokens are 400s naming jwt', async () => {
    const big = await mint({ identity: appSp, claims: { padding: 'x'.repeat(20_000) } });
    const res = await login({ role: 'forged', jwt: big });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/field "jwt".*longer than/);
    const bad = await login({ role: 'forged', jwt: 'not-a-jwt' });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0]).toMatch(/field "jwt"/);
  });
});

describe('renew', () => {
  it('re-checks the role: current TTLs apply, a principal no longer bound or a deleted role is refused', async () => {
    await role('renewing', { bound_service_principal_ids: appSp.principalId, token_ttl: '10m', token_max_ttl: '1h' });
    const res = await login({ role: 'renewing', jwt: await mint({ identity: appSp }) });
    expect(res.body.auth.lease_duration).toBe(600);
    const token = res.body.auth.client_token;
    await role('renewing', { token_ttl: '20m' });
    const renewed = await server.request('POST', 'auth/token/renew-self', { token });
    expect(renewed.status, JSON.stringify(renewed.body)).toBe(200);
    expect(renewed.body.auth.lease_duration).toBe(1200);
    await role('renewing', { bound_service_principal_ids: otherSp.principalId });
    expectDenied(await server.request('POST', 'auth/token/renew-self', { token }), /service principal not authorized/);
    await role('renewing', { bound_service_principal_ids: appSp.principalId });
    expect((await server.request('DELETE', 'auth/cloud/role/renewing')).status).toBe(204);
    expectDenied(await server.request('POST', 'auth/token/renew-self', { token }), /no longer exists/);
  });

  it('"renewal applies the role\'s current policies": a periodic token renews while they are unchanged; after a change it is refused and a new login gets the new ones', async () => {
    await role('periodic', { bound_service_principal_ids: appSp.principalId, token_period: '1h' });
    const first = await login({ role: 'periodic', jwt: await mint({ identity: appSp }) });
    expect(first.body.auth.policies).toEqual(['default', 'mounts-reader']);
    const token = first.body.auth.client_token;
    // Unchanged policies, whatever else changes or however they are spelled: renewals go on.
    for (const body of [{}, { token_policies: ' Mounts-Reader ' }, { token_ttl: '5m' }]) {
      await role('periodic', body);
      const renewed = await server.request('POST', 'auth/token/renew-self', { token });
      expect(renewed.status, JSON.stringify(renewed.body)).toBe(200);
      expect(renewed.body.auth.lease_duration).toBe(3600);
    }

    await role('periodic', { token_policies: 'other' });
    const refused = await server.request('POST', 'auth/token/renew-self', { token });
    expectDenied(refused, /policies have changed.*log in again/, ['mounts-reader', 'other']);
    // The old policies do not come back by renewing through the accessor either.
    const accessor = first.body.auth.accessor;
    expectDenied(await server.request('POST', 'auth/token/renew-accessor', { body: { accessor } }), /policies have changed/);
    expect((await server.request('GET', 'auth/token/lookup-self', { token })).body.data.policies).toEqual(['default', 'mounts-reader']);

    const next = await login({ role: 'periodic', jwt: await mint({ identity: appSp }) });
    expect(next.body.auth.policies).toEqual(['default', 'other']);
    expect((await server.request('POST', 'auth/token/renew-self', { token: next.body.auth.client_token })).status).toBe(200);

    // token_no_default_policy changes the policies a login gives, so it counts as a change too.
    await role('periodic', { token_policies: 'other', token_no_default_policy: true });
    expectDenied(await server.request('POST', 'auth/token/renew-self', { token: next.body.auth.client_token }), /policies have changed/);
  });
});
