/**
 * `GET ldap/static-cred/:name` with a policy token, over a real socket (autocannon, 64 connections) against the
 * `ldap` child of servers.ts, beside two baselines in the same run: a bare Fastify JSON route (its own child) and the
 * core's ACL-checked read of a stored object served by the same child.
 *
 * Each round measures every server once, in turn, and the order rotates between rounds so none always follows
 * another. Throughput is judged by the best round of each; server CPU per request (all threads, from /proc) by the
 * median round, since it moves much less than throughput when the machine's two cores are shared. The spread of each
 * figure between rounds of one run is printed as its noise.
 *
 * BENCH_BASELINE_TREE=<dir>: also runs that checkout's servers.ts (e.g. a worktree of an older commit with
 * node_modules linked) against the same slapd, in the same alternation, and prints its CPU per read beside ours.
 * BENCH_CPU_PROF=<dir>: a CPU profile of our server child.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IsolatedOu } from '../test/support/slapd.ts';
import { child, fmt, loadWithCpu, ratio, stop, type CpuRound } from './util.ts';

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;
const ROUNDS = 5;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const spread = (xs: number[]) => (Math.max(...xs) === 0 ? 0 : (Math.max(...xs) - Math.min(...xs)) / Math.max(...xs));

interface Target {
  label: string;
  run: () => Promise<CpuRound>;
  rounds: CpuRound[];
}

/** `ou` holds the role's account; `config` is the engine's config for it. */
export async function benchStaticCredRead(ou: IsolatedOu, config: Record<string, unknown>, seconds: number): Promise<string[]> {
  const dirs: string[] = [];
  const procs: Array<Awaited<ReturnType<typeof child>>> = [];
  const profileDir = process.env.BENCH_CPU_PROF;
  const ldapServer = async (script: string, nodeArgs: string[] = []) => {
    const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-'));
    dirs.push(dir);
    const env = { BENCH_LDAP: JSON.stringify({ config, role: { username: ou.serviceAccounts[0]!.name, rotation_period: '24h' } }) };
    const c = await child(script, ['ldap', dir], env, nodeArgs);
    procs.push(c);
    return c;
  };
  try {
    const bare = await child(SERVERS, ['bare']);
    procs.push(bare);
    const ours = await ldapServer(SERVERS, profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []);
    const baselineTree = process.env.BENCH_BASELINE_TREE;
    const other = baselineTree ? await ldapServer(join(baselineTree, 'bench/servers.ts')) : undefined;
    const read = (c: typeof ours, path: string) => () => loadWithCpu(c.proc.pid!, `${c.info.url}/v1/${path}`, { seconds, headers: { 'x-service-token': String(c.info.token) } });
    const targets: Target[] = [
      { label: 'bare Fastify JSON route', run: () => loadWithCpu(bare.proc.pid!, `${bare.info.url}/v1/bare`, { seconds }), rounds: [] },
      { label: 'GET ldap/static-cred/bench', run: read(ours, 'ldap/static-cred/bench'), rounds: [] },
      { label: 'core read kv/data/app/config', run: read(ours, 'kv/data/app/config'), rounds: [] },
      ...(other ? [{ label: `static-cred, ${baselineTree}`, run: read(other, 'ldap/static-cred/bench'), rounds: [] }] : []),
    ];
    // A fresh process runs unoptimised code for a while: every server is warmed before it is judged.
    for (const t of targets) await t.run();
    for (let i = 0; i < ROUNDS; i++) {
      for (let j = 0; j < targets.length; j++) {
        const t = targets[(i + j) % targets.length]!;
        t.rounds.push(await t.run());
      }
    }
    const figures = targets.map((t) => ({
      ...t,
      rps: Math.max(...t.rounds.map((r) => r.rps)),
      cpuUs: median(t.rounds.map((r) => r.cpuUs ?? 0)),
      errors: t.rounds.reduce((n, r) => n + r.errors, 0),
      noise: { rps: spread(t.rounds.map((r) => r.rps)), cpu: spread(t.rounds.map((r) => r.cpuUs ?? 0)) },
    }));
    const [fastify, cred, core, old] = figures;
    const vsBare = ratio(cred!.rps, fastify!.rps);
    const vsCore = ratio(cred!.rps, core!.rps);
    return [
      ...figures.map((f) => `static-cred: ${f.label.padEnd(40)} ${fmt(f.rps)} req/s best, server CPU ${fmt(f.cpuUs, 1)} µs/request median ` +
        `(errors ${f.errors}; spread over ${ROUNDS} rounds: throughput ${fmt(f.noise.rps * 100)}%, CPU ${fmt(f.noise.cpu * 100)}%)`),
      `static-cred: vs bare Fastify ${fmt(vsBare, 2)}x by throughput (target >= 0.60x) ${vsBare >= 0.6 ? 'OK' : 'BELOW TARGET'}; ` +
        `${fmt(ratio(cred!.cpuUs, fastify!.cpuUs), 2)}x its CPU per request`,
      `static-cred: vs the core read ${fmt(vsCore, 2)}x by throughput (target >= 0.80x) ${vsCore >= 0.8 ? 'OK' : 'BELOW TARGET'}; ` +
        `${fmt(ratio(cred!.cpuUs, core!.cpuUs), 2)}x its CPU per request`,
      ...(old ? [`static-cred: CPU per read ${fmt(ratio(cred!.cpuUs, old.cpuUs), 2)}x the baseline tree's (target <= 1.00x) ${cred!.cpuUs <= old.cpuUs ? 'OK' : 'ABOVE'}`] : []),
    ];
  } finally {
    for (const c of procs) await stop(c.proc, c === procs[1] && profileDir ? 'SIGINT' : 'SIGTERM');
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}
