// The engines at a real start (src/main.ts loads their modules only after it listens): a request to the LDAP or the
// cloud mount sent as soon as the listener accepts, before any health check, is answered as it would be later,
// against the real directory (slapd) and the Azure emulator, on an empty store's first start and on a restart.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, cloudWorldPerFile, tokenWorks } from '../support/cloud-engine.ts';
import { ouConfig } from '../support/ldap-engine.ts';
import { spawnNode, type NodeProcess } from '../support/node-process.ts';
import { canBind, createIsolatedOu } from '../support/slapd.ts';

const facts = inject('slapd');
const closers: Array<() => Promise<unknown>> = [];
const world = cloudWorldPerFile(async () => {
  while (closers.length) await closers.pop()!().catch(() => undefined);
});
afterEach(async () => {
  while (closers.length) await closers.pop()!().catch(() => undefined);
});

function newStore(): { storage: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'startup-engines-'));
  closers.push(async () => rmSync(dir, { recursive: true, force: true }));
  return { storage: `sqlite:${join(dir, 'strongroom.db')}`, key: randomBytes(32).toString('base64') };
}

/**
 * Spawns a node and sends it `method path` until the listener accepts it (every 5 ms, at most 30 s): the node's first
 * request, sent before any health check, so it arrives while the engines' modules are still to be loaded.
 */
async function firstAnswer(store: { storage: string; key: string }, method: string, path: string, body?: unknown): Promise<{ node: NodeProcess; status: number; body: any }> {
  const { node, exited } = await spawnNode(store.storage, store.key, { CLOUD_ENVIRONMENT_FILEPATH: world.envFile, STRONGROOM_LOG_LEVEL: 'info' });
  closers.push(() => node.stop());
  for (const until = performance.now() + 30_000; performance.now() < until;) {
    if (node.proc.exitCode !== null) throw new Error(`the node exited (${node.proc.exitCode}): ${exited.stderr().slice(-2000)}`);
    try {
      return { node, ...(await node.request(method, path, { body })) };
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }
  throw new Error('the node did not accept a connection within 30 s');
}

async function ok(node: NodeProcess, method: string, path: string, body?: unknown): Promise<any> {
  const r = await node.request(method, path, { body });
  expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBeLessThan(300);
  return r.body;
}

describe('ldap/ at start-up', () => {
  it('"a request sent as the listener opens is served as later": the config written by a first start\'s first request, and a static credential read by a restart\'s, both work in slapd', { timeout: 60_000 }, async () => {
    const ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 0 });
    closers.push(() => ou.cleanup());
    const store = newStore();
    const first = await firstAnswer(store, 'POST', 'ldap/config', ouConfig(facts, ou));
    expect(first.status, JSON.stringify(first.body)).toBe(204);
    await ok(first.node, 'POST', 'ldap/static-role/app', { username: ou.users[0]!.name, rotation_period: '24h' });
    const password = (await ok(first.node, 'GET', 'ldap/static-cred/app')).data.password as string;
    await first.node.stop();

    const again = await firstAnswer(store, 'GET', 'ldap/static-cred/app');
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.data).toMatchObject({ username: ou.users[0]!.name, password });
    expect(await canBind(facts.url, ou.users[0]!.dn, password)).toBe(true);
  });
});

describe('cloud/ at start-up', () => {
  it('"a request sent as the listener opens is served as later": the config written by a first start\'s first request, and a static secret read by a restart\'s, work at the emulator', { timeout: 60_000 }, async () => {
    const store = newStore();
    const first = await firstAnswer(store, 'POST', 'cloud/config', adminConfig(world));
    expect(first.status, JSON.stringify(first.body)).toBe(204);
    const app = seedApp(world.emu.state, { displayName: 'startup-static' });
    await ok(first.node, 'POST', 'cloud/static-roles/app', { application_object_id: app.objectId });
    const served = (await ok(first.node, 'GET', 'cloud/static-creds/app')).data;
    await first.node.stop();

    const again = await firstAnswer(store, 'GET', 'cloud/static-creds/app');
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body.data).toMatchObject({ secret_id: served.secret_id, client_secret: served.client_secret });
    expect(await tokenWorks(world, served.client_id, served.client_secret)).toBe(true);
  });

  it('"auth/cloud/ is served at start-up too": its config written by the first request of a restart reads back', { timeout: 60_000 }, async () => {
    const store = newStore();
    const first = await firstAnswer(store, 'GET', 'sys/health');
    expect(first.status).toBe(200);
    await first.node.stop();
    const again = await firstAnswer(store, 'POST', 'auth/cloud/config', { tenant_id: world.emu.tenantId, resource: 'https://management.azure.com/' });
    expect(again.status, JSON.stringify(again.body)).toBe(204);
    expect((await ok(again.node, 'GET', 'auth/cloud/config')).data).toMatchObject({ tenant_id: world.emu.tenantId });
  });
});

describe('auth/token/ at start-up', () => {
  it('"the token store is served at start-up too": a token created by a restart\'s first request works', { timeout: 60_000 }, async () => {
    const store = newStore();
    const first = await firstAnswer(store, 'GET', 'sys/health');
    expect(first.status).toBe(200);
    await first.node.stop();
    const again = await firstAnswer(store, 'POST', 'auth/token/create', { policies: ['default'], ttl: '1h' });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    const token = again.body.auth.client_token as string;
    expect((await again.node.request('GET', 'auth/token/lookup-self', { token })).body.data).toMatchObject({ policies: ['default'] });
  });
});
