// Nodes of a cluster in one process (several servers on one PostgreSQL database, short cluster timings): how they
// initialise, stay coherent and lead. cluster.test.ts runs the same rules with real server processes under load.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { LEADER_KEY, type ClusterTimings } from '../../src/core/cluster.ts';
import type { BackendRegistry } from '../../src/core/core.ts';
import { backendTypes } from '../../src/engines.ts';
import { createDatabase } from '../support/postgres.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const postgres = inject('postgres');
const timings: Partial<ClusterTimings> = { leaseTtlMs: 1500, renewMs: 200, pollMs: 100, heartbeatMs: 300, deadAfterMs: 2000 };

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

interface Node extends TestServer {
  probes: Map<string, TestBackendProbe>;
}

/** A database and a way to start nodes on it, each with the test engine (its own probes, unless `engines` are given) and the same unseal key. */
async function cluster(engines?: BackendRegistry) {
  const db = await createDatabase(postgres);
  closers.push(() => db.drop());
  const unsealKey = randomBytes(32).toString('base64');
  const start = async (): Promise<Node> => {
    const probes = new Map<string, TestBackendProbe>();
    const s = await startTestServer({ postgresUrl: db.url, unsealKey, backends: engines ?? { secret: { test: testBackend(probes) }, auth: {} }, cluster: timings });
    const close = s.close.bind(s);
    let closed = false;
    const node = Object.assign(s, { probes, close: async () => {
      if (!closed) await close();
      closed = true;
    } });
    closers.push(() => node.close());
    return node;
  };
  return { db, start, unsealKey };
}

const ok = async (s: TestServer, method: string, path: string, body?: unknown) => {
  const r = await s.request(method, path, { body });
  expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBeLessThan(300);
  return r.body;
};

