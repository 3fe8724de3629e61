// "A role may not target the engine's own application" (design.md), on every path that could break it:
// role writes naming the engine's application in any spelling, config writes that would make a role's
// application the engine's, credentials and role changes after only the environment moved client_id, and
// rotate-root. Real SDK clients against this file's emulator.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_GRAPH_PERMISSIONS, seedApp, type SeededApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, startCloudServer, startCloudWorld, subScope, tokenWorks, type CloudWorld } from '../support/cloud-engine.ts';
import type { TestServer } from '../support/server.ts';

let world: CloudWorld;
let server: TestServer;
/** The engine's environment, read on every request: a test sets CLOUD_CLIENT_ID as a restart with a new environment would. */
let env: Record<string, string>;
let target: SeededApp;

beforeAll(async () => {
  world = await startCloudWorld();
  env = { CLOUD_ENVIRONMENT_FILEPATH: world.envFile };
  server = await startCloudServer(world, { engine: { env } });
  expect((await server.request('POST', 'cloud/config', { body: adminConfig(world) })).status).toBe(204);
  target = seedApp(world.emu.state, { displayName: 'team-app' });
  expect((await server.request('POST', 'cloud/roles/team', { body: { application_object_id: target.objectId, ttl: '1h' } })).status).toBe(204);
});
afterAll(async () => {
  await server?.close();
  await world?.emu.close();
});
afterEach(() => {
  delete env.CLOUD_CLIENT_ID;
});

const readerRole = (extra: Record<string, unknown> = {}) => ({ cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }]), ...extra });
const passwordsOf = (app: SeededApp) => world.emu.state.applications.get(app.objectId)!.passwordCredentials.length;

/** Ways a client may write the same GUID. */
const SPELLINGS: Array<[string, (id: string) => string]> = [
  ['as stored', (id) => id],
  ['in upper case', (id) => id.toUpperCase()],
  ['with surrounding spaces', (id) => `  ${id}\t`],
  ['in upper case with a no-break space', (id) => `${id.toUpperCase()}\u00a0`],
];

describe('roles/:name', () => {
  it.each(SPELLINGS.flatMap(([how, spell]) => [
    [`its object id ${how}`, (a: SeededApp) => spell(a.objectId)],
    [`its client id ${how}`, (a: SeededApp) => spell(a.appId)],
  ] as const))('"a role may not target the engine\'s own application": application_object_id naming it by %s is a 400 naming the field', async (_how, name) => {
    const res = await server.request('POST', 'cloud/roles/self', { body: { application_object_id: name(world.tenant.admin) } });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.errors[0]).toContain('"application_object_id"');
    expect(res.body.errors[0]).toContain("engine's own application");
    expect((await server.request('GET', 'cloud/roles/self')).status).toBe(404);
  });

  it('another application in any case is accepted and stored as Graph spells its object id', async () => {
    const other = seedApp(world.emu.state, { displayName: 'upper-case-target' });
    expect((await server.request('POST', 'cloud/roles/upper', { body: { application_object_id: ` ${other.objectId.toUpperCase()} ` } })).status).toBe(204);
    expect((await server.request('GET', 'cloud/roles/upper')).body.data.application_object_id).toBe(other.objectId);
    expect((await server.request('GET', 'cloud/creds/upper')).status).toBe(200);
  });

  it('"the engine never manages itself": a persisted app the engine has since been pointed at is neither re-granted nor deleted by its role', async () => {
    expect((await server.request('POST', 'cloud/roles/kept', { body: readerRole({ persist_app: true }) })).status).toBe(204);
    const persisted = (await server.request('GET', 'cloud/roles/kept')).body.data.persisted_app;
    env.CLOUD_CLIENT_ID = persisted.client_id;
    const update = await server.request('POST', 'cloud/roles/kept', { body: readerRole({ cloud_roles: JSON.stringify([{ role_name: 'Contributor', scope: subScope(world) }]) }) });
    expect(update.status).toBe(400);
    expect(update.body.errors[0]).toMatch(/role 'kept' owns the application the engine signs in as/);
    const remove = await server.request('DELETE', 'cloud/roles/kept');
    expect(remove.status).toBe(400);
    expect(world.emu.state.objectsForAppId(persisted.client_id).application).toBeDefined();
    expect(world.emu.state.objectsForAppId(persisted.client_id).roleAssignments.map((r) => r.roleDefinitionId.split('/').pop())).toEqual(['acdd72a7-3385-48ef-bd42-f606fba81ae7']);
    const creds = await server.request('GET', 'cloud/creds/kept');
    expect(creds.status).toBe(400);
    expect(creds.body.errors[0]).toMatch(/role 'kept' targets the engine's own application/);

    delete env.CLOUD_CLIENT_ID;
    expect((await server.request('DELETE', 'cloud/roles/kept')).status).toBe(204);
    expect(world.emu.state.objectsForAppId(persisted.client_id).application).toBeUndefined();
  });
});

