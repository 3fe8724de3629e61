// The cloud secrets engine through the HTTP API, with the real Azure SDK clients against this file's
// own emulator: config and role validation, dynamic and existing-app credentials, revocation.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, engineApps, leftovers, startCloudServer, startCloudWorld, subScope, tokenWorks, type CloudWorld } from '../support/cloud-engine.ts';
import type { TestServer } from '../support/server.ts';

let world: CloudWorld;
let server: TestServer;

beforeAll(async () => {
  world = await startCloudWorld();
  server = await startCloudServer(world);
  expect((await server.request('POST', 'cloud/config', { body: adminConfig(world) })).status).toBe(204);
});
afterAll(async () => {
  await server?.close();
  await world?.emu.close();
});
afterEach(() => {
  world.emu.faults.clear();
});

const readerRole = (extra: Record<string, unknown> = {}) => ({
  cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }]),
  ttl: '1h',
  ...extra,
});

async function writeRole(name: string, body: Record<string, unknown>) {
  return server.request('POST', `cloud/roles/${name}`, { body });
}

async function revoke(leaseId: string) {
  return server.request('POST', 'sys/leases/revoke', { body: { lease_id: leaseId } });
}

describe('config', () => {
  it('read returns the fields with durations as integer seconds and never client_secret', async () => {
    const res = await server.request('GET', 'cloud/config');
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({
      subscription_id: world.tenant.subscriptionId, tenant_id: world.emu.tenantId, client_id: world.tenant.admin.appId,
      environment: 'StrongroomEmulator', root_password_ttl: 182 * 86_400, identity_token_ttl: 3600,
    });
    expect(JSON.stringify(res.body)).not.toContain(world.tenant.admin.clientSecret);
    expect(res.body.data).not.toHaveProperty('client_secret');
  });

  it('durations accept integer seconds and time-suffixed strings', async () => {
    expect((await server.request('POST', 'cloud/config', { body: { root_password_ttl: '48h' } })).status).toBe(204);
    expect((await server.request('GET', 'cloud/config')).body.data.root_password_ttl).toBe(172_800);
    expect((await server.request('POST', 'cloud/config', { body: { root_password_ttl: 90_000 } })).status).toBe(204);
    expect((await server.request('GET', 'cloud/config')).body.data.root_password_ttl).toBe(90_000);
  });

  it.each([
    [{ identity_token_audience: 'api://AzureADTokenExchange' }, 'identity_token_audience', "only one of 'client_secret' or 'identity_token_audience'"],
    [{ environment: 'AzureGermanCloud' }, 'environment', 'no cloud configuration matching'],
    [{ subscription_id: 'not-a-guid' }, 'subscription_id', 'GUID'],
    [{ root_password_ttl: 'soon' }, 'root_password_ttl', ''],
  ])('an invalid write (%j) is a 400 naming the field and changes nothing', async (body, fieldName, rule) => {
    const res = await server.request('POST', 'cloud/config', { body });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toContain(`"${fieldName}"`);
    expect(res.body.errors[0]).toContain(rule);
    expect((await server.request('GET', 'cloud/config')).body.data.environment).toBe('StrongroomEmulator');
  });
});

