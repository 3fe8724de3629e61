/**
 * The library as a CI fleet uses it: 64 clients on 6 accounts, in process (`app.inject`, SQLite), against a floor of
 * the same durable work measured in the same run: per cycle the three commits a check-out and a check-in make
 * (through the same barrier and store) and one raw password modify, with one worker per account (docs/benchmarks.md).
 *
 * - waiting mode: every check-out asks `wait`; judged against the floor (target >= 0.8x), with 0 refusals and
 *   0 double lends; the wait each check-out spent is reported (p50/p99).
 * - no-wait mode (Vault's): a refused check-out is asked again at once, as a retry loop would; refusals per cycle.
 */
import { randomBytes } from 'node:crypto';
import type { Client } from 'ldapts';
import { createIsolatedOu, type SlapdFacts } from '../test/support/slapd.ts';
import type { TestServer } from '../test/support/server.ts';
import { fmt, ratio } from './util.ts';

const CLIENTS = 64;
const ACCOUNTS = 6;
const TARGET = 0.8;
/** A value the size of a loan record with its lease, encrypted by the barrier like theirs. */
const RECORD_BYTES = 600;

/** What the LDAP sections share (bench/ldap.ts), passed in so this file does not import it back. */
export interface QueueBenchTools {
  withServer<T>(facts: SlapdFacts, ou: Awaited<ReturnType<typeof createIsolatedOu>>, fn: (s: TestServer) => Promise<T>): Promise<T>;
  must(s: TestServer, method: string, path: string, body?: unknown): Promise<any>;
  rawClient(facts: SlapdFacts, ou: Awaited<ReturnType<typeof createIsolatedOu>>): Promise<Client>;
  /** One raw password replace of `dn`. */
  modify(client: Client, dn: string): Promise<void>;
  /** With BENCH_CPU_PROF=<dir>, a CPU profile of this process while `fn` runs. */
  profiled<T>(name: string, fn: () => Promise<T>): Promise<T>;
}

interface Run {
  cycles: number;
  seconds: number;
  /** This process's CPU (every thread: the server, its SQLite writer, the clients) per cycle, and its main thread's. */
  cpuUs: number;
  mainUs: number;
  refused: number;
  doubleLends: number;
  waits: number[];
  checkIns: number[];
}

const percentile = (xs: number[], p: number) => {
  if (xs.length === 0) return 0;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};

/** 64 clients cycling check-out (with `wait`, or retried at once without it) and check-in for `seconds`. */
async function fleet(s: TestServer, tools: QueueBenchTools, seconds: number, wait: boolean): Promise<Run> {
  const run: Run = { cycles: 0, seconds, cpuUs: 0, mainUs: 0, refused: 0, doubleLends: 0, waits: [], checkIns: [] };
  const held = new Set<string>();
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  const cpu = startCpu();
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (performance.now() < deadline) {
      const asked = performance.now();
      const out = await s.request('POST', 'ldap/library/fleet/check-out', { body: wait ? { wait: '60s' } : {} });
      if (out.status !== 200) {
        run.refused++;
        // A retry loop's next attempt: at once, after this turn of the event loop.
        await new Promise((r) => setImmediate(r));
        continue;
      }
      run.waits.push(performance.now() - asked);
      const account = String(out.body.data.service_account_name);
      if (held.has(account)) run.doubleLends++;
      held.add(account);
      await new Promise((r) => setImmediate(r));
      held.delete(account);
      const returning = performance.now();
      await tools.must(s, 'POST', 'ldap/library/fleet/check-in', { service_account_names: [account] });
      run.checkIns.push(performance.now() - returning);
      run.cycles++;
    }
  }));
  run.seconds = (performance.now() - started) / 1000;
  Object.assign(run, cpu.per(run.cycles));
  return run;
}

/** CPU spent from now on, per cycle: the whole process's, and the main thread's (its event loop's busy time). */
function startCpu() {
  const usage = process.cpuUsage();
  const loop = performance.eventLoopUtilization();
  return {
    per(cycles: number) {
      const { user, system } = process.cpuUsage(usage);
      const busyMs = performance.eventLoopUtilization(loop).active;
      return { cpuUs: (user + system) / Math.max(1, cycles), mainUs: (busyMs * 1000) / Math.max(1, cycles) };
    },
  };
}