describe('config', () => {
  it.each(SPELLINGS)('"the engine may not be pointed at an application a role issues credentials on": client_id %s is a 400 naming the field and the role', async (_how, spell) => {
    const res = await server.request('POST', 'cloud/config', { body: { client_id: spell(target.appId) } });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.errors[0]).toContain('"client_id"');
    expect(res.body.errors[0]).toContain("role 'team'");
    expect((await server.request('GET', 'cloud/config')).body.data.client_id).toBe(world.tenant.admin.appId);
  });

  it('a persisted app counts as the application its role issues credentials on', async () => {
    expect((await server.request('POST', 'cloud/roles/owned', { body: readerRole({ persist_app: true }) })).status).toBe(204);
    const persisted = (await server.request('GET', 'cloud/roles/owned')).body.data.persisted_app;
    const res = await server.request('POST', 'cloud/config', { body: { client_id: persisted.client_id } });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toContain("role 'owned'");
    expect((await server.request('DELETE', 'cloud/roles/owned')).status).toBe(204);
  });

  it('a write that keeps client_id, or moves it to an application no role uses, is not held up', async () => {
    expect((await server.request('POST', 'cloud/config', { body: { root_password_ttl: '48h' } })).status).toBe(204);
    expect((await server.request('POST', 'cloud/config', { body: { client_id: ` ${world.tenant.admin.appId.toUpperCase()} ` } })).status).toBe(204);
    const spare = seedApp(world.emu.state, { displayName: 'spare-engine-app' });
    expect((await server.request('POST', 'cloud/config', { body: { client_id: spare.appId } })).status).toBe(204);
    expect((await server.request('POST', 'cloud/config', { body: adminConfig(world) })).status).toBe(204);
  });
});

describe('creds/:name', () => {
  it.each(SPELLINGS)('"credentials are not issued on the engine\'s own application", also when only the environment moved client_id (%s)', async (_how, spell) => {
    const before = passwordsOf(target);
    env.CLOUD_CLIENT_ID = spell(target.appId);
    const res = await server.request('GET', 'cloud/creds/team');
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toBe("role 'team' targets the engine's own application; credentials are not issued for it");
    expect(passwordsOf(target)).toBe(before);
  });

  it('the same role issues credentials once the engine is its own application again', async () => {
    const res = await server.request('GET', 'cloud/creds/team');
    expect(res.status).toBe(200);
    expect(res.body.data.client_id).toBe(target.appId);
    expect((await server.request('POST', 'sys/leases/revoke', { body: { lease_id: res.body.lease_id } })).status).toBe(204);
  });
});

describe('rotate-root', () => {
  it('rotates only the engine\'s own password: passwords issued on a role\'s application stay, and the engine\'s application stays untargetable', async () => {
    const root = seedApp(world.emu.state, { displayName: 'rotating-engine', graphPermissions: ADMIN_GRAPH_PERMISSIONS, ownerOf: [world.tenant.subscriptionId] });
    const s = await startCloudServer(world);
    try {
      expect((await s.request('POST', 'cloud/config', { body: { ...adminConfig(world), client_id: root.appId, client_secret: root.clientSecret } })).status).toBe(204);
      expect((await s.request('POST', 'cloud/roles/team', { body: { application_object_id: target.objectId } })).status).toBe(204);
      const issued = await s.request('GET', 'cloud/creds/team');
      expect(issued.status).toBe(200);

      expect((await s.request('POST', 'cloud/rotate-root')).status).toBe(204);
      expect(await tokenWorks(world, target.appId, issued.body.data.client_secret)).toBe(true);
      const self = await s.request('POST', 'cloud/roles/self', { body: { application_object_id: root.objectId } });
      expect(self.status).toBe(400);
      expect(self.body.errors[0]).toContain("engine's own application");
      expect((await s.request('POST', 'sys/leases/revoke', { body: { lease_id: issued.body.lease_id } })).status).toBe(204);
    } finally {
      await s.close();
    }
  });
});
