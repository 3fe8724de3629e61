import type { Core } from '../../core/core.ts';
import type { BackendFactory } from '../../core/framework.ts';
import { leasePaths } from './leases.ts';
import { mountPaths } from './mounts.ts';
import { policyPaths } from './policies.ts';
import { statusPaths } from './status.ts';

/** The `sys/` backend: control of mounts, policies and leases. */
export const systemBackend = (core: Core): BackendFactory => () => ({
  paths: [...statusPaths(core), ...policyPaths(core), ...leasePaths(core), ...mountPaths(core)],
});
