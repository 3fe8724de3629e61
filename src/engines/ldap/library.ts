/**
 * `library/:set_name` CRUD and LIST. Adding a member sets its password (so the service is its only
 * holder); removing a member, or deleting the set, is refused while the account is checked out.
 */
import { BadRequestError, ConflictError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, lowerName } from '../../core/framework.ts';
import { refuseBindAccount, type AccountIdentity, type AccountOwner } from './accounts.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { clearDriftOp } from './drift-marks.ts';
import { accountWalTarget, enrollAccount, libraryCheckoutPart, setName } from './library-checkout.ts';
import { MAX_WAIT_SECONDS } from './library-queue.ts';
import {
  SET_NAME, allLibrarySetNames, canonicalAccount, deleteAccountOp, deleteLibrarySetOp, listLibrarySets, putLibrarySetOp, readAccount,
  readLibrarySet, unchangedAccount, type AccountSnapshot, type LibrarySet,
} from './library-store.ts';

const DAY = 24 * 3600;
const DEFAULT_MAX_WAIT_SECONDS = 60;

const fields = {
  service_account_names: field.commaList('Directory accounts lent by this set (a list or a comma-separated string). Each must exist and belong to no other set or static role.', { matchKey: canonicalAccount }),
  ttl: field.duration('Length of one check-out before automatic check-in. Default 24h; 0 means unlimited.'),
  max_ttl: field.duration('Longest a check-out may last with renewals. Default 24h; 0 means unlimited.'),
  disable_check_in_enforcement: field.bool('When true, any caller may check an account in, not only the borrowing entity or token.'),
  max_wait: field.duration('Longest `wait` a check-out may ask for while no account is free. Default 60s, at most 10m; 0 allows no waiting.', { max: MAX_WAIT_SECONDS }),
  max_checkouts_per_entity: field.int('Accounts of the set one entity (or one token, without an entity) may hold at once. Default 0: no limit.', { min: 0, max: 100_000 }),
};
type SetFields = typeof fields;

/** Only the keys the client sent change; a new set starts from the defaults. */
export function mergeLibrarySet(existing: LibrarySet | undefined, req: Pick<BackendRequest<SetFields>, 'data' | 'has'>): LibrarySet {
  const set: LibrarySet = existing ? { ...existing } : {
    service_account_names: [], ttl: DAY, max_ttl: DAY, disable_check_in_enforcement: false, max_wait: DEFAULT_MAX_WAIT_SECONDS, max_checkouts_per_entity: 0,
  };
  if (req.has('service_account_names')) set.service_account_names = req.data.service_account_names ?? [];
  if (req.has('ttl')) set.ttl = req.data.ttl ?? 0;
  if (req.has('max_ttl')) set.max_ttl = req.data.max_ttl ?? 0;
  if (req.has('disable_check_in_enforcement')) set.disable_check_in_enforcement = req.data.disable_check_in_enforcement ?? false;
  if (req.has('max_wait')) set.max_wait = req.data.max_wait ?? DEFAULT_MAX_WAIT_SECONDS;
  if (req.has('max_checkouts_per_entity')) set.max_checkouts_per_entity = req.data.max_checkouts_per_entity ?? 0;
  return set;
}

/** Rules of a whole set; the message names the field. */
export function validateLibrarySet(set: LibrarySet): void {
  const names = set.service_account_names;
  if (names.length === 0) throw new BadRequestError('invalid value for field "service_account_names": at least one service account is required');
  const seen = new Set<string>();
  for (const [i, name] of names.entries()) {
    if (name === '') throw new BadRequestError('invalid value for field "service_account_names": a service account name must not be empty');
    // Directories match names case-insensitively, so "Svc" and "svc" are the same account.
    if (seen.has(name.toLowerCase())) throw new BadRequestError(`invalid value for field "service_account_names": element ${i + 1} repeats an earlier one`);
    seen.add(name.toLowerCase());
  }
  if (set.max_ttl > 0 && set.ttl > set.max_ttl) {
    throw new BadRequestError(`invalid value for field "max_ttl": ${set.max_ttl}s is shorter than ttl (${set.ttl}s)`);
  }
}

