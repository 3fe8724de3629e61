import type { Logger } from 'pino';
import type { AuditBroker } from './audit/broker.ts';
import type { Barrier } from './barrier.ts';
import type { Clock } from './clock.ts';
import type { Cluster } from './cluster.ts';
import type { DisableMarks } from './disable-marks.ts';
import { BadRequestError, ConflictError, StrongroomError, invalidField } from './errors.ts';
import { pluginInfo, type Events } from './events/events.ts';
import { fenceWrite } from './fence.ts';
import type { Backend, BackendContext, BackendFactory, MountInfo } from './framework.ts';
import { KeyedLock } from './keyed-lock.ts';
import type { Leadership } from './leadership.ts';
import type { LeaseManager } from './leases.ts';
import { NO_METRICS, type CoreTelemetry } from './metrics.ts';
import type { Mounted } from './mounted.ts';
import { storagePrefix, type MountEntry, type MountTable } from './mounts.ts';
import type { PolicyStore } from './policy-store.ts';
import { PathTable } from './router.ts';
import { MountSignals } from './signals.ts';
import type { SharedStorage } from './storage/types.ts';
import { GuardError, StorageView } from './storage/view.ts';
import type { TokenStore } from './tokens.ts';

/**
 * The built-ins a start runs before it listens even when it defers the rest: sys/ answers sys/health (and every sys
 * request), and identity/ installs the OIDC issuer that engines ask for plugin identity tokens.
 */
const SERVED_FIRST = new Set(['system', 'identity']);

/** Engine and auth method factories by type; a type name may exist in both classes ("cloud"). */
export interface BackendRegistry {
  secret: Record<string, BackendFactory>;
  auth: Record<string, BackendFactory>;
  /** Other names clients enable a type by (Vault's `azure`, `openldap`); the mount is stored under the type's own name. */
  aliases?: { secret?: Record<string, string>; auth?: Record<string, string> };
}

/** What mounting needs of the core's options; the built-ins' factories already close over the core. */
export interface MountOptions {
  backends: BackendRegistry;
  builtins: Record<string, () => BackendFactory>;
  defaultLeaseTtl: number;
  maxLeaseTtl: number;
  telemetry?: CoreTelemetry;
}

/** Plugin identity tokens, as a mount's system view asks for them. */
export interface IdentityTokenSource {
  generate(entry: MountEntry, audience: string, ttl: number): Promise<{ token: string; ttl: number }>;
}

/**
 * The mount table's life cycle on this node: enabling, disabling (under its mark), moving and tuning mounts, and
 * instantiating and stopping the backends that serve them, in line with the stored table as other nodes change it.
 */
export class MountLifecycle {
  declare readonly options: MountOptions;
  declare readonly barrier: Barrier;
  declare readonly systemView: StorageView;
  declare readonly clock: Clock;
  declare readonly logger: Logger;
  declare readonly mounts: MountTable;
  declare readonly policies: Pick<PolicyStore, 'generate' | 'invalidate'>;
  declare readonly leases: Pick<LeaseManager, 'idsUnder' | 'revoke' | 'exclusive' | 'prepareMove' | 'prepareEnd' | 'get'>;
  declare readonly tokens: Pick<TokenStore, 'prepareRepath'>;
  declare readonly cluster: Pick<Cluster, 'leading' | 'shared' | 'alive' | 'nodeId' | 'fence'>;
  declare readonly audit: Pick<AuditBroker, 'load'>;
  declare readonly events: Pick<Events, 'outbox'>;
  declare readonly marks: Pick<DisableMarks, 'markDisabling' | 'unmark' | 'follow'>;
  declare readonly leadership: Pick<Leadership, 'startLeaderWork' | 'stopLeaderWork'>;
  /** The backends running here, by mount uuid; written only here, read by the other rooms. */
  readonly #mounted: Map<string, Mounted>;
  readonly #signals: MountSignals;
  /**
   * Changes of which backends run here (enable, disable, remount, tune, and following another node's table) one at a
   * time: a table read by the follower must not undo a mount this node is adding.
   */
  readonly #mountChanges = new KeyedLock();
  /** Mounts in the table whose backend a start left for later (startBackends), by uuid; `loading` once started. */
  readonly #deferred = new Map<string, { loading?: Promise<void> }>();
  #closing = false;

