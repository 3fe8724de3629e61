/**
 * Where the waiters of library sets are kept (docs/ldap-library.md, "Waiting check-outs"): in the store when other
 * nodes share it, so first come, first served holds across the cluster; in this process's memory when no other node
 * can ever queue on the store (SQLite, memory), where a waiter stored would only cost commits and reads, since a
 * waiter lives exactly as long as the process holding its request.
 *
 * Stored: a waiter is one entry, `library-queue/<set>/<ticket>.<node>`. Its ticket comes from the set's counter
 * (`library-queue-ticket/<set>`), moved by compare-and-set in the transaction that adds the entry, so tickets order
 * waiters by the commits that queued them, whichever node they wait on. The node id lets any node judge a waiter stale
 * (its node no longer heard from, `SystemView.nodeAlive`) and drop it.
 */
import { ConflictError } from '../../core/errors.ts';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import type { PreparedWrite, StorageView } from '../../core/storage/view.ts';
import type { LdapEngine } from './engine.ts';

const QUEUE_PREFIX = 'library-queue/';
const TICKET_PREFIX = 'library-queue-ticket/';
/** Fixed width, so the store's sorted listing is ticket order. */
const TICKET_DIGITS = 15;
/** Compare-and-set rounds of one enqueue against other nodes' queueing on the same set at once. */
const ENQUEUE_ATTEMPTS = 100;
const WAITER_VALUE = Buffer.from('{}');
const [DOT, ZERO, NINE] = ['.', '0', '9'].map((c) => c.charCodeAt(0));

const queueFolder = (set: string) => `${QUEUE_PREFIX}${encodeURIComponent(set)}/`;
const ticketKey = (set: string) => TICKET_PREFIX + encodeURIComponent(set);
const waiterId = (ticket: number, node: string) => `${String(ticket).padStart(TICKET_DIGITS, '0')}.${node}`;

export interface Waiter {
  /** `<ticket>.<node>`: its entry's name and what a reservation names. */
  id: string;
  ticket: number;
  node: string;
}

/** Parsed on every look at a queue, for each entry: no expression, and what is not ours is skipped. */
export function parseWaiter(id: string): Waiter | undefined {
  if (id.length <= TICKET_DIGITS + 1 || id.charCodeAt(TICKET_DIGITS) !== DOT) return undefined;
  const digits = id.slice(0, TICKET_DIGITS);
  for (let i = 0; i < TICKET_DIGITS; i++) {
    const c = digits.charCodeAt(i);
    if (c < ZERO || c > NINE) return undefined;
  }
  return { id, ticket: Number(digits), node: id.slice(TICKET_DIGITS + 1) };
}

/** The queue of a set as read at one moment: the next ticket, and the waiters whose node is alive, first come first. */
export interface QueueView {
  next: number;
  live: Waiter[];
  liveIds: Set<string>;
  /**
   * Set when every waiter is of this node (a queue in memory): a reservation named for another node's waiter, left
   * by an earlier process, then never holds, whatever its ticket.
   */
  onlyNode?: string;
}

/** Whether a reservation still binds: its waiter is queued (or queued after the view was read). */
export function reservationHolds(view: QueueView, id: string | undefined): boolean {
  if (id === undefined) return false;
  if (view.liveIds.has(id)) return true;
  const waiter = parseWaiter(id);
  return waiter !== undefined && waiter.ticket >= view.next && (view.onlyNode === undefined || waiter.node === view.onlyNode);
}

/** How the queue of each set is kept: what LibraryQueue needs of it. */
export interface QueueStore {
  view(set: string): Promise<QueueView>;
  /** Up to `count` new waiters at the end of the queue (fewer when `cap` leaves less room: none when full). */
  add(set: string, count: number, cap: number): Promise<Waiter[]>;
  /** The writes, committed with a waiter's loan, that take it off the queue (a stored entry goes with the loan). */
  served(set: string, waiter: Waiter): { ops: StorageOp[]; conditions: StorageCondition[] };
  /**
   * Takes a waiter off the queue: it gave up, or (`served`) its loan has committed. `event` (a wait that expired) is
   * committed with the removal of a stored entry, or alone where the queue is this process's.
   */
  remove(set: string, waiter: Waiter, served: boolean, event?: PreparedWrite): Promise<void>;
  /** Waiters of a set (the gauge; a stored queue counts stale entries until a node drops them). */
  count(set: string): Promise<number>;
}

type Engine = Pick<LdapEngine, 'ctx' | 'storage'>;

export const queueStore = (engine: Engine): QueueStore => (engine.ctx.system.shared ? new StoredQueues(engine) : new LocalQueues(engine.ctx.system.nodeId, engine.storage));

class StoredQueues implements QueueStore {
  readonly #engine: Engine;

  constructor(engine: Engine) {
    this.#engine = engine;
  }

