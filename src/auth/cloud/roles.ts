import { z } from 'zod';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition, type SystemView, lowerName } from '../../core/framework.ts';
import { KeyedLock } from '../../core/keyed-lock.ts';
import type { StorageView } from '../../core/storage/view.ts';
import {
  DEFAULT_TOKEN_SETTINGS, legacyTokenFields, mergeTokenSettings, tokenFields, tokenSettingsSchema, tokenSettingsView, tokenSettingsWarnings, validateTokenSettings,
} from '../../core/token-fields.ts';
import { BOUND_FIELDS, normaliseBoundList, validateRoleBounds, type RoleBounds } from './bounds.ts';

const boundList = z.array(z.string());

export const roleSchema = tokenSettingsSchema.extend(Object.fromEntries(BOUND_FIELDS.map((f) => [f, boundList])) as Record<keyof RoleBounds, typeof boundList>);

export type CloudAuthRole = z.infer<typeof roleSchema> & RoleBounds;

const roleKey = (name: string): string => `role/${name}`;

export async function readRole(storage: StorageView, name: string): Promise<CloudAuthRole | undefined> {
  return storage.getJson(roleKey(name), (raw) => roleSchema.parse(raw) as CloudAuthRole);
}

async function writeRole(storage: StorageView, name: string, role: CloudAuthRole): Promise<void> {
  await storage.putJson(roleKey(name), roleSchema.parse(role));
}

/**
 * Parsed roles for logins, so a login neither decrypts nor re-validates its role. Every write and delete
 * below drops the entry, and another node's write drops them all (`clear`, from the backend's `cached`); a
 * read that started before either (the generation moved) is not cached. Only existing roles are kept, so
 * unknown names sent to the unauthenticated login cannot grow the map.
 */
export class RoleCache {
  readonly #roles = new Map<string, CloudAuthRole>();
  #generation = 0;

  async get(storage: StorageView, name: string): Promise<CloudAuthRole | undefined> {
    const cached = this.#roles.get(name);
    if (cached) return cached;
    const generation = this.#generation;
    const role = await readRole(storage, name);
    if (role && generation === this.#generation) this.#roles.set(name, role);
    return role;
  }

  forget(name: string): void {
    this.#generation++;
    this.#roles.delete(name);
  }

  clear(): void {
    this.#generation++;
    this.#roles.clear();
  }
}

async function listRoles(storage: StorageView): Promise<string[]> {
  return (await storage.list('role/')).filter((k) => !k.endsWith('/'));
}

const EMPTY_BOUNDS = Object.fromEntries(BOUND_FIELDS.map((f) => [f, []])) as unknown as RoleBounds;

/** Bounds compare without case at login (bounds.ts), so a denied_parameters entry on one does too. */
const caseless = { matchKey: (v: string) => v.toLowerCase() };
const boundFields = {
  bound_service_principal_ids: field.commaList('Object ids (token oid) allowed to log in; "*" alone for any.', caseless),
  bound_group_ids: field.commaList('Group ids (token groups) of which the caller must be in one; "*" alone for any.', caseless),
  bound_subscription_ids: field.commaList('Subscriptions the caller\'s resource must be in (verified with ARM).', caseless),
  bound_resource_groups: field.commaList('Resource groups the caller\'s resource must be in (verified with ARM).', caseless),
  bound_locations: field.commaList('Locations (e.g. eastus) the caller\'s resource must be in (verified with ARM).', caseless),
  bound_scale_sets: field.commaList('Scale sets the caller must belong to (vmss_name logins, verified with ARM).', caseless),
};

/** Role names as Vault's GenericNameRegex; stored lower-cased. */
const NAME = '\\w(?:[\\w.-]*\\w)?';

export function rolePaths(system: SystemView, cache: RoleCache): PathDefinition[] {
  const locks = new KeyedLock();
  return [
    definePath({
      pattern: 'role/?',
      description: 'List roles.',
      operations: { list: async (req) => ({ data: { keys: await listRoles(req.storage) } }) },
    }),
    definePath({
      pattern: `role/(?<name>${NAME})`,
      canonical: { name: lowerName },
      description: 'Roles tie bound constraints on the caller to the policies and TTLs of the tokens it gets.',
      fields: { ...boundFields, ...tokenFields, ...legacyTokenFields },
      existenceCheck: async (req) => (await readRole(req.storage, req.params.name.toLowerCase())) !== undefined,
      operations: {
        read: async (req) => {
          const role = await readRole(req.storage, req.params.name.toLowerCase());
          if (!role) return undefined;
          return { data: tokenSettingsView(role) };
        },
        update: async (req) => {
          const name = req.params.name.toLowerCase();
          return locks.run(name, async () => {
            const current = (await readRole(req.storage, name)) ?? { ...EMPTY_BOUNDS, ...DEFAULT_TOKEN_SETTINGS };
            const next = { ...current, ...mergeTokenSettings(current, req) } as CloudAuthRole;
            for (const f of BOUND_FIELDS) if (req.has(f)) next[f] = normaliseBoundList(req.data[f] ?? []);
            validateRoleBounds(next);
            validateTokenSettings(next, system.maxLeaseTtl());
            try {
              await writeRole(req.storage, name, next);
            } finally {
              cache.forget(name);
            }
            const warnings = tokenSettingsWarnings(next, system.maxLeaseTtl());
            return warnings.length ? { warnings } : undefined;
          });
        },
        delete: async (req) => {
          const name = req.params.name.toLowerCase();
          try {
            await req.storage.delete(roleKey(name));
          } finally {
            cache.forget(name);
          }
        },
      },
    }),
  ];
}