export function libraryPart(engine: LdapEngine): LdapEnginePart {
  const { storage, locks, accounts } = engine;
  const owner = (name: string): AccountOwner => ({ kind: 'library-set', name });
  const lockKey = (name: string) => `library/${name}`;
  // Members' passwords are changed through the config's bind account; the config must outlive the sets.
  engine.configDependents.push({ what: 'library sets', names: () => allLibrarySetNames(storage) });
  const checkouts = libraryCheckoutPart(engine);

  /** Snapshots of members that must be available (to be removed or deleted); 400 naming one that is not. */
  const availableSnapshots = async (setNameValue: string, names: string[]): Promise<Array<[string, AccountSnapshot]>> => {
    const out: Array<[string, AccountSnapshot]> = [];
    for (const name of names) {
      const snapshot = await readAccount(storage, name);
      if (!snapshot) continue;
      if (snapshot.state.state !== 'available') {
        throw new BadRequestError(`"${name}" is checked out; check it in (library/manage/${setNameValue}/check-in) before removing it from the set`);
      }
      out.push([name, snapshot]);
    }
    return out;
  };

  const identities = (snapshots: Array<[string, AccountSnapshot]>): AccountIdentity[] => snapshots.map(([name, s]) => ({ username: name, dn: s.state.dn }));

  const write = (req: BackendRequest<SetFields>) =>
    locks.run(lockKey(setName(req)), async () => {
      const name = setName(req);
      const existing = await readLibrarySet(storage, name);
      if (!existing && !req.has('service_account_names')) throw new BadRequestError('missing required field "service_account_names"');
      const next = mergeLibrarySet(existing, req);
      validateLibrarySet(next);
      const before = new Map((existing?.service_account_names ?? []).map((n) => [n.toLowerCase(), n]));
      const keep = new Set(next.service_account_names.map((n) => n.toLowerCase()));
      const added = next.service_account_names.filter((n) => !before.has(n.toLowerCase()));
      const removed = [...before].filter(([lower]) => !keep.has(lower)).map(([, n]) => n);
      const removing = await availableSnapshots(name, removed);

      // Every new member must exist before anything is claimed or changed.
      const { client, bindAccount } = await engine.connections.get();
      const bind = await bindAccount();
      const found: Array<{ name: string; dn: string }> = [];
      for (const account of added) {
        const entry = await client.findByUsername(account, ['1.1']);
        const element = `invalid value for field "service_account_names": element ${next.service_account_names.indexOf(account) + 1}`;
        if (!entry) throw new BadRequestError(`${element} was not found in the directory`);
        refuseBindAccount(bind, { username: account, dn: entry.dn }, element);
        found.push({ name: account, dn: entry.dn });
      }
      const addedIdentities = found.map((a) => ({ username: a.name, dn: a.dn }));
      await accounts.claim(owner(name), addedIdentities);
      try {
        for (const account of found) await enrollAccount(engine, account.name, account.dn);
        // The guards fail if a removed member was checked out after we looked.
        const stored = await storage.transaction(
          [putLibrarySetOp(name, next), ...removing.flatMap(([n]) => [deleteAccountOp(n), clearDriftOp(accountWalTarget(n))])],
          removing.map(([n, s]) => unchangedAccount(n, s)),
        );
        if (!stored) throw new ConflictError('a service account being removed was checked out meanwhile; retry the request');
      } catch (err) {
        await storage.transaction(found.map((a) => deleteAccountOp(a.name)));
        await accounts.release(owner(name), addedIdentities);
        throw err;
      }
      await accounts.release(owner(name), identities(removing));
    });

  return {
    paths: [
      ...checkouts.paths,
      definePath({
        pattern: 'library/(?<prefix>(?:.+/)?)',
        canonical: { prefix: lowerName },
        description: 'Lists library sets below a folder; sub-folders end in "/".',
        operations: {
          list: async (req) => ({ data: { keys: await listLibrarySets(storage, req.params.prefix!.toLowerCase()) } }),
        },
      }),
      definePath({
        pattern: `library/(?<name>${SET_NAME})`,
        canonical: { name: lowerName },
        description: 'Library sets: service accounts that callers check out and in.',
        fields,
        existenceCheck: async (req) => (await readLibrarySet(storage, setName(req))) !== undefined,
        operations: {
          read: async (req) => {
            const set = await readLibrarySet(storage, setName(req));
            if (!set) return;
            return { data: { ...set } };
          },
          create: write,
          update: write,
          delete: (req) =>
            locks.run(lockKey(setName(req)), async () => {
              const name = setName(req);
              const set = await readLibrarySet(storage, name);
              if (!set) return;
              const members = await availableSnapshots(name, set.service_account_names);
              const deleted = await storage.transaction(
                [deleteLibrarySetOp(name), ...members.flatMap(([n]) => [deleteAccountOp(n), clearDriftOp(accountWalTarget(n))])],
                members.map(([n, s]) => unchangedAccount(n, s)),
              );
              if (!deleted) throw new ConflictError('a service account of the set was checked out meanwhile; retry the request');
              await accounts.release(owner(name), identities(members));
            }),
        },
      }),
    ],
    secrets: checkouts.secrets,
    initialize: checkouts.initialize,
    lead: checkouts.lead,
    cleanup: checkouts.cleanup,
  };
}
