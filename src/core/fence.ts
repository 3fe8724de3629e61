import type { Cluster } from './cluster.ts';
import type { PreparedWrite } from './storage/view.ts';

/** The cluster's fence as a write to commit with a leader-only one. */
export function fenceWrite(cluster: Pick<Cluster, 'fence'>): PreparedWrite {
  return { ops: [], conditions: cluster.fence(), committed: () => {} };
}
