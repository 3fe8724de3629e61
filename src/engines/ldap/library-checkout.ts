/**
 * Library check-out and check-in: `library/:set/check-out`, `library/:set/check-in`,
 * `library/manage/:set/check-in`, `library/:set/status`, and the lease type of a check-out.
 *
 * Every state change of an account is a compare-and-set on its record (library-store.ts), never a
 * read-then-write, so concurrency control survives restarts and works across servers on one database.
 * Check-in claims the account (`lent` → `returning`) in the transaction that stores the new password's
 * write-ahead log, changes the password in the directory, then records it as `available`: whoever wins
 * the claim is the only writer until the account is available again, and an interrupted check-in is
 * finished at start-up or by the next check-in or lease revocation of the same loan.
 */
import { BadRequestError, NotFoundError, PermissionDeniedError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, type CallerInfo, type LeaseView, type SecretResponse, type SecretType, lowerName } from '../../core/framework.ts';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import {
  ACCOUNT_PREFIX, SET_NAME, accountRecord, accountSegment, canonicalAccount, listAccountNames, putAccountOp, readAccount, readLibrarySet, returningClaim,
  unchangedAccount, type AccountState, type Borrower, type LentAccount, type LibrarySet,
} from './library-store.ts';
import { clearDriftOp } from './drift-marks.ts';
import { recordedAccountPassword } from './library-store.ts';
import { changePasswordWithWal, walKey } from './rotation.ts';
import { libraryLender } from './library-lend.ts';
import { LibraryQueue, MAX_WAIT_SECONDS, type DirectLoan, type Grant, type Heir } from './library-queue.ts';

/** How often a node with waiting check-outs looks for accounts freed elsewhere: on a shared store, another node. */
const SHARED_POLL_MS = 100;
const LOCAL_POLL_MS = 1000;

export const CHECKOUT_SECRET_TYPE = 'ldap_library_checkout';

type Engine = Pick<LdapEngine, 'ctx' | 'storage' | 'clock' | 'connections' | 'locks' | 'options' | 'libraryWaiters'>;

/** Set names are lower-cased on every path, as in Vault. */
export const setName = (req: Pick<BackendRequest, 'params'>): string => req.params.name!.toLowerCase();

/** The WAL target of an account's password (one per account, whichever set it is in), and its drift mark's. */
export const accountWalTarget = (account: string): string => `library/${accountSegment(account)}`;

/**
 * Seconds a check-out lasts. The set's ttl caps any request; 0 (asked for, or the set's default) means
 * unlimited, i.e. as long as the mount allows. The core then caps the lease by the set's max_ttl.
 */
export function checkoutTtl(set: Pick<LibrarySet, 'ttl'>, requested: number | undefined, mountMaxTtl: number): number {
  const ttl = requested === undefined || requested === 0 ? set.ttl : set.ttl > 0 ? Math.min(requested, set.ttl) : requested;
  return ttl > 0 ? ttl : mountMaxTtl;
}

export function isBorrower(borrower: Borrower, caller: CallerInfo | undefined): boolean {
  if (!caller) return false;
  return (borrower.entity_id !== '' && borrower.entity_id === caller.entityId) || (borrower.accessor !== '' && borrower.accessor === caller.accessor);
}

/** A new member: its password is set now, so the service is the only holder (Vault's initial check-in). */
export async function enrollAccount(engine: Engine, name: string, dn: string): Promise<void> {
  await setAvailablePassword(engine, name, dn);
}

/**
 * An available account given a new password without lending it: drift take-back (drift.ts). Only from the record as
 * read, so a check-out meanwhile is not overwritten (its borrower then holds the drifted password, which the check-in
 * replaces, as it replaces the WAL's). The commit clears the account's drift mark. False when it was not available.
 */
