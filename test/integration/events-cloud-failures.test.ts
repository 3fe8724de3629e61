// The cloud engine's failure events (docs/events.md): azure/creds-create-fail when issuing a credential fails,
// azure/rotate-root-fail when the leader's automated rotation of the engine's client secret fails, azure/rotate-fail
// when a static role's scheduled rotation fails; each recorded
// with its failure, with a scrubbed error and the attempt count, and no secret. One SQLite node on a fake clock shared
// with the emulator (a static role's rotation is weeks away); the emulator refuses addPassword.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type WebSocket from 'ws';
import { FakeClock } from '../../src/core/clock.ts';
import { cloudSecretsEngine } from '../../src/engines/cloud/index.ts';
import { ADMIN_GRAPH_PERMISSIONS, seedApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, FAST_RETRY, startCloudWorld, type CloudWorld } from '../support/cloud-engine.ts';
import { subscriber, until } from '../support/events.ts';
import { ok } from '../support/ldap-engine.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const HOUR = 3_600_000;
let clock = new FakeClock(Date.now());
let world: CloudWorld;
let s: TestServer | undefined;
const sockets: WebSocket[] = [];
beforeAll(async () => {
  world = await startCloudWorld({ now: () => clock.now(), tokenLifetimeSec: 10 * 365 * 86_400 });
});
afterAll(async () => {
  await world?.emu.close();
});
afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  world.emu.faults.clear();
  await s?.close().catch(() => undefined);
});

/** Moves the fake clock and lets the timers it fired do their (real) I/O. */
async function advanceTo(at: number): Promise<void> {
  await clock.advance(Math.max(0, at - clock.now()));
  for (let i = 0; i < 5; i++) {
    await clock.advance(0);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('azure/*-fail events', () => {
  it('"a failed credential, a failed automated rotate-root and a failed scheduled static-role rotation each fire their *-fail event with a scrubbed error and the attempt count; no secret in either"', async () => {
    clock = new FakeClock(Date.now());
    const t0 = clock.now();
    const engine = cloudSecretsEngine({ env: { CLOUD_ENVIRONMENT_FILEPATH: world.envFile }, retry: FAST_RETRY, rotateRoot: { propagation: { baseDelayMs: 20, deadlineMs: 3_000 } } });
    s = await startTestServer({ storage: 'sqlite', listen: true, clock, backends: { secret: { cloud: engine }, auth: {} } });
    const sub = await subscriber(s.url, sockets)('azure/*', 'root');
    const root = seedApp(world.emu.state, { displayName: 'events-failing-root', graphPermissions: ADMIN_GRAPH_PERMISSIONS, ownerOf: [world.tenant.subscriptionId] });
    await ok(s, 'POST', 'cloud/config', { ...adminConfig(world), client_id: root.appId, client_secret: root.clientSecret, rotation_period: '1h' });
    const target = seedApp(world.emu.state, { displayName: 'events-failing-static' });
    await ok(s, 'POST', 'cloud/static-roles/fl', { application_object_id: target.objectId, rotation_period: '720h', rotation_grace_period: '1h' });
    const served = await ok(s, 'GET', 'cloud/static-creds/fl');
    await ok(s, 'POST', 'cloud/roles/onapp', { application_object_id: target.objectId, ttl: '1h' });

    world.emu.faults.fail({ service: 'graph', path: /addPassword$/ }, 1000, 400);
    const ofType = (type: string) => sub.events.filter((e) => e.data.event_type === type);
    const refused = await s.request('GET', 'cloud/creds/onapp');
    expect(refused.status).toBeGreaterThanOrEqual(400);
    await until(() => ofType('azure/creds-create-fail').length === 1, 'the failed credential');
    expect(ofType('azure/creds-create-fail')[0].data.metadata).toEqual({ modified: 'false', operation: 'read', path: 'creds/onapp', name: 'onapp', error: refused.body.errors.join('; '), attempts: '1' });
    expect(ofType('azure/creds-create')).toEqual([]);
    await advanceTo(t0 + HOUR);
    await until(() => ofType('azure/rotate-root-fail').length >= 1, 'the failed root rotation');
    // The error is the one the config records for clients (and no more).
    const recorded = (await ok(s, 'GET', 'cloud/config')).data.last_rotation_error.message;
    await advanceTo(t0 + 720 * HOUR - 2 * HOUR);
    await until(() => ofType('azure/rotate-fail').length >= 1, 'the failed static rotation');

    const rootFail = ofType('azure/rotate-root-fail')[0].data.metadata;
    expect(rootFail).toEqual({ modified: 'false', operation: 'periodic', path: 'rotate-root', error: expect.any(String), attempts: '1' });
    expect(rootFail.error).toBe(recorded);
    const staticFail = ofType('azure/rotate-fail')[0].data.metadata;
    expect(staticFail).toEqual({ modified: 'false', operation: 'periodic', path: 'rotate-role/fl', name: 'fl', error: expect.any(String), attempts: '1' });
    expect(staticFail.error).toBe((await ok(s, 'GET', 'cloud/static-roles/fl')).data.last_rotation_error.message);
    // No success is reported for either.
    expect(ofType('azure/rotate-root')).toEqual([]);
    expect(ofType('azure/rotate')).toEqual([]);
    for (const raw of sub.raw) for (const secret of [root.clientSecret, served.data.client_secret]) expect(raw).not.toContain(secret);
  });
});