  async view(set: string): Promise<QueueView> {
    return (await this.#read(set)).view;
  }

  async #read(set: string): Promise<{ view: QueueView; counter: Buffer | undefined }> {
    const { storage, ctx } = this.#engine;
    // The counter first: a waiter missing from the listing below was gone before it was read, or holds a later ticket.
    const counter = await storage.get(ticketKey(set));
    const next = counter ? Number(counter.toString('utf8')) : 0;
    const waiters = (await storage.list(queueFolder(set))).map(parseWaiter).filter((w) => w !== undefined);
    // Each node asked once, whatever number of waiters it has.
    const alive = new Map<string, boolean>();
    for (const w of waiters) if (!alive.has(w.node)) alive.set(w.node, await ctx.system.nodeAlive(w.node));
    const live: Waiter[] = [];
    for (const waiter of waiters) {
      if (alive.get(waiter.node)) live.push(waiter);
      // Its node died (kill -9, or a process before a restart): nothing will ever serve it.
      else await storage.delete(queueFolder(set) + waiter.id);
    }
    return { view: { next, live, liveIds: new Set(live.map((w) => w.id)) }, counter };
  }

  async add(set: string, count: number, cap: number): Promise<Waiter[]> {
    const { storage, ctx } = this.#engine;
    for (let attempt = 0; attempt < ENQUEUE_ATTEMPTS; attempt++) {
      const { view, counter } = await this.#read(set);
      const room = Math.min(count, cap - view.live.length);
      if (room <= 0) return [];
      const node = ctx.system.nodeId;
      const waiters = Array.from({ length: room }, (_, i): Waiter => ({ id: waiterId(view.next + i, node), ticket: view.next + i, node }));
      const ops: StorageOp[] = [
        { type: 'put', key: ticketKey(set), value: Buffer.from(String(view.next + room)) },
        ...waiters.map((w): StorageOp => ({ type: 'put', key: queueFolder(set) + w.id, value: WAITER_VALUE })),
      ];
      if (await storage.transaction(ops, [{ key: ticketKey(set), expected: counter }])) return waiters;
    }
    throw new ConflictError(`too many check-outs were queueing on library set "${set}" at once; retry the request`);
  }

  served(set: string, waiter: Waiter): { ops: StorageOp[]; conditions: StorageCondition[] } {
    const key = queueFolder(set) + waiter.id;
    return { ops: [{ type: 'delete', key }], conditions: [{ key, expected: WAITER_VALUE }] };
  }

  async remove(set: string, waiter: Waiter, served: boolean, event?: PreparedWrite): Promise<void> {
    if (!served) await this.#engine.storage.transaction([{ type: 'delete', key: queueFolder(set) + waiter.id }], [], event ? [event] : []);
  }

  /** Stale entries included until a node drops them: no liveness reads per scrape. */
  async count(set: string): Promise<number> {
    return (await this.#engine.storage.list(queueFolder(set))).length;
  }
}

/** One process's queues: tickets from a counter per set, in the order check-outs asked. */
class LocalQueues implements QueueStore {
  readonly #node: string;
  readonly #storage: StorageView;
  readonly #sets = new Map<string, { next: number; waiters: Map<string, Waiter> }>();

  constructor(node: string, storage: StorageView) {
    this.#node = node;
    this.#storage = storage;
  }

  async view(set: string): Promise<QueueView> {
    const queue = this.#sets.get(set);
    return { next: queue?.next ?? 0, live: queue ? [...queue.waiters.values()] : [], liveIds: new Set(queue?.waiters.keys()), onlyNode: this.#node };
  }

  async add(set: string, count: number, cap: number): Promise<Waiter[]> {
    let queue = this.#sets.get(set);
    if (!queue) this.#sets.set(set, (queue = { next: 0, waiters: new Map() }));
    const room = Math.max(0, Math.min(count, cap - queue.waiters.size));
    const added: Waiter[] = [];
    for (let i = 0; i < room; i++) {
      const waiter = { id: waiterId(queue.next, this.#node), ticket: queue.next++, node: this.#node };
      queue.waiters.set(waiter.id, waiter);
      added.push(waiter);
    }
    return added;
  }

  served(): { ops: StorageOp[]; conditions: StorageCondition[] } {
    return { ops: [], conditions: [] };
  }

  async remove(set: string, waiter: Waiter, _served: boolean, event?: PreparedWrite): Promise<void> {
    const queue = this.#sets.get(set);
    queue?.waiters.delete(waiter.id);
    // The counter stays: a reservation made for a waiter of this process is judged by its ticket.
    // Nothing of the queue is stored here, so an expired wait's event is a small commit of its own.
    if (event) await this.#storage.commit([event]);
  }

  async count(set: string): Promise<number> {
    return this.#sets.get(set)?.waiters.size ?? 0;
  }
}
