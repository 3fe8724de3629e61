// Automated rotation of the cloud engine's root client secret (rotation_period, rotation_schedule, rotation_window,
// disable_automated_rotation on cloud/config): through rotate-root on time, only the previous root secret removed,
// inside its window across restarts, and visible when it fails. Real SDK clients against the emulator, a fake clock.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { ADMIN_GRAPH_PERMISSIONS, seedApp, type SeededApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, cloudWorldPerFile, startCloudServer, tokenWorks } from '../support/cloud-engine.ts';
import { parseScrape } from '../support/prometheus.ts';
import type { TestServer } from '../support/server.ts';

const HOUR = 3_600_000;
const servers: TestServer[] = [];
const dirs: string[] = [];
const world = cloudWorldPerFile(async () => {
  for (const s of servers.splice(0)) await s.close().catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function server(opts: Parameters<typeof startCloudServer>[1] = {}): Promise<TestServer> {
  const s = await startCloudServer(world, opts);
  servers.push(s);
  return s;
}
/** The engine's own application, with a password someone else relies on beside its root secret. */
function rootApp(name: string): { root: SeededApp; passwords: () => string[] } {
  const root = seedApp(world.emu.state, { displayName: name, graphPermissions: ADMIN_GRAPH_PERMISSIONS, ownerOf: [world.tenant.subscriptionId] });
  const app = world.emu.state.applications.get(root.objectId)!;
  world.emu.state.addPassword(app, { displayName: 'ci-pipeline' });
  return { root, passwords: () => app.passwordCredentials.map((p) => p.displayName ?? '') };
}
const configFor = (root: SeededApp, extra: Record<string, unknown>) => ({ ...adminConfig(world), client_id: root.appId, client_secret: root.clientSecret, ...extra });
const readBack = async (s: TestServer) => (await s.request('GET', 'cloud/config')).body.data;
async function scheduled(s: TestServer, result: 'success' | 'failure'): Promise<number> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } });
  return parseScrape(r.body).value('strongroom_root_rotations_scheduled_total', { mount: 'cloud/', result }) ?? 0;
}
/**
 * Waits until a rotation has finished: the application holds the other tool's password and one root password the
 * engine made, not `previous` (the previous root secret removed). Nudges a fresh server's fake clock.
 */
async function rootRotated(passwords: () => string[], previous: string | undefined, clock?: FakeClock): Promise<string> {
  await vi.waitFor(async () => {
    await clock?.advance(0);
    expect(passwords()).toEqual(['ci-pipeline', expect.stringMatching(/^strongroom-root-/)]);
    expect(passwords()[1]).not.toBe(previous);
  }, { timeout: 8000 });
  return passwords()[1]!;
}

