/**
 * Waiting check-outs of library sets: one first-come, first-served queue per set, shared by every node of a cluster
 * through the store, or kept in memory by the only process of a store (library-queue-store.ts; docs/ldap-library.md,
 * "Waiting check-outs").
 *
 * An account goes to a waiter in the commit that frees it (a check-in, revoke or expiry): lent to it there when it
 * waits on the same node, else through a reservation on the account's own record (`reserved_for` on an `available`
 * account) for the first waiter holding none; or by a pump (on any node with waiters: on a wake, and on a short poll)
 * for an account freed while no waiter was queued. Only the waiter named may lend a reserved account, in one
 * transaction that also takes it off the queue. A reservation whose waiter is no longer queued (served, gone, stale)
 * is void: the account is free again, so an account granted to a vanished waiter is never lent on its behalf.
 */
import { ThrottledError } from '../../core/errors.ts';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import type { PreparedWrite, StorageView } from '../../core/storage/view.ts';
import type { LdapEngine } from './engine.ts';
import { parseWaiter, queueStore, reservationHolds, type QueueStore, type QueueView, type Waiter } from './library-queue-store.ts';
import { accountRecord, readAccount, readLibrarySet, unchangedAccount, type AccountSnapshot } from './library-store.ts';

export type { QueueView, Waiter } from './library-queue-store.ts';

/** The longest `max_wait` a set may have, and so the longest a check-out waits. */
export const MAX_WAIT_SECONDS = 600;

export interface Member {
  /** As the set spells it. */
  name: string;
  snapshot: AccountSnapshot | undefined;
}

/** A set's members with their records, read together (one statement on PostgreSQL). */
export async function readMembers(storage: StorageView, names: string[]): Promise<Member[]> {
  return Promise.all(names.map(async (name) => ({ name, snapshot: await readAccount(storage, name) })));
}

/** Available members no queued waiter holds, least recently returned first (spreads password changes evenly). */
export function freeMembers(view: QueueView, members: Member[]): Member[] {
  const returnedAt = (m: Member) => (m.snapshot?.state.state === 'available' ? m.snapshot.state.returned_at ?? 0 : 0);
  return members
    .filter((m) => m.snapshot?.state.state === 'available' && !reservationHolds(view, m.snapshot.state.reserved_for))
    .sort((a, b) => returnedAt(a) - returnedAt(b));
}

/** Which queued waiter holds which member. */
function holdings(view: QueueView, members: Member[]): Map<string, Member> {
  const held = new Map<string, Member>();
  for (const member of members) {
    const state = member.snapshot?.state;
    if (state?.state === 'available' && state.reserved_for !== undefined && reservationHolds(view, state.reserved_for)) held.set(state.reserved_for, member);
  }
  return held;
}

type Engine = Pick<LdapEngine, 'ctx' | 'storage' | 'options'>;

/** An account as the commit that frees it leaves it. */
export interface FreedAccount {
  name: string;
  dn: string;
  password: string;
}

/**
 * A waiter of this node that can be lent an account in the very commit that frees it (library-lend.ts): the loan's
 * record, the writes beside it (its queue entry's removal) and the waiter's lease and event, or undefined when it
 * cannot take one now (its client is gone).
 */
export type DirectLoan = (account: FreedAccount) => { record: StorageOp; ops: StorageOp[]; alongside: PreparedWrite[] } | undefined;

/** The waiter a freeing commit gives its account to: by a loan in that commit when it can, else by a reservation. */
export interface Heir {
  id: string;
  direct?: DirectLoan;
}

/** What a waiter is given: an account reserved for it, to lend itself; or a loan already committed for it. */
export type Grant = { reserved: Member; lent?: undefined } | { lent: FreedAccount; reserved?: undefined };

/** A waiter of this node that has an account in hand (given, or being lent). */
const holdsLocally = (local: LocalWaiter | undefined): boolean => local !== undefined && (local.granted !== undefined || local.busy === true);

