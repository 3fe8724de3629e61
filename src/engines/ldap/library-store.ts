/**
 * Typed storage of library sets and of their accounts' check-out state.
 *
 * `library/<set>`            the set: members, TTLs, enforcement flag.
 * `library-account/<acct>`   one record per member: its DN, current password, and where it is in the
 *                            check-out cycle. The record is the unit of atomicity: every transition is a
 *                            compare-and-set on its exact bytes, so two check-outs (on one server or on
 *                            several sharing a database) can never both move the same account out of
 *                            "available".
 */
import { z } from 'zod';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import { setBounded } from '../../core/bounded-map.ts';
import { jsonBytes, type StorageView } from '../../core/storage/view.ts';

/** Same grammar as Vault's set names: word characters at both ends, `-` `.` `/` inside. */
export const SET_NAME = String.raw`\w(?:[\w./-]*\w)?`;

const librarySetSchema = z.object({
  service_account_names: z.array(z.string()).min(1),
  /** Seconds; 0 = unlimited (as long as the mount allows). */
  ttl: z.number().int().nonnegative(),
  max_ttl: z.number().int().nonnegative(),
  disable_check_in_enforcement: z.boolean(),
  /** Seconds a check-out may `wait` for an account (sets stored before waiting existed get the default). */
  max_wait: z.number().int().min(0).max(600).default(60),
  /** Accounts of the set one entity (or, without one, one token) may hold at once; 0 = no limit. */
  max_checkouts_per_entity: z.number().int().nonnegative().default(0),
});
export type LibrarySet = z.infer<typeof librarySetSchema>;

const borrowerSchema = z.object({
  /** Empty when the borrowing token has no entity (e.g. the root token). */
  entity_id: z.string(),
  /** The borrowing token's accessor; the token itself is never stored. */
  accessor: z.string(),
  lease_id: z.string(),
  set: z.string(),
  checked_out_at: z.number(),
});
export type Borrower = z.infer<typeof borrowerSchema>;

/**
 * `available` → (check-out) → `lent` → (check-in, lease end) → `returning` → (password changed) → `available`.
 * `returning` is the claim that makes exactly one actor rotate and record the password; it keeps the
 * borrower so an interrupted check-in can be finished by whoever could have started it.
 */
const accountStateSchema = z.discriminatedUnion('state', [
  z.object({
    state: z.literal('available'), name: z.string(), dn: z.string(), password: z.string(),
    /** When it was last checked in (ms): check-outs take the least recently returned account first. */
    returned_at: z.number().optional(),
    /** The waiting check-out (library-queue.ts) it is handed to; only that one may take it while it waits. */
    reserved_for: z.string().optional(),
  }),
  z.object({ state: z.literal('lent'), name: z.string(), dn: z.string(), password: z.string(), borrower: borrowerSchema }),
  z.object({ state: z.literal('returning'), name: z.string(), dn: z.string(), password: z.string(), borrower: borrowerSchema }),
]);
export type AccountState = z.infer<typeof accountStateSchema>;
export type LentAccount = Extract<AccountState, { state: 'lent' | 'returning' }>;

/** A record together with the bytes it was read from, which a compare-and-set must still find. */
export interface AccountSnapshot {
  state: AccountState;
  raw: Buffer;
}

const setKey = (name: string) => `library/${name}`;
export const ACCOUNT_PREFIX = 'library-account/';

/**
 * One account, whatever the case a set spells it in: directories match names case-insensitively and sets
 * compare members so, and the registry claims the lower-cased name. Every key derived from an account name
 * (its record, its WAL, its lock) goes through this, so a case-only rename finds what the old spelling stored.
 */
export const canonicalAccount = (name: string): string => name.toLowerCase();
/** An account's key segment: canonical, and encoded because names may hold any character (`/` included). */
export const accountSegment = (name: string): string => encodeURIComponent(canonicalAccount(name));
const accountKey = (name: string) => ACCOUNT_PREFIX + accountSegment(name);