export async function retakeAvailableAccount(engine: Engine, name: string, fence?: PreparedWrite): Promise<boolean> {
  return engine.locks.run(ACCOUNT_PREFIX + accountSegment(name), async () => {
    const snapshot = await readAccount(engine.storage, name);
    if (snapshot?.state.state !== 'available') return false;
    return setAvailablePassword(engine, name, snapshot.state.dn, {
      also: [clearDriftOp(accountWalTarget(name))], conditions: [unchangedAccount(name, snapshot)], fence,
    });
  });
}

/** Sets an account's password under the WAL and records it available. */
async function setAvailablePassword(engine: Engine, name: string, dn: string, opts: { also?: StorageOp[]; conditions?: StorageCondition[]; fence?: PreparedWrite } = {}): Promise<boolean> {
  const changed = await changePasswordWithWal(engine, {
    target: accountWalTarget(name),
    account: { dn },
    commit: (password, changedDn) => [putAccountOp({ state: 'available', name, dn: changedDn, password }), ...(opts.also ?? [])],
    commitConditions: opts.conditions,
    fence: opts.fence,
    recorded: () => recordedAccountPassword(engine.storage, name),
  });
  return changed !== undefined;
}

/**
 * Checks an account in if `accept` says the loan is the one meant: claims it, rotates the password
 * (so the borrower's copy stops working), records it available and ends the borrower's lease.
 * Returns false when there was nothing to check in (already available, or lent under another loan).
 */
export async function checkInAccount(engine: Engine, name: string, accept: (account: LentAccount) => boolean, queue?: LibraryQueue): Promise<boolean> {
  // In-process serialisation of one account's check-ins; the claim below is what guards across servers.
  return engine.locks.run(ACCOUNT_PREFIX + accountSegment(name), async () => {
    const snapshot = await readAccount(engine.storage, name);
    if (!snapshot || snapshot.state.state === 'available' || !accept(snapshot.state)) return false;
    const account = snapshot.state;
    // A lent account is claimed (`lent` → `returning`) in the same transaction that stores the new password's
    // WAL: one commit instead of two, and a crash leaves either neither or both. A `returning` one is resumed.
    const claim = account.state === 'lent' ? returningClaim(account) : undefined;
    let heir: Heir | undefined;
    // What the commit gives the heir: a loan in that commit (its writes beside), or the account reserved for it.
    let loan: ReturnType<DirectLoan> | undefined;
    let grant: Grant | undefined;
    let direct = true;
    let changed: Awaited<ReturnType<typeof changePasswordWithWal>> | undefined;
    try {
      changed = await changePasswordWithWal(engine, {
      target: accountWalTarget(name),
      account: { dn: account.dn },
      prepare: claim && [claim.op],
      prepareConditions: claim && [unchangedAccount(name, snapshot)],
      // A password the server just set is the directory's: a drift mark from before the loan is stale.
      // The first waiting check-out gets the account in the commit that frees it (library-queue.ts): lent to it
      // there when it waits on this node, else reserved for it.
      commit: async (password, dn) => {
        heir ??= await queue?.headFor(account.borrower.set);
        loan = direct ? heir?.direct?.({ name, dn, password }) : undefined;
        if (loan) {
          grant = { lent: { name, dn, password } };
          return [loan.record, ...loan.ops, clearDriftOp(accountWalTarget(name))];
        }
        const record = accountRecord({ state: 'available', name, dn, password, returned_at: engine.clock.now(), reserved_for: heir?.id });
        grant = { reserved: { name, snapshot: record.snapshot } };
        return [record.op, clearDriftOp(accountWalTarget(name))];
      },
      // Only our claim becomes available: never overwrite a state another server wrote.
      commitConditions: [unchangedAccount(name, claim?.claimed ?? snapshot)],
      // The borrower's lease ends in the same transaction, so no lease outlives its loan.
      commitAlongside: async () => {
        const end = await engine.ctx.system.leaseEnd(account.borrower.lease_id);
        return [...(end ? [end] : []), engine.ctx.system.event('ldap/library-check-in', { modified: 'true', operation: 'update', path: `library/${account.borrower.set}/check-in`, name: account.borrower.set, service_account: name }), ...(loan?.alongside ?? [])];
      },
      // A loan's lease has guards of its own (its token not being revoked): the check-in must land without it.
      commitAgain: () => {
        direct = false;
        return loan !== undefined;
      },
      recorded: () => recordedAccountPassword(engine.storage, name),
      });
    } finally {
      queue?.handed(account.borrower.set, heir, changed ? grant : undefined);
    }
    return changed !== undefined;
  });
}