describe('roles/:name', () => {
  it('resolves role names to canonical ids and groups by name; read, list and delete work', async () => {
    const res = await writeRole('Canon', readerRole({ cloud_groups: JSON.stringify([{ group_name: 'readers' }]), tags: 'team:a, env:test', sign_in_audience: 'CloudADMyOrg' }));
    expect(res.status).toBe(204);
    const read = await server.request('GET', 'cloud/roles/canon');
    expect(read.body.data).toMatchObject({
      cloud_roles: [{ role_name: 'Reader', role_id: `${subScope(world)}/providers/Microsoft.Authorization/roleDefinitions/acdd72a7-3385-48ef-bd42-f606fba81ae7`, scope: subScope(world) }],
      cloud_groups: [{ group_name: 'readers', object_id: world.tenant.groups.readers }],
      ttl: 3600, max_ttl: 0, tags: ['team:a', 'env:test'], sign_in_audience: 'CloudADMyOrg', persist_app: false,
    });
    expect((await server.request('LIST', 'cloud/roles')).body.data.keys).toContain('canon');
    expect((await server.request('DELETE', 'cloud/roles/canon')).status).toBe(204);
    expect((await server.request('GET', 'cloud/roles/canon')).status).toBe(404);
  });

  it('role_id may be a bare GUID or a full id', async () => {
    const res = await writeRole('byid', { cloud_roles: JSON.stringify([{ role_id: 'acdd72a7-3385-48ef-bd42-f606fba81ae7', scope: subScope(world) }]) });
    expect(res.status).toBe(204);
    expect((await server.request('GET', 'cloud/roles/byid')).body.data.cloud_roles[0].role_name).toBe('Reader');
  });

  it('validation failures are 400s naming the field', async () => {
    world.emu.state.addRoleDefinition({ roleName: 'Twin', actions: ['*/read'] });
    world.emu.state.addRoleDefinition({ roleName: 'Twin', actions: ['*/read'] });
    const other = seedApp(world.emu.state, { displayName: 'validation-target' });
    const cases: Array<[Record<string, unknown>, string, string]> = [
      [{ cloud_roles: JSON.stringify([{ role_name: 'No Such Role', scope: subScope(world) }]) }, 'cloud_roles', "element 1: no role found for its role_name"],
      [{ cloud_roles: JSON.stringify([{ role_id: '00000000-0000-0000-0000-000000000001', scope: subScope(world) }]) }, 'cloud_roles', 'element 1: no role found for its role_id'],
      [{ cloud_roles: JSON.stringify([{ role_name: 'Twin', scope: subScope(world) }]) }, 'cloud_roles', 'multiple matches found'],
      [{ cloud_roles: '[{"role_name": "Reader"' }, 'cloud_roles', 'not valid JSON'],
      [{ cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: '/subscriptions/../x' }]) }, 'cloud_roles', 'scope'],
      [{ cloud_roles: JSON.stringify([{ scope: subScope(world) }]) }, 'cloud_roles', 'role_name'],
      [{ cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }, { role_name: 'reader', scope: subScope(world) }]) }, 'cloud_roles', 'element 2: duplicate role_id and scope'],
      [{ ttl: 60 }, 'cloud_roles', 'either cloud_roles or application_object_id'],
      [{ application_object_id: other.objectId, permanently_delete: true }, 'permanently_delete', 'must be false if application_object_id is provided'],
      [{ application_object_id: world.tenant.admin.objectId }, 'application_object_id', "engine's own application"],
      [{ application_object_id: '11111111-1111-1111-1111-111111111111' }, 'application_object_id', 'no application found'],
      [readerRole({ cloud_groups: JSON.stringify([{ group_name: 'nobody' }]) }), 'cloud_groups', "element 1: no group found for its group_name"],
      [readerRole({ sign_in_audience: 'AzureADMyOrg' }), 'sign_in_audience', 'CloudADMyOrg'],
      [readerRole({ tags: 'has space' }), 'tags', 'whitespaces'],
      [readerRole({ ttl: '2h', max_ttl: '1h' }), 'ttl', 'greater than max_ttl'],
    ];
    for (const [body, fieldName, rule] of cases) {
      const res = await writeRole('invalid', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.errors[0]).toContain(`"${fieldName}"`);
      expect(res.body.errors[0]).toContain(rule);
    }
    expect((await server.request('GET', 'cloud/roles/invalid')).status).toBe(404);
  });
});

