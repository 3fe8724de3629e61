// The emulated directory and subscription state. Tests read and seed it directly; the services
// mutate it only through these methods so invariants (unique appId per SP, soft delete) live here.
import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';

export interface PasswordCredential {
  keyId: string;
  displayName: string | null;
  hint: string;
  startDateTime: string;
  endDateTime: string;
  /** sha256 of the secret text; the emulator, like Entra ID, cannot show a secret again. */
  secretHash: string;
  /** Epoch ms from which the token endpoint's replicas know the password (until then: invalid client secret). */
  authenticatesAt: number;
}

export interface FederatedIdentityCredential {
  id: string;
  name: string;
  issuer: string;
  subject: string;
  audiences: string[];
}

export interface Application {
  id: string;
  appId: string;
  displayName: string;
  signInAudience: string;
  tags: string[];
  createdDateTime: string;
  passwordCredentials: PasswordCredential[];
  /** Filled by the federation module (issue 8); kept here so deletes and restores carry it. */
  federatedIdentityCredentials: FederatedIdentityCredential[];
  /** Graph application permissions granted to this app (admin-consented app roles). */
  graphPermissions: string[];
  /** Epoch ms at which Graph's other replicas see the app (service principal creation). */
  visibleAt: number;
}

export interface ServicePrincipal {
  id: string;
  appId: string;
  displayName: string;
  servicePrincipalType: 'Application' | 'ManagedIdentity';
  createdDateTime: string;
  passwordCredentials: PasswordCredential[];
  /** Epoch ms at which ARM sees the principal (role assignments). */
  armVisibleAt: number;
  /** Epoch ms at which group membership writes see the principal. */
  groupsVisibleAt: number;
}

export interface Group {
  id: string;
  displayName: string;
  description: string | null;
  members: Set<string>;
}

export interface RoleDefinition {
  /** GUID, the definition's `name` in ARM. */
  name: string;
  roleName: string;
  description: string;
  roleType: 'BuiltInRole' | 'CustomRole';
  actions: string[];
  notActions: string[];
  dataActions: string[];
  assignableScopes: string[];
}

export interface RoleAssignment {
  id: string;
  name: string;
  scope: string;
  roleDefinitionId: string;
  principalId: string;
  principalType: string;
  createdOn: string;
}

export type DeletedItem =
  | { kind: 'application'; deletedDateTime: string; object: Application }
  | { kind: 'servicePrincipal'; deletedDateTime: string; object: ServicePrincipal };

export interface ManagedIdentity {
  /** Object id of the identity's service principal (the token's `oid`). */
  principalId: string;
  clientId: string;
  /** ARM id of the identity (user-assigned) or of the resource it belongs to (system-assigned). */
  resourceId: string;
  systemAssigned: boolean;
  /** Claims added to its tokens (xms_mirid, xms_az_rid ... for the cloud auth method). */
  claims: Record<string, unknown>;
}

export function newSecretText(): string {
  // Entra secrets are 40 characters with a 3-character hint and a `~` separator.
  const body = randomBytes(30).toString('base64url').replace(/[-_]/g, 'x');
  return `${body.slice(0, 3)}8Q~${body.slice(3, 37)}`;
}

function hashSecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

