// ARM resources that carry managed identities, for the cloud auth method: virtual machines, scale
// sets (uniform and flexible orchestration), user-assigned identities, any other resource type
// (App Service and the like, read at its provider's API version) and the provider metadata that
// lists those API versions. Every identity is a managed-identity service principal in the directory,
// so its principal id is the `oid` of the tokens it gets.
import { armError, armGuarded } from './arm.ts';
import { json, type EmulatorRequest, type Router, type ServiceContext } from './http.ts';
import { addManagedIdentity } from './managed-identity.ts';
import type { EmulatorState, ManagedIdentity } from './state.ts';

export type Orchestration = 'Uniform' | 'Flexible';

export interface EmulatedResource {
  id: string;
  /** "Microsoft.Compute/virtualMachines" */
  type: string;
  name: string;
  location: string;
  systemIdentity?: ManagedIdentity;
  userAssigned: UserAssignedIdentity[];
  orchestration?: Orchestration;
  /** For a VM: the scale set it is an instance of. */
  scaleSetId?: string;
}

export interface UserAssignedIdentity {
  id: string;
  name: string;
  location: string;
  identity: ManagedIdentity;
}

export interface ResourcePlacement {
  subscriptionId: string;
  resourceGroup: string;
  name: string;
  location?: string;
}

interface HostInput extends ResourcePlacement {
  systemAssigned?: boolean;
  userAssigned?: UserAssignedIdentity[];
  /** A VM that is an instance of this (flexible) scale set. */
  scaleSet?: EmulatedResource;
}

const resourceId = (p: ResourcePlacement, namespace: string, type: string): string =>
  `/subscriptions/${p.subscriptionId}/resourceGroups/${p.resourceGroup}/providers/${namespace}/${type}/${p.name}`;

/** API versions the emulated providers answer to; anything else is ARM's NoRegisteredProviderFound. */
const API_VERSIONS: Record<string, string[]> = {
  'microsoft.compute/virtualmachines': ['2026-03-01', '2024-07-01'],
  'microsoft.compute/virtualmachinescalesets': ['2026-03-01', '2024-07-01'],
  'microsoft.managedidentity/userassignedidentities': ['2024-11-30', '2023-01-31'],
  // Newest first, the way ARM lists them, with a preview ahead of the stable one a client must pick.
  'microsoft.web/sites': ['2024-09-01-preview', '2023-12-01', '2022-09-01'],
};

export class ComputeState {
  readonly #state: EmulatorState;
  /** Keyed by lower-cased ARM id: ARM ids are case-insensitive. */
  readonly resources = new Map<string, EmulatedResource>();
  readonly identities = new Map<string, UserAssignedIdentity>();

  constructor(state: EmulatorState) {
    this.#state = state;
  }

