/**
 * What the event log's sequence costs the changes that carry events (docs/events.md, "The sequence"): 32 concurrent
 * writers, each committing a compare-and-set of its own key (as a rotation records its role), with one event appended
 * in the same transaction or without, in alternating rounds on the same store: SQLite (the single writer thread) and
 * PostgreSQL (a throwaway server of this run's own, fsync on; the one-row counter every appending transaction locks
 * until it commits). Reported: commits per second and CPU per commit (this process, all threads; on PostgreSQL also
 * its server processes, from /proc) with and without the event, and their ratios, which the shared machine's load
 * moves far less than the throughput itself. The load average is printed with them.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync, mkdtempSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PostgresStorage } from '../src/core/storage/postgres.ts';
import { SqliteStorage } from '../src/core/storage/sqlite.ts';
import type { Storage, StorageOp } from '../src/core/storage/types.ts';
import { createDatabase, type PostgresFacts } from '../test/support/postgres.ts';
import { fmt, processCpu, ratio } from './util.ts';

const WRITERS = 32;
const ROUNDS = 3;
/** About what a role record and a CloudEvent weigh once sealed. */
const RECORD_BYTES = 800;
const EVENT_BYTES = 700;

interface Round { commits: number; seconds: number; cpuSeconds: number }

/** CPU seconds of the PostgreSQL server: the postmaster and every backend it started (they persist across rounds). */
function postgresCpu(postmaster: number): number {
  let children: number[] = [];
  try {
    children = readFileSync(`/proc/${postmaster}/task/${postmaster}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return 0;
  }
  return [postmaster, ...children].reduce((sum, pid) => sum + (processCpu(pid)?.all ?? 0), 0);
}

/** One round: every writer commits its compare-and-set (with an append when `withEvent`) until `seconds` pass. */
async function round(store: Storage, current: Array<Buffer | undefined>, withEvent: boolean, seconds: number, serverCpu: () => number): Promise<Round> {
  const cpuBefore = process.cpuUsage();
  const serverBefore = serverCpu();
  const started = performance.now();
  const end = started + seconds * 1000;
  let commits = 0;
  await Promise.all(current.map(async (_, w) => {
    while (performance.now() < end) {
      const value = randomBytes(RECORD_BYTES);
      const ops: StorageOp[] = [{ type: 'put', key: `bench/w${w}`, value }];
      if (withEvent) ops.push({ type: 'append', value: randomBytes(EVENT_BYTES) });
      if (!(await store.transaction(ops, [{ key: `bench/w${w}`, expected: current[w] }]))) throw new Error(`writer ${w}: its own key changed`);
      current[w] = value;
      commits++;
    }
  }));
  const cpu = process.cpuUsage(cpuBefore);
  return { commits, seconds: (performance.now() - started) / 1000, cpuSeconds: (cpu.user + cpu.system) / 1e6 + (serverCpu() - serverBefore) };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(name: string, store: Storage, seconds: number, serverCpu: () => number = () => 0): Promise<string[]> {
  const current: Array<Buffer | undefined> = Array.from({ length: WRITERS }, () => undefined);
  await round(store, current, true, 1, serverCpu); // warm-up: connections, statements, the first pages
  const runs: Record<'with' | 'without', Round[]> = { with: [], without: [] };
  for (let i = 0; i < ROUNDS; i++) {
    // Alternating, so a change in the machine's load falls on both.
    runs.with.push(await round(store, current, true, seconds / 2, serverCpu));
    runs.without.push(await round(store, current, false, seconds / 2, serverCpu));
  }
  const rate = (rs: Round[]) => median(rs.map((r) => r.commits / r.seconds));
  const cpuUs = (rs: Round[]) => median(rs.map((r) => (r.cpuSeconds / r.commits) * 1e6));
  const [w, wo] = [rate(runs.with), rate(runs.without)];
  const [cw, cwo] = [cpuUs(runs.with), cpuUs(runs.without)];
  return [
    `${name}: ${WRITERS} writers, with an event ${fmt(w)} commits/s, without ${fmt(wo)} commits/s = ${fmt(ratio(w, wo), 2)}x the throughput`,
    `${name}: CPU per commit with an event ${fmt(cw)} µs, without ${fmt(cwo)} µs = ${fmt(ratio(cw, cwo), 2)}x`,
  ];
}

export async function benchEvents(seconds: number, postgres: () => Promise<PostgresFacts>): Promise<string[]> {
  const lines = [`load average ${loadavg().map((l) => l.toFixed(2)).join(' ')} (1, 5, 15 min) at the start`];
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-events-'));
  const sqlite = new SqliteStorage(join(dir, 'bench.db'));
  try {
    lines.push(...(await measure('SQLite', sqlite, seconds)));
  } finally {
    await sqlite.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const facts = await postgres();
  const db = await createDatabase(facts);
  const pg = await PostgresStorage.open(db.url);
  try {
    lines.push(...(await measure('PostgreSQL', pg, seconds, () => postgresCpu(facts.pid))));
  } finally {
    await pg.close();
    await db.drop();
  }
  lines.push(`load average ${loadavg().map((l) => l.toFixed(2)).join(' ')} (1, 5, 15 min) at the end`);
  return lines;
}