/** The floor: one worker per account, each cycle three commits through the server's barrier and one raw modify. */
async function floor(s: TestServer, raw: Client, dns: string[], seconds: number, modify: QueueBenchTools['modify']): Promise<{ cycles: number; seconds: number; commitMs: number; modifyMs: number; cpuUs: number; mainUs: number }> {
  const deadline = performance.now() + seconds * 1000;
  const started = performance.now();
  const cpu = startCpu();
  let cycles = 0;
  let commitMs = 0;
  let modifyMs = 0;
  await Promise.all(dns.map(async (dn, worker) => {
    const key = `bench-floor/${worker}`;
    while (performance.now() < deadline) {
      const t0 = performance.now();
      for (let i = 0; i < 3; i++) await s.core.barrier.transaction([{ type: 'put', key: `${key}/${i}`, value: randomBytes(RECORD_BYTES) }], []);
      const t1 = performance.now();
      await modify(raw, dn);
      commitMs += t1 - t0;
      modifyMs += performance.now() - t1;
      cycles++;
    }
  }));
  return { cycles, seconds: (performance.now() - started) / 1000, commitMs: commitMs / Math.max(1, cycles), modifyMs: modifyMs / Math.max(1, cycles), ...cpu.per(cycles) };
}

export async function benchLibraryQueue(facts: SlapdFacts, seconds: number, tools: QueueBenchTools): Promise<string[]> {
  const ou = await createIsolatedOu(facts, { users: 0, serviceAccounts: ACCOUNTS });
  try {
    return await tools.withServer(facts, ou, async (s) => {
      await tools.must(s, 'POST', 'ldap/library/fleet', { service_account_names: ou.serviceAccounts.map((a) => a.name), ttl: '1h', max_ttl: '2h', max_wait: '60s' });
      const raw = await tools.rawClient(facts, ou);
      try {
        const dns = ou.serviceAccounts.map((a) => a.dn);
        // Alternated, best of two each, as the other LDAP sections do.
        const waits: Run[] = [];
        const floors: Array<Awaited<ReturnType<typeof floor>>> = [];
        for (let round = 0; round < 2; round++) {
          waits.push(await tools.profiled(`library-queue-round${round + 1}`, () => fleet(s, tools, seconds, true)));
          floors.push(await floor(s, raw, dns, seconds, tools.modify));
        }
        const noWait = await fleet(s, tools, seconds, false);
        const best = waits.reduce((a, b) => (b.cycles / b.seconds > a.cycles / a.seconds ? b : a));
        const bestFloor = floors.reduce((a, b) => (b.cycles / b.seconds > a.cycles / a.seconds ? b : a));
        const rate = best.cycles / best.seconds;
        const floorRate = bestFloor.cycles / bestFloor.seconds;
        const r = ratio(rate, floorRate);
        const status = (await tools.must(s, 'GET', 'ldap/library/fleet/status')).data as Record<string, unknown>;
        return [
          `library queue: ${CLIENTS} clients on ${ACCOUNTS} accounts with wait: ${fmt(rate)} cycles/s; refused ${best.refused}, double lends ${best.doubleLends}; ` +
            `wait p50 ${fmt(percentile(best.waits, 50), 1)} ms, p99 ${fmt(percentile(best.waits, 99), 1)} ms; check-in p50 ${fmt(percentile(best.checkIns, 50), 1)} ms, p99 ${fmt(percentile(best.checkIns, 99), 1)} ms; ` +
            `CPU per cycle ${fmt(best.cpuUs)} us (main thread ${fmt(best.mainUs)} us)`,
          `library queue: floor (3 commits + 1 raw modify per cycle, ${ACCOUNTS} workers): ${fmt(floorRate)} cycles/s (per cycle: commits ${fmt(bestFloor.commitMs, 2)} ms, modify ${fmt(bestFloor.modifyMs, 2)} ms; CPU ${fmt(bestFloor.cpuUs)} us, main thread ${fmt(bestFloor.mainUs)} us)`,
          `library queue: ratio ${fmt(r, 2)}x (target >= ${fmt(TARGET, 2)}x) ${r >= TARGET ? 'OK' : 'BELOW TARGET'}; rounds ${waits.map((w) => fmt(w.cycles / w.seconds)).join(', ')} vs ${floors.map((f) => fmt(f.cycles / f.seconds)).join(', ')}; ` +
            `${best.refused === 0 && best.doubleLends === 0 ? 'no refusals, no double lends: OK' : 'FAILED (refusals or double lends)'}`,
          `library queue: without wait (Vault's mode, retried at once): ${fmt(noWait.cycles / noWait.seconds)} cycles/s, ${fmt(noWait.refused / Math.max(1, noWait.cycles), 2)} refused check-outs per cycle, double lends ${noWait.doubleLends}`,
          `library queue: waiters left after the runs: ${String(status.waiters)}`,
        ];
      } finally {
        await raw.unbind();
      }
    });
  } finally {
    await ou.cleanup();
  }
}
