import type { Core } from '../../core/core.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';

const VERSION = '0.1.0';

/** Health and seal status answer raw JSON (no envelope) and need no token, so load balancers can poll them. */
export function statusPaths(core: Core): PathDefinition[] {
  const raw = (status: number, body: unknown) => ({ raw: { status, body: JSON.stringify(body) } });
  return [
    definePath({
      pattern: 'health',
      description: 'Server health for load balancers and container health checks.',
      unauthenticated: true,
      operations: {
        // A store that can no longer write is as unavailable as a sealed one: load balancers must route away.
        read: async () => raw(core.sealed || core.options.storage.failure ? 503 : 200, {
          initialized: true, sealed: core.sealed, standby: false, performance_standby: false,
          server_time_utc: Math.floor(core.clock.now() / 1000), version: VERSION, cluster_name: 'strongroom',
        }),
      },
    }),
    definePath({
      pattern: 'seal-status',
      description: 'Seal status.',
      unauthenticated: true,
      operations: {
        read: async () => raw(200, { type: 'key-file', initialized: true, sealed: core.sealed, t: 1, n: 1, progress: 0, nonce: '', version: VERSION, build_date: '', migration: false, recovery_seal: false, storage_type: core.options.storage.constructor.name }),
      },
    }),
    definePath({
      pattern: 'key-status',
      description: 'The active barrier key term: when it was installed and how many values it has encrypted.',
      operations: { read: async () => ({ data: { term: core.barrier.term, install_time: core.barrier.installTime, encryptions: core.barrier.encryptions } }) },
    }),
    definePath({
      pattern: 'rotate',
      description: 'Add a new barrier encryption key term (sudo); older terms still decrypt.',
      operations: { update: async () => void (await core.barrier.rotate()) },
    }),
  ];
}

export { VERSION };