  constructor(deps: Pick<MountLifecycle, 'options' | 'barrier' | 'systemView' | 'clock' | 'logger' | 'mounts' | 'policies' | 'leases' | 'tokens' | 'cluster' | 'audit' | 'events' | 'marks' | 'leadership'> & { mounted: Map<string, Mounted>; shared: SharedStorage | undefined }) {
    const { mounted, shared, ...rest } = deps;
    Object.assign(this, rest);
    this.#mounted = mounted;
    this.#signals = new MountSignals(shared);
  }

  effectiveTtls(entry: MountEntry | undefined): { default: number; max: number } {
    const max = entry?.config.max_lease_ttl || this.options.maxLeaseTtl;
    const def = entry?.config.default_lease_ttl || Math.min(this.options.defaultLeaseTtl, max);
    return { default: def, max };
  }

  async mountBuiltins(): Promise<void> {
    for (const [path, type, cls, description] of [
      ['sys/', 'system', 'secret', 'system endpoints used for control, policy and debugging'],
      ['auth/token/', 'token', 'auth', 'token based credentials'],
      ['identity/', 'identity', 'secret', 'identity store and plugin workload identity issuer'],
    ] as const) {
      await this.mounts.load();
      if (!this.options.builtins[type] || this.mounts.get(path)) continue;
      const entry = this.mounts.prepare(path, type, cls, description, { default_lease_ttl: 0, max_lease_ttl: 0 }, true);
      try {
        await this.mounts.add(entry);
      } catch (err) {
        // Another node starting at the same time added it first.
        if (!(err instanceof ConflictError)) throw err;
      }
    }
  }

  /**
   * The mounts created on first initialisation (`CoreOptions.defaultMounts`): added to the table only, like the
   * built-ins; the start instantiates them with the rest of the table (`startBackends`).
   */
  async addDefaultMounts(defaults: ReadonlyArray<{ path: string; type: string; description: string }>): Promise<void> {
    for (const m of defaults) {
      const cls = m.path.startsWith('auth/') ? 'auth' : 'secret';
      if (!this.options.backends[cls][m.type]) continue;
      try {
        await this.mounts.add(this.mounts.prepare(m.path, m.type, cls, m.description, { default_lease_ttl: 0, max_lease_ttl: 0 }));
      } catch (err) {
        if (!(err instanceof ConflictError)) throw err;
      }
    }
  }

