import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { systemBackend } from './builtin/sys/index.ts';
import { identityBackend } from './builtin/identity/index.ts';
import { tokenBackend } from './builtin/token/index.ts';
import { systemClock, type Clock } from './core/clock.ts';
import type { ClusterTimings } from './core/cluster.ts';
import { Core, type BackendRegistry } from './core/core.ts';
import { PRIVATE_FILE_MODE, privateDir, privateFiles } from './core/storage/file-modes.ts';
import { MemoryStorage } from './core/storage/memory.ts';
import { POSTGRES_DEFAULTS, PostgresStorage, type PostgresOptions } from './core/storage/postgres.ts';
import { SqliteStorage } from './core/storage/sqlite.ts';
import { StorageUnavailableError, type Storage } from './core/storage/types.ts';
import { backendTypes, defaultMounts } from './engines.ts';
import { buildApp } from './http/app.ts';
import { Telemetry } from './telemetry/telemetry.ts';
import { apiAddress, postgresOptions, readTls, storageUrl, type Settings } from './settings.ts';

export interface Server {
  core: Core;
  app: FastifyInstance;
  /** The physical store, watched by the process for `onFailure`. */
  storage: Storage;
  rootToken?: string;
  close(): Promise<void>;
}

export interface ServerOverrides {
  clock?: Clock;
  storage?: Storage;
  backends?: BackendRegistry;
  /** The cluster's timings, shortened by tests. */
  cluster?: Partial<ClusterTimings>;
  /** False runs the server without metrics (the benchmark's baseline); sys/metrics then answers 400. */
  metrics?: boolean;
}

export class StartupError extends Error {}