describe('creds/:name (dynamic)', () => {
  it('issues a client_id/client_secret that obtain a token; revoke removes every object', async () => {
    await writeRole('dyn', readerRole({ cloud_groups: JSON.stringify([{ group_name: 'readers' }]) }));
    const res = await server.request('GET', 'cloud/creds/dyn');
    expect(res.status).toBe(200);
    const { client_id, client_secret, expiration } = res.body.data;
    expect(res.body.lease_duration).toBe(3600);
    expect(Date.parse(expiration)).toBeGreaterThan(Date.now());
    expect(await tokenWorks(world, client_id, client_secret)).toBe(true);
    const objects = world.emu.state.objectsForAppId(client_id);
    expect(objects.roleAssignments).toHaveLength(1);
    expect(objects.groups.map((g) => g.displayName)).toEqual(['readers']);

    expect((await revoke(res.body.lease_id)).status).toBe(204);
    expect(leftovers(world, client_id)).toEqual([]);
    expect(await tokenWorks(world, client_id, client_secret)).toBe(false);
  });

  it('permanently_delete also purges the application and principal from deleted items', async () => {
    await writeRole('purge', readerRole({ permanently_delete: true }));
    const res = await server.request('GET', 'cloud/creds/purge');
    const objects = world.emu.state.objectsForAppId(res.body.data.client_id);
    const ids = [objects.application!.id, objects.servicePrincipal!.id];
    await revoke(res.body.lease_id);
    expect(ids.filter((id) => world.emu.state.deletedItems.has(id))).toEqual([]);
  });

  it('under 429s, 5xx (also after the write happened) and a 3 s replication delay: one principal, no orphans', async () => {
    await writeRole('flaky', readerRole({ cloud_groups: JSON.stringify([{ group_name: 'writers' }]) }));
    const before = engineApps(world).length;
    const { faults } = world.emu;
    faults.throttle({ service: 'graph', method: 'POST', path: '/v1.0/applications' }, 2, 1);
    faults.fail({ service: 'graph', method: 'POST', path: /^\/v1\.0\/servicePrincipals$/, when: 'after' }, 1, 503);
    faults.fail({ service: 'graph', method: 'POST', path: '/addPassword' }, 1, 500);
    faults.fail({ service: 'arm', method: 'PUT', path: '/roleAssignments/', when: 'after' }, 1, 502);
    faults.throttle({ service: 'graph', method: 'POST', path: '/members/$ref' }, 1, 1);
    faults.replicationDelay({ servicePrincipalToArm: 3_000, servicePrincipalToGroups: 1_000 });
    const res = await server.request('GET', 'cloud/creds/flaky');
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const appId = res.body.data.client_id;
    expect(engineApps(world).length).toBe(before + 1);
    expect([...world.emu.state.servicePrincipals.values()].filter((sp) => sp.appId === appId)).toHaveLength(1);
    expect(world.emu.state.objectsForAppId(appId).roleAssignments).toHaveLength(1);
    expect(world.emu.state.applicationByAppId(appId)!.passwordCredentials).toHaveLength(1);
    expect(await tokenWorks(world, appId, res.body.data.client_secret)).toBe(true);

    faults.fail({ service: 'arm', method: 'DELETE', path: '/roleAssignments/' }, 1, 503);
    faults.throttle({ service: 'graph', method: 'DELETE', path: '/v1.0/applications/' }, 1, 1);
    expect((await revoke(res.body.lease_id)).status).toBe(204);
    expect(leftovers(world, appId)).toEqual([]);
  }, 30_000);

  it('a failure part-way through creation leaves nothing behind', async () => {
    await writeRole('broken', readerRole({ cloud_groups: JSON.stringify([{ group_name: 'readers' }]) }));
    const before = engineApps(world).length;
    world.emu.faults.inject({ service: 'graph', method: 'POST', path: '/members/$ref', status: 403, count: 1, code: 'Authorization_RequestDenied', message: 'Insufficient privileges to complete the operation.' });
    const res = await server.request('GET', 'cloud/creds/broken');
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(JSON.stringify(res.body)).toContain('Insufficient privileges');
    expect(engineApps(world).length).toBe(before);
    const assignments = [...world.emu.state.roleAssignments.values()].filter((r) => !world.emu.state.servicePrincipals.has(r.principalId) && r.principalId !== world.tenant.admin.servicePrincipalId);
    expect(assignments).toEqual([]);
  });

  it('an unknown role is a 404 (Vault answers 400: docs/decisions.md)', async () => {
    const res = await server.request('GET', 'cloud/creds/nope');
    expect(res.status).toBe(404);
    expect(res.body.errors[0]).toBe("role 'nope' does not exist");
  });
});

