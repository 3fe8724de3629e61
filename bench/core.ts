import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchAuditDevice, child, fmt, load, processCpu, ratio, stop, type Throughput } from './util.ts';

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;

/**
 * Full pipeline (token lookup, ACL, routing, barrier decrypt) against a bare Fastify route, the same read with a
 * file audit device enabled against it without, and against a server without metrics, same run; BENCH_CPU_PROF=<dir>
 * profiles the server.
 */
export async function benchCore(seconds: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-'));
  try {
    const bare = await child(SERVERS, ['bare']);
    const profileDir = process.env.BENCH_CPU_PROF;
    const sr = await child(SERVERS, ['strongroom', dir], {}, profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []);
    const plainDir = join(dir, 'no-metrics');
    mkdirSync(plainDir);
    const plain = await child(SERVERS, ['strongroom', plainDir], { BENCH_METRICS: 'off' });
    // Alternating rounds, best of each: on a 2-core machine a single pair is at the mercy of background load.
    // Server CPU per request is printed too: it barely moves with background load, so it shows what a change did.
    type Round = Throughput & { cpuUs?: number };
    const measure = async (pid: number, url: string, headers?: Record<string, string>): Promise<Round> => {
      const before = processCpu(pid);
      const round = await load(url, { seconds, headers });
      const after = processCpu(pid);
      return { ...round, cpuUs: before && after ? ((after.all - before.all) / (round.rps * seconds)) * 1e6 : undefined };
    };
    const rounds = { base: [] as Round[], full: [] as Round[], audited: [] as Round[], plain: [] as Round[] };
    const read = () => measure(sr.proc.pid!, `${sr.info.url}/v1/kv/data/app/config`, { 'x-service-token': String(sr.info.token) });
    const readPlain = () => measure(plain.proc.pid!, `${plain.info.url}/v1/kv/data/app/config`, { 'x-service-token': String(plain.info.token) });
    // A first load of a fresh process runs unoptimised code for a while: each server is warmed before it is judged.
    for (const warm of [() => load(`${bare.info.url}/v1/bare`, { seconds: 1 }), read, readPlain]) await warm();
    for (let i = 0; i < 3; i++) {
      rounds.base.push(await measure(bare.proc.pid!, `${bare.info.url}/v1/bare`));
      // Each pair back to back, so both see the same background load, and in turn first: neither always follows the other.
      const pair = i % 2 === 0 ? [await read(), await readPlain()] : [await readPlain(), await read()].reverse();
      rounds.full.push(pair[0]!);
      rounds.plain.push(pair[1]!);
      await benchAuditDevice(String(sr.info.url), join(dir, `audit-${i}.log`));
      rounds.audited.push(await read());
      await benchAuditDevice(String(sr.info.url), undefined);
    }
    await stop(bare.proc);
    await stop(plain.proc);
    await stop(sr.proc, profileDir ? 'SIGINT' : 'SIGTERM');
    const best = (xs: Round[]) => xs.reduce((a, b) => (b.rps > a.rps ? b : a));
    const base = best(rounds.base);
    const full = best(rounds.full);
    const audited = best(rounds.audited);
    const r = ratio(full.rps, base.rps);
    const ra = ratio(audited.rps, full.rps);
    const withoutMetrics = best(rounds.plain);
    const rm = ratio(full.rps, withoutMetrics.rps);
    // Server CPU per read, pair by pair: the median pair says what metrics cost with the load of its moment cancelled out.
    const cpuRatios = rounds.full.map((f, i) => (f.cpuUs && rounds.plain[i]!.cpuUs ? rounds.plain[i]!.cpuUs! / f.cpuUs : Number.NaN)).sort((a, b) => a - b);
    const cpuMedian = cpuRatios[Math.floor(cpuRatios.length / 2)]!;
    const cpu = (x: Round) => (x.cpuUs === undefined ? '' : `, server CPU ${fmt(x.cpuUs, 1)} µs/request`);
    return [
      `core: bare Fastify JSON route          ${fmt(base.rps)} req/s (p99 ${base.p99} ms, errors ${base.errors}${cpu(base)})`,
      `core: authenticated ACL-checked read   ${fmt(full.rps)} req/s (p99 ${full.p99} ms, errors ${full.errors}${cpu(full)})`,
      `core: ratio ${fmt(r, 2)}x (target >= 0.50x) ${r >= 0.5 ? 'OK' : 'BELOW TARGET'}`,
      `core: the same read, file audit device ${fmt(audited.rps)} req/s (p99 ${audited.p99} ms, errors ${audited.errors}${cpu(audited)})`,
      `core: audited ratio ${fmt(ra, 2)}x the read without (target >= 0.70x) ${ra >= 0.7 ? 'OK' : 'BELOW TARGET'}`,
      `core: the same read, no metrics         ${fmt(withoutMetrics.rps)} req/s (p99 ${withoutMetrics.p99} ms, errors ${withoutMetrics.errors}${cpu(withoutMetrics)})`,
      `core: with metrics ${fmt(rm, 2)}x the read without by throughput (best of 3 each); by server CPU per read, pairs ${cpuRatios.map((x) => fmt(x, 2)).join(', ')}, median ${fmt(cpuMedian, 2)}x (target >= 0.95x) ${cpuMedian >= 0.95 ? 'OK' : 'BELOW TARGET'}`,
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** 100,000 leases, then a restart: start-up must not load them all. */
export async function benchLeaseRestart(count: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-'));
  try {
    const created = await child(SERVERS, ['leases', dir, String(count)]);
    const restarted = await child(SERVERS, ['restart', dir]);
    await stop(restarted.proc);
    const c = created.info as { seconds: number };
    const r = restarted.info as { msToServing: number; rssMiB: number; status: number };
    return [
      `leases: ${fmt(count)} registered in ${fmt(c.seconds, 1)} s (${fmt(count / c.seconds)} leases/s)`,
      `leases: restart to serving ${fmt(r.msToServing)} ms (health ${r.status}), RSS ${fmt(r.rssMiB, 1)} MiB`,
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