/** Milliseconds until `check` holds (polled every 10 ms, for at most `limit`). */
async function timeUntil(check: () => Promise<boolean>, limit = 5000): Promise<number> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > limit) throw new Error(`not within ${limit} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return performance.now() - started;
}

const leaderOf = async <N extends TestServer>(nodes: N[]): Promise<N> => {
  await expect.poll(() => nodes.filter((n) => n.core.cluster.leading).length, { timeout: 5000 }).toBe(1);
  return nodes.find((n) => n.core.cluster.leading)!;
};

/** Two nodes, which of them leads, and the test engine at kv/ on both. */
async function leaderAndFollower() {
  const { start } = await cluster();
  const nodes = [await start(), await start()];
  const leader = await leaderOf(nodes);
  const follower = nodes.find((n) => n !== leader)!;
  await ok(leader, 'POST', 'sys/mounts/kv', { type: 'test' });
  await expect.poll(async () => (await follower.request('GET', 'kv/creds/none')).status).toBe(200);
  return { nodes, leader, follower };
}

describe('initialisation', () => {
  it('"two nodes starting together on an empty database: one initialises it, both serve its root token and its default mounts as soon as they start, and there is one root token"', async () => {
    for (let round = 0; round < 3; round++) {
      const { start } = await cluster(backendTypes);
      const [a, b] = await Promise.all([start(), start()]);
      for (const n of [a, b]) {
        expect((await n.request('GET', 'auth/token/lookup-self')).body.data.policies).toEqual(['root']);
        expect(Object.keys((await n.request('GET', 'sys/mounts')).body.data)).toEqual(expect.arrayContaining(['cloud/', 'ldap/', 'sys/', 'identity/']));
        expect(JSON.stringify((await n.request('LIST', 'ldap/static-role')).body), 'the default ldap/ mount is routed').not.toMatch(/no handler for route/);
      }
      expect((await a.request('LIST', 'auth/token/accessors')).body.data.keys).toHaveLength(1);
    }
  });

  it('"a node with another unseal key is refused"', async () => {
    const { db, start } = await cluster();
    await start();
    await expect(startTestServer({ postgresUrl: db.url, unsealKey: randomBytes(32).toString('base64') })).rejects.toThrow(/unseal key does not open this store/);
  });
});

describe('coherence of what nodes keep in memory', () => {
  it('"a token revoked through one node is refused by the other on its next request"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    for (let i = 0; i < 5; i++) {
      const token = (await ok(a, 'POST', 'auth/token/create', { policies: ['default'] })).auth.client_token;
      expect((await b.request('GET', 'auth/token/lookup-self', { token })).status).toBe(200);
      await ok(a, 'POST', 'auth/token/revoke', { token });
      expect((await b.request('GET', 'auth/token/lookup-self', { token })).status).toBe(403);
    }
  });

  it('"a policy change through one node is effective on the other within 1 s"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    await ok(a, 'POST', 'sys/mounts/kv', { type: 'test' });
    await ok(a, 'POST', 'kv/data/x', { value: 'v' });
    await ok(a, 'PUT', 'sys/policies/acl/reader', { policy: 'path "kv/data/*" { capabilities = ["read"] }' });
    const token = (await ok(a, 'POST', 'auth/token/create', { policies: ['reader'] })).auth.client_token;
    await expect.poll(async () => (await b.request('GET', 'kv/data/x', { token })).status).toBe(200);
    await ok(a, 'PUT', 'sys/policies/acl/reader', { policy: 'path "kv/data/*" { capabilities = ["deny"] }' });
    const ms = await timeUntil(async () => (await b.request('GET', 'kv/data/x', { token })).status === 403);
    console.log(`policy change seen by the other node after ${ms.toFixed(0)} ms`);
    expect(ms).toBeLessThan(1000);
  });

  it('"a mount enabled, tuned, moved and disabled through one node is served so by the other within 1 s"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    await ok(a, 'POST', 'sys/mounts/kv', { type: 'test' });
    const enabled = await timeUntil(async () => (await b.request('POST', 'kv/data/x', { body: { value: 'from b' } })).status === 204);
    expect((await a.request('GET', 'kv/data/x')).body.data.value).toBe('from b');
    await ok(a, 'POST', 'sys/mounts/kv/tune', { max_lease_ttl: '2h' });
    const tuned = await timeUntil(async () => (await b.request('GET', 'sys/mounts/kv/tune')).body.data.max_lease_ttl === 7200);
    await ok(a, 'POST', 'sys/remount', { from: 'kv', to: 'moved' });
    const moved = await timeUntil(async () => (await b.request('GET', 'moved/data/x')).status === 200 && (await b.request('GET', 'kv/data/x')).status === 404);
    await ok(a, 'DELETE', 'sys/mounts/moved');
    const disabled = await timeUntil(async () => (await b.request('GET', 'sys/mounts')).body.data['moved/'] === undefined);
    console.log(`mount changes seen by the other node after: enable ${enabled.toFixed(0)} ms, tune ${tuned.toFixed(0)} ms, move ${moved.toFixed(0)} ms, disable ${disabled.toFixed(0)} ms`);
    for (const ms of [enabled, tuned, moved, disabled]) expect(ms).toBeLessThan(1000);
  });

  it('"a barrier term added through one node: the other reads what it writes at once, and seals under it within 1 s"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    await ok(a, 'POST', 'sys/mounts/kv', { type: 'test' });
    await expect.poll(async () => (await b.request('POST', 'kv/data/mounted', { body: { value: 'yes' } })).status).toBe(204);
    await ok(a, 'POST', 'sys/rotate');
    await ok(a, 'POST', 'kv/data/new', { value: 'under term 2' });
    expect((await b.request('GET', 'kv/data/new')).body.data.value).toBe('under term 2');
    await timeUntil(async () => (await b.request('GET', 'sys/key-status')).body.data.term === 2, 1000);
    await ok(b, 'POST', 'kv/data/from-b', { value: 'y' });
    expect((await a.request('GET', 'kv/data/from-b')).body.data.value).toBe('y');
  });
});

describe('work any node may start, guarded by compare-and-set', () => {
  it('"a limited-use token spends each use once, whichever node the requests reach"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    const token = (await ok(a, 'POST', 'auth/token/create', { num_uses: 5 })).auth.client_token;
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 ? a : b).request('GET', 'sys/mounts', { token })));
    expect(answers.filter((r) => r.status === 200)).toHaveLength(5);
  });

  it('"a renewal through one node after a revocation through another does not bring the token back"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    const token = (await ok(a, 'POST', 'auth/token/create', { ttl: '1h' })).auth.client_token;
    await ok(a, 'POST', 'auth/token/revoke', { token });
    expect([400, 403]).toContain((await b.request('POST', 'auth/token/renew', { body: { token } })).status);
    for (const n of [a, b]) expect((await n.request('GET', 'auth/token/lookup-self', { token })).status).toBe(403);
  });

  it('"two nodes recording the first login of one identity at once make one entity"', async () => {
    const { start } = await cluster();
    const [a, b] = [await start(), await start()];
    for (let i = 0; i < 10; i++) {
      const [x, y] = await Promise.all([a, b].map((n) => n.core.identity.upsertAlias('auth_test_1', `workload-${i}`, {}, [`group-${i}`])));
      expect(x.id).toBe(y.id);
      expect(x.groupIds).toEqual(y.groupIds);
    }
  });
});

describe('the leader', () => {
  it('"a node with a store of its own (memory, SQLite) always leads; sys/leader says HA is off, sys/ha-status lists it alone"', async () => {
    const alone = await startTestServer();
    closers.push(() => alone.close());
    expect(alone.core.cluster.leading).toBe(true);
    expect((await alone.request('GET', 'sys/leader', { token: null })).body).toMatchObject({ ha_enabled: false, is_self: false, leader_address: '' });
    expect((await alone.request('GET', 'sys/ha-status')).body.nodes).toEqual([expect.objectContaining({ active_node: true, last_echo: null })]);
  });

  it('"exactly one node leads; sys/leader and sys/ha-status say which on every node"', async () => {
    const { start } = await cluster();
    const nodes = [await start(), await start(), await start()];
    const leader = await leaderOf(nodes);
    await expect.poll(async () => (await nodes[0].request('GET', 'sys/ha-status')).body.nodes.length).toBe(3);
    for (const n of nodes) {
      const answer = (await n.request('GET', 'sys/leader', { token: null })).body;
      expect(answer).toMatchObject({ ha_enabled: true, is_self: n === leader, leader_address: expect.any(String) });
      const status = (await n.request('GET', 'sys/ha-status')).body.nodes;
      expect(status.filter((x: { active_node: boolean }) => x.active_node)).toHaveLength(1);
      expect((await n.request('GET', 'sys/health', { token: null })).body).toMatchObject({ standby: false });
    }
  });

  it('"a leader that stops hands over: another node leads within the lease TTL"', async () => {
    const { start } = await cluster();
    const nodes = [await start(), await start()];
    const first = await leaderOf(nodes);
    await first.close();
    const rest = nodes.filter((n) => n !== first);
    const ms = await timeUntil(async () => rest[0].core.cluster.leading, 5000);
    expect(ms).toBeLessThan(timings.leaseTtlMs! + 1000);
  });

  it('"a leader sealed through sys/seal lets its lease go: another node leads within the lease TTL; unsealed, it rejoins and follows"', async () => {
    const { start, unsealKey } = await cluster();
    const nodes = [await start(), await start()];
    const first = await leaderOf(nodes);
    const other = nodes.find((n) => n !== first)!;
    expect((await first.request('PUT', 'sys/seal')).status).toBe(204);
    expect(first.core.cluster.leading).toBe(false);
    const ms = await timeUntil(async () => other.core.cluster.leading, 5000);
    expect(ms).toBeLessThan(timings.leaseTtlMs! + 1000);
    // The other node serves on; the sealed one answers nothing but its status.
    expect((await other.request('GET', 'sys/mounts')).status).toBe(200);
    expect((await first.request('GET', 'sys/mounts')).status).toBe(503);
    expect((await first.request('GET', 'sys/ha-status')).status).toBe(503);
    const unsealed = await first.request('PUT', 'sys/unseal', { token: null, body: { key: unsealKey } });
    expect(unsealed.body).toMatchObject({ sealed: false });
    expect(first.core.cluster.leading).toBe(false);
    expect((await first.request('GET', 'sys/ha-status')).body.nodes).toHaveLength(2);
  });

  it('"a former leader\'s fenced write lands nowhere once its successor recorded its term, and it steps down"', async () => {
    const { db, start } = await cluster();
    const nodes = [await start(), await start()];
    const first = await leaderOf(nodes);
    const fence = first.core.cluster.fence();
    // As if its lease had lapsed while it was paused: the database's row says so, the node does not know yet.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query("UPDATE strongroom_leader SET valid_until = '-infinity'");
    await client.end();
    const second = nodes.find((n) => n !== first)!;
    await expect.poll(() => second.core.cluster.leading, { timeout: 5000 }).toBe(true);
    expect(await first.core.barrier.transaction([{ type: 'put', key: 'sys/fenced', value: Buffer.from('x') }], fence)).toBe(false);
    expect(await first.core.barrier.get('sys/fenced')).toBeUndefined();
    await expect.poll(() => first.core.cluster.leading, { timeout: 5000 }).toBe(false);
    expect(JSON.parse((await second.core.barrier.get(LEADER_KEY))!.toString()).node_id).toBe(second.core.cluster.nodeId);
  });

  it('"a lease issued through a follower expires on the leader, once"', async () => {
    const { nodes, leader, follower } = await leaderAndFollower();
    const revoked = () => nodes.flatMap((n) => n.probes.get('kv/')?.revoked ?? []);
    const before = revoked().length;
    await follower.request('GET', 'kv/creds/short?ttl=1s');
    await expect.poll(() => revoked().length - before, { timeout: 6000 }).toBe(1);
    expect(follower.probes.get('kv/')!.revoked).not.toContain('short');
  });

  it('"a revoke by hand through one node while the leader expires the same lease calls the engine once"', async () => {
    const { nodes, leader, follower } = await leaderAndFollower();
    let open!: () => void;
    leader.probes.get('kv/')!.revokeGate = new Promise<void>((resolve) => (open = resolve));
    const { lease_id } = (await follower.request('GET', 'kv/creds/raced?ttl=1s')).body;
    await expect.poll(() => leader.probes.get('kv/')!.revoking, { timeout: 6000 }).toBe(1);
    const byHand = follower.request('PUT', 'sys/leases/revoke', { body: { lease_id } });
    await new Promise((resolve) => setTimeout(resolve, 300));
    open();
    expect((await byHand).status).toBe(204);
    expect(nodes.flatMap((n) => n.probes.get('kv/')!.revoked).filter((name) => name === 'raced')).toEqual(['raced']);
  });
});
