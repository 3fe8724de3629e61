import { AsyncLocalStorage } from 'node:async_hooks';
import type { Logger } from 'pino';
import type { Clock } from './clock.ts';
import { BadRequestError, ConflictError, StrongroomError } from './errors.ts';
import type { LeaseView, SecretType } from './framework.ts';
import { LeaseExpiry } from './lease-expiry.ts';
import { claimKey, deletionOps, foldedIds, irrevocableKey, LeaseRecords, movedKey, recordOps, timeKey, tokenLeaseIds, type LeaseEntry, type NewLease } from './lease-records.ts';
import type { KeyOp, StorageCondition, StorageOp } from './storage/types.ts';
import type { PreparedWrite, StorageView } from './storage/view.ts';

export { leaseEntrySchema, type LeaseEntry, type NewLease } from './lease-records.ts';

/** What the lease manager reports as it works, for metrics (by the mount the lease belongs to). */
export interface LeaseEvents {
  registered(mountPath: string): void;
  /** `started` is performance.now() when the revocation began. */
  revoked(mountPath: string, started: number): void;
  /** The engine's revoke failed (a forced revocation then removes the lease anyway). */
  revokeFailed(mountPath: string): void;
}

export interface LeaseManagerDeps {
  view: StorageView;
  clock: Clock;
  logger: Logger;
  /** The engine's secret type, once the mount's backend runs (a start may defer it: CoreOptions.deferBackends). */
  secretType(mountPath: string, type: string): Promise<SecretType | undefined>;
  revokeToken(salted: string): Promise<void>;
  /** Effective max lease TTL of a mount, seconds. */
  mountMaxTtl(mountPath: string): number;
  /** Guards a new lease must hold when it lands: its token is not being revoked, its mount not being disabled. */
  guards(lease: NewLease): StorageCondition[];
  retry: { baseDelayMs: number; maxAttempts: number };
  events?: LeaseEvents;
  /** A `lease/*` event to commit with the change it reports (docs/events.md). */
  announce?(type: string, metadata: Record<string, string>): PreparedWrite;
  /**
   * On a shared store (several nodes): this node's id, whether a node is alive, and the leader's fence. Revocations
   * are then claimed in storage first, and expiries carry the fence (docs/ha.md). Absent on a store of one node.
   */
  cluster?: { nodeId: string; alive(nodeId: string): Promise<boolean>; fence(): StorageCondition[] };
}

/**
 * How long a revoke by hand waits for another node that claimed the same lease to finish (its engine call is
 * bounded by the engine's own timeouts).
 */
const CLAIM_WAIT_MS = 60_000;

/**
 * Leases: registration, renewal and revocation. What each writes (the record and its index entries, among them the
 * time index the expiry scheduler, `lease-expiry.ts`, arms its timers from) is `lease-records.ts`.
 *
 * Expiry runs on the cluster's leader only (between `start` and `stop`); registration, renewal and revocation by
 * hand run on any node. Because of that, an expiry re-reads its lease before acting (a renewal on another node moved
 * it without disarming the leader's timer), and on a shared store every revocation first claims the lease in storage
 * (`claim/<hash>`, by compare-and-set, naming the node): of two nodes revoking one lease, one calls the engine. A
 * claim whose node died is taken over, so a lease whose revocation a crash interrupted after the engine call is
 * revoked again by the next node (at least once; never twice at the same time).
 */
export class LeaseManager {
  readonly #d: LeaseManagerDeps;
  readonly #expiry: LeaseExpiry;
  readonly #records: LeaseRecords;
  readonly #inFlight = new Map<string, Promise<void>>();
  /** Lease operations under way (renew, extend, revoke, recording a failure), which a move waits for. */
  #active = 0;
  #drained: (() => void) | undefined;
  /** The move under way (`exclusive`), which new lease operations wait for. */
  #moving: Promise<void> | undefined;
  /** Set inside a lease operation: what it does in turn (a token's revocation revoking its leases) is part of it. */
  readonly #inside = new AsyncLocalStorage<true>();

