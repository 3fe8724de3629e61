/**
 * The claims a verified managed-identity or service-principal token contributes to a login, and the
 * comparisons between its resource claims and what the caller names. Resource ids are compared as
 * whole ARM ids (case-insensitively, as ARM does), never as substrings: Vault's substring check let
 * vm_name "web" match a token from ".../virtualMachines/web01" (design point 7).
 */
import { PermissionDeniedError } from '../../core/errors.ts';
import { parseResourceId, type ParsedResourceId } from '../../providers/azure/compute.ts';

export interface LoginClaims {
  /** Object id of the managed identity or service principal. */
  oid: string;
  appid?: string;
  groups: string[];
  /** Whether the directory replaced `groups` with an overage reference (more than 200 groups). */
  groupsOverage: boolean;
  /** Resource id of the identity: the host for system-assigned, the identity itself for user-assigned. */
  xmsMirid?: string;
  /** Resource id of the host when the token is for a user-assigned identity. */
  xmsAzRid?: string;
}

const deny = (what: string): PermissionDeniedError => new PermissionDeniedError(`permission denied: ${what}`);

function optionalString(payload: Record<string, unknown>, name: string): string | undefined {
  const v = payload[name];
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw deny(`token claim "${name}" is not a string`);
  return v;
}

/** Reads the claims login uses from a payload whose signature, issuer, audience and lifetime were verified. */
export function parseClaims(payload: Record<string, unknown>): LoginClaims {
  const oid = optionalString(payload, 'oid');
  if (!oid) throw deny('token has no object id (oid) claim');
  const rawGroups = payload.groups;
  if (rawGroups !== undefined && (!Array.isArray(rawGroups) || rawGroups.some((g) => typeof g !== 'string'))) {
    throw deny('token claim "groups" is not a list of strings');
  }
  const claimNames = payload._claim_names;
  return {
    oid,
    appid: optionalString(payload, 'appid'),
    groups: ((rawGroups as string[] | undefined) ?? []).filter((g) => g !== ''),
    groupsOverage: typeof claimNames === 'object' && claimNames !== null && 'groups' in claimNames,
    xmsMirid: optionalString(payload, 'xms_mirid'),
    xmsAzRid: optionalString(payload, 'xms_az_rid'),
  };
}

/** The claim naming the compute resource the token was requested on: xms_az_rid when present (user-assigned), else xms_mirid. */
export function hostResourceClaim(claims: LoginClaims): string | undefined {
  return claims.xmsAzRid ?? claims.xmsMirid;
}

const normalise = (id: string): string => id.trim().replace(/\/+$/, '').toLowerCase();

/** Same ARM resource: equal ids, case-insensitively. */
export function sameResourceId(a: string, b: string): boolean {
  return normalise(a) === normalise(b);
}

export interface Placement {
  subscriptionId: string;
  resourceGroup: string;
}

export const vmId = (p: Placement, name: string): string =>
  `/subscriptions/${p.subscriptionId}/resourceGroups/${p.resourceGroup}/providers/Microsoft.Compute/virtualMachines/${name}`;

export const scaleSetId = (p: Placement, name: string): string =>
  `/subscriptions/${p.subscriptionId}/resourceGroups/${p.resourceGroup}/providers/Microsoft.Compute/virtualMachineScaleSets/${name}`;

/** The standalone VM a claim names (a flexible scale set's instance or a plain VM); uniform instances are not one. */
export function standaloneVm(claim: string): ParsedResourceId | undefined {
  const vm = parseResourceId(claim);
  return vm && vm.namespace.toLowerCase() === 'microsoft.compute' && vm.type.toLowerCase() === 'virtualmachines' ? vm : undefined;
}

/**
 * Whether a host claim is an instance of the named scale set: in uniform orchestration the claim is
 * the scale set itself (or one of its instances below it); in flexible orchestration it is a VM of the
 * same subscription and resource group named "<vmss>_<instance>".
 */
export function isScaleSetInstance(claim: string, p: Placement, vmss: string): boolean {
  const set = normalise(scaleSetId(p, vmss));
  const c = normalise(claim);
  if (c === set || (c.startsWith(`${set}/`) && /^\/virtualmachines\/[^/]+$/.test(c.slice(set.length)))) return true;
  const vm = standaloneVm(claim);
  if (!vm) return false;
  const prefix = `${vmss.toLowerCase()}_`;
  return sameResourceId(vmId(vm, ''), vmId(p, '')) && vm.name.toLowerCase().startsWith(prefix) && vm.name.length > prefix.length;
}