describe('POST cloud/config: automated rotation of the root client secret', () => {
  it('"rotation_period": a new secret added, only the previous root secret removed, older ones untouched; never before its time', async () => {
    const t0 = Date.now();
    const clock = new FakeClock(t0);
    const { root, passwords } = rootApp('scheduled-root');
    const s = await server({ clock });
    expect((await s.request('POST', 'cloud/config', { body: configFor(root, { rotation_period: '1h' }) })).status).toBe(204);
    expect(await readBack(s)).toMatchObject({ rotation_period: 3600, rotation_schedule: '', rotation_window: 0, disable_automated_rotation: false, next_rotation: new Date(t0 + HOUR).toISOString() });

    await clock.advance(HOUR - 1000);
    expect(passwords()).toEqual(['seed', 'ci-pipeline']);
    await clock.advance(1000);
    const first = await rootRotated(passwords, undefined);
    expect(passwords()).toEqual(['ci-pipeline', first]);
    expect(await tokenWorks(world, root.appId, root.clientSecret)).toBe(false);
    // The switch is recorded after the old secret is removed (a moment later): awaited, not read once.
    await vi.waitFor(async () => expect((await readBack(s)).next_rotation).toBe(new Date(t0 + 2 * HOUR).toISOString()), { timeout: 5000 });

    await clock.advance(HOUR);
    const second = await rootRotated(passwords, first);
    expect(passwords()).toEqual(['ci-pipeline', second]);
    await vi.waitFor(async () => expect(await scheduled(s, 'success')).toBe(2), { timeout: 5000 });
    // The engine works with the secret only it knows.
    expect((await s.request('POST', 'cloud/roles/after', { body: { application_object_id: seedApp(world.emu.state, { displayName: 'target' }).objectId, ttl: '1h' } })).status).toBe(204);
    expect((await s.request('GET', 'cloud/creds/after')).status).toBe(200);
  });

  it('"a rotation that cannot start within the window waits for the next occurrence; inside it, a restart runs it at once"', async () => {
    const friday = new Date();
    friday.setUTCHours(12, 0, 0, 0);
    while (friday.getUTCDay() !== 5) friday.setUTCDate(friday.getUTCDate() + 1);
    const saturday2am = friday.getTime() + 14 * HOUR;
    const dataDir = mkdtempSync(join(tmpdir(), 'cloud-root-schedule-'));
    dirs.push(dataDir);
    const unsealKey = randomBytes(32).toString('base64');
    const { root, passwords } = rootApp('windowed-root');

    const s1 = await server({ clock: new FakeClock(friday.getTime()), storage: 'sqlite', dataDir, unsealKey });
    expect((await s1.request('POST', 'cloud/config', { body: configFor(root, { rotation_schedule: '0 2 * * 6', rotation_window: '1h' }) })).status).toBe(204);
    expect((await readBack(s1)).next_rotation).toBe(new Date(saturday2am).toISOString());
    await s1.close();

    const lateClock = new FakeClock(saturday2am + 90 * 60_000);
    const late = await server({ clock: lateClock, storage: 'sqlite', dataDir, unsealKey });
    expect((await readBack(late)).next_rotation).toBe(new Date(saturday2am + 7 * 24 * HOUR).toISOString());
    for (let i = 0; i < 10; i++) {
      await lateClock.advance(0);
      await new Promise((r) => setTimeout(r, 30));
    }
    expect(passwords()).toEqual(['seed', 'ci-pipeline']);
    await late.close();

    const clock = new FakeClock(saturday2am + 7 * 24 * HOUR + 30 * 60_000);
    const inside = await server({ clock, storage: 'sqlite', dataDir, unsealKey });
    const rotated = await rootRotated(passwords, undefined, clock);
    expect(passwords()).toEqual(['ci-pipeline', rotated]);
    await vi.waitFor(async () => expect((await readBack(inside)).next_rotation).toBe(new Date(saturday2am + 14 * 24 * HOUR).toISOString()), { timeout: 5000 });
  });

  it('"a failure shows in the config read and the metric, then recovers" (the emulator refuses addPassword once)', async () => {
    const t0 = Date.now();
    const clock = new FakeClock(t0);
    const { root, passwords } = rootApp('failing-root');
    const s = await server({ clock });
    expect((await s.request('POST', 'cloud/config', { body: configFor(root, { rotation_period: '1h' }) })).status).toBe(204);
    world.emu.faults.inject({ service: 'graph', method: 'POST', path: '/addPassword', status: 400, count: 1, code: 'CredentialInvalidLifetimeAsPerAppPolicy', message: 'Credential lifetime exceeds the max value allowed as per assigned policy.' });
    await clock.advance(HOUR);
    await vi.waitFor(async () => expect((await readBack(s)).last_rotation_error).toBeDefined(), { timeout: 5000 });
    const read = await readBack(s);
    expect(read.last_rotation_error).toEqual({ message: expect.stringContaining('lifetime'), time: new Date(t0 + HOUR).toISOString() });
    expect(JSON.stringify(read)).not.toContain(root.clientSecret);
    const retryIn = Date.parse(read.next_rotation) - (t0 + HOUR);
    expect(retryIn).toBeGreaterThanOrEqual(5_000);
    expect(retryIn).toBeLessThanOrEqual(10_000);
    expect(await scheduled(s, 'failure')).toBe(1);
    expect(passwords()).toEqual(['seed', 'ci-pipeline']);

    await clock.advance(10_000);
    const rotated = await rootRotated(passwords, undefined);
    expect(passwords()).toEqual(['ci-pipeline', rotated]);
    await vi.waitFor(async () => expect((await readBack(s)).last_rotation_error).toBeUndefined(), { timeout: 5000 });
    await vi.waitFor(async () => expect(await scheduled(s, 'success')).toBe(1), { timeout: 5000 });
  });

  it('"a config write that does not touch these fields keeps them"; disable_automated_rotation leaves only rotate-root', async () => {
    const clock = new FakeClock(Date.now());
    const { root, passwords } = rootApp('kept-root');
    const s = await server({ clock });
    expect((await s.request('POST', 'cloud/config', { body: configFor(root, { rotation_schedule: '0 2 * * 6', rotation_window: '2h' }) })).status).toBe(204);
    const before = await readBack(s);
    expect((await s.request('POST', 'cloud/config', { body: { root_password_ttl: '24h' } })).status).toBe(204);
    expect(await readBack(s)).toMatchObject({ rotation_schedule: '0 2 * * 6', rotation_window: 7200, next_rotation: before.next_rotation });
    expect((await s.request('POST', 'cloud/config', { body: { disable_automated_rotation: true } })).status).toBe(204);
    expect((await readBack(s)).next_rotation).toBeUndefined();
    await clock.advance(8 * 24 * HOUR);
    expect(passwords()).toEqual(['seed', 'ci-pipeline']);
    expect((await s.request('POST', 'cloud/rotate-root')).status).toBe(204);
    expect(passwords()).toEqual(['ci-pipeline', expect.stringMatching(/^strongroom-root-/)]);
  });

  it.each<[Record<string, unknown>, string]>([
    [{ rotation_period: 30 }, 'rotation_period'],
    [{ rotation_period: 'weekly' }, 'rotation_period'],
    [{ rotation_period: '1h', rotation_schedule: '0 2 * * 6' }, 'rotation_schedule'],
    [{ rotation_schedule: '@every 1h' }, 'rotation_schedule'],
    [{ rotation_schedule: '0 0 ? * *' }, 'rotation_schedule'],
    [{ rotation_schedule: 'x'.repeat(129) }, 'rotation_schedule'],
    [{ rotation_window: '2h' }, 'rotation_window'],
    [{ rotation_schedule: '0 2 * * 6', rotation_window: 1800 }, 'rotation_window'],
    [{ disable_automated_rotation: 'sometimes' }, 'disable_automated_rotation'],
    // Workload identity federation holds no client secret to rotate.
    [{ client_secret: '', identity_token_audience: 'api://strongroom', rotation_period: '24h' }, 'rotation_period'],
  ])('"every input bounded": %j is a 400 naming %s and changes nothing', async (body, name) => {
    const { root } = rootApp('hostile-root');
    const s = await server();
    expect((await s.request('POST', 'cloud/config', { body: configFor(root, {}) })).status).toBe(204);
    const before = await readBack(s);
    const r = await s.request('POST', 'cloud/config', { body });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain(name);
    expect(await readBack(s)).toEqual(before);
  });
});
