// Microsoft Graph v1.0: the slice of applications, servicePrincipals, groups and deleted items the
// cloud engine uses. Bearer tokens must be for Graph's audience and carry an application permission
// for the operation, as in Entra ID; errors use Graph's codes so SDK code paths see real shapes.
import { randomUUID } from 'node:crypto';
import { authenticateBearer } from './entra.ts';
import { registerFederatedCredentials } from './federation.ts';
import { json, page, parseJsonBody, parseODataEq, type EmulatorRequest, type EmulatorResponse, type Router, type ServiceContext } from './http.ts';
import type { Application, Group, PasswordCredential, ServicePrincipal } from './state.ts';

const MAX_TOP = 999;
const SIGN_IN_AUDIENCES = ['AzureADMyOrg', 'AzureADMultipleOrgs', 'AzureADandPersonalMicrosoftAccount', 'PersonalMicrosoftAccount'];

/** Permissions that allow each kind of operation (any one suffices). */
const PERMISSIONS = {
  appRead: ['Application.Read.All', 'Application.ReadWrite.All', 'Application.ReadWrite.OwnedBy', 'Directory.Read.All', 'Directory.ReadWrite.All'],
  appWrite: ['Application.ReadWrite.All', 'Application.ReadWrite.OwnedBy', 'Directory.ReadWrite.All'],
  groupRead: ['Group.Read.All', 'Group.ReadWrite.All', 'GroupMember.Read.All', 'GroupMember.ReadWrite.All', 'Directory.Read.All', 'Directory.ReadWrite.All'],
  memberWrite: ['GroupMember.ReadWrite.All', 'Group.ReadWrite.All', 'Directory.ReadWrite.All'],
} as const;
type Permission = keyof typeof PERMISSIONS;

export function graphError(status: number, code: string, message: string): EmulatorResponse {
  return json(status, { error: { code, message, innerError: { date: new Date().toISOString(), 'request-id': randomUUID(), 'client-request-id': randomUUID() } } });
}

const notFound = (id: string): EmulatorResponse =>
  graphError(404, 'Request_ResourceNotFound', `Resource '${id}' does not exist or one of its queried reference-property objects are not present.`);
const badRequest = (message: string): EmulatorResponse => graphError(400, 'Request_BadRequest', message);

function passwordView(p: PasswordCredential, secretText: string | null = null): Record<string, unknown> {
  return { customKeyIdentifier: null, displayName: p.displayName, endDateTime: p.endDateTime, hint: p.hint, keyId: p.keyId, secretText, startDateTime: p.startDateTime };
}

function appView(a: Application, deletedDateTime: string | null = null): Record<string, unknown> {
  return {
    '@odata.type': '#microsoft.graph.application',
    id: a.id, appId: a.appId, displayName: a.displayName, signInAudience: a.signInAudience, tags: a.tags,
    createdDateTime: a.createdDateTime, deletedDateTime, identifierUris: [], keyCredentials: [],
    passwordCredentials: a.passwordCredentials.map((p) => passwordView(p)),
  };
}

function spView(s: ServicePrincipal, deletedDateTime: string | null = null): Record<string, unknown> {
  return {
    '@odata.type': '#microsoft.graph.servicePrincipal',
    id: s.id, appId: s.appId, displayName: s.displayName, servicePrincipalType: s.servicePrincipalType,
    accountEnabled: true, deletedDateTime, tags: [], keyCredentials: [],
    passwordCredentials: s.passwordCredentials.map((p) => passwordView(p)),
  };
}

function groupView(g: Group): Record<string, unknown> {
  return { '@odata.type': '#microsoft.graph.group', id: g.id, displayName: g.displayName, description: g.description, securityEnabled: true, mailEnabled: false };
}

type Filterable = Record<string, unknown>;

