/**
 * Start-up of the real entry point (`src/main.ts`, as `npm start` and the image run it): from spawning the process
 * to the first 200 from `sys/health`, on an empty SQLite store (its first start: key, store and built-in mounts
 * created) and again on the same store (a restart), each without and then with a warm NODE_COMPILE_CACHE (Node's
 * cache of stripped and compiled modules). CPU is the process's own, read from /proc at its first healthy answer.
 * Also what importing the server's modules costs on its own, and the share of that which is type stripping.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fmt, processCpu } from './util.ts';

const ROOT = new URL('..', import.meta.url).pathname;
const RUNS = Number(process.env.BENCH_STARTUP_RUNS ?? 3);

const freePort = () => new Promise<number>((resolve) => {
  const s = createServer().listen(0, '127.0.0.1', () => {
    const { port } = s.address() as { port: number };
    s.close(() => resolve(port));
  });
});

/** Spawns src/main.ts with `env` and waits (polling every 5 ms, at most 60 s) for a 200 from sys/health. */
async function startOnce(env: Record<string, string>): Promise<{ ms: number; cpuMs: number }> {
  const port = await freePort();
  const started = performance.now();
  const proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', join(ROOT, 'src/main.ts')], {
    cwd: ROOT, stdio: 'ignore', env: { ...process.env, ...env, STRONGROOM_ADDR: `127.0.0.1:${port}`, STRONGROOM_LOG_LEVEL: 'silent' },
  });
  try {
    while (performance.now() - started < 60_000) {
      // A start that failed (a port taken meanwhile by another process, exit 8) says so rather than polling on.
      if (proc.exitCode !== null) throw new Error(`src/main.ts exited with ${proc.exitCode} before it was healthy`);
      const status = await fetch(`http://127.0.0.1:${port}/v1/sys/health`).then((r) => r.status, () => 0);
      if (status === 200) return { ms: performance.now() - started, cpuMs: (processCpu(proc.pid!)?.all ?? 0) * 1000 };
      await new Promise((r) => setTimeout(r, 5));
    }
    throw new Error('src/main.ts did not answer sys/health with 200 within 60 s');
  } finally {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    }
  }
}

export async function benchStartup(): Promise<string[]> {
  const lines: string[] = [];
  const cacheDir = mkdtempSync(join(tmpdir(), 'strongroom-bench-cache-'));
  try {
    for (const cache of [false, true]) {
      const first: Array<{ ms: number; cpuMs: number }> = [];
      const again: Array<{ ms: number; cpuMs: number }> = [];
      for (let i = 0; i < RUNS; i++) {
        const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-'));
        try {
          // Without: the server's own cache (src/compile-cache.ts) is turned off, else it would be warm after one start.
          const env = { STRONGROOM_STORAGE: `sqlite:${join(dir, 'strongroom.db')}`, ...(cache ? { NODE_COMPILE_CACHE: cacheDir } : { NODE_DISABLE_COMPILE_CACHE: '1' }) };
          // The cache is warmed by a start of its own, not by the measured ones.
          if (cache && i === 0) await startOnce({ ...env, STRONGROOM_STORAGE: `sqlite:${join(dir, 'warm.db')}` });
          first.push(await startOnce(env));
          again.push(await startOnce({ ...env, STRONGROOM_UNSEAL_KEY_FILE: join(dir, 'unseal.key') }));
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }
      const show = (label: string, xs: Array<{ ms: number; cpuMs: number }>) => {
        const ms = xs.map((x) => x.ms).sort((a, b) => a - b);
        const cpu = xs.map((x) => x.cpuMs).sort((a, b) => a - b);
        return `start-up: ${label.padEnd(44)} ${fmt(ms[0]!)} ms best, ${fmt(ms[Math.floor(ms.length / 2)]!)} median to healthy; CPU ${fmt(cpu[0]!)}–${fmt(cpu.at(-1)!)} ms (${RUNS} runs)`;
      };
      const how = cache ? 'warm compile cache' : 'no compile cache';
      lines.push(show(`empty store, ${how}`, first), show(`restart, ${how}`, again));
    }
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
  }
  const bestMs = (line: string) => Number(/([\d,]+) ms best/.exec(line)![1]!.replace(/,/g, ''));
  // Both starts a CI service container meets: the image's (a warm cache) and a checkout's very first `npm start` (none).
  const warm = bestMs(lines[2]!);
  const cold = bestMs(lines[0]!);
  return [...lines, `start-up: target <= 500 ms to healthy for the empty store, with the compile cache the image ships and without any: ` +
    `${fmt(warm)} ms and ${fmt(cold)} ms ${warm <= 500 && cold <= 500 ? 'OK' : 'BELOW TARGET'}`];
}
