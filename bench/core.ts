import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { child, fmt, load, ratio, stop } from './util.ts';

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;

/** Full pipeline (token lookup, ACL, routing, barrier decrypt) against a bare Fastify route, same run. */
export async function benchCore(seconds: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-'));
  try {
    const bare = await child(SERVERS, ['bare']);
    const sr = await child(SERVERS, ['strongroom', dir]);
    // Alternating rounds, best of each: on a 2-core machine a single pair is at the mercy of background load.
    const rounds = { base: [] as Awaited<ReturnType<typeof load>>[], full: [] as Awaited<ReturnType<typeof load>>[] };
    for (let i = 0; i < 2; i++) {
      rounds.base.push(await load(`${bare.info.url}/v1/bare`, { seconds }));
      rounds.full.push(await load(`${sr.info.url}/v1/kv/data/app/config`, { seconds, headers: { 'x-service-token': String(sr.info.token) } }));
    }
    await stop(bare.proc);
    await stop(sr.proc);
    const best = (xs: Awaited<ReturnType<typeof load>>[]) => xs.reduce((a, b) => (b.rps > a.rps ? b : a));
    const base = best(rounds.base);
    const full = best(rounds.full);
    const r = ratio(full.rps, base.rps);
    return [
      `core: bare Fastify JSON route          ${fmt(base.rps)} req/s (p99 ${base.p99} ms, errors ${base.errors})`,
      `core: authenticated ACL-checked read   ${fmt(full.rps)} req/s (p99 ${full.p99} ms, errors ${full.errors})`,
      `core: ratio ${fmt(r, 2)}x (target >= 0.50x) ${r >= 0.5 ? 'OK' : 'BELOW TARGET'}`,
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
