/**
 * The endpoints a bootstrap file writes to, as the server routes them, so its bodies are checked against each
 * endpoint's own field definitions (the file keeps no list of fields). A backend's path table comes from its type's
 * factory called with a scratch context over in-memory storage: factories only build their paths and state when
 * called (no I/O, no timers; their work starts in `initialize` and `leader.start`, never called here). The built-in
 * sys/ and auth/token/ backends close over a core, so they get a scratch one that is never started. Tables are built
 * once per process, on first use.
 */
import pino from 'pino';
import { systemBackend } from '../builtin/sys/index.ts';
import { tokenBackend } from '../builtin/token/index.ts';
import { systemClock } from '../core/clock.ts';
import { Core } from '../core/core.ts';
import type { BackendContext, BackendFactory, MountInfo, SystemView } from '../core/framework.ts';
import { PathTable, type PathMatch } from '../core/router.ts';
import { MemoryStorage } from '../core/storage/memory.ts';
import { StorageView } from '../core/storage/view.ts';
import { backendTypes } from '../engines.ts';
import { NO_METRICS } from '../core/metrics.ts';
import { TYPE_ROLE_KINDS, type RoleKind } from './schema.ts';

export type MountClass = 'secret' | 'auth';

/** A mount as the file declares it, or a built-in one. */
export type MountRef = { class: MountClass; type: string } | { class: 'builtin'; type: 'system' | 'token' };

/** The built-in mounts the file writes through (tuning, policies, audit devices; tokens), by path. */
export const BUILTIN_MOUNTS: Record<string, MountRef> = {
  'sys/': { class: 'builtin', type: 'system' },
  'auth/token/': { class: 'builtin', type: 'token' },
};

/** The type a mount of `cls` is stored under (Vault's names resolved), or undefined when this build has none of it. */
export function registeredType(cls: MountClass, type: string): string | undefined {
  const own = backendTypes.aliases?.[cls]?.[type] ?? type;
  return Object.hasOwn(backendTypes[cls], own) ? own : undefined;
}

/** The role kinds a mount of `cls` and `type` (by any name the server accepts) has; none for a type it does not know. */
export function roleKinds(cls: MountClass, type: string): readonly RoleKind[] {
  const own = registeredType(cls, type);
  return own !== undefined && Object.hasOwn(TYPE_ROLE_KINDS[cls], own) ? TYPE_ROLE_KINDS[cls][own] : [];
}

/** The types a mount of `cls` may have, by every name the server accepts. */
export function typeNames(cls: MountClass): string[] {
  return [...Object.keys(backendTypes[cls]), ...Object.keys(backendTypes.aliases?.[cls] ?? {})].sort();
}

/** The definition a write to `relative` (below the mount) reaches, with its named captures; undefined for none. */
export function endpointAt(mount: MountRef, relative: string): PathMatch | undefined {
  return tableOf(mount)?.match(relative);
}

const tables = new Map<string, PathTable | undefined>();

function tableOf(mount: MountRef): PathTable | undefined {
  const type = mount.class === 'builtin' ? mount.type : registeredType(mount.class, mount.type);
  if (!type) return undefined;
  const key = `${mount.class}:${type}`;
  if (!tables.has(key)) {
    const factory = mount.class === 'builtin' ? BUILTIN_FACTORIES[mount.type](scratchCore()) : backendTypes[mount.class][type];
    tables.set(key, build(factory, mount.class === 'auth' || mount.type === 'token' ? 'auth' : 'secret', type));
  }
  return tables.get(key);
}

const BUILTIN_FACTORIES: Record<'system' | 'token', (core: Core) => BackendFactory> = { system: systemBackend(), token: tokenBackend };

function build(factory: BackendFactory, cls: MountClass, type: string): PathTable {
  const storage = new StorageView(new MemoryStorage(), '');
  const mount: MountInfo = { path: `${cls === 'auth' ? 'auth/' : ''}bootstrap-check/`, accessor: 'bootstrap-check', type, class: cls };
  const ctx: BackendContext = { storage, clock: systemClock, logger: SILENT, mount, system: OFFLINE_SYSTEM, metrics: NO_METRICS };
  const backend = factory(ctx);
  // Every factory registered today builds synchronously; one that did not could not be checked offline.
  if (backend instanceof Promise) throw new Error(`the ${cls} type "${type}" builds its paths asynchronously: its fields cannot be checked offline`);
  return new PathTable(backend);
}

const SILENT = pino({ enabled: false });

let core: Core | undefined;
function scratchCore(): Core {
  core ??= new Core({
    storage: new MemoryStorage(), clock: systemClock, logger: SILENT, defaultLeaseTtl: 0, maxLeaseTtl: 0,
    revokeRetry: { baseDelayMs: 0, maxAttempts: 0 }, backends: backendTypes, builtins: {}, defaultMounts: [],
  });
  return core;
}

/** What a handler would use; never called, since no request is handled here. */
const offline = (): never => {
  throw new Error('no request is handled while a bootstrap file is checked');
};
const OFFLINE_SYSTEM: SystemView = {
  defaultLeaseTtl: offline, maxLeaseTtl: offline, generatePassword: offline, leaseEnd: offline, leaseExists: offline, leaseExpireTime: offline, leaseIds: offline,
  generateIdentityToken: offline, mountOption: offline, fence: offline, event: offline, leading: () => true, shared: false, nodeAlive: offline, nodeId: 'bootstrap-check',
  signal: offline, onSignal: offline,
};
