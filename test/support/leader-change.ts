/** Walks of a schedule across leader changes: nodes of one cluster on a fresh PostgreSQL database and one fake clock. */
import { randomBytes } from 'node:crypto';
import { expect, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import type { ClusterTimings } from '../../src/core/cluster.ts';
import { createDatabase, type PostgresFacts } from './postgres.ts';
import type { TestServer, testServers } from './server.ts';

/** Short enough that a leader change takes a few seconds of real time. */
const TIMINGS: Partial<ClusterTimings> = { leaseTtlMs: 1500, renewMs: 200, pollMs: 100, heartbeatMs: 300, deadAfterMs: 2000 };

export interface LeaderChangeWalk {
  /** The clock every node of the walk runs on. */
  clock: FakeClock;
  /** Starts another node of the cluster. */
  node(): Promise<TestServer>;
  /** Waits (bounded) until exactly one of `nodes` leads, and returns it. */
  leaderOf(nodes: TestServer[]): Promise<TestServer>;
}

/**
 * Runs `walk` on a fresh database with its own unseal key and a fake clock starting at `startMs`; the nodes are
 * started in `pool`, and when the walk ends, passed or failed, every server of the pool is closed and the database
 * dropped.
 */
export async function leaderChangeWalk(
  postgres: Pick<PostgresFacts, 'adminUrl' | 'host' | 'port' | 'user'>,
  pool: ReturnType<typeof testServers>,
  startMs: number,
  walk: (w: LeaderChangeWalk) => Promise<void>,
): Promise<void> {
  const db = await createDatabase(postgres);
  try {
    const clock = new FakeClock(startMs);
    const unsealKey = randomBytes(32).toString('base64');
    const node = () => pool.start({ postgresUrl: db.url, unsealKey, clock, cluster: TIMINGS });
    const leaderOf = async (nodes: TestServer[]) => {
      await vi.waitFor(() => expect(nodes.filter((n) => n.core.cluster.leading)).toHaveLength(1), { timeout: 10_000, interval: 50 });
      return nodes.find((n) => n.core.cluster.leading)!;
    };
    await walk({ clock, node, leaderOf });
  } finally {
    await pool.closeAll();
    await db.drop();
  }
}
