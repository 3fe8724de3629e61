import { hostname } from 'node:os';
import type { Logger } from 'pino';
import { AuditBroker } from './audit/broker.ts';
import { AuditRecord } from './audit/entry.ts';
import type { AuditSettings } from './audit/options.ts';
import { PROBE_PREFIX } from './audit/probes.ts';
import { Barrier, KEYRING_PATH, UnsealError } from './barrier.ts';
import type { Clock } from './clock.ts';
import { MountSignals } from './signals.ts';
import { Cluster, type ClusterTimings } from './cluster.ts';
import { KeyedLock } from './keyed-lock.ts';
import { BadRequestError, ConflictError, invalidField, NotFoundError, PermissionDeniedError, SealedError, StrongroomError, UnsupportedOperationError } from './errors.ts';
import { validateFields, type Fields } from './fields.ts';
import { foldAliases, parameterSpelling, parameterView } from './field-aliases.ts';
import { addressInCidrs } from '../lib/cidr.ts';
import { refuseReservedAtIssue } from './policy/reserved.ts';
import type { Backend, BackendContext, BackendFactory, BackendRequest, BackendResponse, CallerInfo, MountInfo, Operation, SecretResponse, SecretType } from './framework.ts';
import { IdentityStore } from './identity.ts';
import { newRequestId, randomBase62 } from './ids.ts';
import { LeaseManager, minPositive, type NewLease } from './leases.ts';
import { MOUNT_TABLE_KEY, MountTable, storagePrefix, type MountEntry } from './mounts.ts';
import { PolicyStore, normalizePolicies } from './policy-store.ts';
import { PathTable, isRootProtected, pathProblem } from './router.ts';
import { withoutSentValues } from './sent-values.ts';
import type { Storage, StorageCondition } from './storage/types.ts';
import { GuardError, StorageView, type PreparedWrite } from './storage/view.ts';
import { TokenStore, tokenLeaseId, type TokenEntry } from './tokens.ts';
import { issueToken, type IssuedToken } from './token-issue.ts';
import { NO_METRICS, type CoreTelemetry } from './metrics.ts';
import type { CoreRequest, CoreResponse, ServedRequest } from './request.ts';
import { VERSION } from './version.ts';
import { ResponseWrapper, requestedWrapTtl, wrappedEnvelope } from './wrapping.ts';
import { pathHelp, wantsHelp } from './path-help.ts';
import { Events, pluginInfo, type EventsOptions } from './events/events.ts';

/** Engine and auth method factories by type; a type name may exist in both classes ("cloud"). */
export interface BackendRegistry {
  secret: Record<string, BackendFactory>;
  auth: Record<string, BackendFactory>;
  /** Other names clients enable a type by (Vault's `azure`, `openldap`); the mount is stored under the type's own name. */
  aliases?: { secret?: Record<string, string>; auth?: Record<string, string> };
}

export interface CoreOptions {
  storage: Storage;
  clock: Clock;
  logger: Logger;
  defaultLeaseTtl: number;
  maxLeaseTtl: number;
  revokeRetry: { baseDelayMs: number; maxAttempts: number };
  backends: BackendRegistry;
  /** Built-in mounts (sys, token) get factories that close over the core. */
  builtins: Record<string, (core: Core) => BackendFactory>;
  /** Mounts created on first initialisation when their type is registered. */
  defaultMounts: Array<{ path: string; type: string; description: string }>;
  /** What audit devices may be enabled with beyond the defaults (server settings). */
  audit?: AuditSettings;
  /** Where requests, storage calls, tokens, leases and mounts record metrics; none are kept without it. */
  telemetry?: CoreTelemetry;
  /** Where clients reach this node, as sys/leader and sys/ha-status show it. */
  apiAddress?: string;
  /** The cluster's timings, where a test shortens them. */
  cluster?: Partial<ClusterTimings>;
  /** The event log's retention and polling, and webhook delivery (docs/events.md). */
  events?: EventsOptions;
}

interface Mounted {
  entry: MountEntry;
  backend: Backend;
  /** Whether the backend's leader work (and periodic job) runs here now. */
  leading: boolean;
  stopPeriodic?: () => void;
  table: PathTable;
  secrets: Map<string, SecretType>;
  info: MountInfo;
  storage: StorageView;
}

/** Operations that need the `update` capability on a path without an existence check. */
const WRITE_OPS = new Set<Operation>(['create', 'update']);
const UNAUTHENTICATED_SYS = new Set(['sys/health', 'sys/seal-status']);
/** What a sealed node still answers (as Vault's does): its status, and the way to unseal it. */
const SEALED_SYS = new Set(['sys/health', 'sys/seal-status', 'sys/unseal']);
/** Stored keys the cluster tracks (see Core.#cached), as the views below write them. */
const POLICY_PREFIX = 'sys/policy/';
const DISABLING_PREFIX = 'sys/disabling/';
const AUDIT_TABLE_KEY = 'sys/audit/table';
const AUDIT_PROBES = `sys/audit/${PROBE_PREFIX}`;
/** Set by the node that initialised the store, once it is whole; a node that lost that race waits for it. */
const INITIALIZED_KEY = 'core/initialized';
/** How long a node that lost the race to initialise waits for the winner to finish before it goes on anyway. */
const PEER_INITIALIZATION_WAIT_MS = 30_000;