export async function openStorage(url: string, postgres: PostgresOptions = POSTGRES_DEFAULTS): Promise<Storage> {
  if (url === 'memory') return new MemoryStorage();
  if (url.startsWith('sqlite:')) return new SqliteStorage(url.slice('sqlite:'.length));
  if (/^postgres(ql)?:\/\//.test(url)) return openPostgres(url, postgres);
  throw new StartupError(`storage "${url.split(':')[0]}" is not supported (use "memory", "sqlite:<path>" or "postgres://...")`);
}

/**
 * An unreachable database stays a StorageUnavailableError (the process exits to be started again once it is up);
 * anything else it says (a refused login, a missing database, a schema from a newer build) is a setting to fix.
 */
async function openPostgres(url: string, options: PostgresOptions): Promise<Storage> {
  try {
    return await PostgresStorage.open(url, options);
  } catch (err) {
    if (err instanceof StorageUnavailableError) throw err;
    throw new StartupError(`cannot open the PostgreSQL storage: ${(err as Error).message}`);
  }
}

/**
 * The unseal key: from the environment or a file; otherwise generated once into a 0600 file beside the data
 * (dev mode on memory storage keeps it in memory). Losing that file means losing the data.
 */
export function resolveUnsealKey(settings: Settings, logger: Logger): Buffer {
  const decode = (text: string, from: string) => {
    const key = Buffer.from(text.trim(), 'base64');
    if (key.length !== 32) throw new StartupError(`the unseal key from ${from} must be 32 bytes, base64-encoded`);
    return key;
  };
  if (settings.STRONGROOM_UNSEAL_KEY) return decode(settings.STRONGROOM_UNSEAL_KEY, 'STRONGROOM_UNSEAL_KEY');
  if (settings.STRONGROOM_UNSEAL_KEY_FILE) {
    if (!existsSync(settings.STRONGROOM_UNSEAL_KEY_FILE)) throw new StartupError(`STRONGROOM_UNSEAL_KEY_FILE "${settings.STRONGROOM_UNSEAL_KEY_FILE}" does not exist`);
    return decode(readFileSync(settings.STRONGROOM_UNSEAL_KEY_FILE, 'utf8'), 'STRONGROOM_UNSEAL_KEY_FILE');
  }
  const url = storageUrl(settings);
  if (url === 'memory') return randomBytes(32);
  // A key generated here would seal a shared database with a key no other node (and no later start) has.
  if (!url.startsWith('sqlite:')) throw new StartupError('PostgreSQL storage needs STRONGROOM_UNSEAL_KEY or STRONGROOM_UNSEAL_KEY_FILE, the same on every node');
  const file = join(dirname(url.slice('sqlite:'.length)), 'unseal.key');
  privateDir(dirname(file));
  if (existsSync(file)) {
    privateFiles(file);
    return decode(readFileSync(file, 'utf8'), file);
  }
  const key = randomBytes(32);
  writeFileSync(file, `${key.toString('base64')}\n`, { mode: PRIVATE_FILE_MODE, flag: 'wx' });
  logger.warn({ file }, '!!! No unseal key was given: one was generated into this file. Back it up and keep it apart from the data; set STRONGROOM_UNSEAL_KEY_FILE in production. !!!');
  return key;
}

/** The physical store as Vault's storage metrics name it (vault_<name>_get ...). */
function storageBackendName(url: string): string {
  return url === 'memory' ? 'inmem' : url.startsWith('sqlite:') ? 'sqlite' : 'postgres';
}

/** The composition root: storage, core with built-ins and engines, HTTP app. */
export async function createServer(settings: Settings, logger: Logger, overrides: ServerOverrides = {}): Promise<Server> {
  const storage = overrides.storage ?? await openStorage(storageUrl(settings), postgresOptions(settings));
  const telemetry = overrides.metrics === false ? undefined : new Telemetry({ logger, storageBackend: storageBackendName(storageUrl(settings)) });
  const core = new Core({
    storage,
    telemetry,
    clock: overrides.clock ?? systemClock,
    logger,
    defaultLeaseTtl: settings.STRONGROOM_DEFAULT_LEASE_TTL,
    maxLeaseTtl: settings.STRONGROOM_MAX_LEASE_TTL,
    revokeRetry: { baseDelayMs: settings.STRONGROOM_REVOKE_RETRY_BASE * 1000, maxAttempts: settings.STRONGROOM_REVOKE_MAX_ATTEMPTS },
    events: {
      feed: { retentionMs: settings.STRONGROOM_EVENTS_RETENTION * 1000, maxRecords: settings.STRONGROOM_EVENTS_MAX_RECORDS },
      webhooks: { allowHttp: settings.STRONGROOM_EVENTS_WEBHOOK_ALLOW_HTTP, retryBaseMs: settings.STRONGROOM_EVENTS_WEBHOOK_RETRY_BASE * 1000, attempts: settings.STRONGROOM_EVENTS_WEBHOOK_ATTEMPTS },
    },
    backends: overrides.backends ?? backendTypes,
    builtins: { system: systemBackend({ unauthenticatedMetrics: settings.STRONGROOM_UNAUTHENTICATED_METRICS }), token: tokenBackend, identity: identityBackend({ defaultIssuer: apiAddress(settings) }) },
    defaultMounts,
    audit: { allowPrefix: settings.STRONGROOM_AUDIT_ALLOW_PREFIX, allowRaw: settings.STRONGROOM_AUDIT_ALLOW_RAW },
    apiAddress: apiAddress(settings),
    cluster: overrides.cluster,
  });
  let unsealKey: Buffer;
  try {
    unsealKey = resolveUnsealKey(settings, logger);
  } catch (err) {
    await storage.close();
    throw err;
  }
  let rootToken: string | undefined;
  try {
    ({ rootToken } = await core.start(unsealKey, settings.STRONGROOM_DEV ? settings.STRONGROOM_DEV_ROOT_TOKEN : undefined));
  } catch (err) {
    await storage.close();
    throw err;
  }
  telemetry?.watch({ leases: core.leases, audit: core.audit, leading: () => core.cluster.leading, events: { counters: core.events.outbox.counters, logSize: () => core.events.feed.size } });
  const app = buildApp(core, {
    logger,
    maxRequestSize: settings.STRONGROOM_MAX_REQUEST_SIZE,
    maxUnauthenticatedRequestSize: settings.STRONGROOM_MAX_UNAUTHENTICATED_REQUEST_SIZE,
    timeouts: {
      headersMs: settings.STRONGROOM_HEADERS_TIMEOUT * 1000,
      requestMs: settings.STRONGROOM_REQUEST_TIMEOUT * 1000,
      keepAliveMs: settings.STRONGROOM_KEEP_ALIVE_TIMEOUT * 1000,
    },
    https: readTls(settings),
  });
  return {
    core, app, storage, rootToken,
    async close() {
      await app.close();
      await core.stop();
    },
  };
}
