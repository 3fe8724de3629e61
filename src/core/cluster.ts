/**
 * Several processes on one PostgreSQL database form an active-active cluster (docs/ha.md): every node serves every
 * request, one elected leader runs the background work, and in-memory caches follow changes other nodes make.
 *
 * Leading. The lease itself lives in the database (SharedStorage: one row, timed by the database's clock, so the
 * nodes' clocks never decide who leads). Taking it moves the term. The new leader then writes the term into the store
 * as `core/leader`, forward only, and starts its jobs only once that write has landed. Every write a leader-only job
 * makes carries `fence()`: a compare-and-set on that record as this node wrote it. A former leader (paused, cut off,
 * or simply not yet aware that its lease lapsed) therefore cannot land anything once its successor's record is in:
 * its guard fails and nothing of the write lands. Until then it may: the successor has not started yet either, so
 * at any moment the fenced writes that land come from one term.
 *
 * The leader renews its lease every `renewMs`; it steps down when a renewal says the lease was taken, when its own
 * clock says the lease may have lapsed (a renewal that does not come back is no proof of anything), and at once when
 * the store becomes unavailable. A node that is not leading asks for the lease every `renewMs`; one killed outright
 * is replaced once its lease lapses (at most `leaseTtlMs` after its last renewal).
 *
 * Stores of one process (memory, SQLite) have no lease: their single node writes the next term at start and leads
 * until it stops, with the same fence, so leader-only code has one path everywhere.
 *
 * Coherence. Writes of the keys nodes cache (the predicates registered with `track`) move the store's change version
 * in the same transaction. Each node reads the version every `pollMs` on the coordination connections and, when it
 * moved, runs its change listeners (which drop or reload what they cache). A change is therefore seen everywhere
 * within one poll interval and a round trip of its commit; a node that cannot read the version cannot serve either
 * (the store is unavailable), and the first read after the database is back finds any change made meanwhile.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock } from './clock.ts';
import type { Storage, StorageCondition } from './storage/types.ts';

/** The current leader's term record, through the barrier. */
export const LEADER_KEY = 'core/leader';
/** One heartbeat record per running node, through the barrier. */
const NODES_PREFIX = 'sys/cluster/nodes/';
/** Never stored: the fence of a node that does not lead holds nowhere. */
const NOT_LEADING = Buffer.from('not leading');

export interface ClusterTimings {
  /** How long a lease lasts without renewal: a killed leader is replaced at most this long after its last renewal. */
  leaseTtlMs: number;
  /** How often the leader renews, and a follower asks for the lease. */
  renewMs: number;
  /** How often each node reads the change version: the coherence bound, plus a round trip. */
  pollMs: number;
  /** How often each node records that it is alive. */
  heartbeatMs: number;
  /** A node not heard from for this long is taken for dead (its claims may be taken over, see `alive`). */
  deadAfterMs: number;
  /** The leader forgets a node's record once it has not been heard from for this long. */
  forgetAfterMs: number;
}

export const CLUSTER_TIMINGS: ClusterTimings = { leaseTtlMs: 5000, renewMs: 1000, pollMs: 200, heartbeatMs: 2000, deadAfterMs: 10_000, forgetAfterMs: 60_000 };

/**
 * The leader stops acting this long before its lease could lapse by its own clock, so a clock that runs a little slow
 * against the database's does not leave it acting after another node may have taken over.
 */
const LEASE_SAFETY_MS = 1000;

export interface NodeInfo {
  hostname: string;
  apiAddress: string;
  /** Strongroom nodes never forward requests to each other; this repeats the API address for Vault's clients. */
  clusterAddress: string;
  version: string;
}

/** A node's heartbeat record, as sys/ha-status shows it. */
export interface NodeRecord {
  node_id: string;
  hostname: string;
  api_address: string;
  cluster_address: string;
  version: string;
  /** Milliseconds since the epoch, by that node's clock. */
  last_echo: number;
}

/** The term record the leader writes when it takes over. */
export interface LeaderRecord {
  term: number;
  node_id: string;
  api_address: string;
  cluster_address: string;
  /** When this node took over (milliseconds since the epoch). */
  since: number;
}

export interface ClusterOptions {
  /** The physical store: whether it is shared, and its lease and change version. */
  storage: Storage;
  /** The same store through the barrier: the term record and heartbeats are stored like everything else. */
  sealed: Storage;
  clock: Clock;
  logger: Logger;
  self: NodeInfo;
  timings?: Partial<ClusterTimings>;
}

