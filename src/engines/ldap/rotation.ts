/**
 * Password changes that never lose a password.
 *
 * Write-ahead: before the directory is touched, the new password is persisted (encrypted by the
 * barrier) under `wal/<target>`. The directory modify is a replace, so repeating it with the same
 * value is harmless. After the modify, the owner's record and the WAL's removal are written in ONE
 * transaction. Whatever fails or crashes in between, the WAL still holds the password the directory
 * may now have, and the next attempt (a retry, the scheduler, start-up replay) re-applies that same
 * password and then records it. There is at most one WAL per target, so stale duplicates cannot
 * pile up as in Vault (#28). When rotations run is scheduler.ts's business.
 *
 * Across the nodes of a cluster the WAL is also the lock: a fresh WAL is written only where none is (compare-and-set),
 * so a node that finds another node's change under way applies that change's password too (a replace with the same
 * value), and the commit is guarded on the WAL it used, so of two changes of one account exactly one records it.
 *
 * The directory write itself is "possibly applied until proven otherwise" (directory-writes.ts): it is never re-sent
 * after its answer failed to come, it is conditional on the entry as read just before it where the directory supports
 * the Assertion Control, leader work checks its fence right before it, and a write not recorded as applied is followed
 * by a verification bind (and a repair when the directory refuses what the server serves).
 */
import { z } from 'zod';
import { ConflictError, StrongroomError } from '../../core/errors.ts';
import { randomHex } from '../../core/ids.ts';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import type { AccountRef, LdapClient } from '../../providers/ldap/client.ts';
import { ASSERTION_FAILED } from '../../providers/ldap/assertion-control.ts';
import { LdapProviderError, UnknownWriteOutcomeError } from '../../providers/ldap/errors.ts';
import type { DirectoryWriteOutcome } from '../../telemetry/families.ts';
import { refuseBindAccount } from './accounts.ts';
import { generatePassword, passwordSource, type LdapConfig } from './config-store.ts';
import type { LdapEngine } from './engine.ts';
import { FencedWriteError, checkFence, fenceHolds, verifyDirectoryPassword, type RecordedPassword, type VerificationResult } from './directory-writes.ts';

// ---- write-ahead log -------------------------------------------------------------------------------

const walSchema = z.object({
  id: z.string(),
  target: z.string(),
  new_password: z.string(),
  /** passwordSource() of the config that generated it (diagnostics). */
  password_source: z.string(),
  /** Resolved DN the password is (being) written to. */
  dn: z.string().default(''),
  /**
   * What the change is for, as its owner wrote it (a dual-account role: which account, and whether it becomes the
   * active one): whoever finishes the change after a crash finishes that, not what it would begin now. "" = plain.
   */
  intent: z.string().default(''),
  created: z.number(),
});
export type WalEntry = z.infer<typeof walSchema>;

export const WAL_PREFIX = 'wal/';
export const walKey = (target: string): string => `${WAL_PREFIX}${target}`;

export async function readWal(storage: StorageView, target: string): Promise<WalEntry | undefined> {
  return storage.getJson(walKey(target), (raw) => walSchema.parse(raw));
}

function parseWal(raw: Buffer): WalEntry {
  return walSchema.parse(JSON.parse(raw.toString('utf8')));
}

export async function writeWal(storage: StorageView, entry: z.input<typeof walSchema>): Promise<void> {
  await storage.putJson(walKey(entry.target), walSchema.parse(entry));
}

export async function deleteWal(storage: StorageView, target: string): Promise<void> {
  await storage.delete(walKey(target));
}

/** Targets with a pending WAL below `prefix` (e.g. "static-role/"), depth-first. */
export async function listWalTargets(storage: StorageView, prefix = ''): Promise<string[]> {
  return storage.listRecursive(walKey(prefix)).then((keys) => keys.map((k) => k.slice(WAL_PREFIX.length)));
}

// ---- the protected change --------------------------------------------------------------------------

const NO_SUCH_OBJECT = 32;

/** constraintViolation, unwillingToPerform: the directory rejected the password value. */
const REFUSED_VALUE_CODES = new Set([19, 53]);