interface LocalWaiter {
  /** Set while the check-out awaits `next`; resolves it with what it was given (undefined: its entry is gone). */
  wake?: (grant: Grant | undefined) => void;
  /** What it was given and has not taken yet. */
  granted?: Grant;
  /** Trying to lend what `next` gave it: no other account is reserved for it meanwhile. */
  busy?: boolean;
  /** How it can be lent an account in the freeing commit, when it can. */
  direct?: DirectLoan;
  /**
   * Its wait ended (deadline, client gone) while a commit was handing it an account: it stays until that commit
   * settles, so a loan made for it is never left behind by a waiter that already answered.
   */
  ending?: boolean;
}

/** Grants and waits of one mount's library sets on this node. */
export class LibraryQueue {
  readonly #engine: Engine;
  readonly #store: QueueStore;
  readonly #pollMs: number;
  /** Waiters of this node, by set and waiter id. */
  readonly #local = new Map<string, Map<string, LocalWaiter>>();
  /** Waiters a commit of this node is reserving an account for: another commit meanwhile picks the next one. */
  readonly #handing = new Set<string>();
  readonly #pumping = new Set<string>();
  readonly #again = new Set<string>();
  /** Check-outs asking to be queued, by set, while an enqueue of the set commits. */
  readonly #asking = new Map<string, Array<{ resolve(w: Waiter): void; reject(err: Error): void }>>();
  #timer: NodeJS.Timeout | undefined;
  #unsubscribe: (() => void) | undefined;

  constructor(engine: Engine, pollMs: number) {
    this.#engine = engine;
    this.#store = queueStore(engine);
    this.#pollMs = pollMs;
  }

  view(set: string): Promise<QueueView> {
    return this.#store.view(set);
  }

  /** Check-outs waiting on `set` (the gauge). */
  waiting(set: string): Promise<number> {
    return this.#store.count(set);
  }

  /**
   * Queues a check-out at the end of the set's queue; 429 naming the set when the queue is full. The check-outs of
   * one set that ask while this node's previous enqueue commits are queued together, in one commit (tickets in
   * the order they asked): one at a time, each paid a whole commit's latency, and a fleet queued no faster than
   * that; only other nodes' enqueues can make the counter's compare-and-set fail.
   */
  enqueue(set: string): Promise<Waiter> {
    return new Promise((resolve, reject) => {
      let asking = this.#asking.get(set);
      if (!asking) this.#asking.set(set, (asking = []));
      asking.push({ resolve, reject });
      if (asking.length === 1) void this.#enqueueAll(set);
    });
  }

  async #enqueueAll(set: string): Promise<void> {
    // Runs while check-outs of the set ask; the first of each batch started it.
    for (let asking = this.#asking.get(set); asking?.length; asking = this.#asking.get(set)) {
      // Those asking now; later ones wait for the next commit.
      const batch = asking.slice();
      try {
        const waiters = await this.#enqueueBatch(set, batch.length);
        batch.forEach((ask, i) => (waiters[i] ? ask.resolve(waiters[i]) : ask.reject(this.#full(set))));
      } catch (err) {
        for (const ask of batch) ask.reject(err as Error);
      }
      const rest = this.#asking.get(set)!.slice(batch.length);
      if (rest.length) this.#asking.set(set, rest);
      else this.#asking.delete(set);
    }
  }

  #full(set: string): ThrottledError {
    return new ThrottledError(`library set "${set}" already has as many check-outs waiting as allowed (${this.#engine.options.libraryMaxWaiters}); retry later`);
  }

  /** Queues up to `count` waiters (in one commit when stored), as many as the cap leaves room for. */
  async #enqueueBatch(set: string, count: number): Promise<Waiter[]> {
    const waiters = await this.#store.add(set, count, this.#engine.options.libraryMaxWaiters);
    if (waiters.length === 0) return waiters;
    let local = this.#local.get(set);
    if (!local) this.#local.set(set, (local = new Map()));
    for (const w of waiters) local.set(w.id, {});
    this.#poll();
    return waiters;
  }