export class Core {
  readonly options: CoreOptions;
  readonly barrier: Barrier;
  /** The core's own storage (`sys/`); the stores below use sub-views of it and commit across them through it. */
  readonly systemView: StorageView;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly mounts: MountTable;
  readonly tokens: TokenStore;
  readonly policies: PolicyStore;
  readonly identity: IdentityStore;
  readonly leases: LeaseManager;
  readonly events: Events;
  readonly audit: AuditBroker;
  readonly cluster: Cluster;
  readonly wrapping: ResponseWrapper;
  readonly #mounted = new Map<string, Mounted>();
  readonly #signals: MountSignals;
  /**
   * Changes of which backends run here (enable, disable, remount, tune, and following another node's table) one at a
   * time: a table read by the follower must not undo a mount this node is adding.
   */
  readonly #mountChanges = new KeyedLock();

  constructor(options: CoreOptions) {
    this.options = options;
    this.clock = options.clock;
    this.logger = options.logger;
    this.barrier = new Barrier(options.telemetry?.instrument(options.storage) ?? options.storage);
    const sys = new StorageView(this.barrier, 'sys/');
    this.systemView = sys;
    const apiAddress = options.apiAddress ?? '';
    this.#signals = new MountSignals(options.storage.shared);
    this.cluster = new Cluster({
      storage: options.storage, sealed: this.barrier, clock: this.clock, logger: this.logger, timings: options.cluster,
      self: { hostname: hostname(), apiAddress, clusterAddress: apiAddress, version: VERSION },
    });
    // Only the leader adds terms by count; any node may still rotate by hand (sys/rotate), guarded by compare-and-set.
    this.barrier.coordinate({ mayRotate: () => this.cluster.leading, fence: () => this.cluster.fence() });
    this.mounts = new MountTable(this.barrier);
    // On a shared store another node may revoke a token at any moment: every lookup reads it (docs/ha.md).
    this.tokens = new TokenStore(sys.sub('token/'), this.clock, { cache: !options.storage.shared });
    this.policies = new PolicyStore(sys.sub('policy/'), sys.sub('policy-password/'));
    this.identity = new IdentityStore(sys.sub('identity/'));
    this.wrapping = new ResponseWrapper(this);
    this.audit = new AuditBroker(sys.sub('audit/'), this.logger, this.clock, options.audit ?? { allowPrefix: false, allowRaw: false, dir: undefined }, this.cluster);
    this.events = new Events(this.barrier, sys, { leading: () => this.cluster.leading, fence: () => this.cluster.fence() }, this.clock, this.logger, options.events);
    this.leases = new LeaseManager({
      view: sys.sub('expire/'),
      clock: this.clock,
      logger: this.logger,
      secretType: (mountPath, type) => this.#mountedAt(mountPath)?.secrets.get(type),
      revokeToken: (salted) => this.revokeTokenTree(salted),
      mountMaxTtl: (mountPath) => this.effectiveTtls(this.mounts.get(mountPath)).max,
      guards: (lease) => [...(lease.kind === 'secret' && lease.tokenSalted ? [this.tokens.notRevoking(lease.tokenSalted)] : []), this.notDisabling(lease.mountPath)],
      retry: options.revokeRetry,
      events: options.telemetry?.leaseEvents,
      announce: (type, metadata) => this.events.outbox.prepare(type, metadata),
      cluster: options.storage.shared ? { nodeId: this.cluster.nodeId, alive: (id) => this.cluster.alive(id), fence: () => this.cluster.fence() } : undefined,
    });
  }

  /** Seals and unseals one at a time; the node counts as sealed while either runs. */
  readonly #sealChanges = new KeyedLock();
  #sealChanging = false;

  get sealed(): boolean {
    return this.#sealChanging || this.barrier.sealed;
  }