function secretMatches(secret: string, cred: PasswordCredential): boolean {
  const a = Buffer.from(hashSecret(secret), 'hex');
  const b = Buffer.from(cred.secretHash, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

export type SecretCheck = 'ok' | 'invalid' | 'expired';

export class EmulatorState {
  readonly tenantId: string;
  /** The tenant's initial verified domain; Entra accepts it wherever the tenant id goes in a login URL. */
  readonly tenantDomain: string;
  readonly now: () => number;
  readonly subscriptions = new Set<string>();
  readonly applications = new Map<string, Application>();
  readonly servicePrincipals = new Map<string, ServicePrincipal>();
  readonly groups = new Map<string, Group>();
  readonly roleDefinitions = new Map<string, RoleDefinition>();
  /** Keyed by lower-cased assignment id: ARM ids are case-insensitive. */
  readonly roleAssignments = new Map<string, RoleAssignment>();
  readonly deletedItems = new Map<string, DeletedItem>();
  readonly managedIdentities: ManagedIdentity[] = [];
  /** Replication delays applied to objects created from now on (ms). */
  readonly replication = { applicationToServicePrincipal: 0, servicePrincipalToArm: 0, servicePrincipalToGroups: 0, passwordToToken: 0 };
  /** Graph limit on password credentials per object. */
  maxPasswordsPerObject = 100;

  constructor(tenantId: string, now: () => number = Date.now) {
    this.tenantId = tenantId;
    this.tenantDomain = `emulator${tenantId.slice(0, 8)}.onmicrosoft.com`;
    this.now = now;
  }

  /** Whether a login URL's tenant segment names this tenant (its id or domain, case-insensitively). */
  isTenant(segment: string): boolean {
    const s = segment.toLowerCase();
    return s === this.tenantId.toLowerCase() || s === this.tenantDomain.toLowerCase();
  }

  isoNow(offsetMs = 0): string {
    return new Date(this.now() + offsetMs).toISOString();
  }

  createApplication(input: { displayName: string; signInAudience?: string; tags?: string[]; graphPermissions?: string[] }): Application {
    const app: Application = {
      id: randomUUID(),
      appId: randomUUID(),
      displayName: input.displayName,
      signInAudience: input.signInAudience ?? 'AzureADMyOrg',
      tags: input.tags ?? [],
      createdDateTime: this.isoNow(),
      passwordCredentials: [],
      federatedIdentityCredentials: [],
      graphPermissions: input.graphPermissions ?? [],
      visibleAt: this.now() + this.replication.applicationToServicePrincipal,
    };
    this.applications.set(app.id, app);
    return app;
  }

  applicationByAppId(appId: string): Application | undefined {
    for (const app of this.applications.values()) if (app.appId === appId) return app;
    return undefined;
  }

  servicePrincipalByAppId(appId: string): ServicePrincipal | undefined {
    for (const sp of this.servicePrincipals.values()) if (sp.appId === appId) return sp;
    return undefined;
  }

  createServicePrincipal(app: { appId: string; displayName: string }, type: ServicePrincipal['servicePrincipalType'] = 'Application'): ServicePrincipal {
    const now = this.now();
    const sp: ServicePrincipal = {
      id: randomUUID(),
      appId: app.appId,
      displayName: app.displayName,
      servicePrincipalType: type,
      createdDateTime: new Date(now).toISOString(),
      passwordCredentials: [],
      armVisibleAt: now + this.replication.servicePrincipalToArm,
      groupsVisibleAt: now + this.replication.servicePrincipalToGroups,
    };
    this.servicePrincipals.set(sp.id, sp);
    return sp;
  }

  /** Adds a password and returns its secret text, which is not stored. */
  addPassword(
    owner: { passwordCredentials: PasswordCredential[] },
    input: { displayName?: string | null; startDateTime?: string; endDateTime?: string } = {},
  ): { credential: PasswordCredential; secretText: string } {
    const secretText = newSecretText();
    const credential: PasswordCredential = {
      keyId: randomUUID(),
      displayName: input.displayName ?? null,
      hint: secretText.slice(0, 3),
      startDateTime: input.startDateTime ?? this.isoNow(),
      // Graph's default lifetime for addPassword is two years.
      endDateTime: input.endDateTime ?? this.isoNow(2 * 365 * 24 * 3600 * 1000),
      secretHash: hashSecret(secretText),
      authenticatesAt: this.now() + this.replication.passwordToToken,
    };
    owner.passwordCredentials.push(credential);
    return { credential, secretText };
  }

  /** Checks a client secret against the app's and its service principal's passwords. */
  checkSecret(app: Application, secret: string): SecretCheck {
    const sp = this.servicePrincipalByAppId(app.appId);
    const creds = [...app.passwordCredentials, ...(sp?.passwordCredentials ?? [])];
    const now = this.now();
    // A password the token endpoint's replica has not seen yet is as unknown as a wrong one (AADSTS7000215).
    const match = creds.find((c) => secretMatches(secret, c));
    if (!match || match.authenticatesAt > now) return 'invalid';
    if (Date.parse(match.endDateTime) <= now || Date.parse(match.startDateTime) > now + 5 * 60_000) return 'expired';
    return 'ok';
  }

  /** Soft delete, as Graph does: the object moves to directory/deletedItems for 30 days. */
  deleteApplication(id: string): boolean {
    const app = this.applications.get(id);
    if (!app) return false;
    this.applications.delete(id);
    this.deletedItems.set(id, { kind: 'application', deletedDateTime: this.isoNow(), object: app });
    // Deleting an application also deletes its service principal in the home tenant.
    const sp = this.servicePrincipalByAppId(app.appId);
    if (sp) this.deleteServicePrincipal(sp.id);
    return true;
  }

  deleteServicePrincipal(id: string): boolean {
    const sp = this.servicePrincipals.get(id);
    if (!sp) return false;
    this.servicePrincipals.delete(id);
    for (const g of this.groups.values()) g.members.delete(id);
    this.deletedItems.set(id, { kind: 'servicePrincipal', deletedDateTime: this.isoNow(), object: sp });
    return true;
  }

  /** Any live directory object a group can hold or a role can be assigned to. */
  directoryObject(id: string): { kind: 'servicePrincipal'; sp: ServicePrincipal } | { kind: 'group'; group: Group } | undefined {
    const sp = this.servicePrincipals.get(id);
    if (sp) return { kind: 'servicePrincipal', sp };
    const group = this.groups.get(id);
    if (group) return { kind: 'group', group };
    return undefined;
  }

  addGroup(displayName: string, description: string | null = null): Group {
    const group: Group = { id: randomUUID(), displayName, description, members: new Set() };
    this.groups.set(group.id, group);
    return group;
  }

  addSubscription(id: string = randomUUID()): string {
    this.subscriptions.add(id.toLowerCase());
    return id;
  }

  addRoleDefinition(def: Omit<RoleDefinition, 'name' | 'roleType' | 'description' | 'notActions' | 'dataActions' | 'assignableScopes'> & Partial<RoleDefinition>): RoleDefinition {
    const full: RoleDefinition = {
      name: def.name ?? randomUUID(),
      roleName: def.roleName,
      description: def.description ?? def.roleName,
      roleType: def.roleType ?? 'CustomRole',
      actions: def.actions,
      notActions: def.notActions ?? [],
      dataActions: def.dataActions ?? [],
      assignableScopes: def.assignableScopes ?? ['/'],
    };
    this.roleDefinitions.set(full.name.toLowerCase(), full);
    return full;
  }

  /** Role assignments made by tests directly (e.g. giving the admin Owner on a subscription). */
  assignRole(scope: string, roleDefinitionName: string, principalId: string, principalType = 'ServicePrincipal'): RoleAssignment {
    const name = randomUUID();
    const sub = /^\/subscriptions\/([^/]+)/i.exec(scope)?.[1] ?? '';
    const ra: RoleAssignment = {
      id: `${scope}/providers/Microsoft.Authorization/roleAssignments/${name}`,
      name,
      scope,
      roleDefinitionId: `/subscriptions/${sub}/providers/Microsoft.Authorization/roleDefinitions/${roleDefinitionName}`,
      principalId,
      principalType,
      createdOn: this.isoNow(),
    };
    this.roleAssignments.set(ra.id.toLowerCase(), ra);
    return ra;
  }

  /** Leftover check for tests: everything a dynamic credential could have created for an appId. */
  objectsForAppId(appId: string): { application?: Application; servicePrincipal?: ServicePrincipal; roleAssignments: RoleAssignment[]; groups: Group[] } {
    const application = this.applicationByAppId(appId);
    const servicePrincipal = this.servicePrincipalByAppId(appId);
    let spId = servicePrincipal?.id;
    for (const item of this.deletedItems.values()) {
      if (spId === undefined && item.kind === 'servicePrincipal' && item.object.appId === appId) spId = item.object.id;
    }
    return {
      application,
      servicePrincipal,
      roleAssignments: [...this.roleAssignments.values()].filter((r) => spId !== undefined && r.principalId === spId),
      groups: [...this.groups.values()].filter((g) => spId !== undefined && g.members.has(spId)),
    };
  }
}
