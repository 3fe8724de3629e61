import { hostname } from 'node:os';
import type { Logger } from 'pino';
import { AuditBroker } from './audit/broker.ts';
import type { AuditSettings } from './audit/options.ts';
import { PROBE_PREFIX } from './audit/probes.ts';
import { Barrier, KEYRING_PATH } from './barrier.ts';
import type { Clock } from './clock.ts';
import { Cluster, type ClusterTimings } from './cluster.ts';
import { DisableMarks } from './disable-marks.ts';
import type { Backend, BackendFactory } from './framework.ts';
import { IdentityStore } from './identity.ts';
import { Leadership } from './leadership.ts';
import { LeaseManager } from './leases.ts';
import { Login } from './login.ts';
import type { CoreTelemetry } from './metrics.ts';
import { MountLifecycle, type BackendRegistry, type IdentityTokenSource } from './mount-lifecycle.ts';
import type { Mounted } from './mounted.ts';
import { MOUNT_TABLE_KEY, MountTable, type MountEntry } from './mounts.ts';
import { Pipeline } from './pipeline.ts';
import { PolicyStore } from './policy-store.ts';
import type { CoreRequest, CoreResponse } from './request.ts';
import { Sealing } from './seal.ts';
import type { Storage, StorageCondition } from './storage/types.ts';
import { StorageView } from './storage/view.ts';
import { TokenStore } from './tokens.ts';
import type { IssuedToken } from './token-issue.ts';
import { VERSION } from './version.ts';
import { ResponseWrapper } from './wrapping.ts';
import { Events, type EventsOptions } from './events/events.ts';

export type { BackendRegistry } from './mount-lifecycle.ts';

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
  /**
   * Leaves the backends of all mounts but sys/ and identity/ to `loadDeferredBackends` (or the first request for one,
   * which waits for it), so that `start` returns before their modules are loaded (docs/architecture.md, "Start-up").
   */
  deferBackends?: boolean;
}

/** Stored keys the cluster tracks (see Core.#cached), as the views below write them. */
const POLICY_PREFIX = 'sys/policy/';
const DISABLING_PREFIX = 'sys/disabling/';
const AUDIT_TABLE_KEY = 'sys/audit/table';
const AUDIT_PROBES = `sys/audit/${PROBE_PREFIX}`;
/** Set by the node that initialised the store, once it is whole; a node that lost that race waits for it. */
const INITIALIZED_KEY = 'core/initialized';
/** How long a node that lost the race to initialise waits for the winner to finish before it goes on anyway. */
const PEER_INITIALIZATION_WAIT_MS = 30_000;

