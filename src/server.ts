import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { systemBackend } from './builtin/sys/index.ts';
import { identityBackend } from './builtin/identity/index.ts';
import { systemClock, type Clock } from './core/clock.ts';
import type { ClusterTimings } from './core/cluster.ts';
import { Core, type BackendRegistry } from './core/core.ts';
import type { BackendFactory } from './core/framework.ts';
import { decodeUnsealKey, UnsealError } from './core/barrier.ts';
import { PRIVATE_FILE_MODE, privateDir, privateFiles } from './core/storage/file-modes.ts';
import { MemoryStorage } from './core/storage/memory.ts';
import { POSTGRES_DEFAULTS, type PostgresOptions } from './core/storage/postgres-options.ts';
import { SqliteStorage } from './core/storage/sqlite.ts';
import { lockStore, StoreInUseError } from './core/storage/sqlite-lock.ts';
import { StorageUnavailableError, type Storage } from './core/storage/types.ts';
import { defaultMounts, lazyBackends } from './lazy-engines.ts';
import { buildApp } from './http/app.ts';
import { Telemetry } from './telemetry/telemetry.ts';
import { apiAddress, auditDirectory, auditSettings, postgresOptions, readTls, storageUrl, type Settings } from './settings.ts';

export interface Server {
  core: Core;
  app: FastifyInstance;
  /** The physical store, watched by the process for `onFailure`. */
  storage: Storage;
  rootToken?: string;
  /** The key file generated at this start (no key was given), which the operator must back up. */
  generatedKeyFile?: string;
  /**
   * What a start with `listenFirst` leaves until the process listens: the backends of the mounts but sys/ and
   * identity/ (their requests wait for them meanwhile) and Node's process metrics. Resolves once each backend runs or
   * has failed (its mount then answers 503). Without `listenFirst`, createServer has done it before returning.
   */
  finishStart(): Promise<void>;
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
  /**
   * Returns before the modules of the engines and the token store are loaded, leaving them to `finishStart` (main.ts:
   * the process listens first; docs/architecture.md, "Start-up"). Tests that read a backend at once leave it off.
   */
  listenFirst?: boolean;
}

export class StartupError extends Error {}

