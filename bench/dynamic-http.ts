/**
 * Dynamic credentials over HTTP: `GET ldap/creds/bench` then `POST sys/leases/revoke`, 8 workers, against the `ldap`
 * child of servers.ts, beside the floor (bench/dynamic-floor.ts: a bare Fastify process doing the same directory
 * operations and commits and nothing else) driven by the same client, rounds alternating. Both are judged by cycles/s
 * and by server CPU per cycle from /proc, by thread (main: HTTP and our code; the SQLite writer; V8's GC helpers).
 * BENCH_CPU_PROF=<dir>: CPU profiles of both children (<dir>/ours, <dir>/floor; one file a thread), and the cycles each
 * ran while profiled (warm-up included), so `node bench/cpu-profile.ts <file> <cycles>` gives µs per cycle per function.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IsolatedOu } from '../test/support/slapd.ts';
import { dynamicCosts } from './dynamic-costs.ts';
import { child, fmt, processCpu, ratio, stop } from './util.ts';

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;
const WORKERS = 8;
const ROUNDS = 3;

interface Round {
  perSecond: number;
  cycles: number;
  errors: number;
  firstError?: string;
  /** Server CPU per cycle in µs, all threads and by thread name. */
  cpuUs: number;
  /** Of which in the kernel (system calls, scheduling), µs per cycle. */
  systemUs: number;
  byThread: Record<string, number>;
  /** Median latency of each call of a cycle, ms. */
  issueMs: number;
  revokeMs: number;
}

/** A cycle's two calls, each timed into the round's lists (ms). */
type Cycle = (issue: number[], revoke: number[]) => Promise<void>;

async function cycles(pid: number, seconds: number, cycle: Cycle): Promise<Round> {
  const issue: number[] = [];
  const revoke: number[] = [];
  const before = processCpu(pid);
  const started = performance.now();
  const deadline = started + seconds * 1000;
  let done = 0;
  let errors = 0;
  let firstError: string | undefined;
  await Promise.all(Array.from({ length: WORKERS }, async () => {
    while (performance.now() < deadline) {
      try {
        await cycle(issue, revoke);
        done++;
      } catch (err) {
        errors++;
        firstError ??= (err as Error).message;
      }
    }
  }));
  const after = processCpu(pid);
  const perCycle = (a = 0, b = 0) => ((a - b) / Math.max(1, done)) * 1e6;
  const byThread: Record<string, number> = {};
  for (const [name, used] of Object.entries(after?.byName ?? {})) byThread[name] = perCycle(used, before?.byName[name]);
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? 0;
  return { perSecond: done / ((performance.now() - started) / 1000), cycles: done, errors, firstError, cpuUs: perCycle(after?.all, before?.all), systemUs: perCycle(after?.system, before?.system), byThread, issueMs: median(issue), revokeMs: median(revoke) };
}

async function timed<T>(list: number[], call: Promise<T>): Promise<T> {
  const started = performance.now();
  const result = await call;
  list.push(performance.now() - started);
  return result;
}

