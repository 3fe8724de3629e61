/**
 * Lending a library account: at once when one is free and no check-out waits ahead, else (with `wait`) in turn
 * through the set's queue (library-queue.ts). Every loan is one compare-and-set on the account's record, committed
 * with its lease (and, for a waiter, the removal of its queue entry), so no account is ever lent twice.
 */
import { BadRequestError } from '../../core/errors.ts';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import { LDAP_LIBRARY_REFUSED, LDAP_LIBRARY_WAIT_SECONDS, type LibraryRefusal } from '../../telemetry/families.ts';
import type { LdapEngine } from './engine.ts';
import { freeMembers, readMembers, type DirectLoan, type LibraryQueue, type Member, type QueueView, type Waiter } from './library-queue.ts';
import { accountSegment, putAccountOp, readAccount, unchangedAccount, type Borrower, type LibrarySet } from './library-store.ts';

/** What a refused waiting check-out's client is told to wait before asking again. */
const RETRY_AFTER_SECONDS = 1;

export interface CheckOutRequest {
  set: string;
  config: LibrarySet;
  borrower: Borrower;
  /** The check-out's lease, committed with the loan. */
  lease(account: string): PreparedWrite;
  /** Seconds to wait for an account (0: refuse at once when none is free). */
  wait: number;
  disconnected: AbortSignal | undefined;
}

export interface Loan {
  account: string;
  password: string;
}

type Engine = Pick<LdapEngine, 'ctx' | 'storage' | 'clock'>;

/** Both loans of one holder: the same entity, or (without one) the same token. */
const sameHolder = (a: Borrower, b: Borrower): boolean => (a.entity_id !== '' ? a.entity_id === b.entity_id : a.accessor !== '' && a.accessor === b.accessor);

