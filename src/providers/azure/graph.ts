/**
 * The narrow Graph surface the cloud mounts use, behind an interface so engines can be unit tested
 * with fakes. The implementation uses @microsoft/microsoft-graph-client with the environment's Graph
 * base URL, a middleware chain without the SDK's retry and redirect handlers (retry.ts is the one
 * retry layer; redirects are refused as in Vault), and follows @odata.nextLink on every list.
 */
import { AuthenticationHandler, Client, GraphError, HTTPMessageHandler, type Middleware } from '@microsoft/microsoft-graph-client';
import type { TokenCredential } from '@azure/identity';
import type { AzureEnvironment } from './environments.ts';
import { scopeFor } from './environments.ts';
import { AzureProviderError, describeUpstream, isNotFound, redact, toProviderError } from './errors.ts';
import { odataString } from './odata.ts';
import { graphObserver, observedRetry, type ProviderObserver } from './observer.ts';
import { callRetryOptions, createOnce, providerCall, type CallContext, type CallOptions, type ReplicationCheck, type RetryOptions } from './retry.ts';

export type { CallOptions } from './retry.ts';

export interface PasswordCredentialInfo {
  keyId: string;
  displayName: string | null;
  hint: string | null;
  startDateTime: string | null;
  endDateTime: string | null;
}

export interface NewPassword extends PasswordCredentialInfo {
  secretText: string;
  endDateTime: string;
}

export interface GraphApplication {
  id: string;
  appId: string;
  displayName: string;
  signInAudience: string | null;
  tags: string[];
  passwordCredentials: PasswordCredentialInfo[];
}

export interface GraphServicePrincipal {
  id: string;
  appId: string;
  displayName: string;
  passwordCredentials: PasswordCredentialInfo[];
}

export interface GraphGroup {
  id: string;
  displayName: string;
}

export interface DirectoryObjectRef {
  id: string;
  type: string;
}

export interface NewApplication {
  /** Should be unique (e.g. `strongroom-<uuid>`): it is how a create whose answer was lost is found. */
  displayName: string;
  tags?: string[];
  signInAudience?: string;
}

export interface NewPasswordInput {
  /** Should be unique per password: a lost addPassword answer is cleaned up by it before retrying. */
  displayName: string;
  endDateTime: Date;
  /** When the password starts to authenticate (Graph's default: now); a staged secret starts later. */
  startDateTime?: Date;
}

export interface GraphClient {
  createApplication(input: NewApplication, opts?: CallOptions): Promise<GraphApplication>;
  getApplication(objectId: string, opts?: CallOptions): Promise<GraphApplication | undefined>;
  /** At most one application has a given appId; more is an error. */
  findApplicationByAppId(appId: string, opts?: CallOptions): Promise<GraphApplication | undefined>;
  findApplicationsByDisplayName(displayName: string, opts?: CallOptions): Promise<GraphApplication[]>;
  /** Soft delete, and also from directory/deletedItems when `permanently`. False when already gone. */
  deleteApplication(objectId: string, opts?: CallOptions & { permanently?: boolean }): Promise<boolean>;
  addApplicationPassword(objectId: string, input: NewPasswordInput, opts?: CallOptions): Promise<NewPassword>;
  /** False when no password with that keyId exists (already removed). */
  removeApplicationPassword(objectId: string, keyId: string, opts?: CallOptions): Promise<boolean>;
  /** Idempotent: retries never create a second service principal for the appId. */
  createServicePrincipal(appId: string, opts?: CallOptions): Promise<GraphServicePrincipal>;
  getServicePrincipal(objectId: string, opts?: CallOptions): Promise<GraphServicePrincipal | undefined>;
  findServicePrincipalByAppId(appId: string, opts?: CallOptions): Promise<GraphServicePrincipal | undefined>;
  deleteServicePrincipal(objectId: string, opts?: CallOptions & { permanently?: boolean }): Promise<boolean>;
  addServicePrincipalPassword(objectId: string, input: NewPasswordInput, opts?: CallOptions): Promise<NewPassword>;
  removeServicePrincipalPassword(objectId: string, keyId: string, opts?: CallOptions): Promise<boolean>;
  getGroup(objectId: string, opts?: CallOptions): Promise<GraphGroup | undefined>;
  findGroupsByDisplayName(displayName: string, opts?: CallOptions): Promise<GraphGroup[]>;
  /** Idempotent: an existing membership is success. Retries while a new principal replicates. */
  addGroupMember(groupId: string, memberId: string, opts?: CallOptions): Promise<void>;
  /** False when the membership (or group) is already gone. */
  removeGroupMember(groupId: string, memberId: string, opts?: CallOptions): Promise<boolean>;
  listGroupMembers(groupId: string, opts?: CallOptions): Promise<DirectoryObjectRef[]>;
}