async function call(url: string, method: 'GET' | 'POST', token: string | undefined, body?: unknown): Promise<any> {
  const res = await fetch(url, { method, headers: { ...(token ? { 'x-service-token': token } : {}), ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined });
  const text = await res.text();
  if (res.status >= 300) throw new Error(`${method} ${url}: ${res.status} ${text.slice(0, 200)}`);
  return text ? JSON.parse(text) : undefined;
}

/** `ldif` is the dynamic role's creation, deletion and rollback LDIF (bench/ldap.ts). */
export async function benchDynamicHttp(ou: IsolatedOu, config: Record<string, unknown>, role: Record<string, unknown>, seconds: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-'));
  const procs: Array<Awaited<ReturnType<typeof child>>> = [];
  try {
    const profileDir = process.env.BENCH_CPU_PROF;
    const profiled = (name: string) => (profileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(profileDir, name)}`] : []);
    const ours = await child(SERVERS, ['ldap', dir], { BENCH_LDAP: JSON.stringify({ config, role: { username: ou.serviceAccounts[0]!.name, rotation_period: '24h' }, dynamicRole: role }) },
      profiled('ours'));
    procs.push(ours);
    const floor = await child(SERVERS, ['dynamic-floor', dir], {
      BENCH_FLOOR: JSON.stringify({ url: config.url, binddn: config.binddn, bindpass: config.bindpass, usersDn: ou.usersDn, groupDn: ou.groupDn }),
    }, profiled('floor'));
    procs.push(floor);
    const oursCycle = async (issue: number[], revoke: number[]) => {
      const creds = await timed(issue, call(`${ours.info.url}/v1/ldap/creds/bench`, 'GET', 'root'));
      await timed(revoke, call(`${ours.info.url}/v1/sys/leases/revoke`, 'POST', 'root', { lease_id: creds.lease_id }));
    };
    const floorCycle = async (issue: number[], revoke: number[]) => {
      const creds = await timed(issue, call(`${floor.info.url}/v1/creds`, 'GET', undefined));
      await timed(revoke, call(`${floor.info.url}/v1/revoke`, 'POST', undefined, { lease_id: creds.lease_id }));
    };
    const a: Round[] = [];
    const b: Round[] = [];
    // Warm-up: a fresh process runs unoptimised code for a while.
    const warm = [await cycles(ours.proc.pid!, 1, oursCycle), await cycles(floor.proc.pid!, 1, floorCycle)];
    for (let i = 0; i < ROUNDS; i++) {
      const pair = async () => [a.push(await cycles(ours.proc.pid!, seconds, oursCycle)), b.push(await cycles(floor.proc.pid!, seconds, floorCycle))];
      if (i % 2 === 0) await pair();
      else {
        b.push(await cycles(floor.proc.pid!, seconds, floorCycle));
        a.push(await cycles(ours.proc.pid!, seconds, oursCycle));
      }
    }
    const best = (xs: Round[]) => xs.reduce((x, y) => (y.perSecond > x.perSecond ? y : x));
    const medianCpu = (xs: Round[]) => [...xs].sort((x, y) => x.cpuUs - y.cpuUs)[Math.floor(xs.length / 2)]!;
    const spread = (xs: number[]) => (Math.max(...xs) - Math.min(...xs)) / Math.max(...xs);
    const line = (label: string, rs: Round[]) => {
      const r = best(rs);
      const c = medianCpu(rs);
      const threads = Object.entries(c.byThread).filter(([, us]) => us >= 1).sort((x, y) => y[1] - x[1]).map(([n, us]) => `${n} ${fmt(us)}`).join(', ');
      return `dynamic over HTTP: ${label.padEnd(44)} ${fmt(r.perSecond)} cycles/s best (errors ${rs.reduce((n, x) => n + x.errors, 0)}${r.firstError ? `: ${r.firstError.slice(0, 160)}` : ''}); ` +
        `server CPU ${fmt(c.cpuUs)} µs/cycle median (${threads}; in the kernel ${fmt(c.systemUs)}); latency of that round: issue ${fmt(c.issueMs, 1)} ms, revoke ${fmt(c.revokeMs, 1)} ms (medians); spread over ${ROUNDS} rounds: throughput ${fmt(spread(rs.map((x) => x.perSecond)) * 100)}%, CPU ${fmt(spread(rs.map((x) => x.cpuUs)) * 100)}%`;
    };
    const r = ratio(best(a).perSecond, best(b).perSecond);
    const ran = (w: Round, rs: Round[]) => [w, ...rs].reduce((n, x) => n + x.cycles, 0);
    return [
      ...(profileDir ? [`dynamic over HTTP: profiled cycles (warm-up included): ours ${ran(warm[0]!, a)}, floor ${ran(warm[1]!, b)}`] : []),
      line(`creds + sys/leases/revoke, ${WORKERS} workers`, a),
      line('floor: bare Fastify, same directory ops + 3 commits', b),
      `dynamic over HTTP: ${fmt(r, 2)}x the floor by throughput (target >= 0.80x) ${r >= 0.8 ? 'OK' : 'BELOW TARGET'}; ` +
        `${fmt(ratio(medianCpu(a).cpuUs, medianCpu(b).cpuUs), 2)}x its server CPU per cycle`,
      ...dynamicCosts(role, String(config.binddn)),
    ];
  } finally {
    for (const c of procs) await stop(c.proc, process.env.BENCH_CPU_PROF ? 'SIGINT' : 'SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}