  /**
   * sys/seal: new requests are refused at once (503) except the status and unseal paths; this node stops leading (its
   * background work ends, on a cluster another node takes over) and leaves the cluster; caches are dropped and the
   * barrier forgets its keys. Audit devices stay open, so what a sealed node answers is still recorded.
   */
  async seal(): Promise<void> {
    await this.#sealChanges.run('', async () => {
      if (this.barrier.sealed) return;
      this.#sealChanging = true;
      try {
        await this.cluster.stop();
        await this.leases.idle();
        for (const mounted of this.#mounted.values()) mounted.backend.cached?.invalidate();
        this.policies.invalidate();
        this.tokens.forget();
        this.barrier.seal();
      } finally {
        this.#sealChanging = false;
      }
      this.logger.warn('the node is sealed: it serves nothing but sys/seal-status, sys/health and sys/unseal until unsealed');
    });
  }

  /** sys/unseal: the unseal key opens the barrier again (UnsealError when it does not), then the node rejoins as at start. */
  async unseal(unsealKey: Buffer): Promise<void> {
    await this.#sealChanges.run('', async () => {
      if (!this.barrier.sealed) return;
      this.#sealChanging = true;
      try {
        await this.barrier.unseal(unsealKey);
        try {
          await this.#follow();
          await this.cluster.start();
        } catch (err) {
          // Half unsealed is not served: the node stays sealed, and the operator sees why and tries again.
          await this.cluster.stop();
          this.barrier.seal();
          throw err;
        }
      } finally {
        this.#sealChanging = false;
      }
      this.logger.info('the node is unsealed');
    });
  }

  /**
   * Opens the store with the unseal key. An empty store is initialised first and the root token returned
   * (printed once by the caller); a wrong key throws UnsealError and changes nothing.
   */
  async start(unsealKey: Buffer, rootTokenId?: string): Promise<{ rootToken?: string }> {
    let rootToken: string | undefined;
    // Of nodes starting together on an empty store, one initialises it (the barrier writes its keys only where none
    // are); the others unseal what it wrote and leave the root token to it.
    const initializedBefore = await this.barrier.isInitialized();
    if (!initializedBefore && (await this.barrier.initialize(unsealKey))) {
      await this.tokens.load();
      await this.policies.ensureDefault();
      await this.#mountBuiltins();
      for (const m of this.options.defaultMounts) {
        if (!this.options.backends[m.path.startsWith('auth/') ? 'auth' : 'secret'][m.type]) continue;
        await this.enableMount(m.path, m.type, m.description, { default_lease_ttl: 0, max_lease_ttl: 0 });
      }
      rootToken = (await this.createRootToken(rootTokenId)).token;
      await this.#markInitialized();
    } else {
      await this.barrier.unseal(unsealKey);
      // On a shared store a peer may have written the keys and still be making the rest, whichever branch this node
      // saw; a store of its own has no peer, and one made before the mark existed gets it now.
      if (this.options.storage.shared) await this.#awaitPeerInitialization();
      else if ((await this.barrier.get(INITIALIZED_KEY)) === undefined) await this.#markInitialized();
      await this.tokens.load();
      await this.policies.ensureDefault();
      // A built-in added after the store was initialised (identity/) still gets its mount.
      await this.#mountBuiltins();
    }
    await this.mounts.load();
    for (const entry of this.mounts.all()) if (!this.#mounted.has(entry.uuid)) await this.#instantiate(entry);
    await this.audit.load();
    this.cluster.track((key) => this.#cached(key));
    this.cluster.onChange(() => this.#follow());
    this.cluster.onLeadership((leading) => (leading ? this.#lead() : this.#stepDown()));
    await this.cluster.start();
    await this.events.start();
    return { rootToken };
  }

  /**
   * The node that won the race to initialise is still making the built-in mounts, the default policy and the root
   * token: waiting for its mark gives a start that sees them all (what it would otherwise miss reaches this node as a
   * change within the coherence bound anyway, so after a bounded wait it goes on).
   */
  async #awaitPeerInitialization(): Promise<void> {
    const until = performance.now() + PEER_INITIALIZATION_WAIT_MS;
    let told = false;
    while ((await this.barrier.get(INITIALIZED_KEY)) === undefined) {
      if (!told) this.logger.info('waiting for the node that initialises the store to finish');
      told = true;
      if (performance.now() > until) {
        // A store migrated from one made before the mark, or an initialiser that died: marked so later starts go on.
        this.logger.warn('the store has no initialisation mark after 30 s (its initialiser died, or it predates the mark); marking it and starting');
        await this.#markInitialized();
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async #markInitialized(): Promise<void> {
    await this.barrier.put(INITIALIZED_KEY, Buffer.from(new Date(this.clock.now()).toISOString()));
  }

  async stop(): Promise<void> {
    // Leader work first (while the store is still open), then what every node runs.
    await this.cluster.stop();
    this.events.stop();
    this.leases.stop();
    await this.leases.idle();
    for (const m of this.#mounted.values()) await this.#unmount(m);
    this.#mounted.clear();
    await this.audit.close();
    await this.barrier.close();
  }

  async createRootToken(id?: string): Promise<IssuedToken> {
    return issueToken(this, { id, policies: ['root'], path: 'auth/token/root', displayName: 'root', ttl: 0, parent: '', renewable: false, mountAccessor: this.mounts.get('auth/token/')?.accessor ?? '' });
  }

  effectiveTtls(entry: MountEntry | undefined): { default: number; max: number } {
    const max = entry?.config.max_lease_ttl || this.options.maxLeaseTtl;
    const def = entry?.config.default_lease_ttl || Math.min(this.options.defaultLeaseTtl, max);
    return { default: def, max };
  }

  async #mountBuiltins(): Promise<void> {
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

  /** Enables a secrets engine (`path`) or auth method (`auth/<path>`). */
  async enableMount(fullPath: string, type: string, description: string, config: MountEntry['config']): Promise<MountEntry> {
    const cls = fullPath.startsWith('auth/') ? 'auth' : 'secret';
    type = this.options.backends.aliases?.[cls]?.[type] ?? type;
    if (!this.options.backends[cls][type]) throw invalidField('type', `unknown ${cls === 'auth' ? 'auth method' : 'secrets engine'} type`);
    return this.#changeMounts(async () => {
      const entry = this.mounts.prepare(fullPath, type, cls, description, config);
      await this.#instantiate(entry);
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

  #changeMounts<T>(fn: () => Promise<T>): Promise<T> {
    return this.#mountChanges.run('', fn);
  }

  /**
   * Marks a mount as being disabled or moved, once across the cluster: a second disable or move of it, on any node,
   * is refused until this one ends. The mark names this node, so a mark whose node died can be told from one at work.
   */
  async #markDisabling(fullPath: string, refusal: string): Promise<string> {
    const marker = this.#disablingKey(fullPath);
    const marked = this.#disabling.has(fullPath) ? false : await this.systemView.transaction([{ type: 'put', key: marker, value: Buffer.from(this.cluster.nodeId) }], [{ key: marker, expected: undefined }]);
    if (!marked) throw new ConflictError(refusal);
    this.#disabling.add(fullPath);
    return marker;
  }

  /**
   * Disables a mount: marks it first (its requests are refused and no new lease or login token can land for it),
   * then revokes its leases (a failure aborts, clears the mark and keeps the mount), then deletes its storage.
   */
  async disableMount(fullPath: string): Promise<void> {
    const entry = this.mounts.get(fullPath);
    if (!entry) return;
    const marker = await this.#markDisabling(fullPath, `the mount "${fullPath}" is already being disabled or moved`);
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
      this.#disabling.delete(fullPath);
      await this.systemView.delete(marker);
      throw err;
    }
    await this.#changeMounts(async () => {
      const mounted = this.#mounted.get(entry.uuid);
      if (mounted) await this.#unmount(mounted);
      this.#mounted.delete(entry.uuid);
      await new StorageView(this.barrier, storagePrefix(entry)).clear();
      await this.mounts.remove(fullPath);
    });
    this.#disabling.delete(fullPath);
    await this.systemView.delete(marker);
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
    const marker = await this.#markDisabling(from, `invalid value for field "from": the mount "${from}" is being disabled or moved`);
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
          await this.#instantiate(moved ?? entry);
        }
        return moved;
      }));
    } finally {
      this.#disabling.delete(from);
      await this.systemView.delete(marker);
    }
  }

  /**
   * A disable or remount the process did not live to finish leaves its mark, which would refuse every new lease
   * of the mount for good. The mount is still in the table (removing it is the last step), so the operation simply
   * did not happen: the mark goes, and the operator runs it again.
   */
  async #clearInterruptedDisables(): Promise<void> {
    for (const key of await this.systemView.list('disabling/')) {
      const raw = await this.systemView.get(`disabling/${key}`);
      // A mark names the node at work (earlier versions wrote none): one that is alive is still working on it.
      const owner = raw?.toString('utf8') ?? '';
      if (owner && (await this.cluster.alive(owner))) continue;
      this.logger.warn({ mount: decodeURIComponent(key) }, 'a disable or remount of this mount was interrupted; run it again');
      await this.systemView.transaction([{ type: 'delete', key: `disabling/${key}` }], [{ key: `disabling/${key}`, expected: raw }], [this.#fence()]);
    }
  }

  /** Mounts this node is disabling or moving: their requests are refused from the moment the disable starts. */
  readonly #disabling = new Set<string>();
  /** Mounts being disabled or moved as the store's marks say (by any node), as of the last change followed. */
  #disablingAnywhere = new Set<string>();

  /** The cluster's fence as a write to commit with a leader-only one. */
  #fence(): PreparedWrite {
    return { ops: [], conditions: this.cluster.fence(), committed: () => {} };
  }

  #disablingKey(mountPath: string): string {
    return `disabling/${encodeURIComponent(mountPath)}`;
  }

  /** A guard for writes that attach something to a mount (a lease, a login token): it holds while the mount is not being disabled. */
  notDisabling(mountPath: string): StorageCondition {
    return { key: `${this.systemView.prefix}${this.#disablingKey(mountPath)}`, expected: undefined };
  }

  async tuneMount(entry: MountEntry): Promise<void> {
    await this.#changeMounts(async () => {
      await this.mounts.update(entry);
      const mounted = this.#mounted.get(entry.uuid);
      if (mounted) mounted.entry = entry;
    });
  }

  #mountedAt(fullPath: string): Mounted | undefined {
    const entry = this.mounts.get(fullPath);
    return entry ? this.#mounted.get(entry.uuid) : undefined;
  }

  mountedBackend(fullPath: string): Backend | undefined {
    return this.#mountedAt(fullPath)?.backend;
  }

  async #instantiate(entry: MountEntry): Promise<void> {
    const factory = this.options.builtins[entry.type]?.(this) ?? this.options.backends[entry.class][entry.type];
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
        fence: () => this.#fence(),
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
    if (this.cluster.leading) await this.#startLeaderWork(mounted);
  }

  /** Stops what a backend runs here (its leader work first) before it goes: a disable, a move, a change elsewhere, shutdown. */
  async #unmount(mounted: Mounted): Promise<void> {
    await this.#stopLeaderWork(mounted);
    await mounted.backend.cleanup?.();
  }

  async #startLeaderWork(mounted: Mounted): Promise<void> {
    if (mounted.leading) return;
    mounted.leading = true;
    try {
      await mounted.backend.leader?.start();
    } catch (err) {
      this.logger.error({ err, mount: mounted.entry.path }, 'starting the background work of a mount failed');
    }
    const { periodic } = mounted.backend;
    if (periodic) mounted.stopPeriodic = this.#schedulePeriodic(mounted.entry.path, periodic, this.logger);
  }

  async #stopLeaderWork(mounted: Mounted): Promise<void> {
    if (!mounted.leading) return;
    mounted.leading = false;
    mounted.stopPeriodic?.();
    mounted.stopPeriodic = undefined;
    await mounted.backend.leader?.stop();
  }

  /** This node took over: the lease expiry, the marks of interrupted disables, every mount's background work. */
  async #lead(): Promise<void> {
    await this.#clearInterruptedDisables();
    await this.leases.start();
    for (const mounted of [...this.#mounted.values()]) await this.#startLeaderWork(mounted);
  }

  async #stepDown(): Promise<void> {
    this.leases.stop();
    for (const mounted of [...this.#mounted.values()]) await this.#stopLeaderWork(mounted);
  }

  /**
   * Keys whose writes the other nodes hear of (Cluster.track): the mount table, the keyring, ACL policies, disable
   * marks, the audit table, and what each backend says it caches. Tokens and leases are not among them: every node
   * reads those from the store on each use.
   */
  #cached(key: string): boolean {
    if (key === MOUNT_TABLE_KEY || key === KEYRING_PATH || key === AUDIT_TABLE_KEY || key.startsWith(AUDIT_PROBES) || key.startsWith(POLICY_PREFIX) || key.startsWith(DISABLING_PREFIX)) return true;
    const inMount = /^(?:auth|logical)\/([^/]+)\/(.*)$/s.exec(key);
    const prefixes = inMount ? this.#mounted.get(inMount[1])?.backend.cached?.prefixes : undefined;
    return prefixes?.some((prefix) => inMount![2].startsWith(prefix)) ?? false;
  }

  /**
   * Another node (or this one) changed something cached: the keyring, policies, backends' caches and the audit table
   * are read again, and the mounts this node runs are brought in line with the table (instantiated, moved, retuned or
   * stopped), as are the marks of mounts being disabled.
   */
  async #follow(): Promise<void> {
    await this.barrier.reload();
    this.policies.invalidate();
    for (const mounted of this.#mounted.values()) mounted.backend.cached?.invalidate();
    await this.audit.load();
    await this.#changeMounts(async () => {
      await this.mounts.load();
      this.#disablingAnywhere = new Set((await this.systemView.list('disabling/')).map((key) => decodeURIComponent(key)));
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
      for (const entry of wanted.values()) if (!this.#mounted.has(entry.uuid)) await this.#instantiate(entry);
    });
  }

  /** Re-arms after each run completes, so a slow run delays the next one instead of overlapping it. */
  #schedulePeriodic(path: string, job: NonNullable<Backend['periodic']>, logger: Logger): () => void {
    let cancel = () => {};
    let stopped = false;
    const arm = () => {
      cancel = this.clock.setTimer(job.intervalMs, () => {
        void job.run().catch((err) => logger.error({ err, mount: path }, 'periodic job failed')).finally(() => { if (!stopped) arm(); });
      });
    };
    arm();
    return () => {
      stopped = true;
      cancel();
    };
  }

  /** Plugin identity tokens; replaced by the OIDC issuer when it is wired (workload identity federation). */
  identityTokens: { generate(entry: MountEntry, audience: string, ttl: number): Promise<{ token: string; ttl: number }> } = {
    generate: async () => {
      throw new BadRequestError('plugin identity tokens are not available: no OIDC issuer is configured');
    },
  };

  // ---- request pipeline -------------------------------------------------------------------------

  async handle(req: CoreRequest): Promise<CoreResponse> {
    const started = performance.now();
    const served: ServedRequest = { id: newRequestId(), mount: undefined, operation: undefined, login: false };
    const res = await this.#answer(req, served);
    res.served = served;
    this.options.telemetry?.request(served, res.status, started);
    return res;
  }

  async #answer(req: CoreRequest, served: ServedRequest): Promise<CoreResponse> {
    const requestId = served.id;
    // Without audit devices this boolean is all auditing costs a request.
    const audit = this.audit.enabled ? new AuditRecord(req, requestId) : undefined;
    try {
      const res = await this.#handle(req, requestId, audit, served);
      return audit ? await this.audit.logResponse(audit, res) : res;
    } catch (err) {
      const res = this.#errorResponse(err, requestId, req);
      return audit ? await this.audit.logResponse(audit, res) : res;
    }
  }

  async #handle(req: CoreRequest, requestId: string, audit: AuditRecord | undefined, served: ServedRequest): Promise<CoreResponse> {
    const problem = pathProblem(req.path);
    if (problem) throw new BadRequestError(problem);
    let operation = operationFor(req);
    served.operation = operation;
    let path = req.path;
    if (operation === 'list' && !path.endsWith('/')) path += '/';
    if (this.sealed && !SEALED_SYS.has(path)) throw new SealedError();
    const wrapTtl = requestedWrapTtl(req.wrapTtl, this.options.maxLeaseTtl);

    const entry = this.mounts.match(path);
    served.mount = entry?.path;
    if (entry && (this.#disabling.has(entry.path) || this.#disablingAnywhere.has(entry.path))) throw new StrongroomError(503, `the mount "${entry.path}" is being disabled or moved`);
    const mounted = entry ? this.#mounted.get(entry.uuid) : undefined;
    let relative = entry ? path.slice(entry.path.length) : path;
    let match = mounted?.table.match(relative);
    // Canonical before authorised: from here on the ACL, the lease id and the handler see one spelling.
    if (match && match.def.canonical) {
      ({ path: relative, match } = mounted!.table.canonicalise(relative, match));
      path = entry!.path + relative;
    }

    const input: Record<string, unknown> = operation === 'update' || operation === 'create' || operation === 'patch' ? { ...(req.body ?? {}) } : { ...flattenQuery(req.query) };
    if (operation !== 'read' && operation !== 'list' && req.body) Object.assign(input, req.body);
    delete input.list;
    // Vault's request framework treats a JSON null as a field that was not sent (hvac sends nulls for unset options).
    for (const k in input) if (input[k] === null) delete input[k];

    const unauthenticated = (match?.def.unauthenticated ?? false) || UNAUTHENTICATED_SYS.has(path);
    served.login = entry?.class === 'auth' && (match?.def.unauthenticated ?? false);
    const presented = req.token && !this.sealed ? await this.tokens.lookup(req.token) : undefined;
    // A token bound to networks is refused outside them on every use, not only where it was issued.
    const usable = presented && (presented.boundCidrs.length === 0 || addressInCidrs(req.remoteAddress, presented.boundCidrs)) ? presented : undefined;
    // On an unauthenticated path a token still says who asks (sys/internal/ui/mounts answers by its policies): the
    // ACL does not judge the request, no use is counted, and an unusable token is as good as none.
    const caller: CallerInfo | undefined = usable && { clientToken: req.token!, accessor: usable.accessor, entityId: usable.entityId, displayName: usable.displayName, policies: usable.policies };
    audit?.identify(path, operation, entry, input, usable, match?.def.fields, match?.def.secretResponseKeys);
    let token: TokenEntry | undefined;
    if (!unauthenticated) {
      if (!usable) throw new PermissionDeniedError();
      token = usable;
    }
    const acl = token ? await this.policies.aclFor(token.policies) : undefined;

    if (!mounted || !match) {
      if (acl && !acl.allowOperation(path, operation === 'list' ? 'list' : operation === 'read' ? 'read' : 'update', undefined).allowed) throw new PermissionDeniedError();
      throw new NotFoundError(mounted ? 'unsupported path' : `no handler for route "${path}". route entry not found.`);
    }
    if (operation === 'read' && wantsHelp(req.query)) {
      // As in Vault: any capability on the path (not only read) lets a token see its help.
      if (acl && acl.capabilities(path).every((c) => c === 'deny')) throw new PermissionDeniedError();
      return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(pathHelp(mounted.entry.path, relative, match.def, VERSION)) };
    }

    const validated = validateFields(match.def.fields ?? {}, input);
    const { errors } = validated;
    // One name per effect: aliases become their field before the ACL, the existence check and the handler see them.
    const folded = foldAliases(match.def.fields, input, validated.values);
    const { sentAs } = folded;
    const values = match.def.freeForm ? { ...input, ...folded.values } : folded.values;
    let stored: { ttl: number; renewable: boolean } | undefined;
    const lease = (secret: SecretResponse): NewLease => {
      if (stored) throw new Error('a request can store only one lease');
      return this.#secretLease(secret, mounted, backendReq.leaseId, token);
    };
    const leaseHooks: LeaseHooks = {
      register: async (secret) => {
        const entry = lease(secret);
        await this.leases.register(entry);
        stored = entry;
      },
      write: (secret) => {
        const entry = lease(secret);
        const { write } = this.leases.prepare(entry);
        return { ops: write.ops, committed: () => {
          stored = entry;
          write.committed();
        } };
      },
    };
    const backendReq = new PipelineRequest(operation, requestId, relative, match.params, values, input, sentAs, mounted, caller, req.remoteAddress, path, leaseHooks, req.disconnected);

    if (operation === 'update' && match.def.existenceCheck && errors.length === 0) {
      if (!(await match.def.existenceCheck(backendReq))) operation = 'create';
      backendReq.operation = operation;
      served.operation = operation;
    }
    if (acl) {
      const decision = acl.allowOperation(path, operation, parameterView(input, values, match.def.fields), {
        rootProtected: isRootProtected(path),
        wrapTtl,
        parameters: match.def.fields && parameterSpelling(match.def.fields),
      });
      if (!decision.allowed) throw new PermissionDeniedError();
    }
    const handler = match.def.operations[operation] ?? (WRITE_OPS.has(operation) ? match.def.operations[operation === 'create' ? 'update' : 'create'] : undefined);
    if (!handler) throw new UnsupportedOperationError();
    if (errors.length) throw new BadRequestError(errors);
    if (wrapTtl === undefined && match.def.requiresWrapping) throw new BadRequestError('this endpoint requires response wrapping: send the X-Vault-Wrap-TTL header');
    if (wrapTtl !== undefined && match.def.rawResponse) throw new BadRequestError('this endpoint\'s answer cannot be wrapped: send it without the X-Vault-Wrap-TTL header');

    if (audit) {
      audit.operation = operation;
      await this.audit.logRequest(audit);
    }
    if (token && token.numUses > 0) await this.#useOnce(token);
    let response: BackendResponse | undefined;
    try {
      response = (await handler(backendReq)) ?? undefined;
      if (stored && !response?.secret) throw new Error('the handler stored a lease but answered without its secret');
    } catch (err) {
      if (stored) await this.leases.forget(backendReq.leaseId);
      throw err;
    }
    const warnings = [...(response?.warnings ?? [])];
    const fields = match.def.fields ?? {};
    const ignored = match.def.freeForm ? [] : Object.keys(input).filter((k) => !Object.hasOwn(fields, k) && !Object.hasOwn(match.params, k)).sort();
    if (ignored.length) warnings.push(ignoredWarning(ignored));

    if (response?.raw) return { status: response.raw.status, headers: { 'content-type': 'application/json', ...response.raw.headers }, body: response.raw.body };

    let leaseDuration = 0;
    let renewable = false;
    let issuedLease = '';
    if (response?.secret) {
      const secret = response.secret;
      if (!stored) await leaseHooks.register(secret);
      const lease = stored!;
      // The secret is handed out either way; a record left behind is cleared by the engine's own sweep.
      await secret.registered?.().catch((err: unknown) => this.logger.warn({ mount: mounted.entry.path, err: (err as Error).message }, 'releasing the write-ahead record of an issued secret failed'));
      leaseDuration = lease.ttl;
      renewable = lease.renewable;
      issuedLease = backendReq.leaseId;
    }
    if (response?.lease) {
      issuedLease = response.lease.id;
      leaseDuration = response.lease.duration;
      renewable = response.lease.renewable;
    }
    let auth: Record<string, unknown> | null = response?.authBlock ?? null;
    if (response?.auth) auth = await this.#login(response.auth, mounted, path);

    const data = response?.data ?? null;
    if (!response || (response.data === undefined && !response.secret && !response.auth && !response.authBlock)) {
      if (operation === 'read' || operation === 'list') throw new NotFoundError(`${operation === 'list' ? 'no entries' : 'no value'} found at "${path}"`);
      if (warnings.length === 0) return { status: response?.status ?? 204, headers: {}, body: undefined };
    }
    if (operation === 'list') {
      const keys = (data as { keys?: unknown } | null)?.keys;
      if (!Array.isArray(keys) || keys.length === 0) throw new NotFoundError(`no entries found at "${path}"`);
    }
    const envelope: Record<string, unknown> = {
      request_id: requestId, lease_id: issuedLease, renewable, lease_duration: leaseDuration, data,
      wrap_info: null, warnings: warnings.length ? warnings : null, auth, mount_type: mounted.entry.type,
    };
    // Vault repeats these sys answers' data at the top level (older clients read it there); envelope keys win.
    if (data && injectsData(path)) for (const [k, v] of Object.entries(data)) if (!Object.hasOwn(envelope, k)) envelope[k] = v;
    if (wrapTtl !== undefined) return this.#wrapped(envelope, { ttl: wrapTtl, creationPath: path, wrappedAccessor: auth?.accessor as string | undefined }, audit);
    if (audit) audit.envelope = envelope;
    return { status: response?.status ?? 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(envelope) };
  }

  /**
   * The answer kept behind a wrapping token and the client told only how to unwrap it. Its lease and token were
   * issued as for any answer; the audit entry records the answer (hashed, as always) with the wrap_info.
   */
  async #wrapped(envelope: Record<string, unknown>, opts: { ttl: number; creationPath: string; wrappedAccessor?: string }, audit: AuditRecord | undefined): Promise<CoreResponse> {
    const wrapInfo = await this.wrapping.wrap(JSON.stringify(envelope), opts);
    if (audit) audit.envelope = { ...envelope, wrap_info: wrapInfo };
    return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(wrappedEnvelope(wrapInfo)) };
  }

  /** A secret's lease, its TTL clamped by the engine's cap, the mount and the system. */
  #secretLease(secret: SecretResponse, mounted: Mounted, id: string, token: TokenEntry | undefined): NewLease {
    const ttls = this.effectiveTtls(mounted.entry);
    const max = minPositive(ttls.max, secret.maxTtl ?? 0);
    let ttl = secret.ttl > 0 ? secret.ttl : ttls.default;
    ttl = max > 0 ? Math.min(ttl, max) : ttl;
    const now = this.clock.now();
    return {
      id, kind: 'secret', mountPath: mounted.entry.path, secretType: secret.type, internal: secret.internal,
      issueTime: now, expireTime: now + ttl * 1000, ttl, maxTtl: secret.maxTtl ?? 0, renewable: secret.renewable ?? true, tokenSalted: token?.salted ?? '',
    };
  }

  /** A login answered by an auth method: resolve identity, clamp TTLs by the mount, issue the token. */
  async #login(spec: NonNullable<BackendResponse['auth']>, mounted: Mounted, path: string): Promise<Record<string, unknown>> {
    const ttls = this.effectiveTtls(mounted.entry);
    let entityId = '';
    if (spec.alias) entityId = (await this.identity.upsertAlias(mounted.entry.accessor, spec.alias.name, spec.alias.metadata ?? {}, spec.groupAliases ?? [])).id;
    const base = mounted.entry.path.replace(/^auth\//, '').replace(/\/$/, '').replace(/\//g, '-');
    const displayName = `${base}-${spec.displayName}`.replace(/-+$/, '');
    const policies = normalizePolicies(spec.policies, !spec.noDefaultPolicy);
    refuseReservedAtIssue(policies);
    const max = minPositive(ttls.max, spec.maxTtl);
    let ttl = spec.period ? spec.period : spec.ttl > 0 ? spec.ttl : ttls.default;
    if (max > 0) ttl = Math.min(ttl, max);
    const issued = await issueToken(this, {
      policies, path, displayName, ttl, explicitMaxTtl: spec.maxTtl, period: spec.period ?? 0, numUses: spec.numUses ?? 0,
      parent: '', renewable: spec.renewable ?? true, entityId, meta: spec.metadata, boundCidrs: spec.boundCidrs ?? [],
      mountAccessor: mounted.entry.accessor, internal: spec.internal ?? {}, guards: [this.notDisabling(mounted.entry.path)],
    });
    this.options.telemetry?.tokenCreated(mounted.entry, issued.entry.ttl);
    return issued.auth;
  }

  async #useOnce(token: TokenEntry): Promise<void> {
    // Counted by compare-and-set: two requests (on two nodes) never spend the same use.
    const left = await this.tokens.useOnce(token.salted);
    if (left === undefined) throw new PermissionDeniedError();
    // Last use: the request proceeds, the token dies right after it.
    if (left === 0) setImmediate(() => void this.revokeTokenTree(token.salted).catch((err) => this.logger.error({ err }, 'revoking a used-up token failed')));
  }

  /**
   * Revokes a token, its descendants (leaves first) and every lease issued with them. Atomic from the caller's
   * view: the mark comes first (the tree is refused from then on and nothing new can attach to it), then the
   * children and leases, then a re-check that the mark kept anything from joining.
   */
  async revokeTokenTree(salted: string, seen = new Set<string>()): Promise<void> {
    if (seen.has(salted)) return;
    seen.add(salted);
    const entry = await this.tokens.lookupSalted(salted);
    if (entry) await this.tokens.markRevoking(entry);
    const tried = new Set<string>();
    for (let round = 0; ; round++) {
      const children = (await this.tokens.children(salted)).filter((c) => !seen.has(c));
      const leases = (await this.leases.idsByToken(salted)).filter((id) => !tried.has(id));
      if (children.length === 0 && leases.length === 0) break;
      if (round === 2) throw new Error(`revoking a token: ${children.length} children and ${leases.length} leases appeared after it was marked`);
      for (const child of children) await this.revokeTokenTree(child, seen);
      await this.leases.revokeByToken(salted, tried);
    }
    if (!entry) return;
    await this.tokens.remove(entry);
    await this.leases.forget(tokenLeaseId(entry));
  }

  #errorResponse(err: unknown, requestId: string, req: CoreRequest): CoreResponse {
    // A token revoked or a mount disabled while the request ran: what it was about to store was refused.
    if (err instanceof GuardError) err = new PermissionDeniedError();
    // The node was sealed while the request ran.
    if (err instanceof UnsealError && this.sealed) err = new SealedError();
    if (err instanceof StrongroomError) {
      return { status: err.status, headers: { ...err.headers, 'content-type': 'application/json' }, body: JSON.stringify({ errors: withoutSentValues(err.messages, req.body, req.query) }) };
    }
    this.logger.error({ err, request_id: requestId, path: req.path }, 'internal error');
    return { status: 500, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ errors: [`internal error (request ${requestId})`] }) };
  }
}


