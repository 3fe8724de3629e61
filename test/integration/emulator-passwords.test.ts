// The emulator's client-secret behaviour the cloud static roles rely on, through the real SDKs: addPassword's
// startDateTime and endDateTime, the token endpoint judging a secret by them, and the replication delay of a new
// password at the token endpoint (AADSTS7000215 until it has replicated).
import { ClientSecretCredential } from '@azure/identity';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, startCloudWorld, type CloudWorld } from '../support/cloud-engine.ts';
import { AzureClientFactory } from '../../src/providers/azure/clients.ts';
import type { GraphClient } from '../../src/providers/azure/graph.ts';

const HOUR = 3_600_000;
let now = Date.now();
let world: CloudWorld;
let graph: GraphClient;

beforeAll(async () => {
  world = await startCloudWorld({ now: () => now, tokenLifetimeSec: 10 * 365 * 86_400 });
  const c = adminConfig(world);
  graph = new AzureClientFactory({ env: { CLOUD_ENVIRONMENT_FILEPATH: world.envFile }, retry: { baseDelayMs: 20, deadlineMs: 5_000 } }).get({
    tenantId: String(c.tenant_id), subscriptionId: String(c.subscription_id), clientId: String(c.client_id), clientSecret: String(c.client_secret), environment: String(c.environment),
  }).graph;
});
afterAll(async () => {
  await world?.emu.close();
});
afterEach(() => {
  world.emu.faults.clear();
});

/** The token endpoint's verdict on a secret: 'ok' or the AADSTS code it refused with. */
async function verdict(appId: string, secret: string): Promise<string> {
  const credential = new ClientSecretCredential(world.emu.tenantId, appId, secret, { authorityHost: world.emu.url, disableInstanceDiscovery: true, retryOptions: { maxRetries: 0 } });
  try {
    await credential.getToken(`${world.emu.graphUrl}/.default`);
    return 'ok';
  } catch (err) {
    return /AADSTS\d+/.exec((err as Error).message)?.[0] ?? 'error';
  }
}

describe('POST /applications/:id/addPassword', () => {
  it('"startDateTime and endDateTime are kept as sent"; a secret authenticates from (5 minutes before) its start until its end', async () => {
    const app = seedApp(world.emu.state, { displayName: 'emu-dates' });
    const start = new Date(now + 2 * HOUR);
    const end = new Date(now + 3 * HOUR);
    const added = await graph.addApplicationPassword(app.objectId, { displayName: 'staged', startDateTime: start, endDateTime: end });
    expect(added).toMatchObject({ startDateTime: start.toISOString(), endDateTime: end.toISOString() });
    expect((await graph.getApplication(app.objectId))!.passwordCredentials.find((p) => p.keyId === added.keyId)).toMatchObject({ startDateTime: start.toISOString() });
    expect(await verdict(app.appId, added.secretText)).toBe('AADSTS7000222');
    now = start.getTime();
    expect(await verdict(app.appId, added.secretText)).toBe('ok');
    now = end.getTime();
    expect(await verdict(app.appId, added.secretText)).toBe('AADSTS7000222');
  });

  it('"an end before the start is refused"', async () => {
    const app = seedApp(world.emu.state, { displayName: 'emu-bad-dates' });
    await expect(graph.addApplicationPassword(app.objectId, { displayName: 'x', startDateTime: new Date(now + 2 * HOUR), endDateTime: new Date(now + HOUR) })).rejects.toThrow(/end date is invalid/);
  });
});

describe('POST /{tenant}/oauth2/v2.0/token with a client secret', () => {
  it('"replication.passwordToToken": a new password is an invalid client secret (AADSTS7000215) until it has replicated', async () => {
    const app = seedApp(world.emu.state, { displayName: 'emu-replication' });
    world.emu.faults.replicationDelay({ passwordToToken: 3000 });
    const added = await graph.addApplicationPassword(app.objectId, { displayName: 'fresh', endDateTime: new Date(now + HOUR) });
    expect(await verdict(app.appId, added.secretText)).toBe('AADSTS7000215');
    expect(await verdict(app.appId, app.clientSecret)).toBe('ok');
    now += 3000;
    expect(await verdict(app.appId, added.secretText)).toBe('ok');
  });
});
