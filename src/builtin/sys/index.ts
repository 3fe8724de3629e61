import type { Core } from '../../core/core.ts';
import type { BackendFactory } from '../../core/framework.ts';
import { auditPaths } from './audit.ts';
import { capabilitiesPaths } from './capabilities.ts';
import { eventWebhookPaths } from './events-webhooks.ts';
import { haPaths } from './ha.ts';
import { hostInfoPaths } from './host-info.ts';
import { leasePaths } from './leases.ts';
import { mountPaths } from './mounts.ts';
import { policyPaths } from './policies.ts';
import { remountPaths } from './remount.ts';
import { sealPaths } from './seal.ts';
import { generateRootPaths } from './generate-root.ts';
import { ClusterIdentity, statusPaths } from './status.ts';
import { telemetryPaths } from './telemetry.ts';
import { uiMountPaths } from './ui-mounts.ts';
import { wrappingPaths } from './wrapping.ts';
import { VERSION } from '../../core/version.ts';

export interface SystemBackendOptions {
  /** STRONGROOM_UNAUTHENTICATED_METRICS. */
  unauthenticatedMetrics?: boolean;
}

/** The `sys/` backend: status, control of mounts, policies, leases and audit devices, and what Vault clients ask of the server. */
export const systemBackend = (options: SystemBackendOptions = {}) => (core: Core): BackendFactory => () => {
  const cluster = new ClusterIdentity(core.systemView);
  return {
    paths: [
      ...statusPaths(core, cluster), ...sealPaths(core, cluster), ...generateRootPaths(core), ...haPaths(core), ...hostInfoPaths(core), ...policyPaths(core), ...capabilitiesPaths(core), ...leasePaths(core),
      ...remountPaths(core), ...mountPaths(core), ...uiMountPaths(core), ...auditPaths(core), ...wrappingPaths(core), ...eventWebhookPaths(core),
      ...telemetryPaths(core, { unauthenticatedMetrics: options.unauthenticatedMetrics ?? false, version: VERSION }),
    ],
    initialize: () => cluster.load(),
  };
};
