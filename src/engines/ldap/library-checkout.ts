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
import type { LdapEngine, LdapEnginePart } from './config.ts';
import {
  ACCOUNT_PREFIX, SET_NAME, accountSegment, canonicalAccount, listAccountNames, putAccountOp, readAccount, readLibrarySet, returningClaim, swapAccount, unchangedAccount,
  type AccountState, type Borrower, type LentAccount, type LibrarySet,
} from './library-store.ts';
import { clearDriftOp } from './drift-marks.ts';
import { recordedAccountPassword } from './library-store.ts';
import { changePasswordWithWal, walKey } from './rotation.ts';
import { LDAP_LIBRARY_REFUSED } from '../../telemetry/families.ts';

export const CHECKOUT_SECRET_TYPE = 'ldap_library_checkout';

type Engine = Pick<LdapEngine, 'ctx' | 'storage' | 'clock' | 'connections' | 'locks'>;

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
export async function checkInAccount(engine: Engine, name: string, accept: (account: LentAccount) => boolean): Promise<boolean> {
  // In-process serialisation of one account's check-ins; the claim below is what guards across servers.
  return engine.locks.run(ACCOUNT_PREFIX + accountSegment(name), async () => {
    const snapshot = await readAccount(engine.storage, name);
    if (!snapshot || snapshot.state.state === 'available' || !accept(snapshot.state)) return false;
    const account = snapshot.state;
    // A lent account is claimed (`lent` → `returning`) in the same transaction that stores the new password's
    // WAL: one commit instead of two, and a crash leaves either neither or both. A `returning` one is resumed.
    const claim = account.state === 'lent' ? returningClaim(account) : undefined;
    const changed = await changePasswordWithWal(engine, {
      target: accountWalTarget(name),
      account: { dn: account.dn },
      prepare: claim && [claim.op],
      prepareConditions: claim && [unchangedAccount(name, snapshot)],
      // A password the server just set is the directory's: a drift mark from before the loan is stale.
      commit: (password, dn) => [putAccountOp({ state: 'available', name, dn, password }), clearDriftOp(accountWalTarget(name))],
      // Only our claim becomes available: never overwrite a state another server wrote.
      commitConditions: [unchangedAccount(name, claim?.claimed ?? snapshot)],
      // The borrower's lease ends in the same transaction, so no lease outlives its loan.
      commitAlongside: async () => {
        const end = await engine.ctx.system.leaseEnd(account.borrower.lease_id);
        return [...(end ? [end] : []), engine.ctx.system.event('ldap/library-check-in', { modified: 'true', operation: 'update', path: `library/${account.borrower.set}/check-in`, name: account.borrower.set, service_account: name })];
      },
      recorded: () => recordedAccountPassword(engine.storage, name),
    });
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
async function resumeCheckIns(engine: Engine, startedAt: number): Promise<void> {
  for (const name of await listAccountNames(engine.storage)) {
    const state = (await readAccount(engine.storage, name))?.state;
    if (state?.state === 'lent' && state.borrower.checked_out_at < startedAt && !(await engine.ctx.system.leaseExists(state.borrower.lease_id))) {
      engine.ctx.logger.warn({ account: name }, 'taking back a library account lent under a lease that was never stored');
    } else if (state?.state !== 'returning') continue;
    const leaseId = state.borrower.lease_id;
    await checkInAccount(engine, name, (account) => account.state === 'returning' || account.borrower.lease_id === leaseId).catch((err: unknown) => {
      engine.ctx.logger.warn({ err: { message: (err as Error).message }, account: name }, 'resuming an interrupted check-in failed; the lease or the next check-in retries it');
    });
  }
}

async function requireSet(engine: Engine, name: string): Promise<LibrarySet> {
  const set = await readLibrarySet(engine.storage, name);
  if (!set) throw new NotFoundError(`library set "${name}" does not exist`);
  return set;
}

function statusEntry(account: AccountState | undefined): Record<string, unknown> {
  if (account?.state === 'available') return { available: true };
  if (!account) return { available: false };
  // The token is never stored; its accessor identifies it (auth/token/lookup-accessor, revoke-accessor).
  return { available: false, borrower_client_token: account.borrower.accessor, borrower_entity_id: account.borrower.entity_id };
}

/** Which accounts a check-in acts on; throws before anything changes when one may not be checked in. */
async function checkInTargets(engine: Engine, setNameValue: string, set: LibrarySet, requested: string[] | undefined, mayCheckIn: (b: Borrower) => boolean): Promise<string[]> {
  if (requested && requested.length > 0) {
    const names: string[] = [];
    for (const wanted of requested) {
      // A scan, not a map of the members: a check-in usually names one account, and sets are read per request.
      const lower = wanted.toLowerCase();
      const member = set.service_account_names.find((m) => m.toLowerCase() === lower);
      if (!member) throw new BadRequestError(`invalid value for field "service_account_names": "${wanted}" is not a member of library set "${setNameValue}"`);
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

  /** Check-outs in progress on this server, by account: the password lent, or undefined when it was not free. */
  const lending = new Map<string, Promise<string | undefined>>();
  /**
   * Accounts this server checked in and has not lent since. Check-outs try them first: on a busy set, looking
   * for the few free accounts record by record cost a storage read per lent account on every check-out. Only
   * a hint: the compare-and-set decides, and the other members are still tried after them (accounts freed
   * by another server, or before a restart, are found that way).
   */
  const returned = new Set<string>();
  /** Lends `account` if it is available, storing the check-out's lease (`lease`) in the same transaction. */
  const lend = (account: string, borrower: Borrower, lease: () => PreparedWrite): Promise<string | undefined> => {
    const attempt = (async () => {
      // A failed swap means another check-out (or a set update) changed the record: look again.
      for (let snapshot = await readAccount(storage, account); snapshot?.state.state === 'available'; snapshot = await readAccount(storage, account)) {
        const { password, dn } = snapshot.state;
        const event = engine.ctx.system.event('ldap/library-check-out', { modified: 'true', operation: 'update', path: `library/${borrower.set}/check-out`, name: borrower.set, service_account: account });
        if (await swapAccount(storage, snapshot, { state: 'lent', name: account, dn, password, borrower }, [lease(), event])) return password;
      }
      return undefined;
    })().finally(() => {
      lending.delete(account);
      // Lent now, by this check-out or by someone else.
      returned.delete(account);
    });
    lending.set(account, attempt);
    return attempt;
  };
  const checkInReturned = async (account: string, accept: (a: LentAccount) => boolean): Promise<boolean> => {
    const done = await checkInAccount(engine, account, accept);
    if (done) returned.add(account);
    return done;
  };

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
        description: 'Checks out an available account of the set; 400 when none is free.',
        fields: { ttl: field.duration('Length of the check-out; capped at the set\'s ttl. 0 means unlimited where the set allows.') },
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
            const lendTo = (account: string) => lend(account, borrower, () => req.leaseWrite(secret(account)));
            const lent = (account: string, password: string) => ({ data: { service_account_name: account, password }, secret: secret(account) });
            // Accounts another check-out on this server is claiming are passed over at first: queueing behind
            // its commit only to lose made concurrent callers herd onto the same free account one commit at a time.
            const busy: string[] = [];
            const members = set.service_account_names;
            const candidates = returned.size === 0 ? members : [...members.filter((a) => returned.has(a)), ...members.filter((a) => !returned.has(a))];
            for (const account of candidates) {
              if (lending.has(account)) {
                busy.push(account);
                continue;
              }
              const password = await lendTo(account);
              if (password !== undefined) return lent(account, password);
            }
            // Their claim may have failed (another server, a set update): then they are free for us.
            for (const account of busy) {
              while (lending.has(account)) await lending.get(account)!.catch(() => undefined);
              const password = await lendTo(account);
              if (password !== undefined) return lent(account, password);
            }
            engine.ctx.metrics.counter(LDAP_LIBRARY_REFUSED).inc({ set: name });
            throw new BadRequestError('No service accounts available for check-out.');
          },
        },
      }),
      definePath({
        pattern: `library/(?<name>${SET_NAME})/status`,
        canonical: { name: lowerName },
        description: 'Availability of each account of the set, with the borrower of those checked out.',
        operations: {
          read: async (req) => {
            const set = await requireSet(engine, setName(req));
            const data: Record<string, unknown> = {};
            for (const account of set.service_account_names) data[account] = statusEntry((await readAccount(storage, account))?.state);
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
      void resumeCheckIns(engine, engine.clock.now()).catch((err: unknown) => engine.ctx.logger.warn({ err: { message: (err as Error).message } }, 'resuming check-ins failed'));
    },
  };
}