/**
 * Earlier versions keyed an account's record and its WAL by the name as its set spelled it ("SVC1"), so a
 * case-only rename orphaned both. At start-up, before anything reads them, each such entry moves to its
 * canonical key in one compare-and-set (its bytes still there, the canonical key still free). When the
 * canonical key is taken the entry stays where it is, so no password is dropped, and a warning names it.
 */
async function moveLegacyAccountKeys(engine: Engine): Promise<void> {
  const { storage } = engine;
  for (const prefix of [ACCOUNT_PREFIX, walKey(accountWalTarget(''))]) {
    for (const segment of await storage.list(prefix)) {
      const canonical = accountSegment(decodeURIComponent(segment));
      if (segment === canonical) continue;
      const [from, to] = [prefix + segment, prefix + canonical];
      const raw = await storage.get(from);
      if (raw === undefined) continue;
      const moved = await storage.transaction([{ type: 'put', key: to, value: raw }, { type: 'delete', key: from }], [{ key: from, expected: raw }, { key: to, expected: undefined }]);
      if (!moved) engine.ctx.logger.warn({ key: from }, 'a library account entry stored under a mixed-case name was left in place: its lower-cased key is taken');
    }
  }
}

/**
 * At start-up: finishes check-ins that a crash or a directory failure interrupted, and takes back loans whose
 * lease does not exist. A check-out stores its loan and its lease in one transaction, but a forced revocation
 * whose engine call failed deletes the lease anyway, and stores written before loans and leases were committed
 * together may hold a loan whose lease was never stored: no expiry would ever end those. Only loans made before
 * `startedAt` are judged (this runs beside new check-outs). An orphaned loan is checked in like any other: a new
 * password.
 */
async function resumeCheckIns(engine: Engine, startedAt: number, queue: LibraryQueue): Promise<void> {
  for (const name of await listAccountNames(engine.storage)) {
    const state = (await readAccount(engine.storage, name))?.state;
    if (state?.state === 'lent' && state.borrower.checked_out_at < startedAt && !(await engine.ctx.system.leaseExists(state.borrower.lease_id))) {
      engine.ctx.logger.warn({ account: name }, 'taking back a library account lent under a lease that was never stored');
    } else if (state?.state !== 'returning') continue;
    const leaseId = state.borrower.lease_id;
    await checkInAccount(engine, name, (account) => account.state === 'returning' || account.borrower.lease_id === leaseId, queue).catch((err: unknown) => {
      engine.ctx.logger.warn({ err: { message: (err as Error).message }, account: name }, 'resuming an interrupted check-in failed; the lease or the next check-in retries it');
    });
  }
}

async function requireSet(engine: Engine, name: string): Promise<LibrarySet> {
  const set = await readLibrarySet(engine.storage, name);
  if (!set) throw new NotFoundError(`library set "${name}" does not exist`);
  return set;
}

function statusEntry(account: AccountState | undefined, expiresAt: number | undefined): Record<string, unknown> {
  if (account?.state === 'available') return { available: true };
  if (!account) return { available: false };
  // The token is never stored; its accessor identifies it (auth/token/lookup-accessor, revoke-accessor).
  const { accessor, entity_id, lease_id, checked_out_at } = account.borrower;
  return {
    available: false, borrower_client_token: accessor, borrower_entity_id: entity_id, borrower_accessor: accessor, lease_id,
    checked_out_at: new Date(checked_out_at).toISOString(), expires_at: expiresAt && new Date(expiresAt).toISOString(),
  };
}