function operationFor(req: CoreRequest): Operation {
  const method = req.method.toUpperCase();
  const list = req.query.list;
  switch (method) {
    case 'GET':
    case 'HEAD':
      if (list !== undefined) {
        const v = Array.isArray(list) ? list[0] : list;
        if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return 'list';
        if (!['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) throw new BadRequestError('invalid value for query parameter "list": expected a boolean');
      }
      return 'read';
    case 'LIST':
      return 'list';
    case 'POST':
    case 'PUT':
      return 'update';
    case 'DELETE':
      return 'delete';
    case 'PATCH':
      return 'patch';
    default:
      throw new StrongroomError(405, `unsupported HTTP method ${method}`);
  }
}

/**
 * Vault's warning for unknown body fields. The names are the client's own, so the echo is bounded: a request with
 * thousands of keys, or one very long key, gets a short warning.
 */
function ignoredWarning(names: string[]): string {
  const MAX_NAMES = 20;
  const MAX_NAME = 64;
  const shown = names.slice(0, MAX_NAMES).map((n) => (n.length > MAX_NAME ? `${n.slice(0, MAX_NAME)}…` : n));
  const more = names.length > MAX_NAMES ? ` (and ${names.length - MAX_NAMES} more)` : '';
  return `Endpoint ignored these unrecognized parameters: [${shown.join(' ')}]${more}`;
}

function flattenQuery(query: Record<string, string | string[]>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(query).filter(([k]) => k !== 'help'));
}

/** Legacy clients read sys/mounts, sys/auth, sys/audit*, sys/policy* and sys/capabilities* data from the top level. */
function injectsData(path: string): boolean {
  return /^sys\/(mounts|auth|audit|policy|policies\/acl|capabilities)/.test(path) && !/^sys\/policies\/password/.test(path);
}

/** How a request's lease is stored by the engine before it answers (see BackendRequest). */
interface LeaseHooks {
  register(secret: SecretResponse): Promise<void>;
  write(secret: SecretResponse): PreparedWrite;
}

/**
 * What a backend handler receives. A class rather than a literal per request: the lazily made lease id is a
 * prototype getter instead of an accessor defined on every request object.
 */
class PipelineRequest implements BackendRequest {
  operation: Operation;
  readonly requestId: string;
  readonly path: string;
  readonly params: Record<string, string>;
  readonly data: Record<string, unknown>;
  readonly storage: StorageView;
  readonly caller: CallerInfo | undefined;
  readonly mount: MountInfo;
  readonly remoteAddress: string;
  readonly #input: Record<string, unknown>;
  readonly #sentAs: ReadonlyMap<string, string>;
  readonly #fullPath: string;
  #leaseId: string | undefined;
  readonly registerLease: LeaseHooks['register'];
  readonly leaseWrite: LeaseHooks['write'];
  readonly #disconnected: (() => AbortSignal) | undefined;

  constructor(operation: Operation, requestId: string, path: string, params: Record<string, string>, data: Record<string, unknown>,
    input: Record<string, unknown>, sentAs: ReadonlyMap<string, string>, mounted: Mounted, caller: CallerInfo | undefined, remoteAddress: string,
    fullPath: string, leases: LeaseHooks, disconnected: (() => AbortSignal) | undefined) {
    this.operation = operation;
    this.requestId = requestId;
    this.path = path;
    this.params = params;
    this.data = data;
    this.storage = mounted.storage;
    this.caller = caller;
    this.mount = mounted.info;
    this.remoteAddress = remoteAddress;
    this.#input = input;
    this.#sentAs = sentAs;
    this.#fullPath = fullPath;
    this.registerLease = leases.register;
    this.leaseWrite = leases.write;
    this.#disconnected = disconnected;
  }

  /** Made on first use: most requests never ask, and watching the connection costs a listener. */
  disconnected(): AbortSignal | undefined {
    return this.#disconnected?.();
  }

  /** An own property, not a method: handlers pass `req.has` around detached. */
  readonly has = (name: string): boolean => Object.hasOwn(this.#input, name);

  readonly sentAs = (name: string): string | undefined => this.#sentAs.get(name) ?? (this.has(name) ? name : undefined);

  /** The lease id a secret in this response will receive. */
  get leaseId(): string {
    return (this.#leaseId ??= `${this.#fullPath}/${randomBase62(24)}`.replace(/\/+/g, '/'));
  }
}
