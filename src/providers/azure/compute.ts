/**
 * What the cloud auth method asks ARM about the resource a workload claims to run on: its location and
 * the principal ids of its managed identities. VMs and scale sets go through @azure/arm-compute; the
 * user-assigned identities of a flexible scale set (whose response omits their principal ids) and any
 * other resource named by id go through @azure/arm-msi's ServiceClient, whose pipeline already carries
 * ARM authentication.
 *
 * arm-compute 24 asks for a management.azure.com token whatever its endpoint unless given scopes, so the
 * environment's own ARM scope is passed explicitly (a sovereign cloud rejects a public-cloud token).
 */
import type { ComputeManagementClient, VirtualMachineIdentity, VirtualMachineScaleSetIdentity } from '@azure/arm-compute';
import type { ManagedServiceIdentityClient } from '@azure/arm-msi';
import { createPipelineRequest } from '@azure/core-rest-pipeline';
import type { TokenCredential } from '@azure/identity';
import { scopeFor, type AzureEnvironment } from './environments.ts';
import { AzureProviderError, isNotFound, toProviderError } from './errors.ts';
import { armObserver, observedRetry, type ProviderObserver } from './observer.ts';
import { callRetryOptions, withRetry, type CallOptions, type RetryOptions } from './retry.ts';

export interface ComputeResource {
  id: string;
  location: string;
  /** System-assigned principal id and every user-assigned identity's principal id. */
  principalIds: string[];
  /** For a VM: the scale set it belongs to (flexible orchestration), if any. */
  scaleSetId?: string;
}

export interface ComputeClient {
  /** Undefined when ARM says the VM does not exist. */
  getVirtualMachine(subscriptionId: string, resourceGroup: string, name: string, opts?: CallOptions): Promise<ComputeResource | undefined>;
  /** Uniform or flexible orchestration; user-assigned principal ids are resolved either way. */
  getScaleSet(subscriptionId: string, resourceGroup: string, name: string, opts?: CallOptions): Promise<ComputeResource | undefined>;
  /**
   * Any resource with a managed identity (App Service, Functions, Arc machines ...), or a user-assigned identity
   * itself, at its provider's newest stable API version.
   */
  getResource(resourceId: string, opts?: CallOptions): Promise<ComputeResource | undefined>;
}

export interface ComputeClientOptions {
  environment: AzureEnvironment;
  credential: TokenCredential;
  retry?: RetryOptions;
  secrets?: string[];
  observer?: ProviderObserver;
}

/** ARM ids: /subscriptions/{s}/resourceGroups/{rg}/providers/{namespace}/{type}/{name}[/{type}/{name}...]. */
export interface ParsedResourceId {
  subscriptionId: string;
  resourceGroup: string;
  namespace: string;
  /** Full type below the namespace, e.g. "virtualMachines" or "sites/slots". */
  type: string;
  name: string;
}

export function parseResourceId(id: string): ParsedResourceId | undefined {
  const m = /^\/subscriptions\/([^/]+)\/resourceGroups\/([^/]+)\/providers\/([^/]+)\/((?:[^/]+\/[^/]+)(?:\/[^/]+\/[^/]+)*)$/i.exec(id.trim());
  if (!m) return undefined;
  const parts = m[4].split('/');
  const type = parts.filter((_, i) => i % 2 === 0).join('/');
  return { subscriptionId: m[1], resourceGroup: m[2], namespace: m[3], type, name: parts[parts.length - 1] };
}

const PROVIDERS_API_VERSION = '2021-04-01';
const FALLBACK_API_VERSION = '2022-03-01';

interface GenericResource {
  id?: string;
  location?: string;
  identity?: { principalId?: string; userAssignedIdentities?: Record<string, { principalId?: string }> };
  /** A user-assigned identity carries its own principal id here. */
  properties?: { principalId?: string };
}

const isUserAssignedIdentity = (r: ParsedResourceId) => r.namespace.toLowerCase() === 'microsoft.managedidentity' && r.type.toLowerCase() === 'userassignedidentities';

export class SdkComputeClient implements ComputeClient {
  readonly #opts: ComputeClientOptions;
  readonly #retry: RetryOptions;
  readonly #compute = new Map<string, ComputeManagementClient>();
  readonly #msi = new Map<string, ManagedServiceIdentityClient>();
  /** Newest stable API version per provider resource type, for the process lifetime (as Vault). */
  readonly #apiVersions = new Map<string, string>();

  constructor(opts: ComputeClientOptions) {
    this.#opts = opts;
    this.#retry = observedRetry(opts.retry, opts.observer, 'arm_compute');
  }