export interface PasswordChangeRequest {
  /**
   * What is being rotated, storage-key safe and unique per account: `static-role/<name>`,
   * `library/<set>/<account>`, `root`. The WAL lives at `wal/<target>`.
   */
  target: string;
  /** The entry to change: by DN when known (never re-resolved as a username), else by username under userdn. */
  account: AccountRef;
  /**
   * The DN `account.username` was found at before (stored with the owner's record), so no search is needed.
   * When the directory answers noSuchObject there (the entry was renamed or moved), the username is searched
   * once and the change is made at the DN found. Ignored when `account.dn` is set.
   */
  knownDn?: string;
  /**
   * Runs with a DN that a username search just produced, before that entry is changed (e.g. to claim it in
   * the managed-account registry); throwing stops the change with the directory untouched.
   */
  found?(dn: string): Promise<void>;
  /** The account's own password policy (a static role's), used instead of the config's for a fresh password. */
  passwordPolicy?: string;
  /** Recorded in a fresh WAL (WalEntry.intent); `commit` gets the intent of the WAL it finishes, which may be an earlier attempt's. */
  intent?: string;
  /** Writes that land atomically with a freshly written WAL (e.g. the record of a role being created). */
  prepare?: StorageOp[];
  /**
   * Guards of the `prepare` transaction (e.g. a check-in's claim on the account record). When one no longer
   * holds, nothing is written, the directory is not touched, and the change returns undefined.
   */
  prepareConditions?: StorageCondition[];
  /**
   * Writes that record the new password, applied in one transaction with the WAL's removal. Runs after
   * the directory accepted the password; `dn` is the entry that was changed, `intent` the finished WAL's.
   */
  commit(password: string, dn: string, intent: string): StorageOp[] | Promise<StorageOp[]>;
  /**
   * Guards of the commit transaction: when one no longer holds (another server recorded the owner's
   * state meanwhile), nothing is recorded, the WAL stays, and a ConflictError is thrown.
   */
  commitConditions?: StorageCondition[];
  /** Writes of other stores that land in the commit transaction (e.g. the end of a borrower's lease), read just before it. */
  commitAlongside?(): Promise<PreparedWrite[]>;
  /**
   * The commit carried writes of another request that may be why its guards failed (a library check-in lending the
   * account to a waiting check-out in the same commit, whose lease has guards of its own): asked once after a failed
   * commit; true builds the commit again (`commit` and `commitAlongside` are called anew, and must leave them out).
   */
  commitAgain?(): boolean;
  /** Only rotate-root's change is of the bind account; every other change refuses to touch it (refuseBindAccount). */
  rotatesBindAccount?: boolean;
  /**
   * The leader's fence (SystemView.fence) for a change the leader's own schedule started: its WAL and its record land
   * only while this node leads. A change that finds its fence gone before its WAL returns undefined; one that finds it
   * gone right before its directory write, or at its record, throws FencedWriteError.
   */
  fence?: PreparedWrite;
  /**
   * The password the server serves for the account, read fresh (see directory-writes.ts): verified by a bind after a
   * write that was not recorded as applied, and written again when the directory refuses it. None: no verification.
   */
  recorded?(): Promise<RecordedPassword | undefined>;
}

export interface PasswordChangeResult {
  password: string;
  dn: string;
  /** The password came from an earlier, unfinished attempt. */
  reusedWal: boolean;
}

/** The directory has the new password but recording it failed; the WAL keeps it for the next attempt. */
export class UnrecordedPasswordError extends StrongroomError {
  constructor(cause: unknown) {
    super(500, `the directory accepted the new password but storing it failed (${(cause as Error)?.message ?? 'unknown error'}); ` +
      'it is kept in the write-ahead log and the next attempt finishes the rotation with it');
  }
}

/**
 * Changes one account's password under write-ahead protection (see the file comment). Callers hold
 * whatever lock protects their own record; this takes the per-target lock so two changes of one
 * account never interleave. Used by static-role rotation and library check-in. Undefined only when
 * `prepareConditions` did not hold.
 */