describe('creds/:name (existing application)', () => {
  it('issues a password on the application; revoke removes only that password', async () => {
    const target = seedApp(world.emu.state, { displayName: 'existing-app' });
    expect((await writeRole('existing', { application_object_id: target.objectId, ttl: 600 })).status).toBe(204);
    const res = await server.request('GET', 'cloud/creds/existing');
    expect(res.status).toBe(200);
    expect(res.body.data.client_id).toBe(target.appId);
    expect(await tokenWorks(world, target.appId, res.body.data.client_secret)).toBe(true);
    const app = world.emu.state.applications.get(target.objectId)!;
    expect(app.passwordCredentials).toHaveLength(2);

    expect((await revoke(res.body.lease_id)).status).toBe(204);
    expect(app.passwordCredentials.map((p) => p.keyId)).toEqual([target.keyId]);
    expect(await tokenWorks(world, target.appId, res.body.data.client_secret)).toBe(false);
    expect(await tokenWorks(world, target.appId, target.clientSecret)).toBe(true);
    // Already gone counts as revoked: the application itself may have been deleted meanwhile.
    const again = await server.request('GET', 'cloud/creds/existing');
    world.emu.state.deleteApplication(target.objectId);
    expect((await revoke(again.body.lease_id)).status).toBe(204);
  });
});

describe('roles/:name with persist_app', () => {
  it('creates one application for the role, issues passwords on it, and removes it with the role', async () => {
    expect((await writeRole('kept', readerRole({ persist_app: true, cloud_groups: JSON.stringify([{ group_name: 'readers' }]) }))).status).toBe(204);
    const persisted = (await server.request('GET', 'cloud/roles/kept')).body.data.persisted_app;
    expect(persisted.client_id).toMatch(/^[0-9a-f-]{36}$/);
    const objects = world.emu.state.objectsForAppId(persisted.client_id);
    expect(objects.roleAssignments).toHaveLength(1);
    expect(objects.groups).toHaveLength(1);

    const a = await server.request('GET', 'cloud/creds/kept');
    const b = await server.request('GET', 'cloud/creds/kept');
    expect(a.body.data.client_id).toBe(persisted.client_id);
    expect(b.body.data.client_id).toBe(persisted.client_id);
    expect(await tokenWorks(world, persisted.client_id, a.body.data.client_secret)).toBe(true);
    await revoke(a.body.lease_id);
    expect(await tokenWorks(world, persisted.client_id, a.body.data.client_secret)).toBe(false);
    expect(await tokenWorks(world, persisted.client_id, b.body.data.client_secret)).toBe(true);

    // A role update re-grants: Contributor replaces Reader on the same principal.
    expect((await writeRole('kept', { cloud_roles: JSON.stringify([{ role_name: 'Contributor', scope: subScope(world) }]) })).status).toBe(204);
    const updated = world.emu.state.objectsForAppId(persisted.client_id).roleAssignments;
    expect(updated.map((r) => r.roleDefinitionId.split('/').pop())).toEqual(['b24988ac-6180-42a0-ab88-20f7382dd24c']);

    await revoke(b.body.lease_id);
    expect((await server.request('DELETE', 'cloud/roles/kept')).status).toBe(204);
    expect(leftovers(world, persisted.client_id)).toEqual([]);
  });
});
