import { z } from 'zod';
import { BadRequestError, NotFoundError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, type PathDefinition, lowerName } from '../../core/framework.ts';
import { newUuid } from '../../core/ids.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import type { AzureClients } from '../../providers/azure/clients.ts';
import { isEngineApp, sameAppId, type CloudConfig } from './config.ts';
import type { CloudEngine, Connection } from './engine.ts';
import { cloudEvent } from './events.ts';
import { canonicalGroupSchema, canonicalRoleSchema, createPrincipal, type CanonicalGroup, type CanonicalRole } from './principals.ts';
import { removePrincipal } from './revoke.ts';

/** The application and principal a persist_app role owns, with what was granted to it. */
const managedAppSchema = z.object({
  app_object_id: z.string(),
  app_id: z.string(),
  sp_object_id: z.string(),
  role_assignments: z.array(z.object({ role_id: z.string(), scope: z.string(), id: z.string() })),
  group_ids: z.array(z.string()),
});
type ManagedApp = z.infer<typeof managedAppSchema>;

const roleSchema = z.object({
  cloud_roles: z.array(canonicalRoleSchema),
  cloud_groups: z.array(canonicalGroupSchema),
  application_object_id: z.string(),
  /** appId of application_object_id, resolved at write time. */
  application_id: z.string(),
  persist_app: z.boolean(),
  ttl: z.number().int().nonnegative(),
  max_ttl: z.number().int().nonnegative(),
  permanently_delete: z.boolean(),
  sign_in_audience: z.string(),
  tags: z.array(z.string()),
  managed_app: managedAppSchema.nullable(),
});
export type CloudRole = z.infer<typeof roleSchema>;

/** Vault's role-name grammar; names are lower-cased on every path. */
export const ROLE_NAME = String.raw`\w(?:[\w.-]*\w)?`;
export const roleName = (req: Pick<BackendRequest, 'params'>): string => req.params.name!.toLowerCase();
const roleKey = (name: string) => `roles/${name}`;

export async function readRole(storage: StorageView, name: string): Promise<CloudRole | undefined> {
  return storage.getJson(roleKey(name), (raw) => roleSchema.parse(raw));
}
/** The role with its event (`azure/role-create` or `-update`) in one transaction. */
async function writeRole(storage: StorageView, name: string, role: CloudRole, event: PreparedWrite): Promise<void> {
  await storage.transaction([{ type: 'put', key: roleKey(name), value: jsonBytes(roleSchema.parse(role)) }], [], [event]);
}
async function deleteRole(storage: StorageView, name: string, event: PreparedWrite): Promise<void> {
  await storage.transaction([{ type: 'delete', key: roleKey(name) }], [], [event]);
}
async function listRoles(storage: StorageView): Promise<string[]> {
  return storage.list('roles/');
}

/** The application a role's credentials are passwords on: its persisted app or application_object_id ('' when dynamic). */
const issuingAppId = (role: CloudRole): string => role.managed_app?.app_id ?? role.application_id;

/** The first role whose credentials are passwords on the application `appId`. */
export async function roleIssuingOn(storage: StorageView, appId: string): Promise<string | undefined> {
  for (const name of await listRoles(storage)) {
    const role = await readRole(storage, name);
    if (role && sameAppId(issuingAppId(role), appId)) return name;
  }
  return undefined;
}

/** The spec's names for Azure's sign-in audiences. */
export const SIGN_IN_AUDIENCES: Record<string, string> = {
  CloudADMyOrg: 'AzureADMyOrg',
  CloudADMultipleOrgs: 'AzureADMultipleOrgs',
  CloudADandPersonalCloudAccount: 'AzureADandPersonalMicrosoftAccount',
  PersonalCloudAccount: 'PersonalMicrosoftAccount',
};

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Management group, subscription, resource group or a resource below one; no empty or dot segments. */
const SCOPE = /^\/(?:providers\/Microsoft\.Management\/managementGroups\/[\w.()-]+|subscriptions\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:\/resourceGroups\/[\w.()-]+(?:\/providers(?:\/[^/\s]+)+)?)?)$/i;

const roleInputSchema = z.object({
  scope: z.string({ error: 'each element needs a string "scope"' }),
  role_name: z.string().optional(),
  role_id: z.string().optional(),
}).refine((r) => !!(r.role_name?.trim() || r.role_id?.trim()), { message: 'each element needs "role_name" or "role_id"' });
const groupInputSchema = z.object({
  group_name: z.string().optional(),
  object_id: z.string().optional(),
}).refine((g) => !!(g.group_name?.trim() || g.object_id?.trim()), { message: 'each element needs "group_name" or "object_id"' });