/** The password the server holds for an account (its borrower's while lent) and its entry, for directory-writes.ts. */
export async function recordedAccountPassword(storage: StorageView, name: string): Promise<{ dn: string; password: string } | undefined> {
  const state = (await readAccount(storage, name))?.state;
  return state?.password && state.dn ? { dn: state.dn, password: state.password } : undefined;
}

export async function readLibrarySet(storage: StorageView, name: string): Promise<LibrarySet | undefined> {
  return storage.getJson(setKey(name), (raw) => librarySetSchema.parse(raw));
}

/** Direct children below a folder; sub-folders end in "/". */
export async function listLibrarySets(storage: StorageView, folder: string): Promise<string[]> {
  return storage.list(setKey(folder));
}

export async function allLibrarySetNames(storage: StorageView): Promise<string[]> {
  return (await storage.listRecursive('library/')).map((key) => key.slice('library/'.length));
}

export const putLibrarySetOp = (name: string, set: LibrarySet): StorageOp => ({ type: 'put', key: setKey(name), value: jsonBytes(librarySetSchema.parse(set)) });
export const deleteLibrarySetOp = (name: string): StorageOp => ({ type: 'delete', key: setKey(name) });

/**
 * The record last parsed for each stored account key (the mount's prefix included), with its text: a set's few
 * records are read many times between changes (every check-out reads each member; a refused one, in a retry loop,
 * all of them again), and parsing and checking one cost more than the read. One entry a key, so a record's text
 * (its password) is let go as soon as another replaces it. Frozen, as every reader shares them.
 */
const parsedAccounts = new Map<string, { text: string; state: AccountState }>();
const PARSED_ACCOUNTS_LIMIT = 1024;

export async function readAccount(storage: StorageView, name: string): Promise<AccountSnapshot | undefined> {
  const raw = await storage.get(accountKey(name));
  if (raw === undefined) return undefined;
  const text = raw.toString('utf8');
  const key = storage.prefix + accountKey(name);
  let parsed = parsedAccounts.get(key);
  if (parsed?.text !== text) {
    parsed = { text, state: deepFreeze(accountStateSchema.parse(JSON.parse(text))) };
    setBounded(parsedAccounts, PARSED_ACCOUNTS_LIMIT, key, parsed);
  }
  return { state: parsed.state, raw };
}

function deepFreeze<T extends object>(value: T): T {
  for (const field of Object.values(value)) if (field !== null && typeof field === 'object') deepFreeze(field as object);
  return Object.freeze(value);
}

export async function listAccountNames(storage: StorageView): Promise<string[]> {
  return (await storage.list(ACCOUNT_PREFIX)).map((key) => decodeURIComponent(key));
}

export const putAccountOp = (state: AccountState): StorageOp => ({ type: 'put', key: accountKey(state.name), value: jsonBytes(accountStateSchema.parse(state)) });
export const deleteAccountOp = (name: string): StorageOp => ({ type: 'delete', key: accountKey(name) });
/** Guard: the account record still holds exactly what `snapshot` saw. */
export const unchangedAccount = (name: string, snapshot: AccountSnapshot): StorageCondition => ({ key: accountKey(name), expected: snapshot.raw });

/** An account's record as a write, and the snapshot it leaves (which later writes can guard on without reading it back). */
export function accountRecord(state: AccountState): { op: StorageOp; snapshot: AccountSnapshot } {
  const value = jsonBytes(accountStateSchema.parse(state));
  return { op: { type: 'put', key: accountKey(state.name), value }, snapshot: { state, raw: value } };
}

/**
 * The check-in claim of a lent account: the write that moves it to `returning` (to be guarded on the snapshot
 * it was read in) and the snapshot it leaves, which later writes can guard on without reading it back.
 */
export function returningClaim(account: LentAccount): { op: StorageOp; claimed: AccountSnapshot } {
  const state: AccountState = { ...account, state: 'returning' };
  const value = jsonBytes(accountStateSchema.parse(state));
  return { op: { type: 'put', key: accountKey(state.name), value }, claimed: { state, raw: value } };
}
