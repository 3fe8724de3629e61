/**
 * The managed-account registry: one directory account is managed by at most one static role or
 * library set. Claims live in storage (not in memory), so they survive restarts and are shared by
 * servers on one database, and they are taken with compare-and-set, so two concurrent creates of the
 * same account cannot both win.
 *
 * An account is identified by every name it is known under: its username (case-insensitively, as
 * directories match the naming attribute) and, when known, its normalised DN. A role addressed by DN
 * therefore collides with a set that lists the same entry by username once both were resolved.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { BadRequestError, ConflictError } from '../../core/errors.ts';
import type { StorageCondition, StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type StorageView } from '../../core/storage/view.ts';
import { normalizeDn } from '../../providers/ldap/dn.ts';

export type AccountOwnerKind = 'static-role' | 'library-set';

export interface AccountOwner {
  kind: AccountOwnerKind;
  /** Role or set name. */
  name: string;
}

export interface AccountIdentity {
  username?: string;
  dn?: string;
}

const claimSchema = z.object({ kind: z.enum(['static-role', 'library-set']), name: z.string(), label: z.string() });
type Claim = z.infer<typeof claimSchema>;

const PREFIX = 'managed-account/';

/** An account name as directories match it (the naming attribute, without case): the registry's and the ACL's key. */
export const usernameKey = (username: string): string => username.toLowerCase();

/** A DN as the directory compares it (normalised; lower-cased when it does not parse): the registry's and the ACL's key. */
export function dnKey(dn: string): string {
  try {
    return normalizeDn(dn);
  } catch {
    return dn.toLowerCase();
  }
}

/** The registry keys of an account: `user:<lower-cased username>` and `dn:<normalised DN>`. */
export function accountKeys(account: AccountIdentity): string[] {
  const keys: string[] = [];
  if (account.username) keys.push(`user:${usernameKey(account.username)}`);
  if (account.dn) keys.push(`dn:${dnKey(account.dn)}`);
  return keys;
}

function storageKey(key: string): string {
  // Usernames and DNs may hold any character; a hash keeps the storage key plain.
  return PREFIX + createHash('sha256').update(key).digest('hex');
}

export function describeOwner(owner: AccountOwner): string {
  return `${owner.kind === 'static-role' ? 'static role' : 'library set'} "${owner.name}"`;
}

/** True when two identities name the same account: one username (case-insensitively) or one entry by DN. */
export function sameAccount(a: AccountIdentity, b: AccountIdentity): boolean {
  const keys = accountKeys(a);
  return accountKeys(b).some((key) => keys.includes(key));
}

/**
 * The engine never manages itself: its bind account belongs to no static role or library set, and no dynamic
 * role's LDIF may touch it. Its password opens the directory (whoever may read a role's static-cred would get
 * it), and only rotate-root may change it (a change from anywhere else locks the engine out). `bind` is the
 * account by every name known for it (LdapConnection.bindAccount); `subject` starts the 400: the field and what it was given.
 */
export function refuseBindAccount(bind: AccountIdentity, target: AccountIdentity, subject: string): void {
  if (sameAccount(bind, target)) throw new BadRequestError(`${subject} is the account this secrets engine binds as; only rotate-root changes its password`);
}

export class ManagedAccounts {
  readonly #storage: StorageView;

  constructor(storage: StorageView) {
    this.#storage = storage;
  }

  /** Who manages the account, if anyone. */
  async ownerOf(account: AccountIdentity): Promise<AccountOwner | undefined> {
    for (const key of accountKeys(account)) {
      const claim = await this.#read(key);
      if (claim) return { kind: claim.kind, name: claim.name };
    }
    return undefined;
  }

  /**
   * Claims every identity of every account for `owner`, all or nothing. Identities the owner already
   * holds are fine (re-claiming is idempotent); one held by anyone else is a 400 naming the account.
   */
  async claim(owner: AccountOwner, accounts: AccountIdentity[]): Promise<void> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const ops: StorageOp[] = [];
      const conditions: StorageCondition[] = [];
      for (const account of accounts) {
        const label = account.username || account.dn || '';
        for (const key of accountKeys(account)) {
          const raw = await this.#storage.get(storageKey(key));
          const current = raw ? claimSchema.parse(JSON.parse(raw.toString('utf8'))) : undefined;
          if (current && (current.kind !== owner.kind || current.name !== owner.name)) {
            throw new BadRequestError(`"${label}" is already managed by the secrets engine (${describeOwner(current)})`);
          }
          if (current) continue;
          const claim: Claim = { kind: owner.kind, name: owner.name, label };
          ops.push({ type: 'put', key: storageKey(key), value: jsonBytes(claim) });
          conditions.push({ key: storageKey(key), expected: undefined });
        }
      }
      if (ops.length === 0 || (await this.#storage.transaction(ops, conditions))) return;
      // Someone claimed one of the keys between our read and the write: look again (and name them).
    }
    throw new ConflictError('the managed-account registry kept changing; retry the request');
  }

  /** Releases the identities `owner` holds for these accounts; claims of other owners are left alone. */
  async release(owner: AccountOwner, accounts: AccountIdentity[]): Promise<void> {
    for (const account of accounts) {
      for (const key of accountKeys(account)) {
        const claim = await this.#read(key);
        if (claim && claim.kind === owner.kind && claim.name === owner.name) await this.#storage.delete(storageKey(key));
      }
    }
  }

  async #read(key: string): Promise<Claim | undefined> {
    return this.#storage.getJson(storageKey(key), (raw) => claimSchema.parse(raw));
  }
}