function parseJsonArray<T>(name: string, raw: string, element: z.ZodType<T>): T[] {
  if (raw.trim() === '') return [];
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    throw new BadRequestError(`invalid value for field "${name}": not valid JSON: ${(err as Error).message}`);
  }
  const parsed = z.array(element, { error: 'expected a JSON array' }).safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue.path.length ? ` (element ${String(issue.path[0])})` : '';
    throw new BadRequestError(`invalid value for field "${name}": ${issue.message}${at}`);
  }
  return parsed.data;
}

export function parseTags(tags: string[]): string[] {
  const out = [...new Set(tags.map((t) => t.trim()))];
  for (const t of out) {
    if (t.length < 1 || t.length > 256) throw new BadRequestError('invalid value for field "tags": individual tag size must be between 1 and 256 characters (inclusive)');
    if (/\s/.test(t)) throw new BadRequestError('invalid value for field "tags": whitespaces are not allowed in tags');
  }
  return out;
}

/** Vault's names of the role fields the spec renamed: accepted on writes (one spelling per field), never shown. */
const VAULT_NAMES = { cloud_roles: 'azure_roles', cloud_groups: 'azure_groups' } as const;
type RolesField = 'cloud_roles' | typeof VAULT_NAMES.cloud_roles;
type GroupsField = 'cloud_groups' | typeof VAULT_NAMES.cloud_groups;

/** Rules of a whole role that need no Azure call; `rolesField` is the name cloud_roles was sent under. */
export function validateRole(role: CloudRole, rawRoles: Array<z.infer<typeof roleInputSchema>>, rolesField: RolesField): void {
  if (role.max_ttl > 0 && role.ttl > role.max_ttl) throw new BadRequestError('invalid value for field "ttl": ttl cannot be greater than max_ttl');
  if (role.sign_in_audience && !(role.sign_in_audience in SIGN_IN_AUDIENCES)) {
    throw new BadRequestError(`invalid value for field "sign_in_audience": valid values are ${Object.keys(SIGN_IN_AUDIENCES).join(', ')}`);
  }
  if (role.application_object_id) {
    if (!GUID.test(role.application_object_id)) throw new BadRequestError('invalid value for field "application_object_id": expected an application object id (GUID)');
    if (role.permanently_delete) throw new BadRequestError('invalid value for field "permanently_delete": permanently_delete must be false if application_object_id is provided');
    if (role.persist_app) throw new BadRequestError('invalid value for field "persist_app": persist_app cannot be used with application_object_id (the application already persists)');
  } else if (rawRoles.length === 0) {
    throw new BadRequestError(`missing required field "cloud_roles" (or "${VAULT_NAMES.cloud_roles}"): either cloud_roles or application_object_id must be provided`);
  }
  for (const [i, r] of rawRoles.entries()) {
    if (!SCOPE.test(r.scope.trim())) throw new BadRequestError(`invalid value for field "${rolesField}": element ${i + 1}: scope is not a management group, subscription, resource group or resource id`);
  }
}

async function resolveRoles(clients: AzureClients, config: CloudConfig, input: Array<z.infer<typeof roleInputSchema>>, rolesField: RolesField): Promise<CanonicalRole[]> {
  const out: CanonicalRole[] = [];
  const seen = new Set<string>();
  for (const [i, r] of input.entries()) {
    const element = `invalid value for field "${rolesField}": element ${i + 1}`;
    const scope = r.scope.trim().replace(/\/+$/, '');
    let def;
    if (r.role_id?.trim()) {
      const id = r.role_id.trim();
      const full = GUID.test(id) ? `/subscriptions/${config.subscription_id}/providers/Microsoft.Authorization/roleDefinitions/${id}` : id;
      def = await clients.roles.getRoleDefinition(full);
      if (!def) throw new BadRequestError(`${element}: no role found for its role_id`);
    } else {
      const name = r.role_name!.trim();
      const found = await clients.roles.findRoleDefinitionsByName(`/subscriptions/${config.subscription_id}`, name);
      if (found.length === 0) throw new BadRequestError(`${element}: no role found for its role_name`);
      if (found.length > 1) throw new BadRequestError(`${element}: multiple matches found for its role_name. Specify role by ID instead.`);
      def = found[0];
    }
    const key = `${def.id.toLowerCase()}|${scope.toLowerCase()}`;
    if (seen.has(key)) throw new BadRequestError(`${element}: duplicate role_id and scope`);
    seen.add(key);
    out.push({ role_name: def.roleName, role_id: def.id, scope });
  }
  return out;
}