/**
 * The node's core: it makes the stores and wires the rooms that do the work (docs/architecture.md): the mount
 * life cycle, leadership, the request pipeline, login and token revocation, sealing. Its methods are the API the
 * built-in backends, the HTTP layer and the bootstrap use.
 */
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
  /** The backends running on this node, by mount uuid: written by the mount life cycle only. */
  readonly #mounted = new Map<string, Mounted>();
  readonly #marks: DisableMarks;
  readonly #leadership: Leadership;
  readonly #mountTable: MountLifecycle;
  readonly #login: Login;
  readonly #sealing: Sealing;
  readonly #pipeline: Pipeline;

  constructor(options: CoreOptions) {
    this.options = options;
    this.clock = options.clock;
    this.logger = options.logger;
    this.barrier = new Barrier(options.telemetry?.instrument(options.storage) ?? options.storage);
    const sys = new StorageView(this.barrier, 'sys/');
    this.systemView = sys;
    const apiAddress = options.apiAddress ?? '';
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
    this.audit = new AuditBroker(sys.sub('audit/'), this.logger, this.clock, options.audit ?? { allowPrefix: false, allowRaw: false, dir: undefined }, this.cluster,
      (metadata) => this.events.outbox.publish(sys, 'audit/device-fail', metadata));
    this.events = new Events(this.barrier, sys, { leading: () => this.cluster.leading, fence: () => this.cluster.fence() }, this.clock, this.logger, options.events);
    this.leases = new LeaseManager({
      view: sys.sub('expire/'),
      clock: this.clock,
      logger: this.logger,
      secretType: async (mountPath, type) => (await this.#mountTable.servingAt(mountPath))?.secrets.get(type),
      revokeToken: (salted) => this.revokeTokenTree(salted),
      mountMaxTtl: (mountPath) => this.effectiveTtls(this.mounts.get(mountPath)).max,
      guards: (lease) => [...(lease.kind === 'secret' && lease.tokenSalted ? [this.tokens.notRevoking(lease.tokenSalted)] : []), this.notDisabling(lease.mountPath)],
      retry: options.revokeRetry,
      events: options.telemetry?.leaseEvents,
      announce: (type, metadata) => this.events.outbox.prepare(type, metadata),
      cluster: options.storage.shared ? { nodeId: this.cluster.nodeId, alive: (id) => this.cluster.alive(id), fence: () => this.cluster.fence() } : undefined,
    });
    const { clock, logger, barrier, mounts, tokens, policies, leases, cluster, audit, events } = this;
    const mounted = this.#mounted;
    this.#marks = new DisableMarks({ systemView: sys, cluster, logger });
    const marks = this.#marks;
    this.#leadership = new Leadership({ clock, logger, leases, marks, mounted });
    const builtins = Object.fromEntries(Object.entries(options.builtins).map(([type, make]) => [type, () => make(this)]));
    this.#mountTable = new MountLifecycle({
      options: { backends: options.backends, builtins, defaultLeaseTtl: options.defaultLeaseTtl, maxLeaseTtl: options.maxLeaseTtl, telemetry: options.telemetry },
      barrier, systemView: sys, clock, logger, mounts, policies, leases, tokens, cluster, audit, events, marks, leadership: this.#leadership, mounted, shared: options.storage.shared,
    });
    const mountTable = this.#mountTable;
    this.#login = new Login({ tokens, leases, systemView: sys, identity: this.identity, mounts, mountTable, marks, logger, telemetry: options.telemetry });
    this.#sealing = new Sealing({ barrier, cluster, leases, policies, tokens, mountTable, logger, mounted });
    this.#pipeline = new Pipeline({
      options, clock, logger, audit, sealing: this.#sealing, mounts, marks, mountTable, tokens, policies, leases, login: this.#login, wrapping: this.wrapping,
    });
  }

  get sealed(): boolean {
    return this.#sealing.sealed;
  }

  /** sys/seal (see Sealing.seal). */
  seal(): Promise<void> {
    return this.#sealing.seal();
  }

  /** sys/unseal (see Sealing.unseal). */
  unseal(unsealKey: Buffer): Promise<void> {
    return this.#sealing.unseal(unsealKey);
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
      await this.#mountTable.mountBuiltins();
      await this.#mountTable.addDefaultMounts(this.options.defaultMounts);
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
      await this.#mountTable.mountBuiltins();
    }
    await this.mounts.load();
    await this.#mountTable.startBackends(this.options.deferBackends ?? false);
    await this.audit.load();
    this.cluster.track((key) => this.#cached(key));
    this.cluster.onChange(() => this.#mountTable.follow());
    this.cluster.onLeadership((leading) => (leading ? this.#leadership.lead() : this.#leadership.stepDown()));
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
    await this.#mountTable.unmountAll();
    await this.audit.close();
    await this.barrier.close();
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

  createRootToken(id?: string): Promise<IssuedToken> {
    return this.#login.createRootToken(id);
  }

  effectiveTtls(entry: MountEntry | undefined): { default: number; max: number } {
    return this.#mountTable.effectiveTtls(entry);
  }

  /** Enables a secrets engine (`path`) or auth method (`auth/<path>`). */
  enableMount(fullPath: string, type: string, description: string, config: MountEntry['config']): Promise<MountEntry> {
    return this.#mountTable.enableMount(fullPath, type, description, config);
  }

  /** Disables a mount (see MountLifecycle.disableMount). */
  disableMount(fullPath: string): Promise<void> {
    return this.#mountTable.disableMount(fullPath);
  }

  /** Moves a mount to another path (sys/remount; see MountLifecycle.remountMount). */
  remountMount(from: string, to: string): Promise<MountEntry> {
    return this.#mountTable.remountMount(from, to);
  }

  tuneMount(entry: MountEntry): Promise<void> {
    return this.#mountTable.tuneMount(entry);
  }

  /** A guard for writes that attach something to a mount (a lease, a login token): it holds while the mount is not being disabled. */
  notDisabling(mountPath: string): StorageCondition {
    return this.#marks.notDisabling(mountPath);
  }

  mountedBackend(fullPath: string): Backend | undefined {
    return this.#mountTable.mountedBackend(fullPath);
  }

  /** The backend serving the mount at `fullPath`, waiting for one whose start was deferred (`deferBackends`). */
  async servingBackend(fullPath: string): Promise<Backend | undefined> {
    return (await this.#mountTable.servingAt(fullPath))?.backend;
  }

  /** Starts the backends `start` deferred (`deferBackends`); resolves once each runs or has failed (its mount: 503). */
  loadDeferredBackends(): Promise<void> {
    return this.#mountTable.loadDeferred();
  }

  /** Plugin identity tokens; replaced by the OIDC issuer when it is wired (workload identity federation). */
  get identityTokens(): IdentityTokenSource {
    return this.#mountTable.identityTokens;
  }

  set identityTokens(source: IdentityTokenSource) {
    this.#mountTable.identityTokens = source;
  }

  handle(req: CoreRequest): Promise<CoreResponse> {
    return this.#pipeline.handle(req);
  }

  /** Revokes a token, its descendants and every lease issued with them (see Login.revokeTokenTree). */
  revokeTokenTree(salted: string, seen?: Set<string>): Promise<void> {
    return this.#login.revokeTokenTree(salted, seen);
  }
}
