// The cloud secrets engine over time: rotate-root, environment overrides, lease expiry on a fake
// clock, and the creation WAL sweep after a restart - real SDK clients against this file's emulator.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { ADMIN_GRAPH_PERMISSIONS, seedApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, engineApps, ENV_NAME, leftovers, startCloudServer, startCloudWorld, subScope, tokenWorks, type CloudWorld } from '../support/cloud-engine.ts';
import type { TestServer } from '../support/server.ts';

let world: CloudWorld;
const servers: TestServer[] = [];

beforeAll(async () => {
  world = await startCloudWorld();
});
afterAll(async () => {
  for (const s of servers) await s.close().catch(() => undefined);
  await world?.emu.close();
});
afterEach(() => {
  world.emu.faults.clear();
});

async function server(opts: Parameters<typeof startCloudServer>[1] = {}): Promise<TestServer> {
  const s = await startCloudServer(world, opts);
  servers.push(s);
  return s;
}

const role = () => ({ cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }]), ttl: 60 });

describe('rotate-root', () => {
  it('switches to a new secret, leaves the old one unusable and other passwords on the app intact', async () => {
    const root = seedApp(world.emu.state, { displayName: 'rotating-root', graphPermissions: ADMIN_GRAPH_PERMISSIONS, ownerOf: [world.tenant.subscriptionId] });
    const app = world.emu.state.applications.get(root.objectId)!;
    const foreign = world.emu.state.addPassword(app, { displayName: 'ci-pipeline' });
    const s = await server();
    await s.request('POST', 'cloud/config', { body: { ...adminConfig(world), client_id: root.appId, client_secret: root.clientSecret, root_password_ttl: '24h' } });

    const res = await s.request('POST', 'cloud/rotate-root');
    expect(res.status, JSON.stringify(res.body)).toBe(204);
    expect(await tokenWorks(world, root.appId, root.clientSecret)).toBe(false);
    expect(await tokenWorks(world, root.appId, foreign.secretText)).toBe(true);
    expect(app.passwordCredentials.map((p) => p.displayName)).toEqual(['ci-pipeline', expect.stringMatching(/^strongroom-root-/)]);
    const expiry = Date.parse((await s.request('GET', 'cloud/config')).body.data.root_password_expiration_date);
    expect(Math.abs(expiry - (Date.now() + 86_400_000))).toBeLessThan(60_000);

    // The engine works with the secret only it knows, and a second rotation removes the first one.
    expect((await s.request('POST', 'cloud/roles/after', { body: role() })).status).toBe(204);
    const creds = await s.request('GET', 'cloud/creds/after');
    expect(creds.status).toBe(200);
    const firstRotated = app.passwordCredentials[1].keyId;
    expect((await s.request('POST', 'cloud/rotate-root')).status).toBe(204);
    expect(app.passwordCredentials.map((p) => p.keyId)).not.toContain(firstRotated);
    expect(app.passwordCredentials).toHaveLength(2);
    expect((await s.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.body.lease_id } })).status).toBe(204);
    expect(leftovers(world, creds.body.data.client_id)).toEqual([]);
  });

  it('a failed password add leaves the config and the application unchanged', async () => {
    const root = seedApp(world.emu.state, { displayName: 'rotating-fail', graphPermissions: ADMIN_GRAPH_PERMISSIONS });
    const s = await server();
    await s.request('POST', 'cloud/config', { body: { ...adminConfig(world), client_id: root.appId, client_secret: root.clientSecret } });
    world.emu.faults.inject({ service: 'graph', method: 'POST', path: '/addPassword', status: 400, count: 1, code: 'CredentialInvalidLifetimeAsPerAppPolicy', message: 'Credential lifetime exceeds the max value allowed as per assigned policy.' });
    const res = await s.request('POST', 'cloud/rotate-root');
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(await tokenWorks(world, root.appId, root.clientSecret)).toBe(true);
    expect(world.emu.state.applications.get(root.objectId)!.passwordCredentials).toHaveLength(1);
  });
});

describe('environment overrides', () => {
  it('CLOUD_CLIENT_SECRET and CLOUD_ENVIRONMENT win over the stored values; rotate-root refuses them', async () => {
    const s = await server({ env: { CLOUD_CLIENT_SECRET: world.tenant.admin.clientSecret, CLOUD_ENVIRONMENT: ENV_NAME } });
    const stored = { ...adminConfig(world), client_secret: 'stale-secret-from-storage', environment: '' };
    expect((await s.request('POST', 'cloud/config', { body: stored })).status).toBe(204);
    expect((await s.request('GET', 'cloud/config')).body.data.environment).toBe('');
    expect((await s.request('POST', 'cloud/roles/env', { body: role() })).status).toBe(204);
    const creds = await s.request('GET', 'cloud/creds/env');
    expect(creds.status).toBe(200);
    expect(await tokenWorks(world, creds.body.data.client_id, creds.body.data.client_secret)).toBe(true);
    await s.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.body.lease_id } });
    const rotate = await s.request('POST', 'cloud/rotate-root');
    expect(rotate.status).toBe(400);
    expect(rotate.body.errors[0]).toContain('client_secret');
  });

  it('a value only the environment supplies satisfies a required field', async () => {
    const s = await server({ env: { CLOUD_SUBSCRIPTION_ID: world.tenant.subscriptionId } });
    const { subscription_id: _omitted, ...rest } = adminConfig(world);
    expect((await s.request('POST', 'cloud/config', { body: rest })).status).toBe(204);
    const bare = await server();
    const res = await bare.request('POST', 'cloud/config', { body: rest });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toContain('"subscription_id"');
  });
});

