// Seeding helpers: built-in role definitions with their real GUIDs, an admin application with the
// permissions the cloud engine documents, subscriptions and groups.
import type { EmulatorState, RoleDefinition } from './state.ts';

export const BUILTIN_ROLES: Array<Pick<RoleDefinition, 'name' | 'roleName' | 'actions' | 'notActions' | 'dataActions'>> = [
  { name: '8e3af657-a8ff-443c-a75c-2fe8c4bcb635', roleName: 'Owner', actions: ['*'], notActions: [], dataActions: [] },
  {
    name: 'b24988ac-6180-42a0-ab88-20f7382dd24c', roleName: 'Contributor', actions: ['*'], dataActions: [],
    notActions: ['Microsoft.Authorization/*/Delete', 'Microsoft.Authorization/*/Write', 'Microsoft.Authorization/elevateAccess/Action'],
  },
  { name: 'acdd72a7-3385-48ef-bd42-f606fba81ae7', roleName: 'Reader', actions: ['*/read'], notActions: [], dataActions: [] },
  { name: '18d7d88d-d35e-4fb5-a5c3-7773c20a72d9', roleName: 'User Access Administrator', actions: ['*/read', 'Microsoft.Authorization/*'], notActions: [], dataActions: [] },
  {
    name: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b', roleName: 'Storage Blob Data Owner',
    actions: ['Microsoft.Storage/storageAccounts/blobServices/containers/*'], notActions: [],
    dataActions: ['Microsoft.Storage/storageAccounts/blobServices/containers/blobs/*'],
  },
];

export const OWNER_ROLE_ID = BUILTIN_ROLES[0].name;

/** What the cloud engine's root application needs (README: required permissions). */
export const ADMIN_GRAPH_PERMISSIONS = ['Application.ReadWrite.All', 'GroupMember.ReadWrite.All', 'Group.Read.All'];

export function seedBuiltinRoles(state: EmulatorState): void {
  for (const r of BUILTIN_ROLES) state.addRoleDefinition({ ...r, roleType: 'BuiltInRole', description: r.roleName });
}

export interface SeededApp {
  appId: string;
  objectId: string;
  servicePrincipalId: string;
  clientSecret: string;
  keyId: string;
}

/** An application with a service principal and one password; optionally Owner on subscriptions. */
export function seedApp(
  state: EmulatorState,
  input: { displayName: string; graphPermissions?: string[]; ownerOf?: string[]; secretLifetimeMs?: number },
): SeededApp {
  const app = state.createApplication({ displayName: input.displayName, graphPermissions: input.graphPermissions });
  // Seeded objects are already replicated everywhere.
  app.visibleAt = 0;
  const sp = state.createServicePrincipal(app);
  sp.armVisibleAt = 0;
  sp.groupsVisibleAt = 0;
  const endDateTime = input.secretLifetimeMs === undefined ? undefined : state.isoNow(input.secretLifetimeMs);
  const { credential, secretText } = state.addPassword(app, { displayName: 'seed', endDateTime });
  for (const sub of input.ownerOf ?? []) state.assignRole(`/subscriptions/${sub}`, OWNER_ROLE_ID, sp.id);
  return { appId: app.appId, objectId: app.id, servicePrincipalId: sp.id, clientSecret: secretText, keyId: credential.keyId };
}

export interface SeededTenant {
  subscriptionId: string;
  admin: SeededApp;
  groups: Record<string, string>;
}

/** A ready tenant: built-in roles, one subscription, an admin app that owns it, and named groups. */
export function seedTenant(state: EmulatorState, input: { subscriptionId?: string; groups?: string[] } = {}): SeededTenant {
  seedBuiltinRoles(state);
  const subscriptionId = state.addSubscription(input.subscriptionId);
  const admin = seedApp(state, { displayName: 'strongroom-admin', graphPermissions: ADMIN_GRAPH_PERMISSIONS, ownerOf: [subscriptionId] });
  const groups: Record<string, string> = {};
  for (const name of input.groups ?? []) groups[name] = state.addGroup(name).id;
  return { subscriptionId, admin, groups };
}