  /**
   * At start: the backend of every mount in the table. With `defer`, only those of SERVED_FIRST before this returns;
   * the others (the engines, auth methods and the token store, whose modules load at their first use) wait in
   * `#deferred` until `loadDeferred` or a request for them (`serving`) starts them, so the process can listen first.
   */
  async startBackends(defer: boolean): Promise<void> {
    for (const entry of this.mounts.all()) {
      if (this.#mounted.has(entry.uuid)) continue;
      if (defer && !SERVED_FIRST.has(entry.type)) this.#deferred.set(entry.uuid, {});
      else await this.instantiate(entry);
    }
  }

  /** Starts every deferred backend (see startBackends); resolves once each is running or has failed. */
  async loadDeferred(): Promise<void> {
    await Promise.all([...this.#deferred.keys()].map((uuid) => this.#load(uuid)?.catch(() => undefined)));
  }

  /**
   * The backend serving `entry`, or the promise of it while it is deferred (starting it); undefined when none is
   * registered for its type, as before. A deferred backend that failed to start rejects with 503 for every request
   * to its mount until a restart (the pipeline tells it only to a caller allowed there): it fails closed rather than
   * answering 404 or serving half made.
   */
  serving(entry: MountEntry): Mounted | undefined | Promise<Mounted | undefined> {
    if (!this.#deferred.has(entry.uuid)) return this.#mounted.get(entry.uuid);
    return this.#load(entry.uuid)!.then(() => this.#mounted.get(entry.uuid));
  }

  /** The backend serving the mount at `fullPath`, once started (see serving). */
  async servingAt(fullPath: string): Promise<Mounted | undefined> {
    const entry = this.mounts.get(fullPath);
    return entry && this.serving(entry);
  }

  #load(uuid: string): Promise<void> | undefined {
    const deferred = this.#deferred.get(uuid);
    if (!deferred) return undefined;
    // Not under the lock of mount changes: each of those first waits for every deferred backend (#changeMounts), so
    // none can run beside this; and a lease operation waiting here must not wait behind a move that waits for it.
    deferred.loading ??= (async () => {
      if (this.#closing) throw new StrongroomError(503, 'the server is stopping');
      const entry = this.mounts.all().find((e) => e.uuid === uuid);
      if (!entry) {
        this.#deferred.delete(uuid);
        return;
      }
      try {
        await this.instantiate(entry);
      } catch (err) {
        const half = this.#mounted.get(uuid);
        this.#mounted.delete(uuid);
        if (half) await this.#unmount(half).catch(() => undefined);
        // The reason names a module or a storage failure; a backend's errors never carry secrets (errors.ts).
        this.logger.error({ mount: entry.path, type: entry.type, reason: (err as Error).message }, 'the backend of a mount failed to start: its requests are refused with 503');
        throw new StrongroomError(503, `the backend of the mount "${entry.path}" failed to start (the server log says why)`);
      }
    })();
    return deferred.loading;
  }

  /** Enables a secrets engine (`path`) or auth method (`auth/<path>`). */
  async enableMount(fullPath: string, type: string, description: string, config: MountEntry['config']): Promise<MountEntry> {
    const cls = fullPath.startsWith('auth/') ? 'auth' : 'secret';
    type = this.options.backends.aliases?.[cls]?.[type] ?? type;
    if (!this.options.backends[cls][type]) throw invalidField('type', `unknown ${cls === 'auth' ? 'auth method' : 'secrets engine'} type`);
    return this.#changeMounts(async () => {
      const entry = this.mounts.prepare(fullPath, type, cls, description, config);
      await this.instantiate(entry);
      try {
        await this.mounts.add(entry);
      } catch (err) {
        // The table as stored refused it (another node mounted there first): the backend never served.
        const mounted = this.#mounted.get(entry.uuid);
        if (mounted) await this.#unmount(mounted);
        this.#mounted.delete(entry.uuid);
        throw err;
      }
      return entry;
    });
  }

  async #changeMounts<T>(fn: () => Promise<T>): Promise<T> {
    // Deferred backends are all started (or failed) before the table changes under them; once done, nothing is deferred
    // but a failure, which stays refused (serving) until a restart.
    await this.loadDeferred();
    return this.#mountChanges.run('', fn);
  }

  /**
   * Disables a mount: marks it first (its requests are refused and no new lease or login token can land for it),
   * then revokes its leases (a failure aborts, clears the mark and keeps the mount), then deletes its storage.
   */
  async disableMount(fullPath: string): Promise<void> {
    const entry = this.mounts.get(fullPath);
    if (!entry) return;
    const marker = await this.marks.markDisabling(fullPath, `the mount "${fullPath}" is already being disabled or moved`);
    try {
      const ids = await this.leases.idsUnder(fullPath);
      for (const [i, id] of ids.entries()) {
        try {
          await this.leases.revoke(id);
        } catch (err) {
          throw new BadRequestError(`failed to revoke "${id}" (${i + 1} / ${ids.length}): ${(err as Error).message}`);
        }
      }
      // The mark was durable before the list was read, so nothing can have joined it; say so loudly if it did.
      const late = await this.leases.idsUnder(fullPath);
      if (late.length > 0) throw new Error(`${late.length} leases appeared under "${fullPath}" while it was being disabled`);
    } catch (err) {
      await this.marks.unmark(fullPath, marker);
      throw err;
    }
    await this.#changeMounts(async () => {
      const mounted = this.#mounted.get(entry.uuid);
      if (mounted) await this.#unmount(mounted);
      this.#mounted.delete(entry.uuid);
      this.#deferred.delete(entry.uuid);
      await new StorageView(this.barrier, storagePrefix(entry)).clear();
      await this.mounts.remove(fullPath);
    });
    await this.marks.unmark(fullPath, marker);
  }

  /**
   * Moves a mount to another path (sys/remount), keeping its storage (keyed by its uuid), config, leases and login
   * tokens. The mount is marked as for a disable, so its requests are refused and nothing new attaches to it; lease
   * operations are held while its leases (renamed below `to`), its tokens' creation paths and the mount table change
   * in one commit; then its backend starts again at the new path.
   */
  async remountMount(from: string, to: string): Promise<MountEntry> {
    this.mounts.checkMove(from, to);
    const entry = this.mounts.get(from)!;
    const marker = await this.marks.markDisabling(from, `invalid value for field "from": the mount "${from}" is being disabled or moved`);
    try {
      return await this.#changeMounts(() => this.leases.exclusive(async () => {
        const mounted = this.#mounted.get(entry.uuid);
        if (mounted) await this.#unmount(mounted);
        this.#mounted.delete(entry.uuid);
        let moved: MountEntry | undefined;
        try {
          // A concurrent token use or mount table change fails the guarded commit: prepare again from what is stored.
          for (let attempt = 1; !moved; attempt++) {
            const table = await this.mounts.prepareMove(from, to);
            const leases = await this.leases.prepareMove(from, to);
            const tokenPaths = await this.tokens.prepareRepath(leases.tokens, from, to);
            try {
              await this.systemView.commit([table.write, leases.write, tokenPaths]);
              moved = table.entry;
              this.logger.info({ from, to, leases: leases.count, tokens: leases.tokens.length }, 'mount moved');
            } catch (err) {
              if (!(err instanceof GuardError) || attempt === 3) throw err;
            }
          }
        } finally {
          // Moved or not, the backend runs again wherever the table now has it.
          await this.instantiate(moved ?? entry);
        }
        return moved;
      }));
    } finally {
      await this.marks.unmark(from, marker);
    }
  }

  async tuneMount(entry: MountEntry): Promise<void> {
    await this.#changeMounts(async () => {
      await this.mounts.update(entry);
      const mounted = this.#mounted.get(entry.uuid);
      if (mounted) mounted.entry = entry;
    });
  }

  mountedAt(fullPath: string): Mounted | undefined {
    const entry = this.mounts.get(fullPath);
    return entry ? this.#mounted.get(entry.uuid) : undefined;
  }

  mountedBackend(fullPath: string): Backend | undefined {
    return this.mountedAt(fullPath)?.backend;
  }

  /** Plugin identity tokens; replaced by the OIDC issuer when it is wired (workload identity federation). */
  identityTokens: IdentityTokenSource = {
    generate: async () => {
      throw new BadRequestError('plugin identity tokens are not available: no OIDC issuer is configured');
    },
  };

  async instantiate(entry: MountEntry): Promise<void> {
    const factory = this.options.builtins[entry.type]?.() ?? this.options.backends[entry.class][entry.type];
    if (!factory) {
      this.logger.error({ mount: entry.path, type: entry.type }, 'no backend registered for mounted type; its paths answer 404');
      return;
    }
    const info: MountInfo = { path: entry.path, accessor: entry.accessor, type: entry.type, class: entry.class };
    const metrics = this.options.telemetry?.forMount(entry.path) ?? NO_METRICS;
    const ctx: BackendContext = {
      storage: new StorageView(this.barrier, storagePrefix(entry)),
      clock: this.clock,
      logger: this.logger.child({ mount: entry.path }),
      mount: info,
      metrics,
      system: {
        defaultLeaseTtl: () => this.effectiveTtls(this.mounts.get(entry.path) ?? entry).default,
        maxLeaseTtl: () => this.effectiveTtls(this.mounts.get(entry.path) ?? entry).max,
        generatePassword: (name) => this.policies.generate(name),
        leaseEnd: (id) => this.leases.prepareEnd(id),
        leaseExists: async (id) => (await this.leases.get(id)) !== undefined,
        leaseExpireTime: async (id) => (await this.leases.get(id))?.expireTime,
        leaseIds: (prefix) => this.leases.idsUnder(`${entry.path}${prefix}`),
        generateIdentityToken: (audience, ttl) => this.identityTokens.generate(this.mounts.get(entry.path) ?? entry, audience, ttl),
        mountOption: (name) => (this.mounts.get(entry.path) ?? entry).config[name as keyof MountEntry['config']] as string | undefined,
        fence: () => fenceWrite(this.cluster),
        event: (type, metadata) => this.events.outbox.prepare(type, metadata, pluginInfo(entry)),
        leading: () => this.cluster.leading,
        shared: this.cluster.shared,
        nodeAlive: (id) => this.cluster.alive(id),
        nodeId: this.cluster.nodeId,
        signal: (topic) => this.#signals.send(entry.uuid, topic),
        onSignal: (listener) => this.#signals.subscribe(entry.uuid, listener),
      },
    };
    const backend = await factory(ctx);
    // The mount's gauges go with its backend, whatever ends it (a disable, a move, shutdown).
    const cleanup = backend.cleanup?.bind(backend);
    backend.cleanup = async () => {
      metrics.close();
      await cleanup?.();
    };
    const mounted: Mounted = { entry, backend, leading: false, table: new PathTable(backend), secrets: new Map((backend.secrets ?? []).map((s) => [s.type, s])), info, storage: ctx.storage };
    this.#mounted.set(entry.uuid, mounted);
    await backend.initialize?.();
    if (this.cluster.leading) await this.leadership.startLeaderWork(mounted);
    // Served from here on (serving): a deferred mount's requests waited until it was initialised.
    this.#deferred.delete(entry.uuid);
  }

  /** Stops what a backend runs here (its leader work first) before it goes: a disable, a move, a change elsewhere, shutdown. */
  async #unmount(mounted: Mounted): Promise<void> {
    await this.leadership.stopLeaderWork(mounted);
    await mounted.backend.cleanup?.();
  }

  /** Stops every backend running here (shutdown), once those starting have started; deferred ones never start. */
  async unmountAll(): Promise<void> {
    this.#closing = true;
    await Promise.all([...this.#deferred.values()].map((d) => d.loading?.catch(() => undefined)));
    this.#deferred.clear();
    for (const m of this.#mounted.values()) await this.#unmount(m);
    this.#mounted.clear();
  }

  /**
   * Another node (or this one) changed something cached: the keyring, policies, backends' caches and the audit table
   * are read again, and the mounts this node runs are brought in line with the table (instantiated, moved, retuned or
   * stopped), as are the marks of mounts being disabled.
   */
  async follow(): Promise<void> {
    await this.barrier.reload();
    this.policies.invalidate();
    for (const mounted of this.#mounted.values()) mounted.backend.cached?.invalidate();
    await this.audit.load();
    await this.#changeMounts(async () => {
      await this.mounts.load();
      await this.marks.follow();
      const wanted = new Map(this.mounts.all().map((e) => [e.uuid, e]));
      for (const [uuid, mounted] of [...this.#mounted]) {
        const entry = wanted.get(uuid);
        if (entry?.path === mounted.entry.path) {
          mounted.entry = entry;
          continue;
        }
        await this.#unmount(mounted);
        this.#mounted.delete(uuid);
      }
      for (const entry of wanted.values()) if (!this.#mounted.has(entry.uuid) && !this.#deferred.has(entry.uuid)) await this.instantiate(entry);
    });
  }
}
