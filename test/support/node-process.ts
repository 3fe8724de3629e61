/**
 * Strongroom server processes (`src/main.ts`) on free loopback ports, for cluster tests and benchmarks: each node's
 * log lines are kept (parsed), and it can be stopped, or killed outright. Free of vitest imports, so bench/ can use it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { freePort } from './ports.ts';

export const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));

export interface LogLine {
  level: number;
  time: number;
  msg: string;
  [field: string]: unknown;
}

export interface NodeProcess {
  url: string;
  proc: ChildProcess;
  /** Every JSON log line the node printed so far. */
  logs: LogLine[];
  /** Everything it printed so far (the banner and notices besides the JSON log). */
  printed: { stdout(): string; stderr(): string };
  /** Its answer to a request (token "root" unless given; null sends none); never throws for an HTTP status. */
  request(method: string, path: string, opts?: { body?: unknown; token?: string | null }): Promise<{ status: number; body: any }>;
  /** SIGTERM and wait: a clean stop (the node lets its lease go). */
  stop(): Promise<void>;
  /** SIGKILL and wait: the process dies at once, in the middle of whatever it was doing. */
  kill(): Promise<void>;
}

/**
 * Starts one node on `storage` with `unsealKey` (dev mode, so every node knows the root token "root"); resolves once
 * it answers. `env` adds or overrides settings.
 */
export async function startNode(storage: string, unsealKey: string, env: Record<string, string> = {}): Promise<NodeProcess> {
  const { node, exited } = await spawnNode(storage, unsealKey, env);
  const until = performance.now() + 30_000;
  while (!(await fetch(`${node.url}/v1/sys/health`).then(() => true, () => false))) {
    if (node.proc.exitCode !== null || performance.now() > until) {
      await node.kill();
      throw new Error(`the node did not start (exit ${node.proc.exitCode}): ${exited.stderr().slice(-2000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return node;
}

/**
 * The same node process, returned as soon as it is spawned (a test of what it does while starting); `exited` holds
 * what it printed besides its JSON log.
 */
export async function spawnNode(storage: string, unsealKey: string, env: Record<string, string> = {}): Promise<{ node: NodeProcess; exited: { stderr(): string; stdout(): string } }> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', MAIN], {
    env: {
      ...process.env, STRONGROOM_STORAGE: storage, STRONGROOM_UNSEAL_KEY: unsealKey, STRONGROOM_ADDR: `127.0.0.1:${port}`,
      STRONGROOM_DEV: '1', STRONGROOM_DEV_ROOT_TOKEN: 'root', STRONGROOM_LOG_LEVEL: 'debug', STRONGROOM_AUDIT_DIR: tmpdir(), ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: LogLine[] = [];
  let pending = '';
  let stderr = '';
  let stdout = '';
  proc.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
    pending += chunk.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) if (line.startsWith('{')) logs.push(JSON.parse(line) as LogLine);
  });
  proc.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const printed = { stderr: () => stderr, stdout: () => stdout };
  const node: NodeProcess = {
    url, proc, logs, printed,
    async request(method, path, { body, token = 'root' } = {}) {
      const res = await fetch(`${url}/v1/${path}`, {
        method,
        headers: { ...(token ? { 'x-vault-token': token } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : undefined };
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
  return { node, exited: printed };
}

/** Sends `signal` and waits (bounded: 15 s) for one more log line with `msg`, which it returns. */
export async function signalAndWait(n: NodeProcess, signal: NodeJS.Signals, msg: string): Promise<Record<string, any>> {
  const before = n.logs.filter((l) => l.msg === msg).length;
  n.proc.kill(signal);
  for (let i = 0; i < 300; i++) {
    const lines = n.logs.filter((l) => l.msg === msg);
    if (lines.length > before) return lines.at(-1)!;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`no "${msg}" after ${signal}`);
}

/** Runs `args` with node to its exit (a process that should refuse to start, a CLI): its code and what it printed. */
export function runToExit(args: string[], env: Record<string, string>): Promise<{ code: number | null; stderr: string; stdout: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    p.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    p.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    p.once('exit', (code) => resolve({ code, stderr, stdout }));
  });
}