export function registerGraph(router: Router, ctx: ServiceContext): void {
  const { state } = ctx;
  const v1 = `${ctx.urls.graph}/v1.0`;

  /** Wraps a handler with bearer verification and a permission check. */
  const guarded = (perm: Permission, handler: (req: EmulatorRequest, body: Record<string, unknown>) => EmulatorResponse | Promise<EmulatorResponse>) =>
    async (req: EmulatorRequest): Promise<EmulatorResponse> => {
      const auth = await authenticateBearer(ctx, req, 'graph');
      if (!auth.ok) {
        const message = {
          missing: 'Access token is empty.',
          expired: 'Lifetime validation failed, the token is expired.',
          audience: 'Access token validation failure. Invalid audience.',
          issuer: 'Access token validation failure. Invalid issuer.',
          signature: 'Access token validation failure. Invalid signature.',
          malformed: 'IDX14100: JWT is not well formed.',
        }[auth.reason];
        return graphError(401, 'InvalidAuthenticationToken', message);
      }
      const roles = Array.isArray(auth.claims.roles) ? (auth.claims.roles as string[]) : [];
      if (!PERMISSIONS[perm].some((p) => roles.includes(p))) {
        return graphError(403, 'Authorization_RequestDenied', 'Insufficient privileges to complete the operation.');
      }
      const body = req.method === 'GET' || req.method === 'DELETE' ? {} : parseJsonBody(req);
      if (body === undefined) return badRequest('Unable to read JSON request payload. Please ensure Content-Type header is set and payload is of valid JSON format.');
      return handler(req, body);
    };

  /** A filtered, paged collection; `fields` are the properties $filter may use with `eq`. */
  const list = (collection: string, items: Filterable[], fields: string[], req: EmulatorRequest): EmulatorResponse => {
    let rows = items;
    const filter = req.query.get('$filter');
    if (filter !== null) {
      const eq = parseODataEq(filter);
      if (!eq) return badRequest(`Invalid filter clause: ${filter}`);
      if (!fields.includes(eq.field)) {
        return graphError(400, 'Request_UnsupportedQuery', `Unsupported or invalid query filter clause specified for property '${eq.field}' of resource '${collection}'.`);
      }
      rows = items.filter((x) => x[eq.field] === eq.value);
    }
    const p = page(rows, req, ctx.urls.graph, ctx.pageSize, MAX_TOP);
    return json(200, { '@odata.context': `${v1}/$metadata#${collection}`, ...(p.nextLink ? { '@odata.nextLink': p.nextLink } : {}), value: p.rows });
  };

  const entity = (collection: string, view: Record<string, unknown>, status = 200): EmulatorResponse =>
    json(status, { '@odata.context': `${v1}/$metadata#${collection}/$entity`, ...view });

  /** Shared validation for the writable application properties (POST and PATCH). */
  const appProps = (body: Record<string, unknown>): { ok: true; props: Partial<Pick<Application, 'displayName' | 'tags' | 'signInAudience'>> } | { ok: false; res: EmulatorResponse } => {
    const props: Partial<Pick<Application, 'displayName' | 'tags' | 'signInAudience'>> = {};
    if (body.displayName !== undefined) {
      if (typeof body.displayName !== 'string' || body.displayName === '') return { ok: false, res: badRequest("Invalid value specified for property 'displayName' of resource 'Application'.") };
      props.displayName = body.displayName;
    }
    if (body.tags !== undefined) {
      if (!Array.isArray(body.tags) || !body.tags.every((t) => typeof t === 'string' && t.length > 0 && t.length <= 256)) {
        return { ok: false, res: badRequest("Invalid value specified for property 'tags' of resource 'Application'.") };
      }
      props.tags = body.tags as string[];
    }
    if (body.signInAudience !== undefined) {
      if (typeof body.signInAudience !== 'string' || !SIGN_IN_AUDIENCES.includes(body.signInAudience)) {
        return { ok: false, res: badRequest("Invalid value specified for property 'signInAudience' of resource 'Application'.") };
      }
      props.signInAudience = body.signInAudience;
    }
    return { ok: true, props };
  };

  /** addPassword/removePassword behave the same on applications and service principals. */
  const addPassword = (owner: Application | ServicePrincipal, body: Record<string, unknown>): EmulatorResponse => {
    const pc = (body.passwordCredential ?? {}) as Record<string, unknown>;
    if (owner.passwordCredentials.length >= state.maxPasswordsPerObject) {
      return badRequest('The size of the object has exceeded its limit. Please reduce the number of values and retry your request.');
    }
    const endDateTime = typeof pc.endDateTime === 'string' ? pc.endDateTime : undefined;
    const startDateTime = typeof pc.startDateTime === 'string' ? pc.startDateTime : undefined;
    for (const d of [endDateTime, startDateTime]) if (d !== undefined && Number.isNaN(Date.parse(d))) return badRequest(`Invalid date '${d}'.`);
    if (endDateTime && Date.parse(endDateTime) <= Date.parse(startDateTime ?? state.isoNow())) {
      return badRequest('Key credential end date is invalid.');
    }
    const { credential, secretText } = state.addPassword(owner, {
      displayName: typeof pc.displayName === 'string' ? pc.displayName : null,
      startDateTime: startDateTime && new Date(startDateTime).toISOString(),
      endDateTime: endDateTime && new Date(endDateTime).toISOString(),
    });
    return json(200, { '@odata.context': `${v1}/$metadata#microsoft.graph.passwordCredential`, ...passwordView(credential, secretText) });
  };
  const removePassword = (owner: Application | ServicePrincipal, body: Record<string, unknown>): EmulatorResponse => {
    const i = owner.passwordCredentials.findIndex((p) => p.keyId === body.keyId);
    if (i < 0) return badRequest(`No password credential found with keyId ${String(body.keyId)}.`);
    owner.passwordCredentials.splice(i, 1);
    return json(204);
  };

  // Object ids are GUIDs, which Graph matches in any case; the state keys them in lower case.
  const app = (id: string): Application | undefined => state.applications.get(id.toLowerCase());
  const sp = (id: string): ServicePrincipal | undefined => state.servicePrincipals.get(id.toLowerCase());

  router
    .add('POST', '/v1.0/applications', guarded('appWrite', (_req, body) => {
      const p = appProps(body);
      if (!p.ok) return p.res;
      if (!p.props.displayName) return badRequest("Property 'displayName' is required.");
      const created = state.createApplication({ displayName: p.props.displayName, tags: p.props.tags, signInAudience: p.props.signInAudience });
      return entity('applications', appView(created), 201);
    }))
    .add('GET', '/v1.0/applications', guarded('appRead', (req) => list('applications', [...state.applications.values()].map((a) => appView(a)), ['appId', 'displayName', 'id'], req)))
    .add('GET', '/v1.0/applications/:id', guarded('appRead', (req) => {
      const a = app(req.params.id);
      return a ? entity('applications', appView(a)) : notFound(req.params.id);
    }))
    .add('PATCH', '/v1.0/applications/:id', guarded('appWrite', (req, body) => {
      const a = app(req.params.id);
      if (!a) return notFound(req.params.id);
      const p = appProps(body);
      if (!p.ok) return p.res;
      Object.assign(a, p.props);
      return json(204);
    }))
    .add('DELETE', '/v1.0/applications/:id', guarded('appWrite', (req) => (state.deleteApplication(req.params.id) ? json(204) : notFound(req.params.id))))
    .add('POST', '/v1.0/applications/:id/addPassword', guarded('appWrite', (req, body) => {
      const a = app(req.params.id);
      return a ? addPassword(a, body) : notFound(req.params.id);
    }))
    .add('POST', '/v1.0/applications/:id/removePassword', guarded('appWrite', (req, body) => {
      const a = app(req.params.id);
      return a ? removePassword(a, body) : notFound(req.params.id);
    }))
    .add('POST', '/v1.0/servicePrincipals', guarded('appWrite', (_req, body) => {
      const appId = typeof body.appId === 'string' ? body.appId : '';
      const a = state.applicationByAppId(appId);
      // A new application is not yet known to the replica that creates service principals.
      if (!a || a.visibleAt > state.now()) {
        return badRequest(`The appId '${appId}' of the service principal does not reference a valid application object.`);
      }
      if (state.servicePrincipalByAppId(appId)) {
        return graphError(409, 'Request_MultipleObjectsWithSameKeyValue', `The service principal cannot be created, updated, or restored because the service principal name ${appId} is already in use.`);
      }
      return entity('servicePrincipals', spView(state.createServicePrincipal(a)), 201);
    }))
    .add('GET', '/v1.0/servicePrincipals', guarded('appRead', (req) => list('servicePrincipals', [...state.servicePrincipals.values()].map((s) => spView(s)), ['appId', 'displayName', 'id'], req)))
    .add('GET', '/v1.0/servicePrincipals/:id', guarded('appRead', (req) => {
      const s = sp(req.params.id);
      return s ? entity('servicePrincipals', spView(s)) : notFound(req.params.id);
    }))
    .add('DELETE', '/v1.0/servicePrincipals/:id', guarded('appWrite', (req) => (state.deleteServicePrincipal(req.params.id) ? json(204) : notFound(req.params.id))))
    .add('POST', '/v1.0/servicePrincipals/:id/addPassword', guarded('appWrite', (req, body) => {
      const s = sp(req.params.id);
      return s ? addPassword(s, body) : notFound(req.params.id);
    }))
    .add('POST', '/v1.0/servicePrincipals/:id/removePassword', guarded('appWrite', (req, body) => {
      const s = sp(req.params.id);
      return s ? removePassword(s, body) : notFound(req.params.id);
    }))
    .add('GET', '/v1.0/groups', guarded('groupRead', (req) => list('groups', [...state.groups.values()].map(groupView), ['displayName', 'id'], req)))
    .add('GET', '/v1.0/groups/:id', guarded('groupRead', (req) => {
      const g = state.groups.get(req.params.id);
      return g ? entity('groups', groupView(g)) : notFound(req.params.id);
    }))
    .add('GET', '/v1.0/groups/:id/members', guarded('groupRead', (req) => {
      const g = state.groups.get(req.params.id);
      if (!g) return notFound(req.params.id);
      const members = [...g.members].map((id) => state.directoryObject(id)).flatMap((o) => (o === undefined ? [] : [o.kind === 'group' ? groupView(o.group) : spView(o.sp)]));
      return list('directoryObjects', members, ['id'], req);
    }))
    .add('POST', '/v1.0/groups/:id/members/$ref', guarded('memberWrite', (req, body) => {
      const g = state.groups.get(req.params.id);
      if (!g) return notFound(req.params.id);
      const ref = typeof body['@odata.id'] === 'string' ? body['@odata.id'] : '';
      const memberId = /\/(?:directoryObjects|servicePrincipals|groups)\/([0-9a-fA-F-]{36})$/.exec(ref)?.[1];
      if (!memberId) return badRequest(`Invalid object identifier '${ref}'.`);
      const obj = state.directoryObject(memberId);
      if (!obj || (obj.kind === 'servicePrincipal' && obj.sp.groupsVisibleAt > state.now())) return notFound(memberId);
      if (g.members.has(memberId)) {
        return badRequest("One or more added object references already exist for the following modified properties: 'members'.");
      }
      g.members.add(memberId);
      return json(204);
    }))
    .add('DELETE', '/v1.0/groups/:id/members/:memberId/$ref', guarded('memberWrite', (req) => {
      const g = state.groups.get(req.params.id);
      if (!g) return notFound(req.params.id);
      if (!g.members.delete(req.params.memberId)) return notFound(req.params.memberId);
      return json(204);
    }))
    .add('GET', '/v1.0/directory/deletedItems/:id', guarded('appRead', (req) => {
      const item = state.deletedItems.get(req.params.id);
      if (!item) return notFound(req.params.id);
      const view = item.kind === 'application' ? appView(item.object, item.deletedDateTime) : spView(item.object, item.deletedDateTime);
      return entity('directory/deletedItems', view);
    }))
    .add('DELETE', '/v1.0/directory/deletedItems/:id', guarded('appWrite', (req) => (state.deletedItems.delete(req.params.id) ? json(204) : notFound(req.params.id))));
  registerFederatedCredentials(router, state, { guarded, entity });
}
