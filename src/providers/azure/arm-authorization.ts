/**
 * Role definitions and role assignments through @azure/arm-authorization 9, behind RoleClient.
 * The SDK's `endpoint` option is what moves it off management.azure.com; its paths are
 * `/{scope}/...` with the scope unencoded, so a scope written `/subscriptions/...` must lose its
 * leading slash or every request path starts with `//`.
 */
import type { AuthorizationManagementClient, RoleAssignment, RoleDefinition } from '@azure/arm-authorization';
import type { TokenCredential } from '@azure/identity';
import { scopeFor, type AzureEnvironment } from './environments.ts';
import { describeUpstream, isNotFound, toProviderError } from './errors.ts';
import { odataString } from './odata.ts';
import { armObserver, observedRetry, type ProviderObserver } from './observer.ts';
import { callRetryOptions, createOnce, principalNotReplicated, providerCall, type CallContext, type CallOptions, type ReplicationCheck, type RetryOptions } from './retry.ts';

export interface RoleDefinitionInfo {
  /** Full ARM id, e.g. /subscriptions/<sub>/providers/Microsoft.Authorization/roleDefinitions/<guid>. */
  id: string;
  name: string;
  roleName: string;
}

export interface RoleAssignmentInfo {
  id: string;
  name: string;
  scope: string;
  roleDefinitionId: string;
  principalId: string;
}

export interface NewRoleAssignment {
  scope: string;
  /** A GUID chosen by the caller once per logical assignment, which makes the PUT idempotent. */
  name: string;
  roleDefinitionId: string;
  principalId: string;
  principalType?: 'ServicePrincipal' | 'User' | 'Group';
}

export interface RoleClient {
  getRoleDefinition(roleDefinitionId: string, opts?: CallOptions): Promise<RoleDefinitionInfo | undefined>;
  /** ARM matches role names case-insensitively; more than one result is the caller's ambiguity. */
  findRoleDefinitionsByName(scope: string, roleName: string, opts?: CallOptions): Promise<RoleDefinitionInfo[]>;
  /** Retries while the principal replicates to ARM; an identical existing assignment is returned. */
  createRoleAssignment(input: NewRoleAssignment, opts?: CallOptions): Promise<RoleAssignmentInfo>;
  getRoleAssignment(roleAssignmentId: string, opts?: CallOptions): Promise<RoleAssignmentInfo | undefined>;
  /** False when already gone. */
  deleteRoleAssignment(roleAssignmentId: string, opts?: CallOptions): Promise<boolean>;
}

/** Strips the leading slash the SDK would double; ARM ids themselves keep theirs. */
export function sdkScope(scope: string): string {
  return scope.replace(/^\/+/, '');
}

const toDefinition = (d: RoleDefinition): RoleDefinitionInfo => ({ id: d.id ?? '', name: d.name ?? '', roleName: d.roleName ?? '' });
const toAssignment = (a: RoleAssignment): RoleAssignmentInfo => ({
  id: a.id ?? '', name: a.name ?? '', scope: a.scope ?? '', roleDefinitionId: a.roleDefinitionId ?? '', principalId: a.principalId ?? '',
});

export interface RoleClientOptions {
  environment: AzureEnvironment;
  credential: TokenCredential;
  subscriptionId: string;
  retry?: RetryOptions;
  secrets?: string[];
  observer?: ProviderObserver;
}

export class SdkRoleClient implements RoleClient {
  readonly #opts: RoleClientOptions;
  #client: Promise<AuthorizationManagementClient> | undefined;
  readonly #ctx: CallContext;

  constructor(opts: RoleClientOptions) {
    this.#opts = opts;
    this.#ctx = { retry: observedRetry(opts.retry, opts.observer, 'arm_authorization'), secrets: opts.secrets ?? [] };
  }