const GRAPH_HOSTS = new Set(['graph.microsoft.com', 'graph.microsoft.us', 'dod-graph.microsoft.us', 'microsoftgraph.chinacloudapi.cn', 'graph.microsoft.de']);

type Raw = Record<string, unknown>;

const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const strOrNull = (v: unknown): string | null => (typeof v === 'string' ? v : null);

function toPassword(r: Raw): PasswordCredentialInfo {
  return { keyId: str(r.keyId), displayName: strOrNull(r.displayName), hint: strOrNull(r.hint), startDateTime: strOrNull(r.startDateTime), endDateTime: strOrNull(r.endDateTime) };
}
const passwords = (v: unknown): PasswordCredentialInfo[] => (Array.isArray(v) ? (v as Raw[]).map(toPassword) : []);

function toApplication(r: Raw): GraphApplication {
  return {
    id: str(r.id), appId: str(r.appId), displayName: str(r.displayName), signInAudience: strOrNull(r.signInAudience),
    tags: Array.isArray(r.tags) ? (r.tags as string[]) : [], passwordCredentials: passwords(r.passwordCredentials),
  };
}
function toServicePrincipal(r: Raw): GraphServicePrincipal {
  return { id: str(r.id), appId: str(r.appId), displayName: str(r.displayName), passwordCredentials: passwords(r.passwordCredentials) };
}
const toGroup = (r: Raw): GraphGroup => ({ id: str(r.id), displayName: str(r.displayName) });

const isCode = (code: string) => (err: unknown): boolean => describeUpstream(err).code === code;
/** Graph answers these while an object created moments ago has not reached the replica serving the call. */
const APP_NOT_REPLICATED: ReplicationCheck = (i) => i.status === 400 && /does not reference a valid application object/i.test(i.message);
const MEMBER_NOT_REPLICATED: ReplicationCheck = (i) => i.code === 'Request_ResourceNotFound';

export interface GraphClientOptions {
  environment: AzureEnvironment;
  credential: TokenCredential;
  retry?: RetryOptions;
  /** Secrets to scrub from error messages (the configured client secret). */
  secrets?: string[];
  observer?: ProviderObserver;
}

export class SdkGraphClient implements GraphClient {
  readonly #client: Client;
  readonly #ctx: CallContext;
  readonly #baseUrl: string;

