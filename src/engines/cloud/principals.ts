/**
 * Creation of an application with its service principal, role assignments and group memberships,
 * shared by dynamic credentials and persisted roles. Each step is recorded in the creation WAL
 * before the next starts, and any failure removes what was made before the error is returned.
 */
import { z } from 'zod';
import { newUuid } from '../../core/ids.ts';
import type { AzureClients } from '../../providers/azure/clients.ts';
import type { NewPassword } from '../../providers/azure/graph.ts';
import type { CreationWal, PrincipalWalEntry } from './wal.ts';

/** A role assignment a principal receives, as resolved against ARM (role definition id, scope). */
export const canonicalRoleSchema = z.object({ role_name: z.string(), role_id: z.string(), scope: z.string() });
/** A group a principal joins, as resolved against Graph. */
export const canonicalGroupSchema = z.object({ group_name: z.string(), object_id: z.string() });
export type CanonicalRole = z.infer<typeof canonicalRoleSchema>;
export type CanonicalGroup = z.infer<typeof canonicalGroupSchema>;

export interface PrincipalSpec {
  displayName: string;
  tags: string[];
  /** Azure's value (AzureADMyOrg ...), or '' for Graph's default. */
  signInAudience: string;
  roles: CanonicalRole[];
  groups: CanonicalGroup[];
  permanentlyDelete: boolean;
  /** Dynamic credentials get a password on the new application; persisted apps get theirs per lease. */
  password?: { displayName: string; endDateTime: Date };
  /** The lease a dynamic credential will be handed out under (see CreationWal). */
  leaseId?: string;
}

export interface CreatedPrincipal {
  appObjectId: string;
  appId: string;
  spObjectId: string;
  roleAssignmentIds: string[];
  groupIds: string[];
  password?: NewPassword;
  /** The WAL entry still guarding the objects; commit it once their owner is stored. */
  walId: string;
}

export function assignmentId(scope: string, name: string): string {
  return `${scope.replace(/\/+$/, '')}/providers/Microsoft.Authorization/roleAssignments/${name}`;
}

export async function createPrincipal(clients: AzureClients, wal: CreationWal, spec: PrincipalSpec): Promise<CreatedPrincipal> {
  // Assignment names are ours to choose, so their ids are known (and logged) before any PUT.
  const planned = spec.roles.map((r) => ({ role: r, name: newUuid() }));
  const entry: PrincipalWalEntry = {
    kind: 'principal', created_at: 0, lease_id: spec.leaseId, display_name: spec.displayName, permanently_delete: spec.permanentlyDelete,
    app_object_id: '', app_id: '', sp_object_id: '',
    role_assignment_ids: planned.map((p) => assignmentId(p.role.scope, p.name)),
    group_ids: spec.groups.map((g) => g.object_id),
  };
  const walId = await wal.begin(entry);
  try {
    const app = await clients.graph.createApplication({ displayName: spec.displayName, tags: spec.tags, signInAudience: spec.signInAudience || undefined });
    Object.assign(entry, { app_object_id: app.id, app_id: app.appId });
    await wal.update(walId, entry);
    const sp = await clients.graph.createServicePrincipal(app.appId);
    entry.sp_object_id = sp.id;
    await wal.update(walId, entry);
    const password = spec.password ? await clients.graph.addApplicationPassword(app.id, spec.password) : undefined;
    const roleAssignmentIds: string[] = [];
    for (const p of planned) {
      const created = await clients.roles.createRoleAssignment({ scope: p.role.scope, name: p.name, roleDefinitionId: p.role.role_id, principalId: sp.id });
      roleAssignmentIds.push(created.id);
    }
    // An existing identical assignment may have been adopted under another name; revoke needs the real ids.
    if (roleAssignmentIds.some((id, i) => id.toLowerCase() !== entry.role_assignment_ids[i].toLowerCase())) {
      entry.role_assignment_ids = [...new Set([...entry.role_assignment_ids, ...roleAssignmentIds])];
      await wal.update(walId, entry);
    }
    for (const g of spec.groups) await clients.graph.addGroupMember(g.object_id, sp.id);
    return { appObjectId: app.id, appId: app.appId, spObjectId: sp.id, roleAssignmentIds, groupIds: spec.groups.map((g) => g.object_id), password, walId };
  } catch (err) {
    await wal.compensate(walId, clients);
    throw err;
  }
}