  /** The SDK is loaded at the first call, not at start: its generated client is ~0.1 s of a start that may never use it. */
  #sdk(): Promise<AuthorizationManagementClient> {
    const opts = this.#opts;
    return (this.#client ??= import('@azure/arm-authorization').then(({ AuthorizationManagementClient }) => new AuthorizationManagementClient(opts.credential, opts.subscriptionId, {
      endpoint: opts.environment.resourceManagerEndpoint,
      credentialScopes: [scopeFor(opts.environment.resourceManagerEndpoint)],
      // retry.ts is the only retry layer, bounded by the caller's deadline.
      retryOptions: { maxRetries: 0 },
      redirectOptions: { maxRetries: 0 },
      additionalPolicies: opts.observer && [{ policy: armObserver(opts.observer, 'arm_authorization'), position: 'perCall' }],
    })).catch((err: unknown) => {
      // A load or construction that failed (e.g. out of file descriptors) is tried again by the next call.
      this.#client = undefined;
      throw err;
    }));
  }

  #call<T>(operation: string, fn: () => Promise<T>, opts: CallOptions = {}, notReplicated?: ReplicationCheck): Promise<T> {
    return providerCall(operation, fn, this.#ctx, opts, notReplicated);
  }

  getRoleDefinition(roleDefinitionId: string, opts?: CallOptions): Promise<RoleDefinitionInfo | undefined> {
    return this.#call(`get role definition ${roleDefinitionId}`, async () => {
      try {
        return toDefinition(await (await this.#sdk()).roleDefinitions.getById(sdkScope(roleDefinitionId), { abortSignal: opts?.signal }));
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    }, opts);
  }

  async findRoleDefinitionsByName(scope: string, roleName: string, opts?: CallOptions): Promise<RoleDefinitionInfo[]> {
    return this.#call(`find role definition "${roleName}"`, async () => {
      const found: RoleDefinitionInfo[] = [];
      // The pager follows nextLink; a failure part-way restarts the listing from the first page.
      for await (const d of (await this.#sdk()).roleDefinitions.list(sdkScope(scope), { filter: `roleName eq ${odataString(roleName)}`, abortSignal: opts?.signal })) {
        found.push(toDefinition(d));
      }
      return found;
    }, opts);
  }

  async createRoleAssignment(input: NewRoleAssignment, opts?: CallOptions): Promise<RoleAssignmentInfo> {
    const create = async (): Promise<RoleAssignmentInfo> =>
      toAssignment(await (await this.#sdk()).roleAssignments.create(sdkScope(input.scope), input.name, {
        roleDefinitionId: input.roleDefinitionId,
        principalId: input.principalId,
        // Microsoft's documented mitigation for principals created moments ago.
        principalType: input.principalType ?? 'ServicePrincipal',
      }, { abortSignal: opts?.signal }));
    const findExisting = async (): Promise<RoleAssignmentInfo | undefined> => {
      const wantedDef = input.roleDefinitionId.split('/').pop()!.toLowerCase();
      for await (const a of (await this.#sdk()).roleAssignments.listForScope(sdkScope(input.scope), { filter: `principalId eq ${odataString(input.principalId)}` })) {
        const info = toAssignment(a);
        if (info.scope.toLowerCase() === input.scope.toLowerCase() && info.roleDefinitionId.split('/').pop()!.toLowerCase() === wantedDef) return info;
      }
      return undefined;
    };
    try {
      return await createOnce(create, findExisting, (err) => describeUpstream(err).code === 'RoleAssignmentExists', {
        ...this.#ctx.retry, ...callRetryOptions(opts), notReplicated: principalNotReplicated,
      });
    } catch (err) {
      throw toProviderError(err, `create role assignment at ${input.scope}`, this.#ctx.secrets);
    }
  }

  getRoleAssignment(roleAssignmentId: string, opts?: CallOptions): Promise<RoleAssignmentInfo | undefined> {
    return this.#call(`get role assignment ${roleAssignmentId}`, async () => {
      try {
        return toAssignment(await (await this.#sdk()).roleAssignments.getById(sdkScope(roleAssignmentId), { abortSignal: opts?.signal }));
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    }, opts);
  }

  deleteRoleAssignment(roleAssignmentId: string, opts?: CallOptions): Promise<boolean> {
    return this.#call(`delete role assignment ${roleAssignmentId}`, async () => {
      try {
        const res = await (await this.#sdk()).roleAssignments.deleteById(sdkScope(roleAssignmentId), { abortSignal: opts?.signal });
        // ARM answers 204 with no body when there was nothing to delete.
        return res.id !== undefined;
      } catch (err) {
        if (isNotFound(err)) return false;
        throw err;
      }
    }, opts);
  }
}