export async function openStorage(url: string, postgres: PostgresOptions = POSTGRES_DEFAULTS): Promise<Storage> {
  if (url === 'memory') return new MemoryStorage();
  if (url.startsWith('sqlite:')) return openSqlite(url.slice('sqlite:'.length));
  if (/^postgres(ql)?:\/\//.test(url)) return openPostgres(url, postgres);
  throw new StartupError(`storage "${url.split(':')[0]}" is not supported (use "memory", "sqlite:<path>" or "postgres://...")`);
}

/** The store, locked to this process until it is closed (sqlite-lock.ts); a second process is refused. */
function openSqlite(path: string): Storage {
  const cannot = (err: unknown) => new StartupError(`cannot open the SQLite store ${path}: ${(err as Error).message}`);
  let lock;
  try {
    privateDir(dirname(path));
    lock = lockStore(path);
  } catch (err) {
    throw err instanceof StoreInUseError ? err : cannot(err);
  }
  try {
    const storage = new SqliteStorage(path);
    const close = storage.close.bind(storage);
    storage.close = async () => {
      try {
        await close();
      } finally {
        lock.release();
      }
    };
    return storage;
  } catch (err) {
    lock.release();
    throw cannot(err);
  }
}

/**
 * An unseal key the store was made with, and which is not here: refused before anything (a new key above all) is
 * written, since a new key could never open the store.
 */
export class MissingUnsealKeyError extends UnsealError {}

/**
 * An unreachable database stays a StorageUnavailableError (the process exits to be started again once it is up);
 * anything else it says (a refused login, a missing database, a schema from a newer build) is a setting to fix.
 */
async function openPostgres(url: string, options: PostgresOptions): Promise<Storage> {
  try {
    // Loaded here only: `pg` and the store's code are no part of a start on SQLite or memory storage.
    const { PostgresStorage } = await import('./core/storage/postgres.ts');
    return await PostgresStorage.open(url, options);
  } catch (err) {
    if (err instanceof StorageUnavailableError) throw err;
    throw new StartupError(`cannot open the PostgreSQL storage: ${(err as Error).message}`);
  }
}

/**
 * The unseal key: from the environment or a file; otherwise, for a store not yet initialised, generated once into a
 * 0600 file beside the data (`generated` names it; dev mode on memory storage keeps it in memory). Losing that file
 * means losing the data, so for an initialised store whose key file is gone nothing is generated: it is refused.
 */
export function resolveUnsealKey(settings: Settings, logger: Logger, storeInitialised = false): { key: Buffer; generated?: string } {
  const decode = (text: string, from: string) => {
    const key = decodeUnsealKey(text);
    if (!key) throw new StartupError(`the unseal key from ${from} must be 32 bytes, base64-encoded (make one with: openssl rand -base64 32)`);
    return key;
  };
  if (settings.STRONGROOM_UNSEAL_KEY) return { key: decode(settings.STRONGROOM_UNSEAL_KEY, 'STRONGROOM_UNSEAL_KEY') };
  if (settings.STRONGROOM_UNSEAL_KEY_FILE) {
    if (!existsSync(settings.STRONGROOM_UNSEAL_KEY_FILE)) throw new StartupError(`STRONGROOM_UNSEAL_KEY_FILE "${settings.STRONGROOM_UNSEAL_KEY_FILE}" does not exist`);
    return { key: decode(readFileSync(settings.STRONGROOM_UNSEAL_KEY_FILE, 'utf8'), 'STRONGROOM_UNSEAL_KEY_FILE') };
  }
  const url = storageUrl(settings);
  if (url === 'memory') return { key: randomBytes(32) };
  // A key generated here would seal a shared database with a key no other node (and no later start) has.
  if (!url.startsWith('sqlite:')) throw new StartupError('PostgreSQL storage needs STRONGROOM_UNSEAL_KEY or STRONGROOM_UNSEAL_KEY_FILE, the same on every node (make one with: openssl rand -base64 32 > unseal.key)');
  const file = join(dirname(url.slice('sqlite:'.length)), 'unseal.key');
  privateDir(dirname(file));
  if (existsSync(file)) {
    privateFiles(file);
    return { key: decode(readFileSync(file, 'utf8'), file) };
  }
  if (storeInitialised) {
    throw new MissingUnsealKeyError(`this store was initialised with an unseal key that is not here (${file} is missing, and neither STRONGROOM_UNSEAL_KEY_FILE nor STRONGROOM_UNSEAL_KEY is set). Restore ${file} from your backup, or set STRONGROOM_UNSEAL_KEY_FILE to the backed-up key; no new key was generated`);
  }
  const key = randomBytes(32);
  writeFileSync(file, `${key.toString('base64')}\n`, { mode: PRIVATE_FILE_MODE, flag: 'wx' });
  logger.warn({ file }, 'No unseal key was given: one was generated into this file. Back it up and keep it apart from the data; set STRONGROOM_UNSEAL_KEY_FILE in production.');
  return { key, generated: file };
}

/** The physical store as Vault's storage metrics name it (vault_<name>_get ...). */
function storageBackendName(url: string): string {
  return url === 'memory' ? 'inmem' : url.startsWith('sqlite:') ? 'sqlite' : 'postgres';
}

/** The token store's paths (auth/token/), loaded at the mount's start: with `listenFirst`, after the process listens. */
const lazyTokenBackend = (core: Core): BackendFactory => async (ctx) => (await import('./builtin/token/index.ts')).tokenBackend(core)(ctx);

/** The composition root: storage, core with built-ins and engines, HTTP app. */
export async function createServer(settings: Settings, logger: Logger, overrides: ServerOverrides = {}): Promise<Server> {
  // Read before the store is opened: a file that cannot be read must not fail a start that already initialised it.
  const https = readTls(settings);
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
    backends: overrides.backends ?? lazyBackends({ libraryMaxWaiters: settings.STRONGROOM_LIBRARY_MAX_WAITERS }),
    builtins: { system: systemBackend({ unauthenticatedMetrics: settings.STRONGROOM_UNAUTHENTICATED_METRICS }), token: lazyTokenBackend, identity: identityBackend({ defaultIssuer: apiAddress(settings) }) },
    defaultMounts,
    audit: auditSettings(settings),
    apiAddress: apiAddress(settings),
    cluster: overrides.cluster,
    deferBackends: overrides.listenFirst,
  });
  // Built while the SQLite writer thread starts, which the first commit (in core.start) waits for: the app reads nothing
  // from the core until it serves a request, and the process listens only once createServer has returned.
  const app = buildApp(core, {
    logger,
    maxRequestSize: settings.STRONGROOM_MAX_REQUEST_SIZE,
    maxUnauthenticatedRequestSize: settings.STRONGROOM_MAX_UNAUTHENTICATED_REQUEST_SIZE,
    timeouts: {
      headersMs: settings.STRONGROOM_HEADERS_TIMEOUT * 1000,
      requestMs: settings.STRONGROOM_REQUEST_TIMEOUT * 1000,
      keepAliveMs: settings.STRONGROOM_KEEP_ALIVE_TIMEOUT * 1000,
    },
    https,
  });
  let unsealKey: ReturnType<typeof resolveUnsealKey>;
  // Beside a SQLite database the default audit directory is the server's own, like the database's: made if missing.
  if (!settings.STRONGROOM_AUDIT_DIR && storageUrl(settings).startsWith('sqlite:')) mkdirSync(auditDirectory(settings), { recursive: true, mode: 0o700 });
  let rootToken: string | undefined;
  try {
    unsealKey = resolveUnsealKey(settings, logger, await core.barrier.isInitialized());
    ({ rootToken } = await core.start(unsealKey.key, settings.STRONGROOM_DEV ? settings.STRONGROOM_DEV_ROOT_TOKEN : undefined));
  } catch (err) {
    await storage.close();
    throw err;
  }
  telemetry?.watch({ leases: core.leases, audit: core.audit, leading: () => core.cluster.leading, events: { counters: core.events.outbox.counters, logSize: () => core.events.feed.size } });
  const finishStart = async () => {
    telemetry?.observeProcess();
    await core.loadDeferredBackends();
  };
  if (!overrides.listenFirst) await finishStart();
  return {
    core, app, storage, rootToken, generatedKeyFile: unsealKey.generated, finishStart,
    async close() {
      await app.close();
      await core.stop();
    },
  };
}
