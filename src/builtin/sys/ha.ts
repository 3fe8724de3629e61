import type { Core } from '../../core/core.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';

/** Vault's "never" for a time, as its Go zero value prints. */
const NEVER = '0001-01-01T00:00:00Z';
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * sys/leader and sys/ha-status in Vault's shapes (docs/ha.md). On a store of its own the node is alone and Vault's
 * answer for storage without HA applies (ha_enabled false); on a shared store they name the leader as the term record
 * has it, and the nodes that recorded a heartbeat lately. Every node serves requests: the leader differs only in the
 * background work it runs.
 */
export function haPaths(core: Core): PathDefinition[] {
  const { cluster } = core;
  /** The recorded leader, unless it is no longer heard from (killed, and not yet replaced). */
  const liveLeader = async () => {
    const leader = cluster.shared ? await cluster.leader() : undefined;
    return leader && (await cluster.alive(leader.node_id)) ? leader : undefined;
  };
  return [
    definePath({
      pattern: 'leader',
      unauthenticated: true,
      rawResponse: ['application/json'],
      description: 'Whether the cluster has HA, whether this node leads it, and where the leader is.',
      operations: {
        read: async () => {
          const leader = await liveLeader();
          const isSelf = cluster.shared && cluster.leading && leader?.node_id === cluster.nodeId;
          return {
            raw: {
              status: 200,
              body: JSON.stringify({
                ha_enabled: cluster.shared, is_self: isSelf, active_time: isSelf ? iso(leader!.since) : NEVER,
                leader_address: leader?.api_address ?? '', leader_cluster_address: leader?.cluster_address ?? '',
                performance_standby: false, performance_standby_last_remote_wal: 0, raft_committed_index: 0, raft_applied_index: 0,
              }),
            },
          };
        },
      },
    }),
    definePath({
      pattern: 'ha-status',
      description: 'The nodes of the cluster heard from lately, and which one leads.',
      rawResponse: ['application/json'],
      operations: {
        read: async () => {
          const leader = cluster.shared ? await liveLeader() : { node_id: cluster.nodeId };
          const nodes = (await cluster.nodes()).map((n) => {
            const active = n.node_id === leader?.node_id;
            return {
              hostname: n.hostname, api_address: n.api_address, cluster_address: n.cluster_address, active_node: active,
              // Vault reports when the active node last heard a standby; here every node records its own heartbeat.
              last_echo: active ? null : iso(n.last_echo), version: n.version,
              echo_duration_ms: 0, clock_skew_ms: 0, replication_primary_canary_age_ms: 0,
            };
          });
          return { raw: { status: 200, body: JSON.stringify({ nodes }) } };
        },
      },
    }),
  ];
}