export function libraryLender(engine: Engine, queue: LibraryQueue): (req: CheckOutRequest) => Promise<Loan> {
  const { storage } = engine;
  /** Loans being committed on this node, by account: a concurrent check-out tries the others first instead of queueing behind it. */
  const lending = new Map<string, Promise<unknown>>();

  const refuse = (set: string, reason: LibraryRefusal, err: Error): never => {
    engine.ctx.metrics.counter(LDAP_LIBRARY_REFUSED).inc({ set, reason });
    throw err;
  };

  const checkOutEvent = (borrower: Borrower, account: string) =>
    engine.ctx.system.event('ldap/library-check-out', { modified: 'true', operation: 'update', path: `library/${borrower.set}/check-out`, name: borrower.set, service_account: account });

  /** 400 naming the field when the borrower already holds as many of the set's accounts as it may. */
  const checkHolderLimit = (req: CheckOutRequest, members: Member[]): void => {
    const limit = req.config.max_checkouts_per_entity;
    if (limit === 0) return;
    const held = members.filter((m) => m.snapshot && m.snapshot.state.state !== 'available' && sameHolder(m.snapshot.state.borrower, req.borrower)).length;
    if (held >= limit) throw new BadRequestError(`invalid value for field "max_checkouts_per_entity": the caller already holds ${held} account(s) of library set "${req.set}", the most it may`);
  };

  /** One attempt at lending `member` as it was read: false when anything it was judged on changed meanwhile. */
  const tryLend = async (req: CheckOutRequest, member: Member, members: Member[], also: { ops: StorageOp[]; conditions: StorageCondition[] }): Promise<string | undefined> => {
    const state = member.snapshot?.state;
    if (state?.state !== 'available') return undefined;
    const guards = [unchangedAccount(member.name, member.snapshot!), ...also.conditions];
    // The holder's count is judged on every member as read: a loan of another member meanwhile makes this one retry.
    if (req.config.max_checkouts_per_entity > 0) for (const m of members) if (m !== member && m.snapshot) guards.push(unchangedAccount(m.name, m.snapshot));
    // Checked out when lent, not when asked: a waiter's loan starts once it has the account.
    const borrower = { ...req.borrower, checked_out_at: engine.clock.now() };
    const loan = putAccountOp({ state: 'lent', name: member.name, dn: state.dn, password: state.password, borrower });
    const key = accountSegment(member.name);
    const attempt = storage.transaction([loan, ...also.ops], guards, [req.lease(member.name), checkOutEvent(borrower, member.name)]);
    lending.set(key, attempt);
    try {
      return (await attempt) ? state.password : undefined;
    } finally {
      if (lending.get(key) === attempt) lending.delete(key);
    }
  };

  /** A free account now, when no check-out waits ahead of this one. */
  const lendNow = async (req: CheckOutRequest, view: QueueView): Promise<Loan | undefined> => {
    const members = await readMembers(storage, req.config.service_account_names);
    checkHolderLimit(req, members);
    const busy: Member[] = [];
    const none = { ops: [], conditions: [] };
    for (const member of freeMembers(view, members)) {
      // Queueing behind another check-out's commit only to lose made concurrent callers herd onto one free account.
      if (lending.has(accountSegment(member.name))) {
        busy.push(member);
        continue;
      }
      const password = await tryLend(req, member, members, none);
      if (password !== undefined) return { account: member.name, password };
    }
    // Their commit may have failed (another node, a set update): then they are free for this one.
    for (const member of busy) {
      await lending.get(accountSegment(member.name))?.catch(() => undefined);
      const fresh = { name: member.name, snapshot: await readAccount(storage, member.name) };
      if (freeMembers(view, [fresh]).length === 0) continue;
      const password = await tryLend(req, fresh, members.map((m) => (m === member ? fresh : m)), none);
      if (password !== undefined) return { account: member.name, password };
    }
    return undefined;
  };

  /**
   * How a waiter is lent an account in the commit that frees it (library-queue.ts, DirectLoan): the loan record, its
   * queue entry's removal, its lease and its event. Not with a holder limit: that loan must be judged on every member.
   */
  const directLoan = (req: CheckOutRequest, waiter: Waiter): DirectLoan | undefined => {
    if (req.config.max_checkouts_per_entity > 0) return undefined;
    return (account) => {
      if (req.disconnected?.aborted) return undefined;
      const borrower = { ...req.borrower, checked_out_at: engine.clock.now() };
      return {
        record: putAccountOp({ state: 'lent', name: account.name, dn: account.dn, password: account.password, borrower }),
        // Unguarded: the waiter cannot leave while an account is being handed to it, whatever its deadline.
        ops: queue.served(req.set, waiter).ops,
        alongside: [req.lease(account.name), checkOutEvent(borrower, account.name)],
      };
    };
  };

  /** Waits in the set's queue for an account lent or reserved to this check-out; lends itself a reserved one. */
  const lendInTurn = async (req: CheckOutRequest, waiter: Waiter): Promise<Loan | undefined> => {
    const deadline = performance.now() + req.wait * 1000;
    const direct = directLoan(req, waiter);
    if (direct) queue.lendDirectly(req.set, waiter, direct);
    for (;;) {
      // The account as its reservation left it: its compare-and-set fails if it changed since, and the waiter looks again.
      const grant = await queue.next(req.set, waiter, deadline - performance.now(), req.disconnected);
      if (grant === undefined) return undefined;
      if (grant.lent) return { account: grant.lent.name, password: grant.lent.password };
      const given = grant.reserved;
      // Only a holder limit needs the other members (the loan is then guarded on all of them).
      const members = req.config.max_checkouts_per_entity > 0 ? await readMembers(storage, req.config.service_account_names) : [given];
      const member = members.find((m) => m.name.toLowerCase() === given.name.toLowerCase());
      const state = member?.snapshot?.state;
      if (!member || state?.state !== 'available' || state.reserved_for !== waiter.id) continue;
      checkHolderLimit(req, members);
      const password = await tryLend(req, member, members, queue.served(req.set, waiter));
      if (password !== undefined) return { account: member.name, password };
    }
  };

  /** A loan whose client went away before its answer: the account is put back as it was (its password never left). */
  const giveBack = async (req: CheckOutRequest, loan: Loan): Promise<void> => {
    const lent = await readAccount(storage, loan.account);
    if (lent?.state.state !== 'lent' || lent.state.borrower.lease_id !== req.borrower.lease_id) return;
    const { dn, password } = lent.state;
    // Least recently returned stays true of it: the next waiter gets it first.
    const back = putAccountOp({ state: 'available', name: loan.account, dn, password, returned_at: 0 });
    await storage.transaction([back], [unchangedAccount(loan.account, lent)]);
  };

  return async (req) => {
    const view = await queue.view(req.set);
    if (view.live.length === 0) {
      const loan = await lendNow(req, view);
      if (loan) return loan;
    } else if (req.config.max_checkouts_per_entity > 0) {
      checkHolderLimit(req, await readMembers(storage, req.config.service_account_names));
    }
    const noneFree = () => new BadRequestError('No service accounts available for check-out.');
    if (req.wait === 0) return refuse(req.set, 'none_free', noneFree());
    let waiter: Waiter;
    try {
      waiter = await queue.enqueue(req.set);
    } catch (err) {
      return refuse(req.set, 'queue_full', err as Error);
    }
    let loan: Loan | undefined;
    let waited = false;
    const queuedAt = performance.now();
    try {
      loan = await lendInTurn(req, waiter);
      waited = true;
    } finally {
      engine.ctx.metrics.histogram(LDAP_LIBRARY_WAIT_SECONDS).observe({}, (performance.now() - queuedAt) / 1000);
      // A wait that ran out (not one the client ended) is reported with the removal of its entry: no commit of its own.
      const expired = waited && loan === undefined && !req.disconnected?.aborted;
      await queue.leave(req.set, waiter, loan === undefined, expired ? engine.ctx.system.event('ldap/library-check-out-wait-expired', {
        modified: 'false', operation: 'update', path: `library/${req.set}/check-out`, name: req.set, max_wait: String(req.wait),
      }) : undefined);
    }
    if (loan && req.disconnected?.aborted) {
      // The lease is forgotten by the core when the handler fails.
      await giveBack(req, loan);
      queue.freed(req.set);
      throw new BadRequestError('the client went away before the check-out was answered');
    }
    if (loan) return loan;
    if (req.disconnected?.aborted) throw new BadRequestError('the client went away while waiting for a service account');
    const expired = noneFree();
    expired.headers = { 'retry-after': String(RETRY_AFTER_SECONDS) };
    return refuse(req.set, 'wait_expired', expired);
  };
}
