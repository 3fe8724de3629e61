/**
 * Revocation rebuilt from the lease alone. "Already gone" upstream is success, so a revoke retried
 * by the lease manager after a partial failure finishes the job instead of failing on what the
 * previous attempt removed. Every step is attempted even when an earlier one failed, so one attempt
 * removes as much as it can; the lease stays (and is retried) while anything is left.
 */
import { z } from 'zod';
import type { LeaseView, SecretType } from '../../core/framework.ts';
import { UpstreamError } from '../../core/errors.ts';
import type { AzureClients } from '../../providers/azure/clients.ts';

export const DYNAMIC_SECRET = 'service_principal';
export const STATIC_SECRET = 'static_service_principal';

export const dynamicLeaseSchema = z.object({
  app_object_id: z.string().min(1),
  app_id: z.string(),
  sp_object_id: z.string(),
  role_assignment_ids: z.array(z.string()),
  group_membership_ids: z.array(z.string()),
  permanently_delete: z.boolean(),
  key_id: z.string(),
  key_end_date: z.string(),
  role: z.string(),
});
export type DynamicLease = z.infer<typeof dynamicLeaseSchema>;

export const staticLeaseSchema = z.object({
  app_object_id: z.string().min(1),
  app_id: z.string(),
  key_id: z.string().min(1),
  key_end_date: z.string(),
  role: z.string(),
});
export type StaticLease = z.infer<typeof staticLeaseSchema>;

export interface PrincipalObjects {
  appObjectId: string;
  spObjectId: string;
  roleAssignmentIds: string[];
  groupIds: string[];
  permanentlyDelete: boolean;
}

/** Role assignments, group memberships, service principal, then the application. */
export async function removePrincipal(clients: AzureClients, p: PrincipalObjects): Promise<void> {
  const failures: string[] = [];
  const attempt = async (fn: () => Promise<unknown>): Promise<void> => {
    try {
      await fn();
    } catch (err) {
      failures.push((err as Error).message);
    }
  };
  for (const id of p.roleAssignmentIds) await attempt(() => clients.roles.deleteRoleAssignment(id));
  if (p.spObjectId) {
    for (const group of p.groupIds) await attempt(() => clients.graph.removeGroupMember(group, p.spObjectId));
    await attempt(() => clients.graph.deleteServicePrincipal(p.spObjectId, { permanently: p.permanentlyDelete }));
  }
  if (p.appObjectId) await attempt(() => clients.graph.deleteApplication(p.appObjectId, { permanently: p.permanentlyDelete }));
  if (failures.length) throw new UpstreamError(`revocation incomplete: ${failures.join('; ')}`);
}

/** Removes the application's passwords carrying this display name; a missing application is success. */
export async function removePasswordsNamed(clients: AzureClients, appObjectId: string, displayName: string): Promise<void> {
  const app = await clients.graph.getApplication(appObjectId);
  for (const p of app?.passwordCredentials.filter((c) => c.displayName === displayName) ?? []) {
    await clients.graph.removeApplicationPassword(appObjectId, p.keyId);
  }
}

/** Leases cannot outlive the password they hand out. */
function keyLifetimeCap(lease: LeaseView, keyEndDate: string): { maxTtl: number } | void {
  const end = Date.parse(keyEndDate);
  if (Number.isNaN(end)) return;
  return { maxTtl: Math.max(1, Math.floor((end - lease.issueTime) / 1000)) };
}

export function secretTypes(clients: () => Promise<AzureClients>): SecretType[] {
  return [
    {
      type: DYNAMIC_SECRET,
      async revoke(lease) {
        const l = dynamicLeaseSchema.parse(lease.internal);
        await removePrincipal(await clients(), {
          appObjectId: l.app_object_id, spObjectId: l.sp_object_id, roleAssignmentIds: l.role_assignment_ids,
          groupIds: l.group_membership_ids, permanentlyDelete: l.permanently_delete,
        });
      },
      async renew(lease) {
        return keyLifetimeCap(lease, dynamicLeaseSchema.parse(lease.internal).key_end_date);
      },
    },
    {
      type: STATIC_SECRET,
      async revoke(lease) {
        const l = staticLeaseSchema.parse(lease.internal);
        // Only this lease's password: the application and its other passwords belong to someone else.
        await (await clients()).graph.removeApplicationPassword(l.app_object_id, l.key_id);
      },
      async renew(lease) {
        return keyLifetimeCap(lease, staticLeaseSchema.parse(lease.internal).key_end_date);
      },
    },
  ];
}