  constructor(deps: LeaseManagerDeps) {
    this.#d = deps;
    this.#records = new LeaseRecords(deps.view);
    this.#expiry = new LeaseExpiry({
      view: deps.view,
      clock: deps.clock,
      logger: deps.logger,
      shared: deps.cluster !== undefined,
      leases: this,
      failed: (id, err) => this.#failed(id, err),
      revoking: (id) => this.#inFlight.has(id),
      outside: (fn) => this.#inside.exit(fn),
    });
  }

  /** Starts expiring leases (this node leads): arms what falls due soon, and keeps scanning. */
  start(): Promise<void> {
    return this.#expiry.start();
  }

  stop(): void {
    this.#expiry.stop();
  }

  /** Leases stored and how many of them are irrevocable, for metrics. */
  async counts(): Promise<{ leases: number; irrevocable: number }> {
    const [ids, irrevocable] = await Promise.all([this.#d.view.listRecursive('id/'), this.#d.view.list('irrevocable/')]);
    return { leases: ids.length, irrevocable: irrevocable.length };
  }

  /** Waits for revocations already running (used at shutdown and by tests). */
  async idle(): Promise<void> {
    await Promise.allSettled([...this.#inFlight.values()]);
  }

  /** Stores a lease, with `alongside` (writes committed with it, e.g. its engine's event). */
  async register(entry: NewLease, alongside: PreparedWrite[] = []): Promise<LeaseEntry> {
    const { lease, write } = this.prepare(entry);
    await this.#d.view.commit([write, ...alongside]);
    return lease;
  }

  /** A lease and the writes that store it, for committing together with what it belongs to (a token). */
  prepare(entry: NewLease): { lease: LeaseEntry; write: PreparedWrite } {
    const full: LeaseEntry = { ...entry, attempts: 0, nextAttempt: 0, irrevocable: false, revokeError: '', lastRenewal: 0, issuedAs: '' };
    const event = this.#announce('lease/issued', full);
    const raw = Buffer.from(JSON.stringify(full));
    return { lease: full, write: { ops: [...this.#d.view.qualify(recordOps(full, raw)), ...event.ops], conditions: this.#d.guards(entry), committed: () => {
      this.#records.remember(full, raw);
      this.#expiry.armIfSoon(full);
      this.#d.events?.registered(full.mountPath);
      event.committed();
    } } };
  }

  /** The event of a secret lease's change (token leases are reported as tokens, not here); a no-op write without one. */
  #announce(type: string, entry: LeaseEntry): PreparedWrite {
    if (entry.kind !== 'secret' || !this.#d.announce) return { ops: [], committed: () => {} };
    return this.#d.announce(type, { lease_id: entry.id, path: entry.id, mount_path: entry.mountPath, expire_time: new Date(entry.expireTime).toISOString() });
  }

  /** A lease by its id, or by the id it was issued under before a remount moved it. */
  async get(id: string): Promise<LeaseEntry | undefined> {
    const entry = await this.#records.read(id);
    if (entry) return entry;
    const current = (await this.#d.view.get(movedKey(id)))?.toString();
    const moved = current === undefined ? undefined : await this.#records.read(current);
    return moved?.issuedAs === id ? moved : undefined;
  }

  /** Leases whose expiry is revoking them now: an engine that ends one meanwhile reports it expired, not revoked. */
  readonly #expiringIds = new Set<string>();

  /**
   * Direct children of a lease-id prefix. With `foldFrom` (the length of the prefix's mount path) the rest compares
   * case-insensitively, as for idsUnder.
   */
  async list(prefix: string, foldFrom?: number): Promise<string[]> {
    if (foldFrom === undefined) return this.#d.view.list(`id/${prefix}`);
    const children = new Set<string>();
    for (const id of await foldedIds(this.#d.view, prefix, foldFrom)) {
      const rest = id.slice(prefix.length);
      const slash = rest.indexOf('/');
      children.add(slash === -1 ? rest : rest.slice(0, slash + 1));
    }
    return [...children].sort();
  }

  /**
   * Ids of the lease `prefix` names or of every lease below it. With `foldFrom` (the length of the prefix's mount
   * path) ids compare case-insensitively past it: lease ids are built from canonical (lower-case) names, and this
   * also reaches leases an earlier version issued under another spelling of a role, so revoke-prefix misses none.
   */
  async idsUnder(prefix: string, foldFrom?: number): Promise<string[]> {
    if (foldFrom !== undefined) {
      // The lease named exactly, or those below it: `ldap/creds/dev` must not reach `ldap/creds/devops/...`.
      return (await foldedIds(this.#d.view, prefix, foldFrom)).filter((id) => id.length === prefix.length || prefix.endsWith('/') || id[prefix.length] === '/');
    }
    const exact = await this.get(prefix);
    if (exact) return [prefix];
    const base = prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/`;
    return (await this.#d.view.listRecursive(`id/${base}`)).map((k) => k.slice('id/'.length));
  }

  /** Ids of the secret leases issued with a token. */
  idsByToken(salted: string): Promise<string[]> {
    return tokenLeaseIds(this.#d.view, salted);
  }

  /** Renews a secret lease; the increment is capped by the mount's and the engine's max TTL. */
  renew(id: string, increment: number): Promise<LeaseEntry> {
    return this.#operation(() => this.#renew(id, increment));
  }

  async #renew(id: string, increment: number): Promise<LeaseEntry> {
    const entry = await this.get(id);
    const now = this.#d.clock.now();
    if (!entry) throw new BadRequestError('invalid lease');
    if (entry.kind === 'token') throw new BadRequestError('tokens cannot be renewed through this endpoint');
    if (entry.irrevocable) throw new BadRequestError('lease is expired and has failed previous revocation attempts');
    if (entry.expireTime <= now) throw new BadRequestError('lease expired');
    if (!entry.renewable) throw new BadRequestError('lease is not renewable');
    const requested = increment > 0 ? increment : entry.ttl;
    const secret = await this.#d.secretType(entry.mountPath, entry.secretType);
    const hook = secret?.renew ? await secret.renew(this.#view(entry, requested)) : undefined;
    const maxTtl = minPositive(this.#d.mountMaxTtl(entry.mountPath), entry.maxTtl, hook?.maxTtl ?? 0);
    const maxEnd = entry.issueTime + maxTtl * 1000;
    const ttl = Math.min(requested, Math.floor((maxEnd - now) / 1000));
    if (ttl <= 0) throw new BadRequestError('past the max TTL, cannot renew');
    return this.#reschedule(entry, { ...entry, expireTime: now + ttl * 1000, lastRenewal: now, ttl: entry.ttl }, 'lease/renewed');
  }

  /** Moves a token lease's expiry (token renewals). */
  extend(id: string, expireTime: number): Promise<void> {
    return this.#operation(async () => {
      const entry = await this.get(id);
      if (entry) await this.#reschedule(entry, { ...entry, expireTime, lastRenewal: this.#d.clock.now() });
    });
  }

  /**
   * Revokes now; throws if the engine fails (unless force, which deletes the record anyway). `expiry` is the leader's
   * own: its claim carries the fence, and it leaves a lease another live node is revoking to that node.
   */
  revoke(id: string, opts: { force?: boolean; expiry?: boolean } = {}): Promise<void> {
    return this.#operation(() => {
      const running = this.#inFlight.get(id);
      if (running) return running;
      const job = this.#revokeNow(id, opts.force ?? false, opts.expiry ?? false).finally(() => this.#inFlight.delete(id));
      this.#inFlight.set(id, job);
      return job;
    });
  }

  /** Deletes the lease record without calling the engine (it already undid the secret). */
  async forget(id: string): Promise<void> {
    const end = await this.prepareEnd(id);
    if (end) await this.#d.view.commit([end]);
  }

  /**
   * The writes that delete a lease record without calling the engine, for committing together with the engine's
   * own record of the secret's end; undefined when there is no such lease.
   */
  async prepareEnd(id: string): Promise<PreparedWrite | undefined> {
    const entry = await this.get(id);
    if (!entry) return undefined;
    const event = this.#announce(this.#expiringIds.has(entry.id) ? 'lease/expired' : 'lease/revoked', entry);
    return { ops: [...this.#d.view.qualify(this.#deletion(entry)), ...event.ops], committed: () => {
      this.#records.forget(entry.id);
      this.#expiry.disarm(entry.id);
      event.committed();
    } };
  }

  /**
   * Revokes every secret lease issued with a token except those in `tried` (best effort: failures stay scheduled
   * for retry); adds what it tried to `tried`.
   */
  async revokeByToken(salted: string, tried: Set<string> = new Set()): Promise<void> {
    for (const id of await this.idsByToken(salted)) {
      if (tried.has(id)) continue;
      tried.add(id);
      try {
        await this.revoke(id);
      } catch (err) {
        await this.#failed(id, err);
      }
    }
  }

  async #revokeNow(id: string, force: boolean, expiry: boolean): Promise<void> {
    let entry = await this.get(id);
    if (!entry) return;
    let claim: Buffer | undefined;
    if (this.#d.cluster) {
      for (const until = performance.now() + CLAIM_WAIT_MS; ;) {
        claim = await this.#claim(entry, expiry);
        if (claim || expiry) break;
        // Another node is revoking it: wait for that to end, as a revocation by hand answers once it is done.
        await new Promise((resolve) => setTimeout(resolve, 200));
        entry = await this.get(id);
        if (!entry) return;
        if (performance.now() > until) throw new StrongroomError(503, 'another node is revoking this lease and has not finished; try again');
      }
      if (!claim) return;
    }
    const started = performance.now();
    try {
      if (entry.kind === 'token') await this.#d.revokeToken(entry.tokenSalted);
      else {
        const secret = await this.#d.secretType(entry.mountPath, entry.secretType);
        if (!secret) throw new Error(`no engine at "${entry.mountPath}" can revoke secrets of type "${entry.secretType}"`);
        if (expiry) this.#expiringIds.add(entry.id);
        await secret.revoke(this.#view(entry, entry.ttl)).finally(() => this.#expiringIds.delete(entry!.id));
        this.#d.logger.debug({ lease_id: entry.id }, 'the engine revoked a lease');
      }
    } catch (err) {
      this.#d.events?.revokeFailed(entry.mountPath);
      if (!force) {
        if (claim) await this.#d.view.transaction([{ type: 'delete', key: claimKey(entry.id) }], [{ key: claimKey(entry.id), expected: claim }]).catch(() => undefined);
        throw err;
      }
      this.#d.logger.warn({ lease_id: id, err: errorText(err) }, 'forced revocation ignored an engine error');
    }
    await this.#delete(entry, expiry ? 'lease/expired' : 'lease/revoked');
    this.#d.events?.revoked(entry.mountPath, started);
  }

  /**
   * Claims the revocation of a lease for this node (a shared store only): the claim bytes, or undefined when another
   * node that is alive holds it (or, for an expiry, when this node no longer leads). A claim of a node that died, or
   * this node's own left by a failed attempt, is taken over.
   */
  async #claim(entry: LeaseEntry, fenced: boolean): Promise<Buffer | undefined> {
    const cluster = this.#d.cluster!;
    const key = claimKey(entry.id);
    const current = await this.#d.view.get(key);
    if (current) {
      const holder = (JSON.parse(current.toString('utf8')) as { node: string }).node;
      if (holder !== cluster.nodeId && (await cluster.alive(holder))) return undefined;
    }
    const mine = Buffer.from(JSON.stringify({ node: cluster.nodeId, at: this.#d.clock.now() }));
    const fence: PreparedWrite[] = fenced ? [{ ops: [], conditions: cluster.fence(), committed: () => {} }] : [];
    return (await this.#d.view.transaction([{ type: 'put', key, value: mine }], [{ key, expected: current }], fence)) ? mine : undefined;
  }

  /** Backoff base·2^attempt with ±50% jitter; after maxAttempts the lease turns irrevocable and stays visible. */
  #failed(id: string, err: unknown): Promise<void> {
    return this.#operation(async () => {
      const entry = await this.get(id);
      if (!entry) return;
      const attempts = entry.attempts + 1;
      const message = errorText(err).slice(0, 240);
      this.#d.logger.warn({ lease_id: entry.id, attempts, err: message }, 'lease revocation failed');
      if (attempts >= this.#d.retry.maxAttempts) {
        const updated = { ...entry, attempts, irrevocable: true, revokeError: `out of retries: ${message}` };
        await this.#d.view.transaction([
          { type: 'put', key: `id/${entry.id}`, value: Buffer.from(JSON.stringify(updated)) },
          { type: 'delete', key: timeKey(entry) },
          { type: 'put', key: irrevocableKey(entry.id), value: Buffer.from(entry.id) },
        ], [this.#records.unchanged(entry)]);
        return;
      }
      const delay = this.#d.retry.baseDelayMs * 2 ** attempts * (0.5 + Math.random());
      // Changed meanwhile (revoked, renewed or its failure recorded elsewhere): that change stands.
      await this.#reschedule(entry, { ...entry, attempts, nextAttempt: this.#d.clock.now() + delay, revokeError: message }).catch((err: unknown) => {
        if (!(err instanceof ConflictError)) throw err;
      });
    });
  }

  /** A ConflictError when the lease changed since `before` was read (revoked or renewed through another node). */
  async #reschedule(before: LeaseEntry, after: LeaseEntry, event?: string): Promise<LeaseEntry> {
    const oldKey = timeKey(before);
    const newKey = timeKey(after);
    const ops = [{ type: 'put' as const, key: `id/${after.id}`, value: Buffer.from(JSON.stringify(after)) }];
    const written = await this.#d.view.transaction(oldKey === newKey ? ops : [...ops, { type: 'delete', key: oldKey }, { type: 'put', key: newKey, value: Buffer.from(after.id) }], [this.#records.unchanged(before)], event ? [this.#announce(event, after)] : []);
    if (!written) throw new ConflictError('the lease was revoked or changed meanwhile; read it again');
    this.#expiry.disarm(after.id);
    this.#expiry.armIfSoon(after);
    return after;
  }

  #deletion(entry: LeaseEntry): KeyOp[] {
    return deletionOps(entry, this.#d.cluster !== undefined);
  }

  /**
   * Deletes the lease's records, with its event when the record was still there: an engine that ended the lease itself
   * during its revocation (a library check-in) committed the event with its own record of the end.
   */
  async #delete(entry: LeaseEntry, event: string): Promise<void> {
    this.#expiry.disarm(entry.id);
    this.#records.forget(entry.id);
    if (await this.#d.view.transaction(this.#deletion(entry), [this.#records.unchanged(entry)], [this.#announce(event, entry)])) return;
    const present = (await this.#d.view.get(`id/${entry.id}`)) !== undefined;
    await this.#d.view.transaction(this.#deletion(entry), [], present ? [this.#announce(event, entry)] : []);
  }

  /** Engines see a lease by the id it was issued under, the one they may have recorded (`req.leaseId`). */
  #view(entry: LeaseEntry, increment: number): LeaseView {
    return { id: entry.issuedAs || entry.id, issueTime: entry.issueTime, expireTime: entry.expireTime, internal: entry.internal, increment };
  }

  // ---- moving a mount's leases (sys/remount) -------------------------------------------------------

  /** Runs a lease operation; while a move is under way it waits for the move to end. */
  async #operation<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#inside.getStore()) return fn();
    while (this.#moving) await this.#moving;
    this.#active++;
    try {
      return await this.#inside.run(true, fn);
    } finally {
      if (--this.#active === 0) this.#drained?.();
    }
  }

  /**
   * Runs `fn` once no lease operation is under way, holding new ones until it ends, so the leases it moves
   * cannot be renewed, revoked or recorded as failed under their old ids meanwhile. `fn` must not wait for a
   * lease operation itself.
   */
  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    while (this.#moving) await this.#moving;
    let release!: () => void;
    this.#moving = new Promise<void>((resolve) => (release = resolve));
    try {
      if (this.#active > 0) await new Promise<void>((resolve) => (this.#drained = resolve));
      this.#drained = undefined;
      return await fn();
    } finally {
      this.#moving = undefined;
      release();
    }
  }

  /**
   * The writes that move every lease under the mount path `from` to the same path under `to`, for committing with
   * the mount table (call inside `exclusive`). A moved lease keeps the id it was issued under (`issuedAs`), by which
   * `get` still finds it and its engine still knows it. Also names the tokens whose leases moved (logins at `from`).
   */
  async prepareMove(from: string, to: string): Promise<{ write: PreparedWrite; tokens: string[]; count: number }> {
    const ops: StorageOp[] = [];
    const moves: Array<{ before: LeaseEntry; after: LeaseEntry }> = [];
    for (const id of await this.idsUnder(from)) {
      const before = await this.get(id);
      if (!before) continue;
      const after: LeaseEntry = { ...before, id: to + before.id.slice(from.length), mountPath: before.mountPath === from ? to : before.mountPath, issuedAs: before.issuedAs || before.id };
      const puts = recordOps(after);
      const rewritten = new Set(puts.map((op) => op.key));
      ops.push(...this.#deletion(before).filter((op) => !rewritten.has(op.key)), ...puts);
      moves.push({ before, after });
    }
    const committed = () => {
      for (const { before, after } of moves) {
        this.#expiry.disarm(before.id);
        this.#expiry.armIfSoon(after);
      }
    };
    const tokens = moves.filter(({ before }) => before.kind === 'token').map(({ before }) => before.tokenSalted);
    return { write: { ops: this.#d.view.qualify(ops), committed }, tokens, count: moves.length };
  }
}

export function minPositive(...values: number[]): number {
  const positive = values.filter((v) => v > 0);
  return positive.length ? Math.min(...positive) : 0;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