describe('lease expiry', () => {
  it('an expired lease is revoked by the lease manager on the fake clock', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    await s.request('POST', 'cloud/config', { body: adminConfig(world) });
    await s.request('POST', 'cloud/roles/short', { body: role() });
    const creds = await s.request('GET', 'cloud/creds/short');
    expect(creds.body.lease_duration).toBe(60);
    const appId = creds.body.data.client_id;
    await clock.advance(30_000);
    expect(leftovers(world, appId)).not.toEqual([]);
    await clock.advance(31_000);
    await vi.waitFor(() => expect(leftovers(world, appId)).toEqual([]), { timeout: 5_000 });
  });
});

describe('creation WAL', () => {
  const walWrites = (s: TestServer) => {
    const barrier = s.core.barrier;
    return { put: barrier.put.bind(barrier), delete: barrier.delete.bind(barrier), barrier };
  };

  it('a credential whose lease could not be stored is rolled back, not left live without a lease', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cloud-wal-'));
    const unsealKey = Buffer.alloc(32, 8).toString('base64');
    const first = await server({ storage: 'sqlite', dataDir, unsealKey });
    await first.request('POST', 'cloud/config', { body: adminConfig(world) });
    await first.request('POST', 'cloud/roles/unleased', { body: role() });
    const before = engineApps(world);
    // The lease is committed with the entry's release and the creds-create event, in one transaction: it fails.
    vi.spyOn(first.core.leases, 'prepare').mockImplementationOnce(() => {
      throw new Error('disk full');
    });
    expect((await first.request('GET', 'cloud/creds/unleased')).status).toBe(500);
    // Rolled back at once by the request itself (a crash before that leaves the entry to the next start's sweep).
    expect(engineApps(world).filter((a) => !before.includes(a))).toEqual([]);
    await first.close();
    const second = await server({ storage: 'sqlite', dataDir, unsealKey });
    expect(engineApps(world).filter((a) => !before.includes(a))).toEqual([]);
    await second.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('an entry whose lease was stored is released at the next start and the credential stays valid until revoked', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cloud-wal-'));
    const unsealKey = Buffer.alloc(32, 9).toString('base64');
    const first = await server({ storage: 'sqlite', dataDir, unsealKey });
    await first.request('POST', 'cloud/config', { body: adminConfig(world) });
    await first.request('POST', 'cloud/roles/leased', { body: role() });
    // The entry's release after the lease was stored fails (as a crash at that moment would leave it).
    const writes = walWrites(first);
    vi.spyOn(writes.barrier, 'delete').mockImplementation((key) => (key.includes('/wal/') ? Promise.reject(new Error('disk full')) : writes.delete(key)));
    const creds = await first.request('GET', 'cloud/creds/leased');
    expect(creds.status, JSON.stringify(creds.body)).toBe(200);
    vi.mocked(writes.barrier.delete).mockRestore();
    await first.close();

    const second = await server({ storage: 'sqlite', dataDir, unsealKey });
    expect(await tokenWorks(world, creds.body.data.client_id, creds.body.data.client_secret)).toBe(true);
    expect((await second.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.body.lease_id } })).status).toBe(204);
    expect(leftovers(world, creds.body.data.client_id)).toEqual([]);
    await second.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('an application created before the entry recorded its id is found by its unique display name and removed', async () => {
    const s = await server();
    await s.request('POST', 'cloud/config', { body: adminConfig(world) });
    await s.request('POST', 'cloud/roles/early', { body: role() });
    const before = engineApps(world);
    // The entry's first update (recording the new application's id) fails.
    const writes = walWrites(s);
    let walPuts = 0;
    vi.spyOn(writes.barrier, 'put').mockImplementation((key, value) => (key.includes('/wal/') && ++walPuts === 2 ? Promise.reject(new Error('disk full')) : writes.put(key, value)));
    expect((await s.request('GET', 'cloud/creds/early')).status).toBe(500);
    vi.mocked(writes.barrier.put).mockRestore();
    expect(walPuts).toBe(2);
    expect(engineApps(world).filter((a) => !before.includes(a))).toEqual([]);
  });

  it('what a failed compensation left behind is removed by the sweep at the next start', async () => {
    // An explicit dataDir: the test server deletes a directory it made itself when it closes.
    const dataDir = mkdtempSync(join(tmpdir(), 'cloud-wal-'));
    const first = await server({ storage: 'sqlite', dataDir, unsealKey: Buffer.alloc(32, 7).toString('base64'), engine: { retry: { baseDelayMs: 10, maxAttempts: 2, deadlineMs: 500 } } });
    await first.request('POST', 'cloud/config', { body: adminConfig(world) });
    await first.request('POST', 'cloud/roles/crashy', { body: { ...role(), cloud_groups: JSON.stringify([{ group_name: 'readers' }]) } });
    const before = engineApps(world);
    const { faults } = world.emu;
    faults.inject({ service: 'graph', method: 'POST', path: '/members/$ref', status: 403, count: 1, code: 'Authorization_RequestDenied', message: 'Insufficient privileges to complete the operation.' });
    for (const path of ['/v1.0/applications/', '/v1.0/servicePrincipals/', '/roleAssignments/']) faults.fail({ method: 'DELETE', path }, 1_000, 503);
    expect((await first.request('GET', 'cloud/creds/crashy')).status).toBeGreaterThanOrEqual(400);
    const orphan = engineApps(world).filter((a) => !before.includes(a));
    expect(orphan).toHaveLength(1);
    expect(leftovers(world, orphan[0])).toContain('application');

    faults.clear();
    await first.close();
    const second = await server({ storage: 'sqlite', dataDir, unsealKey: Buffer.alloc(32, 7).toString('base64') });
    expect(leftovers(world, orphan[0])).toEqual([]);
    expect((await second.request('GET', 'cloud/roles/crashy')).status).toBe(200);
    await second.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
});
