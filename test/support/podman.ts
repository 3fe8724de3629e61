/**
 * Podman as this machine can run it, for the container tests: rootful, with Debian's runc (crun refuses hybrid
 * cgroups), the host's network (loopback ports only; no bridge is set up), and `nofile` and `nproc` limits that runc may
 * set (podman's defaults for root exceed them, and runc then fails to start the container).
 * Free of vitest imports: test/support/base-images.ts runs it as a script too.
 */
import { execFile, execFileSync } from 'node:child_process';

const RUNTIME = ['--runtime', 'runc'];

/** The machine's hard limit of open files: podman's default for root (1048576) can exceed it. */
function nofile(): string {
  const hard = execFileSync('sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).trim();
  const n = hard === 'unlimited' ? 1048576 : Number(hard);
  return `nofile=${n}:${n}`;
}

/**
 * The flags every `podman run` and `podman build` of the tests takes. Processes: podman build's default, 32768; its
 * run default (the kernel's maximum) is more than runc may set here, even at the shell's hard limit.
 */
export const HOST_FLAGS: readonly string[] = ['--network', 'host', '--ulimit', nofile(), '--ulimit', 'nproc=32768:32768'];

export class PodmanError extends Error {
  readonly code: number | null;
  readonly stdout: string;
  constructor(args: string[], code: number | null, stdout: string, stderr: string) {
    super(`podman ${args.slice(0, 3).join(' ')} … exited ${code}: ${stderr.slice(-3000)}`);
    this.code = code;
    this.stdout = stdout;
  }
}

/** Runs podman to its exit (bounded by `timeoutMs`); resolves with its output, rejects with a PodmanError. */
export function podman(args: string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = execFile('podman', [...RUNTIME, ...args], { timeout: opts.timeoutMs ?? 60_000, maxBuffer: 64 << 20, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      if (err) reject(new PodmanError(args, typeof err.code === 'number' ? err.code : null, stdout, stderr || err.message));
      else resolve({ stdout, stderr });
    });
    if (opts.input !== undefined) child.stdin!.end(opts.input);
  });
}

/** Its exit code only (a health check, a probe that may fail). */
export function podmanStatus(args: string[], timeoutMs = 60_000): Promise<number | null> {
  return podman(args, { timeoutMs }).then(() => 0, (e: unknown) => (e instanceof PodmanError ? e.code : null));
}

export async function imageExists(ref: string): Promise<boolean> {
  return (await podmanStatus(['image', 'exists', ref])) === 0;
}

/** The image's size in bytes as `podman images` reports it (the uncompressed layers). */
export async function imageSize(ref: string): Promise<number> {
  return Number((await podman(['image', 'inspect', '--format', '{{.Size}}', ref])).stdout.trim());
}

/** Removes what a test run made, one by one (a missing one does not spare the rest). Never throws. */
export async function removeAll(kind: 'container' | 'volume' | 'image', refs: string[]): Promise<void> {
  // A container's anonymous volumes (an image's VOLUME no compose key names) go with it.
  const args = { container: ['rm', '--force', '--ignore', '--volumes', '--time', '5'], volume: ['volume', 'rm', '--force'], image: ['rmi', '--force', '--ignore'] }[kind];
  for (const ref of refs) await podman([...args, ref], { timeoutMs: 120_000 }).catch(() => undefined);
}