async function resolveGroups(clients: AzureClients, input: Array<z.infer<typeof groupInputSchema>>, groupsField: GroupsField): Promise<CanonicalGroup[]> {
  const out: CanonicalGroup[] = [];
  for (const [i, g] of input.entries()) {
    const element = `invalid value for field "${groupsField}": element ${i + 1}`;
    let group;
    if (g.object_id?.trim()) {
      const id = g.object_id.trim();
      if (!GUID.test(id)) throw new BadRequestError(`${element}: object_id is not a GUID`);
      group = await clients.graph.getGroup(id);
      if (!group) throw new BadRequestError(`${element}: no group found for its object_id`);
    } else {
      const name = g.group_name!.trim();
      const found = await clients.graph.findGroupsByDisplayName(name);
      if (found.length === 0) throw new BadRequestError(`${element}: no group found for its group_name`);
      if (found.length > 1) throw new BadRequestError(`${element}: multiple matches found for its group_name. Specify group by object_id instead.`);
      group = found[0];
    }
    if (out.some((o) => o.object_id === group.id)) throw new BadRequestError(`${element}: duplicate object_id`);
    out.push({ group_name: group.displayName, object_id: group.id });
  }
  return out;
}

/**
 * The existing application must exist and must not be the one the engine itself signs in as, named by its
 * object id or (a common mix-up) by its client id. Graph's spelling of the object id is what is stored.
 */
export async function resolveApplication(conn: Connection, objectId: string): Promise<{ id: string; appId: string }> {
  const own = new BadRequestError('invalid value for field "application_object_id": the role may not target the engine\'s own application (config client_id)');
  if (isEngineApp(conn.config, objectId)) throw own;
  const app = await conn.clients.graph.getApplication(objectId);
  if (!app) throw new BadRequestError(`invalid value for field "application_object_id": no application found with object id '${objectId}'`);
  if (isEngineApp(conn.config, app.appId)) throw own;
  return app;
}

/** A persisted app the config has since been pointed at is the engine's own: the role neither re-grants nor deletes it. */
function refuseManagingEngineApp(conn: Connection, name: string, role: CloudRole | undefined): void {
  if (role?.managed_app && isEngineApp(conn.config, role.managed_app.app_id)) {
    throw new BadRequestError(`role '${name}' owns the application the engine signs in as (config client_id); point the config at another application before changing or deleting the role`);
  }
}

/** Brings a persisted app's role assignments and group memberships in line with the role. */
async function reconcileManagedApp(clients: AzureClients, managed: ManagedApp, role: CloudRole): Promise<ManagedApp> {
  const key = (roleId: string, scope: string) => `${roleId.toLowerCase()}|${scope.toLowerCase()}`;
  const wanted = new Set(role.cloud_roles.map((r) => key(r.role_id, r.scope)));
  const kept = managed.role_assignments.filter((a) => wanted.has(key(a.role_id, a.scope)));
  for (const a of managed.role_assignments.filter((x) => !wanted.has(key(x.role_id, x.scope)))) await clients.roles.deleteRoleAssignment(a.id);
  const have = new Set(kept.map((a) => key(a.role_id, a.scope)));
  for (const r of role.cloud_roles.filter((x) => !have.has(key(x.role_id, x.scope)))) {
    const created = await clients.roles.createRoleAssignment({ scope: r.scope, name: newUuid(), roleDefinitionId: r.role_id, principalId: managed.sp_object_id });
    kept.push({ role_id: r.role_id, scope: r.scope, id: created.id });
  }
  const groups = role.cloud_groups.map((g) => g.object_id);
  for (const g of managed.group_ids.filter((x) => !groups.includes(x))) await clients.graph.removeGroupMember(g, managed.sp_object_id);
  for (const g of groups.filter((x) => !managed.group_ids.includes(x))) await clients.graph.addGroupMember(g, managed.sp_object_id);
  return { ...managed, role_assignments: kept, group_ids: groups };
}