/** Which accounts a check-in acts on; throws before anything changes when one may not be checked in. */
async function checkInTargets(engine: Engine, setNameValue: string, set: LibrarySet, requested: string[] | undefined, mayCheckIn: (b: Borrower) => boolean): Promise<string[]> {
  if (requested && requested.length > 0) {
    const names: string[] = [];
    for (const [i, wanted] of requested.entries()) {
      // A scan, not a map of the members: a check-in usually names one account, and sets are read per request.
      const lower = wanted.toLowerCase();
      const member = set.service_account_names.find((m) => m.toLowerCase() === lower);
      if (!member) throw new BadRequestError(`invalid value for field "service_account_names": element ${i + 1} is not a member of library set "${setNameValue}"`);
      if (!names.includes(member)) names.push(member);
    }
    for (const name of names) {
      const account = (await readAccount(engine.storage, name))?.state;
      if (account && account.state !== 'available' && !mayCheckIn(account.borrower)) {
        throw new PermissionDeniedError(`"${name}" can't be checked in because it wasn't checked out by the caller`);
      }
    }
    return names;
  }
  const mine: string[] = [];
  for (const name of set.service_account_names) {
    const account = (await readAccount(engine.storage, name))?.state;
    if (account && account.state !== 'available' && mayCheckIn(account.borrower)) mine.push(name);
  }
  if (mine.length > 1) throw new BadRequestError('when several service accounts are checked out, "service_account_names" must name the ones to check in');
  return mine;
}

const checkInFields = {
  service_account_names: field.commaList('Accounts to check in; may be omitted when the caller has exactly one checked out.', { matchKey: canonicalAccount }),
};

