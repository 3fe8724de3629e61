/**
 * Containers of the images `npm run test:container` builds, run with podman on the host's network: each listens on
 * a free loopback port (the translation of a published `127.0.0.1:` port), and service names resolve to 127.0.0.1.
 * A run's containers and volumes are named with its prefix, so its global teardown removes them all.
 */
import { resolve } from 'node:path';
import { HOST_FLAGS, podman, podmanStatus, removeAll } from './podman.ts';

export interface BuiltImages {
  runId: string;
  strongroom: string;
  openldap: string;
  /** The directory mounted as the build's /root: the machine's npm configuration and CA bundle (ca.crt). */
  npmHome: string;
  buildSeconds: Record<string, number>;
  /** Bytes, as `podman images` counts them, of both images and the locally made node base. */
  sizes: Record<string, number>;
}

export const runPrefix = (runId: string) => `strongroom-test-${runId}-`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Container {
  name: string;
  /** `performance.now()` when `podman run` was called. */
  started: number;
  /** Milliseconds from `podman run` to its first passing health check, once `healthy()` resolved. */
  startToHealthyMs?: number;
}

/** `podman run --detach` on the host's network; the container is removed by `removeContainers` or the teardown. */
export async function runContainer(name: string, args: string[]): Promise<Container> {
  const started = performance.now();
  await podman(['run', '--detach', '--name', name, ...HOST_FLAGS, ...args], { timeoutMs: 120_000 });
  return { name, started };
}

export const inspect = async (name: string, format: string) => (await podman(['inspect', '--format', format, name])).stdout.trim();
export const logs = async (name: string) => {
  const { stdout, stderr } = await podman(['logs', name]).catch(() => ({ stdout: '', stderr: '' }));
  return stdout + stderr;
};
export const exec = async (name: string, argv: string[]) => (await podman(['exec', name, ...argv])).stdout;

/**
 * Runs the container's HEALTHCHECK command (`podman healthcheck run`: nothing schedules it without systemd) until it
 * passes; fails at once if the container stops, and after `timeoutMs`.
 */
export async function healthy(c: Container, timeoutMs = 90_000): Promise<void> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    if ((await podmanStatus(['healthcheck', 'run', c.name], 30_000)) === 0) break;
    const [status, policy] = (await inspect(c.name, '{{.State.Status}} {{.HostConfig.RestartPolicy.Name}}').catch(() => 'gone')).split(' ');
    // A restart policy may bring it back (GitHub's services start together), so only a stop without one is final.
    if ((status === 'exited' && !policy) || status === 'gone' || performance.now() > until) {
      throw new Error(`${c.name} did not turn healthy (${status}): ${(await logs(c.name)).slice(-3000)}`);
    }
    await sleep(500);
  }
  c.startToHealthyMs = performance.now() - c.started;
}

/** `podman stop` with the grace given (it sends the image's STOPSIGNAL, then SIGKILL); the exit code and the time taken. */
export async function stopContainer(name: string, graceSeconds: number): Promise<{ exitCode: number; seconds: number }> {
  const started = performance.now();
  await podman(['stop', '--time', String(graceSeconds), name], { timeoutMs: (graceSeconds + 60) * 1000 });
  return { exitCode: Number(await inspect(name, '{{.State.ExitCode}}')), seconds: (performance.now() - started) / 1000 };
}

export async function removeContainers(names: string[]): Promise<void> {
  await removeAll('container', names);
}

/** Compose's `${NAME:-default}` with nothing set: the demo setup exactly as `docker compose up` runs it. */
export const interpolate = (value: string) => value.replace(/\$\{\w+:-([^}]*)\}/g, '$1');

/** A compose duration (`30s`, `1m30s`) in seconds. */
export function seconds(duration: string): number {
  let total = 0;
  for (const [, n, unit] of duration.matchAll(/(\d+)(h|m|s)/g)) total += Number(n) * { h: 3600, m: 60, s: 1 }[unit as 'h' | 'm' | 's'];
  return total;
}

type Service = Record<string, any>;

/** What compose.yaml's `ports` become on the host's network: the variables that move the listener. */
export type Listen = (hostPort: number) => Record<string, string>;

/**
 * `podman run` flags for one service of compose.yaml, every key it uses translated (a key not known here fails, so a
 * change of compose.yaml cannot be silently left out): `ports` (loopback only) becomes the listener `listen` gives on
 * `hostPorts[service]`, and another service's `name:port` in a variable becomes `name:<its host port>`, with the
 * name resolving to 127.0.0.1. The service's own healthcheck is left out: the image's HEALTHCHECK is what is tested.
 */
export function composeRunArgs(compose: { services: Record<string, Service>; secrets?: Record<string, { file: string }> }, service: string,
  opts: { image: string; volumePrefix: string; hostPorts: Record<string, number>; listen: Listen }): string[] {
  const s = compose.services[service];
  const args: string[] = [];
  for (const other of Object.keys(compose.services)) if (other !== service) args.push('--add-host', `${other}:127.0.0.1`);
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(s)) {
    switch (key) {
      case 'build': case 'depends_on': case 'healthcheck': case 'stop_grace_period': break; // the caller's
      case 'environment':
        for (const [k, v] of Object.entries(value as Record<string, string>)) env[k] = rewritePorts(compose, interpolate(String(v)), opts.hostPorts);
        break;
      case 'ports':
        for (const p of value as string[]) {
          if (!p.startsWith('127.0.0.1:')) throw new Error(`${service} publishes ${p} beyond loopback`);
          Object.assign(env, opts.listen(opts.hostPorts[service]));
        }
        break;
      case 'volumes':
        for (const v of value as string[]) {
          const [source, ...rest] = v.split(':');
          args.push('--volume', [source.startsWith('.') ? resolve(source) : `${opts.volumePrefix}${source}`, ...rest].join(':'));
        }
        break;
      case 'secrets':
        for (const name of value as string[]) args.push('--volume', `${resolve(interpolate(compose.secrets![name].file))}:/run/secrets/${name}:ro`);
        break;
      case 'read_only':
        // Docker mounts nothing writable with read_only; podman adds tmpfs on /run, /tmp and /var/tmp unless told not to.
        if (value) args.push('--read-only', '--read-only-tmpfs=false');
        break;
      case 'tmpfs': for (const t of value as string[]) args.push('--tmpfs', t); break;
      case 'cap_drop': for (const c of value as string[]) args.push('--cap-drop', c); break;
      case 'security_opt': for (const o of value as string[]) args.push('--security-opt', o); break;
      case 'stop_signal': args.push('--stop-signal', String(value)); break;
      default: throw new Error(`compose.yaml's ${service}.${key} has no translation to podman here`);
    }
  }
  for (const [k, v] of Object.entries(env)) args.push('--env', `${k}=${v}`);
  return [...args, opts.image];
}

/** `openldap:1389` in a value, for a service published on `127.0.0.1:1389:1389`, becomes `openldap:<its host port>`. */
function rewritePorts(compose: { services: Record<string, Service> }, value: string, hostPorts: Record<string, number>): string {
  let out = value;
  for (const [name, s] of Object.entries(compose.services)) {
    for (const p of (s.ports ?? []) as string[]) out = out.replaceAll(`${name}:${p.split(':').at(-1)}`, `${name}:${hostPorts[name]}`);
  }
  return out;
}