export function removeManagedApp(clients: AzureClients, managed: ManagedApp, permanentlyDelete: boolean): Promise<void> {
  return removePrincipal(clients, {
    appObjectId: managed.app_object_id, spObjectId: managed.sp_object_id, roleAssignmentIds: managed.role_assignments.map((a) => a.id),
    groupIds: managed.group_ids, permanentlyDelete,
  });
}

/**
 * Azure compares role names, group names and object ids without case, so a denied_parameters entry on these fields
 * compares without case too (an entry "*Owner*" also denies "OWNER"), and the JSON of cloud_roles and cloud_groups
 * as the handler reads it (`\u004fwner` is "Owner"). It cannot see a role named by its role_id.
 */
const caseless = (v: string) => v.toLowerCase();
function jsonCaseless(v: string): string {
  try {
    return JSON.stringify(JSON.parse(v)).toLowerCase();
  } catch {
    return caseless(v);
  }
}

const fields = {
  name: field.string('Name of the role.'),
  cloud_roles: field.string('JSON array (as a string) of role assignments: objects with scope and role_name or role_id.', { matchKey: jsonCaseless }),
  azure_roles: field.string('Vault\'s name for cloud_roles; sending both with different values is a 400.', { aliasOf: 'cloud_roles' }),
  cloud_groups: field.string('JSON array (as a string) of groups to join: objects with group_name or object_id.', { matchKey: jsonCaseless }),
  azure_groups: field.string('Vault\'s name for cloud_groups; sending both with different values is a 400.', { aliasOf: 'cloud_groups' }),
  application_object_id: field.string('Object id of an existing application whose passwords are issued instead of new principals.', { matchKey: caseless }),
  persist_app: field.bool('Create one application and principal for the role and issue passwords on it.', { default: false }),
  ttl: field.duration('Default lease TTL of issued credentials; 0 means the mount default.'),
  max_ttl: field.duration('Maximum lease TTL of issued credentials; 0 means the mount maximum.'),
  permanently_delete: field.bool('Also purge created applications and principals from deleted items. Must be false with application_object_id.', { default: false }),
  sign_in_audience: field.string(`Who may sign in to created applications: ${Object.keys(SIGN_IN_AUDIENCES).join(', ')}.`),
  tags: field.commaList('Comma-separated tags put on created applications.'),
};
type RoleFields = typeof fields;

const EMPTY_ROLE: CloudRole = {
  cloud_roles: [], cloud_groups: [], application_object_id: '', application_id: '', persist_app: false, ttl: 0, max_ttl: 0,
  permanently_delete: false, sign_in_audience: '', tags: [], managed_app: null,
};

function roleView(r: CloudRole): Record<string, unknown> {
  return {
    cloud_roles: r.cloud_roles,
    cloud_groups: r.cloud_groups,
    application_object_id: r.application_object_id,
    persist_app: r.persist_app,
    ttl: r.ttl,
    max_ttl: r.max_ttl,
    permanently_delete: r.permanently_delete,
    sign_in_audience: r.sign_in_audience,
    tags: r.tags,
    ...(r.managed_app ? { persisted_app: { client_id: r.managed_app.app_id, application_object_id: r.managed_app.app_object_id } } : {}),
  };
}

/** The name a renamed field was sent under (undefined: not sent); the pipeline has folded Vault's name into ours. */
const sentName = <F extends keyof typeof VAULT_NAMES>(req: BackendRequest<RoleFields>, name: F) => req.sentAs(name) as F | (typeof VAULT_NAMES)[F] | undefined;