export function libraryCheckoutPart(engine: Engine): LdapEnginePart {
  const { storage } = engine;

  const queue = new LibraryQueue(engine, engine.ctx.system.shared ? SHARED_POLL_MS : LOCAL_POLL_MS);
  engine.libraryWaiters = (set) => queue.waiting(set);
  const checkOut = libraryLender(engine, queue);
  const checkInReturned = async (account: string, accept: (a: LentAccount) => boolean): Promise<boolean> => checkInAccount(engine, account, accept, queue);

  const checkIn = (force: boolean) => async (req: BackendRequest<typeof checkInFields>) => {
    const name = setName(req);
    const set = await requireSet(engine, name);
    const mayCheckIn = (b: Borrower) => force || set.disable_check_in_enforcement || isBorrower(b, req.caller);
    const targets = await checkInTargets(engine, name, set, req.data.service_account_names, mayCheckIn);
    const checkIns: string[] = [];
    for (const account of targets) {
      if (await checkInReturned(account, (a) => mayCheckIn(a.borrower))) checkIns.push(account);
    }
    return { data: { check_ins: checkIns } };
  };

  const secret: SecretType = {
    type: CHECKOUT_SECRET_TYPE,
    async renew(lease: LeaseView) {
      const { set_name: set, service_account_name: account } = lease.internal as { set_name: string; service_account_name: string };
      const current = await readLibrarySet(storage, set);
      if (!current) throw new BadRequestError(`library set "${set}" does not exist`);
      const snapshot = await readAccount(storage, account);
      if (snapshot?.state.state !== 'lent' || snapshot.state.borrower.lease_id !== lease.id) {
        throw new BadRequestError(`"${account}" is already checked in; check out again to borrow an account`);
      }
      return { maxTtl: current.max_ttl };
    },
    async revoke(lease: LeaseView) {
      const account = String(lease.internal.service_account_name);
      // Only this loan: after a check-in the account may already be lent to someone else.
      await checkInReturned(account, (a) => a.borrower.lease_id === lease.id);
    },
  };

  return {
    paths: [
      definePath({
        pattern: `library/manage/(?<name>${SET_NAME})/check-in`,
        canonical: { name: lowerName },
        description: 'Forced check-in of a library set\'s accounts, whoever borrowed them (grant to highly privileged callers only).',
        fields: checkInFields,
        operations: { update: checkIn(true) },
      }),
      definePath({
        pattern: `library/(?<name>${SET_NAME})/check-in`,
        canonical: { name: lowerName },
        description: 'Checks accounts in: the password is rotated and the borrower\'s lease ends.',
        fields: checkInFields,
        operations: { update: checkIn(false) },
      }),
      definePath({
        pattern: `library/(?<name>${SET_NAME})/check-out`,
        canonical: { name: lowerName },
        description: 'Checks out an available account of the set; 400 when none is free (with `wait`: when none was lent in that time).',
        fields: {
          ttl: field.duration('Length of the check-out; capped at the set\'s ttl. 0 means unlimited where the set allows.'),
          wait: field.duration('How long to wait in turn for an account when none is free; at most the set\'s max_wait. Default 0: refused at once.', { max: MAX_WAIT_SECONDS }),
        },
        operations: {
          update: async (req) => {
            const name = setName(req);
            const set = await requireSet(engine, name);
            const ttl = checkoutTtl(set, req.has('ttl') ? req.data.ttl : undefined, engine.ctx.system.maxLeaseTtl());
            const borrower: Borrower = {
              entity_id: req.caller?.entityId ?? '', accessor: req.caller?.accessor ?? '', lease_id: req.leaseId, set: name, checked_out_at: engine.clock.now(),
            };
            const secret = (account: string): SecretResponse => ({
              type: CHECKOUT_SECRET_TYPE, ttl, maxTtl: set.max_ttl, renewable: true, internal: { set_name: name, service_account_name: account },
            });
            if (req.data.wait !== undefined && req.data.wait > set.max_wait) {
              throw new BadRequestError(`invalid value for field "wait": ${req.data.wait}s is longer than the set's max_wait (${set.max_wait}s)`);
            }
            const wait = req.data.wait ?? 0;
            // Only a waiting check-out watches its connection (a listener per request otherwise).
            const loan = await checkOut({
              set: name, config: set, borrower, lease: (account) => req.leaseWrite(secret(account)), wait, disconnected: wait > 0 ? req.disconnected() : undefined,
            });
            return { data: { service_account_name: loan.account, password: loan.password }, secret: secret(loan.account) };
          },
        },
      }),
      definePath({
        pattern: `library/(?<name>${SET_NAME})/status`,
        canonical: { name: lowerName },
        description: 'Availability of each account of the set, with the borrower of those checked out.',
        operations: {
          read: async (req) => {
            const name = setName(req);
            const set = await requireSet(engine, name);
            const data: Record<string, unknown> = {};
            for (const account of set.service_account_names) {
              const state = (await readAccount(storage, account))?.state;
              const expiresAt = state && state.state !== 'available' ? await engine.ctx.system.leaseExpireTime(state.borrower.lease_id) : undefined;
              data[account] = statusEntry(state, expiresAt);
            }
            data.waiters = (await queue.view(name)).live.length;
            return { data };
          },
        },
      }),
    ],
    secrets: [secret],
    async initialize() {
      // Storage only, and awaited: everything after it, the resumed check-ins included, finds canonical keys.
      await moveLegacyAccountKeys(engine);
    },
    async lead() {
      // In the background: an unreachable directory must not hold up start-up or a takeover.
      void resumeCheckIns(engine, engine.clock.now(), queue).catch((err: unknown) => engine.ctx.logger.warn({ err: { message: (err as Error).message } }, 'resuming check-ins failed'));
    },
    async cleanup() {
      queue.close();
    },
  };
}