type LeadershipListener = (leading: boolean) => Promise<void>;

export class Cluster {
  readonly nodeId = randomUUID();
  readonly #o: ClusterOptions;
  readonly #t: ClusterTimings;
  readonly #trackers: Array<(key: string) => boolean> = [];
  readonly #changeListeners: Array<() => Promise<void>> = [];
  readonly #leadershipListeners: LeadershipListener[] = [];
  #leading = false;
  #term = 0;
  /** The term record this node leads under (undefined: a store of its own that never had one). */
  #record: Buffer | undefined = NOT_LEADING;
  /** performance.now() past which this node no longer acts as leader unless a renewal moved it. */
  #actUntil = 0;
  /** Leadership transitions run one after another, so a step-down never overtakes the start it undoes. */
  #transitions: Promise<void> = Promise.resolve();
  #version: string | undefined;
  /** Change listeners run one pass at a time; a change seen during a pass runs one more pass after it. */
  #syncing: Promise<void> | undefined;
  #syncAgain = false;
  readonly #timers: Array<NodeJS.Timeout> = [];
  #stopped = false;
  /** Whether the store's availability is watched yet (once per process: a node that was sealed joins again). */
  #watching = false;

  constructor(options: ClusterOptions) {
    this.#o = options;
    this.#t = { ...CLUSTER_TIMINGS, ...options.timings };
  }

  /** Whether other nodes may share the store (ha_enabled in Vault's terms). */
  get shared(): boolean {
    return this.#o.storage.shared !== undefined;
  }

  get timings(): Readonly<ClusterTimings> {
    return this.#t;
  }

  get self(): NodeInfo {
    return this.#o.self;
  }

