// The cloud engine's events under Vault's azure/* names (docs/events.md, "Event types"), each with its documented
// metadata, on SQLite and on a 2-node PostgreSQL cluster subscribed on the other node; no secret in any of them.
// Real SDK clients against the in-repo Azure emulator, a real WebSocket client.
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import type WebSocket from 'ws';
import { cloudSecretsEngine } from '../../src/engines/cloud/index.ts';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, FAST_RETRY, startCloudWorld, subScope, type CloudWorld } from '../support/cloud-engine.ts';
import { oneSqliteNode, subscriber, twoPostgresNodes, until } from '../support/events.ts';
import { ok } from '../support/ldap-engine.ts';

const postgres = inject('postgres');
const closers: Array<() => Promise<unknown>> = [];
const sockets: WebSocket[] = [];
// A tenant per test: rotate-root changes its admin's secret.
let world: CloudWorld;
beforeEach(async () => {
  world = await startCloudWorld();
  closers.push(() => world.emu.close());
});
afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  while (closers.length) await closers.pop()!().catch(() => undefined);
});

const backends = () => ({
  secret: { cloud: cloudSecretsEngine({ env: { CLOUD_ENVIRONMENT_FILEPATH: world.envFile }, retry: FAST_RETRY, rotateRoot: { propagation: { baseDelayMs: 20, deadlineMs: 3_000 } } }) },
  auth: {},
});

describe.each([
  ['SQLite, one node', () => oneSqliteNode(closers, { backends: backends() })],
  ['PostgreSQL, two nodes: produced on one, subscribed on the other', () => twoPostgresNodes(postgres, closers, { backends: backends() })],
])('azure/* events (%s)', (_name, nodes) => {
  it('"each change of the cloud engine fires its azure/* event with its documented metadata; no secret in any event"', async () => {
    const [one, two] = await nodes();
    const sub = await subscriber(two.url, sockets)('azure/*', 'root');
    const target = seedApp(world.emu.state, { displayName: `events-${Date.now()}` });
    const config = adminConfig(world);
    await ok(one, 'POST', 'cloud/config', config);
    await ok(one, 'POST', 'cloud/roles/dyn', { cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }]), ttl: '1h' });
    await ok(one, 'POST', 'cloud/roles/dyn', { ttl: '2h' });
    const issued = await ok(one, 'GET', 'cloud/creds/dyn');
    await ok(one, 'PUT', 'sys/leases/revoke', { lease_id: issued.lease_id });
    await ok(one, 'DELETE', 'cloud/roles/dyn');
    await ok(one, 'POST', 'cloud/static-roles/app', { application_object_id: target.objectId, rotation_period: '720h' });
    const before = await ok(one, 'GET', 'cloud/static-creds/app');
    await ok(one, 'POST', 'cloud/rotate-role/app');
    const after = await ok(one, 'GET', 'cloud/static-creds/app');
    await ok(one, 'POST', 'cloud/static-roles/app', { rotation_period: '1000h' });
    await ok(one, 'DELETE', 'cloud/static-roles/app');
    await ok(one, 'POST', 'cloud/rotate-root');
    await ok(one, 'DELETE', 'cloud/config');

    const expected = [
      'azure/config-write', 'azure/role-create', 'azure/role-update', 'azure/creds-create', 'azure/role-delete',
      'azure/static-role-create', 'azure/rotate', 'azure/static-role-update', 'azure/static-role-delete', 'azure/rotate-root', 'azure/config-delete',
    ];
    const seen = () => sub.events.map((e) => e.data.event_type);
    await until(() => seen().length >= expected.length, `every event (got ${JSON.stringify(seen())})`, 30_000);
    expect(seen()).toEqual(expected);
    const meta = (type: string) => sub.events.find((e) => e.data.event_type === type).data.metadata;
    expect(meta('azure/config-write')).toEqual({ modified: 'true', operation: 'create', path: 'config' });
    expect(meta('azure/role-create')).toEqual({ modified: 'true', operation: 'create', path: 'roles/dyn', name: 'dyn' });
    expect(meta('azure/role-update')).toEqual({ modified: 'true', operation: 'update', path: 'roles/dyn', name: 'dyn' });
    expect(meta('azure/creds-create')).toEqual({ modified: 'true', operation: 'read', path: 'creds/dyn', name: 'dyn' });
    expect(meta('azure/role-delete')).toEqual({ modified: 'true', operation: 'delete', path: 'roles/dyn', name: 'dyn' });
    expect(meta('azure/static-role-create')).toEqual({ modified: 'true', operation: 'create', path: 'static-roles/app', name: 'app' });
    expect(meta('azure/rotate')).toEqual({ modified: 'true', operation: 'update', path: 'rotate-role/app', name: 'app' });
    expect(meta('azure/static-role-delete')).toEqual({ modified: 'true', operation: 'delete', path: 'static-roles/app', name: 'app' });
    expect(meta('azure/rotate-root')).toEqual({ modified: 'true', operation: 'update', path: 'rotate-root' });
    expect(meta('azure/config-delete')).toEqual({ modified: 'true', operation: 'delete', path: 'config' });
    expect(sub.events[0].data.plugin_info).toMatchObject({ mount_path: 'cloud/', plugin: 'cloud' });
    const seqs = sub.events.map((e) => e.sequence);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    for (const raw of sub.raw) for (const secret of [config.client_secret as string, issued.data.client_secret, before.data.client_secret, after.data.client_secret]) expect(raw).not.toContain(secret);
  });

  it('"a credential the cloud refuses fires azure/creds-create-fail with the error its caller got, and no azure/creds-create"', async () => {
    const [one, two] = await nodes();
    const sub = await subscriber(two.url, sockets)('azure/creds-create*', 'root');
    const target = seedApp(world.emu.state, { displayName: `events-fail-${Date.now()}` });
    const config = adminConfig(world);
    await ok(one, 'POST', 'cloud/config', config);
    await ok(one, 'POST', 'cloud/roles/onapp', { application_object_id: target.objectId, ttl: '1h' });
    world.emu.faults.fail({ service: 'graph', path: /addPassword$/ }, 1000, 400);
    try {
      const refused = await one.request('GET', 'cloud/creds/onapp');
      expect(refused.status).toBeGreaterThanOrEqual(400);
      await until(() => sub.events.length >= 1, 'the failed credential', 30_000);
      expect(sub.events.map((e) => e.data.event_type)).toEqual(['azure/creds-create-fail']);
      expect(sub.events[0].data.metadata).toEqual({ modified: 'false', operation: 'read', path: 'creds/onapp', name: 'onapp', error: refused.body.errors.join('; '), attempts: '1' });
      for (const raw of sub.raw) expect(raw).not.toContain(config.client_secret as string);
    } finally {
      world.emu.faults.clear();
    }
  });
});
