/**
 * A role's bound_* constraints: the write-time rules and the JWT-only checks (service principals and
 * groups). Values compare exactly but case-insensitively (object ids, subscription ids and ARM names
 * are case-insensitive in Azure); "*" alone in a list means "any".
 */
import { BadRequestError, PermissionDeniedError } from '../../core/errors.ts';
import type { LoginClaims } from './claims.ts';

export const BOUND_FIELDS = [
  'bound_service_principal_ids', 'bound_group_ids', 'bound_subscription_ids', 'bound_resource_groups', 'bound_locations', 'bound_scale_sets',
] as const;

export type BoundField = (typeof BOUND_FIELDS)[number];
export type RoleBounds = Record<BoundField, string[]>;

/** Bounds that need the caller's resource verified with ARM. */
const RESOURCE_BOUNDS: BoundField[] = ['bound_subscription_ids', 'bound_resource_groups', 'bound_locations', 'bound_scale_sets'];

export const isWildcard = (list: string[]): boolean => list.length === 1 && list[0] === '*';

export function hasResourceBounds(b: RoleBounds): boolean {
  return RESOURCE_BOUNDS.some((f) => b[f].length > 0);
}

export function containsFold(list: string[], value: string | undefined): boolean {
  if (value === undefined) return false;
  const v = value.toLowerCase();
  return list.some((x) => x.toLowerCase() === v);
}

/** Trims entries, drops empty ones and duplicates (compared case-insensitively). */
export function normaliseBoundList(list: string[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  for (const raw of list) {
    const v = raw.trim();
    if (v === '' || seen.has(v.toLowerCase())) continue;
    seen.add(v.toLowerCase());
    out.push(v);
  }
  return out;
}

/**
 * A role must constrain who logs in: at least one bound list, "*" only on its own, and when nothing
 * is verified with ARM, a specific service principal or group (otherwise every principal of the tenant
 * with a token for the resource would get in). Vault enforces the last rule only at login, which
 * leaves roles that can never be used; here the write is refused.
 */
export function validateRoleBounds(b: RoleBounds): void {
  if (BOUND_FIELDS.every((f) => b[f].length === 0)) throw new BadRequestError('must have at least one bound constraint when creating/updating a role');
  for (const f of BOUND_FIELDS) {
    if (b[f].includes('*') && b[f].length > 1) throw new BadRequestError(`invalid value for field "${f}": '*' must be the only value when used`);
    if (b[f].includes('*') && f !== 'bound_service_principal_ids' && f !== 'bound_group_ids') {
      throw new BadRequestError(`invalid value for field "${f}": '*' is only allowed in bound_service_principal_ids and bound_group_ids`);
    }
  }
  const specificPrincipal = [b.bound_service_principal_ids, b.bound_group_ids].some((l) => l.length > 0 && !isWildcard(l));
  if (!hasResourceBounds(b) && !specificPrincipal) {
    throw new BadRequestError('invalid value for field "bound_service_principal_ids": a role without subscription, resource group, location or scale set bounds needs specific bound_service_principal_ids or bound_group_ids (not only \'*\')');
  }
}

/** The JWT-only checks; both apply when both lists are set (AND, as Vault). */
export function checkPrincipalBounds(b: RoleBounds, claims: Pick<LoginClaims, 'oid' | 'groups' | 'groupsOverage'>): void {
  const sps = b.bound_service_principal_ids;
  if (sps.length > 0 && !isWildcard(sps) && !containsFold(sps, claims.oid)) {
    throw new PermissionDeniedError('permission denied: service principal not authorized by bound_service_principal_ids');
  }
  const groups = b.bound_group_ids;
  if (groups.length > 0 && !isWildcard(groups)) {
    if (claims.groupsOverage && claims.groups.length === 0) {
      throw new PermissionDeniedError('permission denied: token carries a group overage reference instead of groups; group membership cannot be verified');
    }
    if (!claims.groups.some((g) => containsFold(groups, g))) throw new PermissionDeniedError('permission denied: groups not authorized by bound_group_ids');
  }
}

export interface VerifiedPlacement {
  subscriptionId: string;
  resourceGroup: string;
  location: string;
  /** The scale set named at login, when the login was a scale set's. */
  scaleSet?: string;
}

/** The resource bounds, against a placement ARM confirmed (at login) or that login recorded (at renewal). */
export function checkPlacementBounds(b: RoleBounds, p: VerifiedPlacement): void {
  const deny = (what: string) => new PermissionDeniedError(`permission denied: ${what}`);
  if (b.bound_subscription_ids.length > 0 && !containsFold(b.bound_subscription_ids, p.subscriptionId)) throw deny('subscription not authorized by bound_subscription_ids');
  if (b.bound_resource_groups.length > 0 && !containsFold(b.bound_resource_groups, p.resourceGroup)) throw deny('resource group not authorized by bound_resource_groups');
  if (b.bound_locations.length > 0) {
    if (!p.location) throw deny('resource location is unknown, so bound_locations cannot be satisfied');
    if (!containsFold(b.bound_locations, p.location)) throw deny('location not authorized by bound_locations');
  }
  if (b.bound_scale_sets.length > 0) {
    if (!p.scaleSet) throw deny('role is bound to scale sets; log in with vmss_name');
    if (!containsFold(b.bound_scale_sets, p.scaleSet)) throw deny('scale set not authorized by bound_scale_sets');
  }
}