  /** Whether this node leads now. A lease that may have lapsed by this node's clock counts as lost. */
  get leading(): boolean {
    if (this.#leading && this.shared && performance.now() >= this.#actUntil) this.#stepDown('the lease was not renewed in time');
    return this.#leading;
  }

  get term(): number {
    return this.#term;
  }

  /**
   * The guard of every leader-only write: the term record is still the one this node wrote. It fails on any node
   * that does not lead, and on a former leader once its successor has written its term.
   */
  fence(): StorageCondition[] {
    return [{ key: LEADER_KEY, expected: this.leading ? this.#record : NOT_LEADING }];
  }

  /** Keys whose writes the other nodes must hear of (they cache what is stored there). */
  track(isTracked: (key: string) => boolean): void {
    this.#trackers.push(isTracked);
  }

  /** Runs after another node (or this one) changed a tracked key; errors are logged, never thrown. */
  onChange(listener: () => Promise<void>): void {
    this.#changeListeners.push(listener);
  }

  /** Runs on each change of leadership: true when this node takes over, false when it steps down. */
  onLeadership(listener: LeadershipListener): void {
    this.#leadershipListeners.push(listener);
  }

  /**
   * Joins the cluster (again, after `stop`, when a sealed node is unsealed). On a store of its own the node leads before
   * this returns; on a shared store it asks for the lease once here and then keeps asking in the background.
   */
  async start(): Promise<void> {
    this.#stopped = false;
    const shared = this.#o.storage.shared;
    if (!shared) {
      // No one else can take over, so there is no new term to record: the fence is the record as it stands (or its
      // absence), which nothing else writes.
      await this.#takeOver(0, await this.#o.sealed.get(LEADER_KEY));
      return;
    }
    shared.trackChanges((key) => this.#trackers.some((tracked) => tracked(key)));
    this.#version = await shared.changeVersion();
    if (!this.#watching) {
      this.#watching = true;
      this.#o.storage.onAvailability?.((lost) => {
        if (lost) this.#stepDown('the store is unavailable');
      });
    }
    await this.#heartbeat();
    await this.#elect();
    if (!this.#leading) {
      const leader = await this.leader().catch(() => undefined);
      this.#o.logger.info({ node_id: this.nodeId, leader: leader?.node_id, leader_address: leader?.api_address }, 'this node follows: another node leads the cluster and runs the background work');
    }
    this.#every(this.#t.pollMs, () => this.#poll());
    this.#every(this.#t.renewMs, () => this.#elect());
    this.#every(this.#t.heartbeatMs, () => this.#heartbeat());
  }

  /** Leaves the cluster: stops leading (letting the lease lapse at once, for a quick takeover) and forgets this node. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const timer of this.#timers.splice(0)) clearTimeout(timer);
    const shared = this.#o.storage.shared;
    const { term } = this;
    if (this.#leading) {
      this.#stepDown('the node is leaving the cluster (stopping, or sealed)');
      if (shared) await shared.releaseLeadership(this.nodeId, term).catch(() => undefined);
    }
    await this.#transitions;
    if (shared) await this.#o.sealed.delete(NODES_PREFIX + this.nodeId).catch(() => undefined);
  }

  /** The term record as stored: who leads, or led last. */
  async leader(): Promise<LeaderRecord | undefined> {
    const raw = await this.#o.sealed.get(LEADER_KEY);
    return raw && (JSON.parse(raw.toString('utf8')) as LeaderRecord);
  }

  /** The nodes heard from within `forgetAfterMs`, this one included. A store of its own has this node only. */
  async nodes(): Promise<NodeRecord[]> {
    if (!this.shared) return [this.#selfRecord()];
    const out: NodeRecord[] = [];
    const now = this.#o.clock.now();
    for (const id of await this.#o.sealed.list(NODES_PREFIX)) {
      const record = await this.#node(id);
      if (record && now - record.last_echo < this.#t.forgetAfterMs) out.push(record);
    }
    return out;
  }

  /** The nodes that may be serving requests now: this one, and those heard from within `deadAfterMs`. */
  async liveNodes(): Promise<NodeRecord[]> {
    const now = this.#o.clock.now();
    return (await this.nodes()).filter((n) => n.node_id === this.nodeId || now - n.last_echo < this.#t.deadAfterMs);
  }

  /**
   * Whether a node may still be working: this one, or one heard from within `deadAfterMs`. Work claimed by a node
   * that is not alive (killed, or a process before a restart) may be taken over.
   */
  async alive(nodeId: string): Promise<boolean> {
    if (nodeId === this.nodeId) return true;
    if (!this.shared) return false;
    const record = await this.#node(nodeId);
    return record !== undefined && this.#o.clock.now() - record.last_echo < this.#t.deadAfterMs;
  }

  // ---- leading ---------------------------------------------------------------------------------

  async #elect(): Promise<void> {
    const shared = this.#o.storage.shared!;
    if (this.#stopped || this.#o.storage.unavailable) return;
    const asked = performance.now();
    if (this.#leading) {
      // A failed call proves nothing either way: the node keeps leading until its own deadline says otherwise.
      const renewed = await shared.renewLeadership(this.nodeId, this.#term, this.#t.leaseTtlMs).catch(() => undefined);
      if (renewed) this.#actUntil = asked + this.#t.leaseTtlMs - LEASE_SAFETY_MS;
      else if (renewed === false) this.#stepDown('another node took the lease');
      return;
    }
    const term = await shared.acquireLeadership(this.nodeId, this.#t.leaseTtlMs).catch(() => undefined);
    if (term === undefined) return;
    this.#actUntil = asked + this.#t.leaseTtlMs - LEASE_SAFETY_MS;
    const record = await this.#writeTerm(term).catch(() => undefined);
    // A newer term is already recorded (this node took the lease, then stalled): let the lease go.
    if (!record || this.#stopped) {
      await shared.releaseLeadership(this.nodeId, term).catch(() => undefined);
      return;
    }
    // Not awaited: starting the leader's work (scanning leases, reading schedules) may take longer than the lease
    // lasts, and the renewals must go on meanwhile.
    void this.#takeOver(term, record.bytes);
  }

  /**
   * Records `term` as the current one, only forward: a node that took the lease and stalled long enough for another
   * to take it after it must not record its older term over the newer one.
   */
  async #writeTerm(term: number): Promise<{ term: number; bytes: Buffer } | undefined> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const raw = await this.#o.sealed.get(LEADER_KEY);
      const stored = raw && (JSON.parse(raw.toString('utf8')) as LeaderRecord);
      if (stored && stored.term >= term) return undefined;
      const record: LeaderRecord = { term, node_id: this.nodeId, api_address: this.#o.self.apiAddress, cluster_address: this.#o.self.clusterAddress, since: this.#o.clock.now() };
      const bytes = Buffer.from(JSON.stringify(record));
      if (await this.#o.sealed.transaction([{ type: 'put', key: LEADER_KEY, value: bytes }], [{ key: LEADER_KEY, expected: raw }])) return { term, bytes };
    }
    return undefined;
  }

  /** Leads from now on; resolves once the leader's work has started. */
  #takeOver(term: number, record: Buffer | undefined): Promise<void> {
    this.#term = term;
    this.#record = record;
    this.#leading = true;
    if (this.shared) this.#o.logger.info({ node_id: this.nodeId, term }, 'this node leads the cluster: background work runs here');
    return this.#transition(true);
  }

  #stepDown(reason: string): void {
    if (!this.#leading) return;
    this.#leading = false;
    this.#record = NOT_LEADING;
    // Leaving on purpose is news, not trouble.
    if (this.shared) this.#o.logger[this.#stopped ? 'info' : 'warn']({ node_id: this.nodeId, term: this.#term, reason }, 'this node no longer leads the cluster: its background work stops');
    void this.#transition(false);
  }

  #transition(leading: boolean): Promise<void> {
    this.#transitions = this.#transitions.then(async () => {
      for (const listener of this.#leadershipListeners) {
        await listener(leading).catch((err: unknown) => this.#o.logger.error({ err, leading }, 'a change of leadership was not applied in full'));
      }
    });
    return this.#transitions;
  }

  // ---- coherence -------------------------------------------------------------------------------

  async #poll(): Promise<void> {
    const version = await this.#o.storage.shared!.changeVersion().catch(() => undefined);
    if (version === undefined || version === this.#version) return;
    this.#version = version;
    await this.changed();
  }

  /** Runs the change listeners now (also used by tests); overlapping calls fold into one more pass. */
  changed(): Promise<void> {
    if (this.#syncing) {
      this.#syncAgain = true;
      return this.#syncing;
    }
    this.#syncing = (async () => {
      do {
        this.#syncAgain = false;
        for (const listener of this.#changeListeners) await listener().catch((err: unknown) => this.#o.logger.error({ err }, 'following a change made on another node failed'));
      } while (this.#syncAgain && !this.#stopped);
    })().finally(() => {
      this.#syncing = undefined;
    });
    return this.#syncing;
  }

  // ---- membership ------------------------------------------------------------------------------

  #selfRecord(): NodeRecord {
    const { self, clock } = this.#o;
    return { node_id: this.nodeId, hostname: self.hostname, api_address: self.apiAddress, cluster_address: self.clusterAddress, version: self.version, last_echo: clock.now() };
  }

  async #heartbeat(): Promise<void> {
    if (this.#o.storage.unavailable) return;
    await this.#o.sealed.put(NODES_PREFIX + this.nodeId, Buffer.from(JSON.stringify(this.#selfRecord()))).catch(() => undefined);
    if (this.leading) await this.#forgetDeparted().catch(() => undefined);
  }

  /** Records of nodes long gone (killed; a clean stop removes its own), deleted by the leader under its fence. */
  async #forgetDeparted(): Promise<void> {
    const now = this.#o.clock.now();
    for (const id of await this.#o.sealed.list(NODES_PREFIX)) {
      const raw = await this.#o.sealed.get(NODES_PREFIX + id);
      if (!raw || now - (JSON.parse(raw.toString('utf8')) as NodeRecord).last_echo < this.#t.forgetAfterMs) continue;
      await this.#o.sealed.transaction([{ type: 'delete', key: NODES_PREFIX + id }], [{ key: NODES_PREFIX + id, expected: raw }, ...this.fence()]);
    }
  }

  async #node(id: string): Promise<NodeRecord | undefined> {
    const raw = await this.#o.sealed.get(NODES_PREFIX + id);
    return raw && (JSON.parse(raw.toString('utf8')) as NodeRecord);
  }

  /** Runs `fn` every `ms` after the previous run ended; real time, since the cluster's peers live in real time too. */
  #every(ms: number, fn: () => Promise<void>): void {
    const arm = () => {
      if (this.#stopped) return;
      const timer = setTimeout(() => {
        this.#timers.splice(this.#timers.indexOf(timer), 1);
        void fn().catch((err: unknown) => this.#o.logger.error({ err }, 'cluster housekeeping failed')).finally(arm);
      }, ms);
      timer.unref();
      this.#timers.push(timer);
    };
    arm();
  }
}
