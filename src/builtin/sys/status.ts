import { randomUUID } from 'node:crypto';
import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { storageRefusal } from '../../core/storage/types.ts';
import { VERSION } from '../../core/version.ts';
import type { StorageView } from '../../core/storage/view.ts';

export const CLUSTER_NAME = 'strongroom';
const CLUSTER_ID_KEY = 'cluster/id';

/** The cluster's id: a UUID stored once behind the barrier, so every node and every restart reports the same one. */
export class ClusterIdentity {
  readonly #view: StorageView;
  #id = '';

  constructor(view: StorageView) {
    this.#view = view;
  }

  /** At every start: the first one stores the id (guarded, so of two nodes starting together one wins), all read it. */
  async load(): Promise<void> {
    await this.#view.transaction([{ type: 'put', key: CLUSTER_ID_KEY, value: Buffer.from(randomUUID()) }], [{ key: CLUSTER_ID_KEY, expected: undefined }]);
    this.#id = (await this.#view.get(CLUSTER_ID_KEY))!.toString('utf8');
  }

  get id(): string {
    return this.#id;
  }
}

const code = (state: string, vaultDefault: number) => field.int(`Status code answered for a ${state} node (default ${vaultDefault}).`, { min: 100, max: 599 });

/**
 * Vault's query parameters. Strongroom answers only once initialised, and every node is active (no standbys, no
 * replication), so only `activecode` and `sealedcode` (a node sealed by sys/seal) can apply; the others are accepted
 * and validated so that a monitor's URL written for Vault works unchanged.
 */
const healthFields = {
  standbyok: field.bool('Answer a standby with the active code.'),
  perfstandbyok: field.bool('Answer a performance standby with the active code.'),
  activecode: code('active', 200),
  standbycode: code('standby', 429),
  drsecondarycode: code('DR secondary', 472),
  performancestandbycode: code('performance standby', 473),
  haunhealthycode: code('standby that cannot reach the active', 474),
  removedcode: code('removed', 530),
  sealedcode: code('sealed', 503),
  uninitcode: code('uninitialised', 501),
};

/** Health and init answer raw JSON (no envelope) and need no token, so load balancers and installers can poll them. */
export function statusPaths(core: Core, cluster: ClusterIdentity): PathDefinition[] {
  const raw = (status: number, body: unknown) => ({ raw: { status, body: JSON.stringify(body) } });
  return [
    definePath({
      pattern: 'health',
      description: 'Server health for load balancers and container health checks (HEAD: the status alone).',
      unauthenticated: true,
      rawResponse: ['application/json'],
      fields: healthFields,
      operations: {
        read: async (req) => raw(
          // A store that can no longer write, or cannot reach its database for now, fails closed: no query parameter
          // turns that into success.
          storageRefusal(core.options.storage) ? 503 : core.sealed ? req.data.sealedcode ?? 503 : req.data.activecode ?? 200,
          {
            initialized: true, sealed: core.sealed, standby: false, performance_standby: false,
            replication_performance_mode: 'disabled', replication_dr_mode: 'disabled',
            server_time_utc: Math.floor(core.clock.now() / 1000), version: VERSION, enterprise: false,
            cluster_name: CLUSTER_NAME, cluster_id: cluster.id, echo_duration_ms: 0, clock_skew_ms: 0, replication_primary_canary_age_ms: 0,
          },
        ),
      },
    }),
    definePath({
      pattern: 'init',
      description: 'Whether the store is initialised. Strongroom initialises it at its first start, so initialising through the API is refused.',
      unauthenticated: true,
      rawResponse: ['application/json'],
      operations: {
        read: async () => raw(200, { initialized: true }),
        update: async () => {
          throw new BadRequestError('Strongroom is already initialized');
        },
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