export async function changePasswordWithWal(engine: Pick<LdapEngine, 'storage' | 'connections' | 'locks' | 'clock' | 'ctx'>, req: PasswordChangeRequest): Promise<PasswordChangeResult | undefined> {
  return engine.locks.run(`wal/${req.target}`, async () => {
    const { storage } = engine;
    const { config, client, bindAccount } = await engine.connections.get();
    // Checked at every change, not only where roles and sets are written: an entry found by a new search, a
    // role created before the config, or a bind account changed since must not make a rotation of it.
    const bind = req.rotatesBindAccount ? undefined : await bindAccount();
    const refuseBind = (dn: string): void => {
      if (bind) refuseBindAccount(bind, { dn }, `dn: "${dn}"`);
    };
    // An unfinished attempt's password is reused even when the password policy changed since: the
    // directory may already hold it, and replacing the WAL before a new password is recorded could
    // forget the one the directory has. (Vault drops it; the next rotation applies the new policy.)
    const fence = req.fence ? [req.fence] : [];
    let walRaw = await storage.get(walKey(req.target));
    let wal = walRaw && parseWal(walRaw);
    let reusedWal = wal !== undefined;
    const expectedDn = req.account.dn || req.knownDn || wal?.dn;
    if (expectedDn) refuseBind(expectedDn);
    const conditions = req.prepareConditions ?? [];
    if (!wal) {
      // A role's own policy replaces the config's policy and its length alike (validateConfig lets only one be set).
      const fresh = await freshWal(engine, req.passwordPolicy ? { ...config, password_policy: req.passwordPolicy, length: 0 } : config, req.target, req.intent ?? '');
      const freshRaw = jsonBytes(fresh);
      if (await storage.transaction([...(req.prepare ?? []), { type: 'put', key: walKey(req.target), value: freshRaw }], [...conditions, { key: walKey(req.target), expected: undefined }], fence)) {
        [wal, walRaw] = [fresh, freshRaw];
      } else {
        // Either a guard of the caller's failed, or another node began a change of this account meanwhile: then its
        // password is the one the directory may get, so this change applies and records that one.
        walRaw = await storage.get(walKey(req.target));
        wal = walRaw && parseWal(walRaw);
        if (!wal) return undefined;
        reusedWal = true;
        if (req.prepare?.length && !(await storage.transaction(req.prepare, conditions, fence))) return undefined;
      }
    } else if (req.prepare?.length) {
      if (!(await storage.transaction(req.prepare, conditions, fence))) return undefined;
    }

    const verify = async (outcome: DirectoryWriteOutcome): Promise<VerificationResult> => {
      if (!req.recorded) return 'nothing';
      return verifyDirectoryPassword(engine, { target: req.target, recorded: req.recorded, pending: async () => (await readWal(storage, req.target))?.new_password }, outcome);
    };
    /** The entry last written to, for a write whose answer never came. */
    let sentTo: string | undefined;
    const write = async (target: string, password: string): Promise<void> => {
      // The entry's state is read first: the fence check then sits right before the write, and anything that changes
      // the entry after the read (a newer rotation, another node's) makes a late arrival of this write refused.
      const guard = await client.writeGuard(target);
      await checkFence(engine, req.target, req.fence);
      sentTo = target;
      await client.setPassword(target, password, guard);
    };
    let dn: string;
    try {
      dn = await applyPassword(client, req, wal, refuseBind, write);
    } catch (err) {
      // The directory refused the value itself (constraint violation, unwilling to perform: quality or
      // history rules) for a password already tried once, so it does not hold it and never will: the
      // next attempt generates a new one (Vault #125). Any other failure leaves the WAL in place.
      if (reusedWal && err instanceof LdapProviderError && REFUSED_VALUE_CODES.has(err.ldapCode ?? -1)) await deleteWal(storage, req.target);
      const outcome = err instanceof UnknownWriteOutcomeError ? 'unknown' : err instanceof LdapProviderError && err.ldapCode === ASSERTION_FAILED ? 'refused' : undefined;
      // When a bind proves the directory holds this change's password (its answer was lost, or another node applied the
      // same WAL first), it is recorded as applied; the commit's guard on the WAL decides who records it.
      if (!outcome || !sentTo || (await verify(outcome)) !== 'pending') throw err;
      dn = sentTo;
    }

    const record = async (): Promise<boolean> => {
      const ops = await req.commit(wal.new_password, dn, wal.intent);
      try {
        const alongside = (await req.commitAlongside?.()) ?? [];
        const guards = [...(req.commitConditions ?? []), { key: walKey(req.target), expected: walRaw }];
        return await storage.transaction([...ops, { type: 'delete', key: walKey(req.target) }], guards, [...alongside, ...fence]);
      } catch (err) {
        await verify('unrecorded');
        throw new UnrecordedPasswordError(err);
      }
    };
    // One more time when the caller says its commit can be made without what failed (commitAgain).
    let recorded = await record();
    if (!recorded && req.commitAgain?.()) recorded = await record();
    if (!recorded) {
      if (req.fence && !(await fenceHolds(engine, req.fence))) {
        await verify('fenced');
        throw new FencedWriteError(req.target, 'after');
      }
      await verify('unrecorded');
      throw new ConflictError(`the record of "${req.target}" changed while its password was being changed; the write-ahead log keeps the new password`);
    }
    return { password: wal.new_password, dn, reusedWal };
  });
}

/** Writes the WAL's password to the account; returns the DN changed. `refuse` throws for a DN found by search that may not change. */
async function applyPassword(client: LdapClient, req: PasswordChangeRequest, wal: WalEntry, refuse: (dn: string) => void,
  write: (dn: string, password: string) => Promise<void>): Promise<string> {
  if (req.account.dn) {
    await write(req.account.dn, wal.new_password);
    return req.account.dn;
  }
  const known = req.knownDn || wal.dn;
  if (known) {
    try {
      await write(known, wal.new_password);
      return known;
    } catch (err) {
      // Only a vanished entry is worth a search; anything else is the answer for this attempt.
      if (!(err instanceof LdapProviderError && err.ldapCode === NO_SUCH_OBJECT)) throw err;
    }
  }
  const { dn } = await client.resolveAccount(req.account);
  refuse(dn);
  await req.found?.(dn);
  await write(dn, wal.new_password);
  return dn;
}

async function freshWal(engine: Pick<LdapEngine, 'ctx' | 'clock'>, config: LdapConfig, target: string, intent: string): Promise<WalEntry> {
  return {
    id: randomHex(8),
    target,
    new_password: await generatePassword(engine, config),
    password_source: passwordSource(config),
    dn: '',
    intent,
    created: engine.clock.now(),
  };
}
