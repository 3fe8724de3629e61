import autocannon from 'autocannon';
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

export interface Throughput {
  rps: number;
  p99: number;
  errors: number;
}

/**
 * One autocannon run against a URL (64 connections unless told; GET unless a method is given; as fast as the server
 * answers unless a `rate` of requests/s is given), reporting mean requests/s and p99 latency.
 */
export async function load(url: string, opts: { connections?: number; seconds?: number; headers?: Record<string, string>; method?: 'GET' | 'POST'; body?: string; rate?: number } = {}): Promise<Throughput> {
  const result = await autocannon({ url, connections: opts.connections ?? 64, duration: opts.seconds ?? 5, headers: opts.headers, method: opts.method ?? 'GET', body: opts.body, ...(opts.rate ? { overallRate: opts.rate } : {}) });
  return { rps: result.requests.average, p99: result.latency.p99, errors: result.errors + result.non2xx };
}

/** A load run with the server's CPU per request (all its threads, µs; undefined where /proc is not there). */
export type CpuRound = Throughput & { cpuUs?: number };

/** `load` against a server whose process is `pid`, charging the CPU that process used meanwhile to each request. */
export async function loadWithCpu(pid: number, url: string, opts: Parameters<typeof load>[1] = {}): Promise<CpuRound> {
  const before = processCpu(pid);
  const round = await load(url, opts);
  const after = processCpu(pid);
  const seconds = opts.seconds ?? 5;
  return { ...round, cpuUs: before && after && round.rps > 0 ? ((after.all - before.all) / (round.rps * seconds)) * 1e6 : undefined };
}

/** Starts a child Node process running `script` and resolves when it prints `READY <json>`; `nodeArgs` e.g. --cpu-prof. */
export function child(script: string, args: string[], env: Record<string, string> = {}, nodeArgs: string[] = [], timeoutMs = 120_000): Promise<{ proc: ChildProcess; info: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', ...nodeArgs, script, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
    let buf = '';
    const timer = setTimeout(() => reject(new Error(`${script} did not become ready in ${timeoutMs / 1000} s`)), timeoutMs);
    proc.stdout!.on('data', (d) => {
      buf += d;
      const m = /READY (\{.*\})\n/.exec(buf);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, info: JSON.parse(m[1]) });
      }
    });
    proc.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
}

/** SIGINT lets a child started with --cpu-prof write its profile (servers.ts exits normally on it). */
export async function stop(proc: ChildProcess, signal: 'SIGTERM' | 'SIGINT' = 'SIGTERM'): Promise<void> {
  if (proc.exitCode !== null) return;
  proc.removeAllListeners('exit');
  proc.kill(signal);
  await new Promise((r) => proc.once('exit', r));
}

export const ratio = (a: number, b: number) => (b === 0 ? 0 : a / b);

/** Enables (a file path) or disables (undefined) a file audit device `bench` on a server whose root token is `root`. */
export async function benchAuditDevice(serverUrl: string, file: string | undefined): Promise<void> {
  const res = await fetch(`${serverUrl}/v1/sys/audit/bench`, {
    method: file ? 'PUT' : 'DELETE', headers: { 'x-service-token': 'root', 'content-type': 'application/json' },
    body: file ? JSON.stringify({ type: 'file', options: { file_path: file } }) : undefined,
  });
  if (res.status !== 204) throw new Error(`audit device: HTTP ${res.status} ${await res.text()}`);
}
export const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/**
 * CPU seconds a process has used so far: its main thread, all threads, and by thread name (Linux /proc;
 * undefined elsewhere), and how much of it the kernel spent for it (`system`). Unlike throughput, CPU per request barely
 * moves when other work shares the machine.
 */
export function processCpu(pid: number): { main: number; all: number; byName: Record<string, number>; system: number } | undefined {
  // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
  const fields = (stat: string) => stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  try {
    const byName: Record<string, number> = {};
    let all = 0;
    let system = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const f = fields(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'));
      const used = (Number(f[11]) + Number(f[12])) / 100;
      const name = tid === String(pid) ? 'main' : readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      byName[name] = (byName[name] ?? 0) + used;
      all += used;
      system += Number(f[12]) / 100;
    }
    return { main: byName.main, all, byName, system };
  } catch {
    return undefined;
  }
}
