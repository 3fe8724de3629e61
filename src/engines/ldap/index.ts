/**
 * The LDAP secrets engine: config, rotate-root, static roles (this file's parts), dynamic roles and
 * library sets (their own files). Each part is a function of the shared engine state that returns
 * its paths and lifecycle hooks; adding one is one import and one line in PARTS.
 */
import type { BackendFactory } from '../../core/framework.ts';
import { KeyedLock } from '../../core/keyed-lock.ts';
import type { LdapClient, LdapConnectionConfig } from '../../providers/ldap/client.ts';
import { createLdapClient } from '../../providers/ldap/ldapts-client.ts';
import { ManagedAccounts } from './accounts.ts';
import { configPart } from './config.ts';
import { LdapConnections } from './connections.ts';
import type { LdapEngine, LdapEngineOptions, LdapEnginePart } from './engine.ts';
import { eraseExpiredPrevious, rotateRootPart } from './rotate-root.ts';
import { rotationFailuresPart } from './rotation-failures.ts';
import { RotationScheduler } from './scheduler.ts';
import { staticCredsPart } from './static-creds.ts';
import { rotateStaticRole, scheduleStaticRoles } from './static-role-rotation.ts';
import { staticRolesPart } from './static-roles.ts';
import { dynamicCredsPart } from './dynamic-creds.ts';
import { dynamicRolesPart } from './dynamic-roles.ts';
import { libraryPart } from './library.ts';
import { driftPart } from './drift.ts';
import { registerLdapGauges } from './metrics.ts';

/**
 * Parts in path match order. Their prefixes do not overlap (config, rotate-root, static-role/,
 * static-cred/, rotate-role/, rotation-failures, role/, creds/, library/), so the order between parts only matters
 * inside one part: a part lists its most specific patterns first (e.g. `library/manage/:name/check-in`
 * before `library/:name`).
 */
const PARTS: Array<(engine: LdapEngine) => LdapEnginePart> = [
  configPart,
  rotateRootPart,
  staticRolesPart,
  staticCredsPart,
  rotationFailuresPart,
  dynamicRolesPart,
  dynamicCredsPart,
  libraryPart,
  driftPart,
];

/**
 * On a shared store, how often the leader reads its rotation schedule (and the rotate-root grace period) from storage
 * again: a role created or changed on another node is rotated at most this late.
 */
const SCHEDULE_REFRESH_MS = 2000;

async function refreshLeaderWork(engine: LdapEngine): Promise<void> {
  await scheduleStaticRoles(engine);
  await eraseExpiredPrevious(engine);
  // The automated root rotation and drift verification follow config writes made on other nodes.
  for (const watcher of engine.configWatchers) await watcher();
}

export interface LdapBackendDeps {
  /** The directory client; tests may pass a fake typed against LdapClient. */
  createClient?: (config: LdapConnectionConfig) => LdapClient;
  rotationConcurrency?: number;
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** Check-outs that may wait on one library set at once (STRONGROOM_LIBRARY_MAX_WAITERS). */
  libraryMaxWaiters?: number;
}

export function ldapBackend(deps: LdapBackendDeps = {}): BackendFactory {
  return (ctx) => {
    const options: LdapEngineOptions = {
      createClient: deps.createClient ?? createLdapClient,
      rotationConcurrency: deps.rotationConcurrency ?? 16,
      retryBaseMs: deps.retryBaseMs ?? 10_000,
      retryMaxMs: deps.retryMaxMs ?? 15 * 60_000,
      libraryMaxWaiters: deps.libraryMaxWaiters ?? 1024,
    };
    const engine: LdapEngine = {
      ctx,
      storage: ctx.storage,
      clock: ctx.clock,
      options,
      connections: new LdapConnections(ctx.storage, options.createClient),
      accounts: new ManagedAccounts(ctx.storage),
      locks: new KeyedLock(),
      scheduler: undefined as unknown as RotationScheduler,
      configDependents: [],
      configWatchers: [],
      libraryWaiters: async () => 0,
    };
    engine.scheduler = new RotationScheduler({
      clock: ctx.clock,
      logger: ctx.logger,
      concurrency: options.rotationConcurrency,
      run: async (name) => void (await rotateStaticRole(engine, name, { scheduled: true })),
    });
    const parts = PARTS.map((part) => part(engine));
    registerLdapGauges(engine);
    return {
      paths: parts.flatMap((p) => p.paths),
      secrets: parts.flatMap((p) => p.secrets ?? []),
      async initialize() {
        for (const p of parts) await p.initialize?.();
      },
      leader: {
        async start() {
          engine.scheduler.start();
          for (const p of parts) await p.lead?.();
        },
        async stop() {
          engine.scheduler.stop();
          for (const p of parts) await p.stepDown?.();
          await engine.scheduler.idle();
        },
      },
      // Roles are created, updated and rotated by hand on other nodes too: the leader reads its schedule again.
      periodic: ctx.system.shared ? { intervalMs: SCHEDULE_REFRESH_MS, run: () => refreshLeaderWork(engine) } : undefined,
      async cleanup() {
        engine.scheduler.stop();
        for (const p of parts) await p.stepDown?.();
        await engine.scheduler.idle();
        for (const p of parts) await p.cleanup?.();
        await engine.connections.close();
      },
    };
  };
}