  /** Options of every ARM client this makes: retry.ts is the only retry layer; the observer sees each answer. */
  #clientOptions() {
    const { environment, observer } = this.#opts;
    return {
      endpoint: environment.resourceManagerEndpoint,
      retryOptions: { maxRetries: 0 },
      additionalPolicies: observer && [{ policy: armObserver(observer, 'arm_compute'), position: 'perCall' as const }],
    };
  }

  async getVirtualMachine(subscriptionId: string, resourceGroup: string, name: string, opts?: CallOptions): Promise<ComputeResource | undefined> {
    const vm = await this.#call('get virtual machine', opts, async () => (await this.#computeFor(subscriptionId)).virtualMachines.get(resourceGroup, name));
    if (!vm) return undefined;
    return { id: vm.id ?? '', location: vm.location ?? '', principalIds: await this.#principals(vm.identity, opts), scaleSetId: vm.virtualMachineScaleSet?.id };
  }

  async getScaleSet(subscriptionId: string, resourceGroup: string, name: string, opts?: CallOptions): Promise<ComputeResource | undefined> {
    const vmss = await this.#call('get virtual machine scale set', opts, async () => (await this.#computeFor(subscriptionId)).virtualMachineScaleSets.get(resourceGroup, name));
    if (!vmss) return undefined;
    return { id: vmss.id ?? '', location: vmss.location ?? '', principalIds: await this.#principals(vmss.identity, opts) };
  }

  async getResource(resourceId: string, opts?: CallOptions): Promise<ComputeResource | undefined> {
    const parsed = parseResourceId(resourceId);
    if (!parsed) throw new AzureProviderError('input', 'resource_id: not an ARM resource id (/subscriptions/<id>/resourceGroups/<name>/providers/<namespace>/<type>/<name>)');
    const apiVersion = await this.#apiVersion(parsed, opts);
    const res = await this.#get<GenericResource>('get resource', `${resourceId}?api-version=${apiVersion}`, parsed.subscriptionId, opts);
    if (!res) return undefined;
    const principalIds = await this.#principals(res.identity, opts);
    // A user-assigned identity is the identity itself: a workload that presents its token directly (AKS workload
    // identity, any federated workload) names the identity as its resource, and the token's xms_mirid names it too.
    if (isUserAssignedIdentity(parsed) && res.properties?.principalId) principalIds.push(res.properties.principalId);
    return { id: res.id ?? resourceId, location: res.location ?? '', principalIds };
  }

  // The SDKs are loaded at the first call, not at start: their generated clients are ~0.1 s of a start that may never
  // use them.
  async #computeFor(subscriptionId: string): Promise<ComputeManagementClient> {
    let client = this.#compute.get(subscriptionId);
    if (!client) {
      const { environment, credential } = this.#opts;
      const { ComputeManagementClient } = await import('@azure/arm-compute');
      client = this.#compute.get(subscriptionId) ?? new ComputeManagementClient(credential, subscriptionId, { ...this.#clientOptions(), credentials: { scopes: [scopeFor(environment.resourceManagerEndpoint)] } });
      this.#compute.set(subscriptionId, client);
    }
    return client;
  }

  async #msiFor(subscriptionId: string): Promise<ManagedServiceIdentityClient> {
    let client = this.#msi.get(subscriptionId);
    if (!client) {
      const { environment, credential } = this.#opts;
      const { ManagedServiceIdentityClient } = await import('@azure/arm-msi');
      client = this.#msi.get(subscriptionId) ?? new ManagedServiceIdentityClient(credential, subscriptionId, { ...this.#clientOptions(), credentialScopes: [scopeFor(environment.resourceManagerEndpoint)] });
      this.#msi.set(subscriptionId, client);
    }
    return client;
  }

  /** Principal ids of an identity block; user-assigned entries without one are looked up by their own id. */
  async #principals(identity: VirtualMachineIdentity | VirtualMachineScaleSetIdentity | GenericResource['identity'] | undefined, opts?: CallOptions): Promise<string[]> {
    if (!identity) return [];
    const out = identity.principalId ? [identity.principalId] : [];
    for (const [uaiId, uai] of Object.entries(identity.userAssignedIdentities ?? {})) {
      if (uai?.principalId) {
        out.push(uai.principalId);
        continue;
      }
      const parsed = parseResourceId(uaiId);
      if (!parsed) continue;
      const found = await this.#call('get user-assigned identity', opts, async () => (await this.#msiFor(parsed.subscriptionId)).userAssignedIdentities.get(parsed.resourceGroup, parsed.name));
      if (found?.principalId) out.push(found.principalId);
    }
    return out;
  }

  async #apiVersion(parsed: ParsedResourceId, opts?: CallOptions): Promise<string> {
    const key = `${parsed.namespace}/${parsed.type}`.toLowerCase();
    const cached = this.#apiVersions.get(key);
    if (cached) return cached;
    const provider = await this.#get<{ resourceTypes?: Array<{ resourceType?: string; apiVersions?: string[] }> }>(
      'get resource provider', `/subscriptions/${parsed.subscriptionId}/providers/${parsed.namespace}?api-version=${PROVIDERS_API_VERSION}`, parsed.subscriptionId, opts,
    );
    const versions = provider?.resourceTypes?.find((t) => t.resourceType?.toLowerCase() === parsed.type.toLowerCase())?.apiVersions ?? [];
    const version = versions.find((v) => !v.toLowerCase().includes('preview')) ?? FALLBACK_API_VERSION;
    this.#apiVersions.set(key, version);
    return version;
  }

  async #get<T>(operation: string, path: string, subscriptionId: string, opts?: CallOptions): Promise<T | undefined> {
    const client = await this.#msiFor(subscriptionId);
    return this.#call(operation, opts, async () => {
      const res = await client.sendRequest(createPipelineRequest({ url: `${this.#opts.environment.resourceManagerEndpoint}${path}`, method: 'GET' }));
      const body: unknown = res.bodyAsText ? JSON.parse(res.bodyAsText) : {};
      if (res.status >= 400) {
        const error = (body as { error?: { code?: string; message?: string } }).error ?? {};
        throw Object.assign(new Error(error.message ?? `HTTP ${res.status}`), { statusCode: res.status, code: error.code, response: res });
      }
      return body as T;
    });
  }

  /** Retries by status; a 404 (or ResourceNotFound) means "no such resource", not an outage. */
  async #call<T>(operation: string, opts: CallOptions | undefined, op: () => Promise<T>): Promise<T | undefined> {
    try {
      return await withRetry(op, { ...this.#retry, ...callRetryOptions(opts) });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw toProviderError(err, operation, this.#opts.secrets);
    }
  }
}
