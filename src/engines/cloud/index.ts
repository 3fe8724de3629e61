/**
 * The cloud secrets engine: dynamic service principals (or passwords on existing applications)
 * from named roles, against Azure through the provider clients.
 */
import type { Backend, BackendContext, BackendFactory } from '../../core/framework.ts';
import { AzureClientFactory } from '../../providers/azure/clients.ts';
import type { RetryOptions } from '../../providers/azure/retry.ts';
import { configPaths } from './config.ts';
import { credsPaths } from './creds.ts';
import { CloudEngine } from './engine.ts';
import { secretTypes } from './revoke.ts';
import { roleIssuingOn, rolePaths } from './roles.ts';
import { RootRotation, rotateRootPaths, type RotateRootOptions } from './rotate-root.ts';
import { staticCredsPaths } from './static-creds.ts';
import { registerStaticGauges, staticRotatePaths } from './static-rotate-role.ts';
import { staticRoleIssuingOn, staticRolePaths } from './static-roles.ts';
import { StaticRotation } from './static-rotation.ts';
import { providerMetrics } from '../../providers/azure/observer.ts';
import { CLOUD_CREDENTIALS, outstandingLeases } from '../../telemetry/families.ts';

/** On a shared store, how often the leader retries what requests on any node left behind. */
const LEADER_RETRY_MS = 60_000;

export interface CloudEngineOptions {
  /** Where CLOUD_* overrides and CLOUD_ENVIRONMENT_FILEPATH are read (default process.env). */
  env?: NodeJS.ProcessEnv;
  retry?: RetryOptions;
  rotateRoot?: RotateRootOptions;
}

export function cloudSecretsEngine(options: CloudEngineOptions = {}): BackendFactory {
  return (ctx: BackendContext): Backend => {
    const env = options.env ?? process.env;
    const factory = new AzureClientFactory({ env, retry: options.retry, logSink: (line) => ctx.logger.debug(line), observer: providerMetrics(ctx.metrics) });
    ctx.metrics.gauge(CLOUD_CREDENTIALS, outstandingLeases(ctx.system, 'creds/'));
    const engine = new CloudEngine({ storage: ctx.storage, clock: ctx.clock, logger: ctx.logger, system: ctx.system, mountAccessor: ctx.mount.accessor, env, factory });
    const rotation = new RootRotation(engine, ctx.metrics, options.rotateRoot);
    const statics = new StaticRotation(engine, ctx.metrics);
    registerStaticGauges(engine, ctx.metrics);
    return {
      // Literal paths first; `roles/?` (list) before `roles/<name>`.
      paths: [
        ...configPaths({
          env, envOptions: { env }, withConfigLock: (fn) => engine.locks.run('config', fn),
          roleIssuingOn: async (storage, appId) => (await roleIssuingOn(storage, appId)) ?? (await staticRoleIssuingOn(storage, appId)), now: () => ctx.clock.now(), system: ctx.system,
          onChange: async () => {
            engine.invalidate();
            await rotation.refresh();
          },
        }),
        ...rotateRootPaths(rotation, ctx.metrics),
        ...rolePaths(engine),
        ...credsPaths(engine),
        ...staticRolePaths(engine, statics),
        ...staticCredsPaths(engine),
        ...staticRotatePaths(engine, statics),
      ],
      secrets: secretTypes(async () => (await engine.connect()).clients),
      leader: {
        async start() {
          await engine.wal.sweep();
          await rotation.lead();
          await statics.lead();
        },
        async stop() {
          engine.wal.stop();
          await rotation.stop();
          await statics.stop();
        },
      },
      // A static role written on another node (created, rotated by hand, imported) re-arms the leader's timer within
      // the coherence bound rather than at the next periodic refresh.
      cached: { prefixes: ['static-roles/'], invalidate: () => void statics.refresh() },
      // Requests on other nodes leave their failed compensations and unfinished root switches to the leader.
      periodic: ctx.system.shared ? { intervalMs: LEADER_RETRY_MS, run: async () => {
        await engine.wal.sweep();
        await rotation.resume();
        // A schedule written on another node.
        await rotation.refresh();
        await statics.refresh();
      } } : undefined,
      async cleanup() {
        engine.wal.stop();
        await rotation.stop();
        await statics.stop();
      },
    };
  };
}

export const cloudBackend: BackendFactory = cloudSecretsEngine();
