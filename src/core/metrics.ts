/**
 * What the core reports to a telemetry sink (src/telemetry/telemetry.ts implements it; a core without one records
 * nothing), so the core depends on this contract and not on the metrics library.
 */
import type { LeaseEvents } from './leases.ts';
import type { MountMetrics } from './framework.ts';
import type { ServedRequest } from './request.ts';
import type { Storage } from './storage/types.ts';

export interface CoreTelemetry {
  /** The physical store with each call timed. */
  instrument(storage: Storage): Storage;
  readonly leaseEvents: LeaseEvents;
  /** What a mount records through; `close` when it goes. */
  forMount(mountPath: string): MountMetrics & { close(): void };
  /** Called once a request is answered; `started` is performance.now() when it arrived. */
  request(served: ServedRequest, status: number, started: number): void;
  /** A token issued by an auth method's login or by the token store. */
  tokenCreated(mount: { type: string; path: string }, ttlSeconds: number): void;
  /** What sys/metrics serves: the Prometheus text exposition, or Vault's JSON shape; `maxAgeMs`: how old a family read from storage may be (0: read now). */
  render(format: 'prometheus' | 'json', maxAgeMs?: number): Promise<{ contentType: string; body: string }>;
}

/** For a core without telemetry: a mount records into nothing. */
export const NO_METRICS: MountMetrics & { close(): void } = {
  counter: () => ({ inc: () => {} }),
  gauge: () => {},
  histogram: () => ({ observe: () => {} }),
  close: () => {},
};