  constructor(opts: GraphClientOptions) {
    const base = new URL(opts.environment.microsoftGraphEndpoint);
    const scope = scopeFor(opts.environment.microsoftGraphEndpoint);
    const credential = opts.credential;
    const authProvider = {
      getAccessToken: async (): Promise<string> => {
        try {
          const token = await credential.getToken(scope);
          if (!token) throw new Error('the credential returned no token');
          return token.token;
        } catch (err) {
          // The Graph client rewraps this as a GraphError that keeps message and name only.
          const e = new Error(redact(describeUpstream(err).message, opts.secrets ?? []));
          e.name = 'AzureAuthenticationError';
          throw e;
        }
      },
    };
    this.#client = Client.initWithMiddleware({
      baseUrl: opts.environment.microsoftGraphEndpoint,
      defaultVersion: 'v1.0',
      // Without this the auth middleware silently sends no token to a non-Microsoft host.
      customHosts: GRAPH_HOSTS.has(base.hostname) ? undefined : new Set([base.hostname]),
      middleware: [new AuthenticationHandler(authProvider), ...(opts.observer ? [graphObserver(opts.observer)] : []), new HTTPMessageHandler()] satisfies Middleware[],
    });
    this.#baseUrl = opts.environment.microsoftGraphEndpoint.replace(/\/+$/, '');
    this.#ctx = { retry: observedRetry(opts.retry, opts.observer, 'graph'), secrets: opts.secrets ?? [], unwrap: unwrapAuth };
  }

  #call<T>(operation: string, fn: () => Promise<T>, opts: CallOptions = {}, notReplicated?: ReplicationCheck): Promise<T> {
    return providerCall(operation, fn, this.#ctx, opts, notReplicated);
  }

  async #getOrUndefined<T>(operation: string, path: string, map: (r: Raw) => T, opts?: CallOptions): Promise<T | undefined> {
    return this.#call(operation, async () => {
      try {
        return map((await this.#client.api(path).get()) as Raw);
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    }, opts);
  }

  /** Every page of a collection, following @odata.nextLink; each page is retried on its own. */
  async #listAll(operation: string, path: string, query: Record<string, string>, opts?: CallOptions): Promise<Raw[]> {
    const rows: Raw[] = [];
    let next: string | undefined;
    let request = this.#client.api(path).query(query);
    for (;;) {
      const current = request;
      const page = (await this.#call(operation, () => current.get(), opts)) as { value?: Raw[]; '@odata.nextLink'?: string };
      rows.push(...(page.value ?? []));
      next = page['@odata.nextLink'];
      if (!next) return rows;
      request = this.#client.api(next);
    }
  }

  async #delete(operation: string, path: string, opts?: CallOptions): Promise<boolean> {
    return this.#call(operation, async () => {
      try {
        await this.#client.api(path).delete();
        return true;
      } catch (err) {
        if (isNotFound(err)) return false;
        throw err;
      }
    }, opts);
  }

  async #addPassword(kind: 'applications' | 'servicePrincipals', objectId: string, input: NewPasswordInput, opts?: CallOptions): Promise<NewPassword> {
    const operation = `add password to ${kind === 'applications' ? 'application' : 'service principal'} ${objectId}`;
    let outcomeUnknown = false;
    const created = await this.#call(operation, async () => {
      if (outcomeUnknown) await this.#removePasswordsNamed(kind, objectId, input.displayName, opts);
      try {
        return (await this.#client.api(`/${kind}/${encodeURIComponent(objectId)}/addPassword`).post({
          passwordCredential: {
            displayName: input.displayName, endDateTime: input.endDateTime.toISOString(),
            ...(input.startDateTime ? { startDateTime: input.startDateTime.toISOString() } : {}),
          },
        })) as Raw;
      } catch (err) {
        // A lost answer may hide a password we can never read; remove it before making another.
        const info = describeUpstream(err);
        outcomeUnknown ||= info.network || (info.status !== undefined && info.status >= 500);
        throw err;
      }
    }, opts);
    const secretText = str(created.secretText);
    if (!secretText) throw new AzureProviderError('upstream', `${operation}: Graph returned no secretText`);
    return { ...toPassword(created), secretText, endDateTime: str(created.endDateTime) || input.endDateTime.toISOString() };
  }

  async #removePasswordsNamed(kind: 'applications' | 'servicePrincipals', objectId: string, displayName: string, opts?: CallOptions): Promise<void> {
    const owner = (await this.#client.api(`/${kind}/${encodeURIComponent(objectId)}`).select('passwordCredentials').get()) as Raw;
    for (const p of passwords(owner.passwordCredentials).filter((x) => x.displayName === displayName)) {
      await this.#removePassword(kind, objectId, p.keyId, opts);
    }
  }

  async #removePassword(kind: 'applications' | 'servicePrincipals', objectId: string, keyId: string, opts?: CallOptions): Promise<boolean> {
    return this.#call(`remove password ${keyId} from ${objectId}`, async () => {
      try {
        await this.#client.api(`/${kind}/${encodeURIComponent(objectId)}/removePassword`).post({ keyId });
        return true;
      } catch (err) {
        const info = describeUpstream(err);
        if (info.status === 404 || /no password credential found/i.test(info.message)) return false;
        throw err;
      }
    }, opts);
  }

  async createApplication(input: NewApplication, opts?: CallOptions): Promise<GraphApplication> {
    const body: Raw = { displayName: input.displayName };
    if (input.tags && input.tags.length > 0) body.tags = input.tags;
    if (input.signInAudience) body.signInAudience = input.signInAudience;
    const findExisting = async (): Promise<GraphApplication | undefined> => {
      const rows = await this.findApplicationsByDisplayName(input.displayName, opts);
      return rows.length === 1 ? rows[0] : undefined;
    };
    try {
      return await createOnce(async () => toApplication((await this.#client.api('/applications').post(body)) as Raw), findExisting, () => false, { ...this.#ctx.retry, ...callRetryOptions(opts) });
    } catch (err) {
      throw toProviderError(unwrapAuth(err), 'create application', this.#ctx.secrets);
    }
  }

  async findApplicationsByDisplayName(displayName: string, opts?: CallOptions): Promise<GraphApplication[]> {
    return (await this.#listAll('find application', '/applications', { $filter: `displayName eq ${odataString(displayName)}` }, opts)).map(toApplication);
  }

  getApplication(objectId: string, opts?: CallOptions): Promise<GraphApplication | undefined> {
    return this.#getOrUndefined(`get application ${objectId}`, `/applications/${encodeURIComponent(objectId)}`, toApplication, opts);
  }

  async findApplicationByAppId(appId: string, opts?: CallOptions): Promise<GraphApplication | undefined> {
    const rows = await this.#listAll(`find application ${appId}`, '/applications', { $filter: `appId eq ${odataString(appId)}` }, opts);
    if (rows.length > 1) throw new AzureProviderError('upstream', `find application ${appId}: multiple applications found`);
    return rows.length === 1 ? toApplication(rows[0]) : undefined;
  }

  async deleteApplication(objectId: string, opts: CallOptions & { permanently?: boolean } = {}): Promise<boolean> {
    const deleted = await this.#delete(`delete application ${objectId}`, `/applications/${encodeURIComponent(objectId)}`, opts);
    if (opts.permanently) await this.#delete(`purge application ${objectId}`, `/directory/deletedItems/${encodeURIComponent(objectId)}`, opts);
    return deleted;
  }

  addApplicationPassword(objectId: string, input: NewPasswordInput, opts?: CallOptions): Promise<NewPassword> {
    return this.#addPassword('applications', objectId, input, opts);
  }

  removeApplicationPassword(objectId: string, keyId: string, opts?: CallOptions): Promise<boolean> {
    return this.#removePassword('applications', objectId, keyId, opts);
  }

  async createServicePrincipal(appId: string, opts?: CallOptions): Promise<GraphServicePrincipal> {
    const retry = { ...this.#ctx.retry, ...callRetryOptions(opts), notReplicated: APP_NOT_REPLICATED };
    try {
      return await createOnce(
        async () => toServicePrincipal((await this.#client.api('/servicePrincipals').post({ appId })) as Raw),
        () => this.findServicePrincipalByAppId(appId, opts),
        isCode('Request_MultipleObjectsWithSameKeyValue'),
        retry,
      );
    } catch (err) {
      throw toProviderError(unwrapAuth(err), `create service principal for ${appId}`, this.#ctx.secrets);
    }
  }

  getServicePrincipal(objectId: string, opts?: CallOptions): Promise<GraphServicePrincipal | undefined> {
    return this.#getOrUndefined(`get service principal ${objectId}`, `/servicePrincipals/${encodeURIComponent(objectId)}`, toServicePrincipal, opts);
  }

  async findServicePrincipalByAppId(appId: string, opts?: CallOptions): Promise<GraphServicePrincipal | undefined> {
    const rows = await this.#listAll(`find service principal ${appId}`, '/servicePrincipals', { $filter: `appId eq ${odataString(appId)}` }, opts);
    return rows.length > 0 ? toServicePrincipal(rows[0]) : undefined;
  }

  async deleteServicePrincipal(objectId: string, opts: CallOptions & { permanently?: boolean } = {}): Promise<boolean> {
    const deleted = await this.#delete(`delete service principal ${objectId}`, `/servicePrincipals/${encodeURIComponent(objectId)}`, opts);
    if (opts.permanently) await this.#delete(`purge service principal ${objectId}`, `/directory/deletedItems/${encodeURIComponent(objectId)}`, opts);
    return deleted;
  }

  addServicePrincipalPassword(objectId: string, input: NewPasswordInput, opts?: CallOptions): Promise<NewPassword> {
    return this.#addPassword('servicePrincipals', objectId, input, opts);
  }

  removeServicePrincipalPassword(objectId: string, keyId: string, opts?: CallOptions): Promise<boolean> {
    return this.#removePassword('servicePrincipals', objectId, keyId, opts);
  }

  getGroup(objectId: string, opts?: CallOptions): Promise<GraphGroup | undefined> {
    return this.#getOrUndefined(`get group ${objectId}`, `/groups/${encodeURIComponent(objectId)}`, toGroup, opts);
  }

  async findGroupsByDisplayName(displayName: string, opts?: CallOptions): Promise<GraphGroup[]> {
    return (await this.#listAll(`find group ${displayName}`, '/groups', { $filter: `displayName eq ${odataString(displayName)}` }, opts)).map(toGroup);
  }

  async addGroupMember(groupId: string, memberId: string, opts?: CallOptions): Promise<void> {
    // @odata.id points at this cloud's Graph (Vault hard-codes the public one).
    const body = { '@odata.id': `${this.#baseUrl}/v1.0/directoryObjects/${memberId}` };
    await this.#call(`add member ${memberId} to group ${groupId}`, async () => {
      try {
        await this.#client.api(`/groups/${encodeURIComponent(groupId)}/members/$ref`).post(body);
      } catch (err) {
        const info = describeUpstream(err);
        if (info.status === 400 && /already exist/i.test(info.message)) return;
        throw err;
      }
    }, opts, MEMBER_NOT_REPLICATED);
  }

  removeGroupMember(groupId: string, memberId: string, opts?: CallOptions): Promise<boolean> {
    return this.#delete(`remove member ${memberId} from group ${groupId}`, `/groups/${encodeURIComponent(groupId)}/members/${encodeURIComponent(memberId)}/$ref`, opts);
  }

  async listGroupMembers(groupId: string, opts?: CallOptions): Promise<DirectoryObjectRef[]> {
    const rows = await this.#listAll(`list members of group ${groupId}`, `/groups/${encodeURIComponent(groupId)}/members`, { $select: 'id' }, opts);
    return rows.map((r) => ({ id: str(r.id), type: str(r['@odata.type']).replace('#microsoft.graph.', '') }));
  }
}

/** The Graph client wraps credential failures in a GraphError named after our auth error. */
function unwrapAuth(err: unknown): unknown {
  if (err instanceof GraphError && err.code === 'AzureAuthenticationError') return new Error(err.message);
  return err;
}
