/**
 * Verification of the caller's compute resource with ARM, for roles with subscription, resource group,
 * location or scale set bounds. The token's resource claim must name exactly the resource the caller
 * names (same subscription, resource group and name: whole ids, not substrings), ARM must confirm the
 * resource and list the token's oid among its identities (and, for a flexible scale set's instance, list the
 * instance VM as a member of the set), and the resource's placement must satisfy the role's bounds.
 */
import { BadRequestError, PermissionDeniedError } from '../../core/errors.ts';
import { parseResourceId, type ComputeClient, type ComputeResource, type ParsedResourceId } from '../../providers/azure/compute.ts';
import type { CallOptions } from '../../providers/azure/retry.ts';
import { checkPlacementBounds, type RoleBounds, type VerifiedPlacement } from './bounds.ts';
import { hostResourceClaim, isScaleSetInstance, sameResourceId, standaloneVm, vmId, type LoginClaims } from './claims.ts';

export interface ResourceLogin {
  subscription_id?: string;
  resource_group_name?: string;
  vm_name?: string;
  vmss_name?: string;
  resource_id?: string;
}

const deny = (what: string): PermissionDeniedError => new PermissionDeniedError(`permission denied: ${what}`);

/** Input rules checked before any token verification: what a login to a role with resource bounds must name. */
export function validateResourceLogin(login: ResourceLogin): void {
  if (!login.subscription_id || !login.resource_group_name) {
    throw new BadRequestError('missing required field "subscription_id" or "resource_group_name": both are required when the role has subscription, resource group, location or scale set bounds');
  }
  if (!login.vm_name && !login.vmss_name && !login.resource_id) {
    throw new BadRequestError('missing required field "vm_name", "vmss_name" or "resource_id": one is required when the role has subscription, resource group, location or scale set bounds');
  }
  if (!login.vmss_name && !login.vm_name && login.resource_id && !parseResourceId(login.resource_id)) {
    throw new BadRequestError('invalid value for field "resource_id": expected /subscriptions/<id>/resourceGroups/<name>/providers/<namespace>/<type>/<name>');
  }
}

interface Target {
  kind: 'virtual machine' | 'scale set' | 'resource';
  fetch: () => Promise<ComputeResource | undefined>;
  scaleSet?: string;
  /** A flexible scale set's instance is a VM of its own, named by the claim: ARM must list it as a member. */
  instance?: ParsedResourceId;
}

/** Which resource the login names (vmss_name wins over vm_name, which wins over resource_id, as in Vault) and its claim check. */
function target(compute: ComputeClient, login: Required<Pick<ResourceLogin, 'subscription_id' | 'resource_group_name'>> & ResourceLogin, claims: LoginClaims, opts: CallOptions): Target {
  const placement = { subscriptionId: login.subscription_id, resourceGroup: login.resource_group_name };
  const claim = hostResourceClaim(claims);
  if (!claim) throw deny('token has neither an xms_az_rid nor an xms_mirid claim naming its resource');
  if (login.vmss_name) {
    if (!isScaleSetInstance(claim, placement, login.vmss_name)) throw deny("token's resource claim is not an instance of vmss_name in subscription_id and resource_group_name");
    return {
      kind: 'scale set', scaleSet: login.vmss_name, instance: standaloneVm(claim),
      fetch: () => compute.getScaleSet(login.subscription_id, login.resource_group_name, login.vmss_name!, opts),
    };
  }
  if (login.vm_name) {
    if (!sameResourceId(claim, vmId(placement, login.vm_name))) throw deny("token's resource claim does not name vm_name in subscription_id and resource_group_name");
    return { kind: 'virtual machine', fetch: () => compute.getVirtualMachine(login.subscription_id, login.resource_group_name, login.vm_name!, opts) };
  }
  const id = parseResourceId(login.resource_id!)!;
  if (!sameResourceId(vmId(id, ''), vmId(placement, ''))) throw deny('resource_id is not in subscription_id and resource_group_name');
  if (!sameResourceId(claim, login.resource_id!)) throw deny("token's resource claim does not name resource_id");
  return { kind: 'resource', fetch: () => compute.getResource(login.resource_id!, opts) };
}

export async function verifyResource(compute: ComputeClient, bounds: RoleBounds, login: ResourceLogin, claims: LoginClaims, opts: CallOptions = {}): Promise<VerifiedPlacement> {
  validateResourceLogin(login);
  const full = { ...login, subscription_id: login.subscription_id!, resource_group_name: login.resource_group_name! };
  const t = target(compute, full, claims, opts);
  if (bounds.bound_scale_sets.length > 0 && !t.scaleSet) throw deny('role is bound to scale sets; log in with vmss_name');
  const resource = await t.fetch();
  if (!resource) throw deny(`the named ${t.kind} does not exist in subscription_id and resource_group_name`);
  if (!resource.principalIds.some((p) => p.toLowerCase() === claims.oid.toLowerCase())) throw deny(`token's object id is not an identity of the named ${t.kind}`);
  if (t.instance) {
    // The name only follows the scale set's convention; a VM outside it that carries the same identity must not pass as an instance.
    const vm = await compute.getVirtualMachine(t.instance.subscriptionId, t.instance.resourceGroup, t.instance.name, opts);
    if (!vm?.scaleSetId || !sameResourceId(vm.scaleSetId, resource.id)) {
      throw deny("the VM named by the token's resource claim is not a member of vmss_name");
    }
  }
  const placement: VerifiedPlacement = { subscriptionId: full.subscription_id, resourceGroup: full.resource_group_name, location: resource.location, scaleSet: t.scaleSet };
  checkPlacementBounds(bounds, placement);
  return placement;
}
