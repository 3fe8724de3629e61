// Cloud static roles under a hostile directory: a 3 s replication delay of new passwords at the token endpoint,
// throttling (429), 5xx before and after the write (the outcome-unknown case), and a write that never succeeds.
// Real clock, real SDKs, the emulator: afterwards every secret the engine made on an application is one its role
// records (served or waiting for its removal), and once the removals ran, only the served one is left: 0 orphans.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { seedApp, type SeededApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, startCloudServer, startCloudWorld, tokenWorks, type CloudWorld } from '../support/cloud-engine.ts';
import type { TestServer } from '../support/server.ts';

let world: CloudWorld;
let s: TestServer;

beforeAll(async () => {
  world = await startCloudWorld();
  s = await startCloudServer(world);
  expect((await s.request('POST', 'cloud/config', { body: adminConfig(world) })).status).toBe(204);
});
afterAll(async () => {
  await s?.close();
  await world?.emu.close();
});

const engineMade = (app: SeededApp): string[] =>
  world.emu.state.applications.get(app.objectId)!.passwordCredentials.filter((p) => p.displayName?.startsWith('strongroom-static-')).map((p) => p.keyId).sort();
/** Every secret the role records: the served one, a staged one, and those waiting for their removal. */
async function recorded(name: string): Promise<string[]> {
  const role = (await s.request('GET', `cloud/static-roles/${name}`)).body.data;
  return [role.secret_id, role.staged_secret_id, ...role.pending_removals.map((r: { secret_id: string }) => r.secret_id)].filter(Boolean).sort();
}

describe('static roles with replication delay, throttling and 5xx', () => {
  it('"3 s replication delay with 429/5xx faults: 0 orphans"; /token works through the delay', async () => {
    const { faults } = world.emu;
    faults.replicationDelay({ passwordToToken: 3000 });
    faults.throttle({ service: 'graph', path: /addPassword$/ }, 3, 1);
    faults.fail({ service: 'graph', path: /addPassword$/, when: 'after' }, 3, 503);
    faults.fail({ service: 'graph', path: /addPassword$/ }, 2, 500);
    faults.fail({ service: 'graph', path: /removePassword$/ }, 2, 503);
    const apps: SeededApp[] = [];
    for (let i = 0; i < 3; i++) {
      const app = seedApp(world.emu.state, { displayName: `static-fault-${i}` });
      apps.push(app);
      expect((await s.request('POST', `cloud/static-roles/f${i}`, { body: { application_object_id: app.objectId, rotation_grace_period: '2s' } })).status).toBe(204);
      const token = await s.request('POST', `cloud/static-creds/f${i}/token`, { body: { scope: `${world.emu.graphUrl}/.default` } });
      expect(token.status).toBe(200);
      expect((await s.request('POST', `cloud/rotate-role/f${i}`)).status).toBe(204);
      expect((await s.request('POST', `cloud/rotate-role/f${i}`, { body: { force: true } })).status).toBe(204);
    }
    for (const [i, app] of apps.entries()) expect(engineMade(app)).toEqual(await recorded(`f${i}`));
    await vi.waitFor(async () => {
      for (const [i, app] of apps.entries()) {
        const served = (await s.request('GET', `cloud/static-roles/f${i}`)).body.data.secret_id;
        expect(engineMade(app)).toEqual([served]);
      }
    }, { timeout: 45_000, interval: 200 });
    const c = (await s.request('GET', 'cloud/static-creds/f0')).body.data;
    expect(await tokenWorks(world, apps[0].appId, c.client_secret)).toBe(true);
  }, 90_000);

  it('"every secret added is recorded in a WAL before the Graph call and removed on failure": a write that never answers leaves nothing', async () => {
    const app = seedApp(world.emu.state, { displayName: 'static-fault-never' });
    expect((await s.request('POST', 'cloud/static-roles/never', { body: { application_object_id: app.objectId } })).status).toBe(204);
    const before = await recorded('never');
    world.emu.faults.fail({ service: 'graph', path: /addPassword$/, when: 'after' }, 1000, 503);
    const r = await s.request('POST', 'cloud/rotate-role/never');
    expect(r.status).toBeGreaterThanOrEqual(500);
    world.emu.faults.clear();
    await vi.waitFor(() => expect(engineMade(app)).toEqual(before), { timeout: 20_000 });
    expect(await recorded('never')).toEqual(before);
  }, 60_000);
});