  addUserAssignedIdentity(p: ResourcePlacement): UserAssignedIdentity {
    const id = resourceId(p, 'Microsoft.ManagedIdentity', 'userAssignedIdentities');
    const identity = addManagedIdentity(this.#state, { name: p.name, systemAssigned: false, resourceId: id });
    const uai: UserAssignedIdentity = { id, name: p.name, location: p.location ?? 'eastus', identity };
    this.identities.set(id.toLowerCase(), uai);
    return uai;
  }

  addVirtualMachine(input: HostInput): EmulatedResource {
    return this.#add(input, 'Microsoft.Compute', 'virtualMachines');
  }

  addScaleSet(input: HostInput & { orchestration: Orchestration }): EmulatedResource {
    return this.#add(input, 'Microsoft.Compute', 'virtualMachineScaleSets');
  }

  /** Any other resource with a managed identity, e.g. namespace "Microsoft.Web", type "sites". */
  addResource(input: HostInput & { namespace: string; type: string }): EmulatedResource {
    return this.#add(input, input.namespace, input.type);
  }

  #add(input: HostInput & { orchestration?: Orchestration }, namespace: string, type: string): EmulatedResource {
    const id = resourceId(input, namespace, type);
    const resource: EmulatedResource = {
      id, type: `${namespace}/${type}`, name: input.name, location: input.location ?? 'eastus', userAssigned: input.userAssigned ?? [],
      orchestration: input.orchestration, scaleSetId: input.scaleSet?.id,
      systemIdentity: input.systemAssigned === false ? undefined : addManagedIdentity(this.#state, { name: input.name, systemAssigned: true, resourceId: id }),
    };
    this.resources.set(id.toLowerCase(), resource);
    return resource;
  }
}

function identityView(r: EmulatedResource, tenantId: string): Record<string, unknown> | undefined {
  const types = [r.systemIdentity ? 'SystemAssigned' : '', r.userAssigned.length ? 'UserAssigned' : ''].filter(Boolean);
  if (types.length === 0) return undefined;
  const userAssignedIdentities = Object.fromEntries(r.userAssigned.map((u) => [u.id, r.orchestration === 'Flexible'
    // A flexible scale set's response names its user-assigned identities without their principal ids.
    ? {}
    : { principalId: u.identity.principalId, clientId: u.identity.clientId }]));
  return {
    type: types.join(', '),
    ...(r.systemIdentity ? { principalId: r.systemIdentity.principalId, tenantId } : {}),
    ...(r.userAssigned.length ? { userAssignedIdentities } : {}),
  };
}

function resourceView(r: EmulatedResource, tenantId: string): Record<string, unknown> {
  const properties: Record<string, unknown> = { provisioningState: 'Succeeded' };
  if (r.orchestration) properties.orchestrationMode = r.orchestration;
  if (r.scaleSetId) properties.virtualMachineScaleSet = { id: r.scaleSetId };
  return { id: r.id, name: r.name, type: r.type, location: r.location, identity: identityView(r, tenantId), properties };
}

const RESOURCE_PATH = /^\/subscriptions\/(?<sub>[^/]+)\/resourceGroups\/(?<rg>[^/]+)\/providers\/(?<namespace>[^/]+)\/(?<type>[^/]+)\/(?<name>[^/]+)$/i;
const PROVIDER_PATH = /^\/subscriptions\/(?<sub>[^/]+)\/providers\/(?<namespace>[^/]+)$/i;

export function registerArmCompute(router: Router, ctx: ServiceContext, compute: ComputeState): void {
  const { state } = ctx;
  router.add('GET', PROVIDER_PATH, (req) => armGuarded(ctx, `${req.params.namespace}/read`, () => `/subscriptions/${req.params.sub}`, () => {
    const prefix = `${req.params.namespace.toLowerCase()}/`;
    const resourceTypes = Object.entries(API_VERSIONS)
      .filter(([t]) => t.startsWith(prefix))
      .map(([t, apiVersions]) => ({ resourceType: t.slice(prefix.length), apiVersions }));
    if (resourceTypes.length === 0) return armError(404, 'InvalidResourceNamespace', `The resource namespace '${req.params.namespace}' is invalid.`);
    return json(200, { id: `/subscriptions/${req.params.sub}/providers/${req.params.namespace}`, namespace: req.params.namespace, registrationState: 'Registered', resourceTypes });
  })(req));

  router.add('GET', RESOURCE_PATH, (req: EmulatorRequest) => {
    const { namespace, type } = req.params;
    const action = `${namespace}/${type}/read`;
    const scope = req.path;
    return armGuarded(ctx, action, () => scope, () => {
      const versions = API_VERSIONS[`${namespace}/${type}`.toLowerCase()];
      if (!versions?.includes(req.query.get('api-version') ?? '')) {
        return armError(400, 'NoRegisteredProviderFound', `No registered resource provider found for location and API version '${req.query.get('api-version')}' and type '${type}'.`);
      }
      if (`${namespace}/${type}`.toLowerCase() === 'microsoft.managedidentity/userassignedidentities') {
        const uai = compute.identities.get(scope.toLowerCase());
        if (!uai) return armError(404, 'ResourceNotFound', `The Resource '${namespace}/${type}/${req.params.name}' under resource group '${req.params.rg}' was not found.`);
        return json(200, {
          id: uai.id, name: uai.name, type: 'Microsoft.ManagedIdentity/userAssignedIdentities', location: uai.location,
          properties: { tenantId: state.tenantId, principalId: uai.identity.principalId, clientId: uai.identity.clientId },
        });
      }
      const resource = compute.resources.get(scope.toLowerCase());
      if (!resource) return armError(404, 'ResourceNotFound', `The Resource '${namespace}/${type}/${req.params.name}' under resource group '${req.params.rg}' was not found.`);
      return json(200, resourceView(resource, state.tenantId));
    })(req);
  });
}