async function writeRoleHandler(engine: CloudEngine, req: BackendRequest<RoleFields>): Promise<{ warnings?: string[] } | void> {
  const name = roleName(req);
  return engine.locks.run(`role/${name}`, async () => {
    const current = await readRole(req.storage, name);
    const next: CloudRole = { ...(current ?? EMPTY_ROLE) };
    const str = (f: 'application_object_id' | 'sign_in_audience') => (req.data[f] ?? '').trim();
    if (req.has('application_object_id')) next.application_object_id = str('application_object_id');
    if (req.has('sign_in_audience')) next.sign_in_audience = str('sign_in_audience');
    if (req.has('persist_app')) next.persist_app = req.data.persist_app ?? false;
    if (req.has('ttl')) next.ttl = req.data.ttl ?? 0;
    if (req.has('max_ttl')) next.max_ttl = req.data.max_ttl ?? 0;
    // Unlike Vault, an update that does not send permanently_delete keeps it.
    if (req.has('permanently_delete')) next.permanently_delete = req.data.permanently_delete ?? false;
    if (req.has('tags')) next.tags = parseTags(req.data.tags ?? []);
    const rolesField = sentName(req, 'cloud_roles');
    const groupsField = sentName(req, 'cloud_groups');
    const rawRoles = rolesField ? parseJsonArray(rolesField, req.data.cloud_roles ?? '', roleInputSchema) : next.cloud_roles;
    const rawGroups = groupsField ? parseJsonArray(groupsField, req.data.cloud_groups ?? '', groupInputSchema) : next.cloud_groups;
    validateRole(next, rawRoles, rolesField ?? 'cloud_roles');

    const conn = await engine.connect();
    const { clients } = conn;
    refuseManagingEngineApp(conn, name, current);
    const event = () => cloudEvent(engine.system, current ? 'role-update' : 'role-create', { operation: req.operation, path: `roles/${name}`, name });
    const app = next.application_object_id ? await resolveApplication(conn, next.application_object_id) : undefined;
    next.application_object_id = app?.id ?? '';
    next.application_id = app?.appId ?? '';
    next.cloud_roles = await resolveRoles(clients, conn.config, rawRoles, rolesField ?? 'cloud_roles');
    next.cloud_groups = await resolveGroups(clients, rawGroups, groupsField ?? 'cloud_groups');
    const warnings = next.application_object_id && (next.cloud_roles.length || next.cloud_groups.length)
      ? ['cloud_roles and cloud_groups are not applied: credentials are passwords on application_object_id'] : undefined;

    if (next.persist_app && !next.managed_app) {
      const created = await createPrincipal(clients, engine.wal, {
        displayName: `strongroom-${name}-${newUuid()}`, tags: next.tags, signInAudience: SIGN_IN_AUDIENCES[next.sign_in_audience] ?? '',
        roles: next.cloud_roles, groups: next.cloud_groups, permanentlyDelete: next.permanently_delete,
      });
      next.managed_app = {
        app_object_id: created.appObjectId, app_id: created.appId, sp_object_id: created.spObjectId, group_ids: created.groupIds,
        role_assignments: created.roleAssignmentIds.map((id, i) => ({ id, role_id: next.cloud_roles[i].role_id, scope: next.cloud_roles[i].scope })),
      };
      try {
        await writeRole(req.storage, name, next, event());
      } catch (err) {
        await engine.wal.compensate(created.walId, clients);
        throw err;
      }
      await engine.wal.commit(created.walId);
      return warnings ? { warnings } : undefined;
    }
    if (next.persist_app && next.managed_app) {
      next.managed_app = await reconcileManagedApp(clients, next.managed_app, next);
    } else if (next.managed_app) {
      // persist_app switched off: the role's own application goes (Vault leaks it).
      await removeManagedApp(clients, next.managed_app, next.permanently_delete);
      next.managed_app = null;
    }
    await writeRole(req.storage, name, next, event());
    return warnings ? { warnings } : undefined;
  });
}

export function rolePaths(engine: CloudEngine): PathDefinition[] {
  return [
    definePath({
      pattern: 'roles/?',
      description: 'List roles.',
      operations: {
        list: async (req) => ({ data: { keys: await listRoles(req.storage) } }),
      },
    }),
    definePath({
      pattern: `roles/(?<name>${ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Roles: which cloud roles and groups generated principals receive, or which existing application is used.',
      fields,
      existenceCheck: async (req) => (await readRole(req.storage, roleName(req))) !== undefined,
      operations: {
        read: async (req) => {
          const role = await readRole(req.storage, roleName(req));
          return role ? { data: roleView(role) } : undefined;
        },
        update: async (req) => (await writeRoleHandler(engine, req)) ?? undefined,
        delete: async (req) => {
          const name = roleName(req);
          await engine.locks.run(`role/${name}`, async () => {
            const role = await readRole(req.storage, name);
            if (!role) throw new NotFoundError([`role '${name}' does not exist`]);
            if (role.managed_app) {
              const conn = await engine.connect();
              refuseManagingEngineApp(conn, name, role);
              await removeManagedApp(conn.clients, role.managed_app, role.permanently_delete);
            }
            await deleteRole(req.storage, name, cloudEvent(engine.system, 'role-delete', { operation: 'delete', path: `roles/${name}`, name }));
          });
        },
      },
    }),
  ];
}
