// Shared set-up for the cloud secrets engine tests: an emulator with a seeded tenant, a custom
// environment file pointing the real SDK clients at it, and a server whose cloud/ mount uses it.
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClientSecretCredential } from '@azure/identity';
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { Clock } from '../../src/core/clock.ts';
import { cloudSecretsEngine, type CloudEngineOptions } from '../../src/engines/cloud/index.ts';
import { seedTenant, type SeededTenant } from './azure-emulator/seed.ts';
import { startEmulator, type Emulator, type EmulatorOptions } from './azure-emulator/server.ts';
import { startTestServer, type TestServer, type TestServerOptions } from './server.ts';

export const ENV_NAME = 'StrongroomEmulator';
/** Azure's built-in Reader role (seeded in the emulator). */
export const READER_ROLE_ID = 'acdd72a7-3385-48ef-bd42-f606fba81ae7';
export const FAST_RETRY = { baseDelayMs: 20, maxDelayMs: 400, deadlineMs: 10_000, maxAttempts: 60 };

export interface CloudWorld {
  emu: Emulator;
  tenant: SeededTenant;
  envFile: string;
}

export async function startCloudWorld(opts: EmulatorOptions = {}): Promise<CloudWorld> {
  const emu = await startEmulator({ pageSize: 2, ...opts });
  const tenant = seedTenant(emu.state, { groups: ['readers', 'writers'] });
  return { emu, tenant, envFile: await environmentFile(emu, 'cloud-engine-env-') };
}

/**
 * A test file's cloud world, filled in before its first test and closed after its last; after each test the emulator's
 * injected faults are cleared, then `afterEachTest` (closing what the test started) runs.
 */
export function cloudWorldPerFile(afterEachTest: () => Promise<void>, opts: EmulatorOptions = {}): CloudWorld {
  const world = {} as CloudWorld;
  beforeAll(async () => {
    Object.assign(world, await startCloudWorld(opts));
  });
  afterAll(async () => {
    await world.emu?.close();
  });
  afterEach(async () => {
    world.emu.faults.clear();
    await afterEachTest();
  });
  return world;
}

/** Writes the emulator's cloud environment (named ENV_NAME) to a fresh temp dir: the file CLOUD_ENVIRONMENT_FILEPATH names. */
export async function environmentFile(emu: Emulator, prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  const envFile = join(dir, 'environment.json');
  await writeFile(envFile, JSON.stringify(emu.environment(ENV_NAME)));
  return envFile;
}

export async function startCloudServer(world: CloudWorld, opts: { env?: Record<string, string>; clock?: Clock; engine?: CloudEngineOptions } & Pick<TestServerOptions, 'storage' | 'dataDir' | 'unsealKey'> = {}): Promise<TestServer> {
  const engine = cloudSecretsEngine({
    env: { CLOUD_ENVIRONMENT_FILEPATH: world.envFile, ...opts.env },
    retry: FAST_RETRY,
    rotateRoot: { propagation: { baseDelayMs: 20, deadlineMs: 3_000 } },
    ...opts.engine,
  });
  return startTestServer({ clock: opts.clock, storage: opts.storage, dataDir: opts.dataDir, unsealKey: opts.unsealKey, backends: { secret: { cloud: engine }, auth: {} } });
}

export function adminConfig(world: CloudWorld): Record<string, unknown> {
  return {
    subscription_id: world.tenant.subscriptionId, tenant_id: world.emu.tenantId, client_id: world.tenant.admin.appId,
    client_secret: world.tenant.admin.clientSecret, environment: ENV_NAME,
  };
}

/** Asks the emulator's token endpoint for a Graph token with these credentials, as a client would. */
export async function tokenWorks(world: CloudWorld, clientId: string, secret: string): Promise<boolean> {
  const credential = new ClientSecretCredential(world.emu.tenantId, clientId, secret, {
    authorityHost: world.emu.url, disableInstanceDiscovery: true, retryOptions: { maxRetries: 0 },
  });
  try {
    return !!(await credential.getToken(`${world.emu.graphUrl}/.default`));
  } catch {
    return false;
  }
}

export function subScope(world: CloudWorld): string {
  return `/subscriptions/${world.tenant.subscriptionId}`;
}

/** Nothing the engine creates for dynamic credentials is left for this appId. */
export function leftovers(world: CloudWorld, appId: string): string[] {
  const o = world.emu.state.objectsForAppId(appId);
  return [
    ...(o.application ? ['application'] : []),
    ...(o.servicePrincipal ? ['service principal'] : []),
    ...o.roleAssignments.map((r) => `role assignment ${r.id}`),
    ...o.groups.map((g) => `membership of ${g.displayName}`),
  ];
}

/** Applications the engine made (dynamic ones are named strongroom-<uuid>). */
export function engineApps(world: CloudWorld): string[] {
  return [...world.emu.state.applications.values()].filter((a) => a.displayName.startsWith('strongroom-')).map((a) => a.appId);
}
