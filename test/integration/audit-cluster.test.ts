// Audit devices on a cluster of two nodes on one PostgreSQL database (docs/audit.md "Cluster"): a device is enabled
// only when every live node can open it, and disabling a device always works, on any node, however it fails
// (audit 2026-11-28 N6). The nodes are given audit directories that overlap only in part, so a file path can be one
// that only one of them may open, as a volume mounted on one host only would be.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, describe, expect, inject, it } from 'vitest';
import type { ClusterTimings } from '../../src/core/cluster.ts';
import { auditDir, readEntries, startCollector } from '../support/audit.ts';
import { createDatabase } from '../support/postgres.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const postgres = inject('postgres');
const timings: Partial<ClusterTimings> = { leaseTtlMs: 1500, renewMs: 200, pollMs: 100, heartbeatMs: 300, deadAfterMs: 2000 };
const logs = auditDir();
/** Node A may write anywhere under the root; node B only under root/b. */
const dirA = logs.dir;
const dirB = join(logs.dir, 'b');
mkdirSync(dirB);

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});
afterAll(() => logs.cleanup());

async function twoNodes(): Promise<[TestServer, TestServer]> {
  const db = await createDatabase(postgres);
  closers.push(() => db.drop());
  const unsealKey = randomBytes(32).toString('base64');
  const start = async (dir: string) => {
    const s = await startTestServer({ postgresUrl: db.url, unsealKey, cluster: timings, env: { STRONGROOM_AUDIT_DIR: dir } });
    closers.push(() => s.close());
    return s;
  };
  const a = await start(dirA);
  const b = await start(dirB);
  await until(async () => (await a.core.cluster.liveNodes()).length === 2 && (await b.core.cluster.liveNodes()).length === 2);
  return [a, b];
}

async function until(check: () => Promise<boolean>, limit = 15_000): Promise<void> {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > limit) throw new Error(`not within ${limit} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const devices = async (s: TestServer) => Object.keys((await s.request('GET', 'sys/audit')).body.data ?? {});

describe('PUT sys/audit/:path on a cluster', () => {
  it.each([
    ['through the node that can open it', 0],
    ['through the node that cannot', 1],
  ])('"a device is enabled only when every live node can open it": a file only node A may write, enabled %s, is a 400 naming node B, and nothing is stored', async (_how, via) => {
    const nodes = await twoNodes();
    const r = await nodes[via].request('PUT', 'sys/audit/only-a', { body: { type: 'file', options: { file_path: join(dirA, `only-a-${via}.log`) } } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toMatch(via === 0 ? /cannot be opened on node .*must be a file inside the audit directory.*enabled on no node/ : /must be a file inside the audit directory/);
    for (const n of nodes) {
      expect(await devices(n)).toEqual([]);
      expect((await n.request('GET', 'sys/mounts')).status, 'both nodes keep serving').toBe(200);
    }
  });

  it('"a device every node can open is enabled on every node": both write their entries to it', async () => {
    const [a, b] = await twoNodes();
    const file = join(dirB, 'both.log');
    expect((await a.request('PUT', 'sys/audit/both', { body: { type: 'file', options: { file_path: file } } })).status).toBe(204);
    await until(async () => (await devices(b)).includes('both/'));
    const fromA = await a.request('GET', 'sys/mounts');
    const fromB = await b.request('GET', 'sys/mounts');
    const ids = new Set(readEntries(file).map((e) => e.request.id));
    expect(ids.has(fromA.body.request_id) && ids.has(fromB.body.request_id)).toBe(true);
  });
});

describe('DELETE sys/audit/:path on a cluster', () => {
  it('"disabling a device always works": with the only device failing on every node, every request is refused but its disable, on either node; then both serve again', async () => {
    const [a, b] = await twoNodes();
    const collector = await startCollector();
    expect((await a.request('PUT', 'sys/audit/sock', { body: { type: 'socket', options: { address: collector.address } } })).status).toBe(204);
    await until(async () => (await devices(b)).includes('sock/'));
    await collector.kill();
    for (const n of [a, b]) expect((await n.request('GET', 'sys/mounts')).status, 'fail closed').toBe(500);
    expect((await b.request('DELETE', 'sys/audit/sock')).status).toBe(204);
    await until(async () => (await a.request('GET', 'sys/mounts')).status === 200);
    expect((await b.request('GET', 'sys/mounts')).status).toBe(200);
  });
});