  /** From now on, `waiter` (of this node) can be lent an account in the commit that frees it. */
  lendDirectly(set: string, waiter: Waiter, direct: DirectLoan): void {
    const local = this.#local.get(set)?.get(waiter.id);
    if (local) local.direct = direct;
  }

  /** The writes that take a waiter off the queue when it is served: its entry goes with its loan. */
  served(set: string, waiter: Waiter): { ops: StorageOp[]; conditions: StorageCondition[] } {
    return this.#store.served(set, waiter);
  }

  /**
   * Forgets a waiter of this node once served or gone; an account still reserved for it is void from now on. `event`
   * (a wait that expired) is committed with the removal of its entry.
   */
  async leave(set: string, waiter: Waiter, removeEntry: boolean, event?: PreparedWrite): Promise<void> {
    const waiters = this.#local.get(set);
    waiters?.delete(waiter.id);
    if (waiters?.size === 0) this.#local.delete(set);
    await this.#store.remove(set, waiter, !removeEntry, event);
    if (!removeEntry) {
      // Served: an account also reserved for it (two nodes' commits picked it at once) is handed on by this node's
      // pump, or is free to anyone (a reservation of a waiter no longer queued is void). With one node, the commits
      // that reserve pick only waiters holding nothing here (headFor), so there is no second account to hand on.
      if (this.#engine.ctx.system.shared) this.wake(set);
      return;
    }
    // Gave up: what was reserved for it goes on at once, on whichever node the next waiter is.
    this.freed(set);
  }

  /** An account of `set` may have become free: waiters look now, on whichever node they wait. */
  freed(set: string): void {
    this.wake(set);
    this.#engine.ctx.system.signal(set);
  }

  /**
   * Waits until an account is reserved for `waiter` and resolves with its name; undefined once `timeoutMs` has passed,
   * `signal` aborted, or the waiter's entry was dropped (judged stale by another node).
   */
  next(set: string, waiter: Waiter, timeoutMs: number, signal: AbortSignal | undefined): Promise<Grant | undefined> {
    const local = this.#local.get(set)?.get(waiter.id);
    if (!local || timeoutMs <= 0 || signal?.aborted) return Promise.resolve(undefined);
    local.busy = false;
    const granted = local.granted;
    if (granted) {
      local.granted = undefined;
      local.busy = true;
      return Promise.resolve(granted);
    }
    return new Promise((resolve) => {
      const finish = (grant: Grant | undefined) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        local.wake = undefined;
        local.granted = undefined;
        local.busy = grant !== undefined;
        resolve(grant);
      };
      const aborted = () => {
        if (this.#handing.has(waiter.id)) local.ending = true;
        else finish(undefined);
      };
      const timer = setTimeout(aborted, timeoutMs);
      signal?.addEventListener('abort', aborted, { once: true });
      local.wake = finish;
      this.wake(set);
    });
  }

  /**
   * For a commit about to free an account of `set`: the first waiter known to hold no account, to reserve it for in
   * that commit. `handed` must follow the commit, whether it landed or not. The records are not read (this is on
   * the check-in's path): a waiter of another node may then get two accounts at once; it takes one, and the
   * other's reservation is void as soon as it is served (its node's pump hands it on).
   */
  async headFor(set: string): Promise<Heir | undefined> {
    const view = await this.view(set);
    const local = this.#local.get(set);
    const head = view.live.find((w) => !this.#handing.has(w.id) && !holdsLocally(local?.get(w.id)));
    if (!head) return undefined;
    this.#handing.add(head.id);
    const waiter = local?.get(head.id);
    return { id: head.id, direct: waiter?.ending ? undefined : waiter?.direct };
  }

  /**
   * After the commit that gave an account to `heir` settled: `grant` is what it committed (a loan for the waiter, or
   * the record reserving the account for it), undefined when it did not land.
   */
  handed(set: string, heir: Heir | undefined, grant: Grant | undefined): void {
    if (heir === undefined) return;
    this.#handing.delete(heir.id);
    const local = this.#local.get(set)?.get(heir.id);
    // A waiter of this node takes it as written, without reading anything.
    // A waiter whose wait ended meanwhile still takes a loan made for it (its check-out then answers, or gives it
    // back when its client is gone), but not a reservation: that is void once it leaves.
    if (local && grant && (grant.lent || !local.ending)) this.#give(local, grant);
    else if (local?.ending) local.wake?.(undefined);
    else this.#wakeHolder(set, heir.id);
  }

  #give(local: LocalWaiter, grant: Grant): void {
    if (local.wake) local.wake(grant);
    else local.granted = grant;
  }

  /** The node of waiter `id` looks now: this one at once, another through a signal. */
  #wakeHolder(set: string, id: string): void {
    if (this.#local.get(set)?.has(id)) this.wake(set);
    else this.#engine.ctx.system.signal(set);
  }

  /** Something of `set` changed (an account freed, a reservation made elsewhere): this node's waiters look again. */
  wake(set: string): void {
    if (!this.#local.has(set)) return;
    if (this.#pumping.has(set)) {
      this.#again.add(set);
      return;
    }
    this.#pumping.add(set);
    void (async () => {
      try {
        do {
          this.#again.delete(set);
          await this.#pump(set);
        } while (this.#again.has(set) && this.#local.has(set));
      } catch (err) {
        this.#engine.ctx.logger.warn({ err: { message: (err as Error).message }, set }, 'granting library accounts to waiting check-outs failed; the next poll retries');
      } finally {
        this.#pumping.delete(set);
      }
    })();
  }

  /** Stops the poll (no waiter of this node left). */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** The mount goes away. */
  close(): void {
    this.stop();
    this.#unsubscribe?.();
  }

  /** While this node has waiters, it looks again every `pollMs`: reservations made on other nodes, stale waiters. */
  #poll(): void {
    // Another node freed or reserved an account of a set (LISTEN/NOTIFY on PostgreSQL): look now, not at the poll.
    // Heard from the first wait on: a node where nobody waits has nothing to look for.
    this.#unsubscribe ??= this.#engine.ctx.system.onSignal((set) => this.wake(set));
    if (this.#timer) return;
    this.#timer = setInterval(() => {
      if (this.#local.size === 0) return this.stop();
      for (const set of this.#local.keys()) this.wake(set);
    }, this.#pollMs);
    this.#timer.unref();
  }

  /** Reserves free accounts for the first waiters holding none, then wakes this node's waiters that hold one. */
  async #pump(set: string): Promise<void> {
    const { storage } = this.#engine;
    const waiters = this.#local.get(set);
    if (!waiters) return;
    const names = (await readLibrarySet(storage, set))?.service_account_names ?? [];
    const view = await this.view(set);
    const members = await readMembers(storage, names);
    const held = holdings(view, members);
    const heads = view.live.filter((w) => !held.has(w.id) && !this.#handing.has(w.id) && !holdsLocally(waiters.get(w.id)));
    const free = freeMembers(view, members);
    for (let i = 0; i < Math.min(heads.length, free.length); i++) {
      const { name, snapshot } = free[i];
      if (snapshot?.state.state !== 'available') continue;
      const reserved = accountRecord({ ...snapshot.state, reserved_for: heads[i].id });
      if (!(await storage.transaction([reserved.op], [unchangedAccount(name, snapshot)]))) continue;
      held.set(heads[i].id, { name, snapshot: reserved.snapshot });
      if (!waiters.has(heads[i].id)) this.#wakeHolder(set, heads[i].id);
    }
    for (const [id, local] of waiters) {
      const account = held.get(id);
      if (account !== undefined) {
        // Not to a waiter a check-in's commit is lending an account meanwhile (headFor chose it after `heads` was
        // read): that loan serves it, and this reservation, void once it leaves, passes on.
        if (!local.busy && !this.#handing.has(id)) this.#give(local, { reserved: account });
      } else if (!view.liveIds.has(id) && parseWaiter(id)!.ticket < view.next && !this.#handing.has(id)) {
        // Its entry is gone (judged stale by another node) — unless a commit is lending it an account, which removes
        // the entry with the loan before that commit's caller hands it over.
        local.wake?.(undefined);
      }
    }
  }
}
