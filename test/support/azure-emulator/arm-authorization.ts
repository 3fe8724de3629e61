// ARM Microsoft.Authorization: role definitions (list with roleName filter, get) and role
// assignments (PUT/GET/DELETE/list) at any scope, with ARM's conflict and replication errors.
import { armError, armGuarded, scopeCovers, subscriptionOf } from './arm.ts';
import { json, page, parseODataEq, type EmulatorRequest, type Router, type ServiceContext } from './http.ts';
import type { RoleAssignment, RoleDefinition } from './state.ts';

const PROVIDER = '/providers/Microsoft\\.Authorization';
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Role definitions are tenant-wide; their id carries the subscription they are read through. */
function definitionId(scope: string, name: string): string {
  const sub = subscriptionOf(scope);
  return `${sub ? `/subscriptions/${sub}` : ''}/providers/Microsoft.Authorization/roleDefinitions/${name}`;
}

function definitionView(def: RoleDefinition, scope: string): Record<string, unknown> {
  return {
    id: definitionId(scope, def.name),
    type: 'Microsoft.Authorization/roleDefinitions',
    name: def.name,
    properties: {
      roleName: def.roleName, type: def.roleType, description: def.description, assignableScopes: def.assignableScopes,
      permissions: [{ actions: def.actions, notActions: def.notActions, dataActions: def.dataActions, notDataActions: [] }],
      createdOn: '2015-02-02T21:55:09.8806423Z', updatedOn: '2021-11-11T20:13:47.8628684Z', createdBy: null, updatedBy: null,
    },
  };
}

function assignmentView(ra: RoleAssignment): Record<string, unknown> {
  return {
    id: ra.id,
    type: 'Microsoft.Authorization/roleAssignments',
    name: ra.name,
    properties: {
      roleDefinitionId: ra.roleDefinitionId, principalId: ra.principalId, principalType: ra.principalType, scope: ra.scope,
      condition: null, conditionVersion: null, createdOn: ra.createdOn, updatedOn: ra.createdOn, createdBy: null, updatedBy: null,
      delegatedManagedIdentityResourceId: null, description: null,
    },
  };
}

const scopeParam = (req: EmulatorRequest): string => (req.params.scope === '' ? '/' : req.params.scope);

export function registerArmAuthorization(router: Router, ctx: ServiceContext): void {
  const { state } = ctx;

  router
    .add('GET', new RegExp(`^(?<scope>.*?)${PROVIDER}/roleDefinitions$`, 'i'), armGuarded(ctx, 'Microsoft.Authorization/roleDefinitions/read', scopeParam, ({ req }) => {
      let defs = [...state.roleDefinitions.values()];
      const filter = req.query.get('$filter');
      if (filter !== null) {
        const eq = parseODataEq(filter);
        if (!eq || eq.field !== 'roleName') return armError(400, 'InvalidFilterInQueryString', `Invalid $filter '${filter}' specified in the query string.`);
        // ARM matches role names case-insensitively.
        defs = defs.filter((d) => d.roleName.toLowerCase() === eq.value.toLowerCase());
      }
      const p = page(defs, req, ctx.urls.arm, ctx.pageSize, 1000);
      return json(200, { value: p.rows.map((d) => definitionView(d, scopeParam(req))), ...(p.nextLink ? { nextLink: p.nextLink } : {}) });
    }))
    .add('GET', new RegExp(`^(?<scope>.*?)${PROVIDER}/roleDefinitions/(?<name>[^/]+)$`, 'i'), armGuarded(ctx, 'Microsoft.Authorization/roleDefinitions/read', scopeParam, ({ req }) => {
      const def = state.roleDefinitions.get(req.params.name.toLowerCase());
      if (!def) return armError(404, 'RoleDefinitionDoesNotExist', `The specified role definition with ID '${req.params.name}' does not exist.`);
      return json(200, definitionView(def, scopeParam(req)));
    }))
    .add('GET', new RegExp(`^(?<scope>.*?)${PROVIDER}/roleAssignments$`, 'i'), armGuarded(ctx, 'Microsoft.Authorization/roleAssignments/read', scopeParam, ({ req }) => {
      const scope = scopeParam(req);
      let rows = [...state.roleAssignments.values()].filter((ra) => scopeCovers(ra.scope, scope) || scopeCovers(scope, ra.scope));
      const filter = req.query.get('$filter');
      if (filter !== null && filter !== 'atScope()') {
        const eq = parseODataEq(filter);
        if (!eq || eq.field !== 'principalId') return armError(400, 'InvalidFilterInQueryString', `Invalid $filter '${filter}' specified in the query string.`);
        rows = rows.filter((ra) => ra.principalId === eq.value);
      }
      const p = page(rows, req, ctx.urls.arm, ctx.pageSize, 1000);
      return json(200, { value: p.rows.map(assignmentView), ...(p.nextLink ? { nextLink: p.nextLink } : {}) });
    }))
    .add('PUT', new RegExp(`^(?<scope>.*?)${PROVIDER}/roleAssignments/(?<name>[^/]+)$`, 'i'), armGuarded(ctx, 'Microsoft.Authorization/roleAssignments/write', scopeParam, ({ req, body }) => {
      const scope = scopeParam(req);
      const name = req.params.name;
      if (!GUID.test(name)) return armError(400, 'InvalidRoleAssignmentId', `The role assignment ID '${name}' is not valid. The role assignment ID must be a GUID.`);
      const props = (body.properties ?? {}) as Record<string, unknown>;
      if (typeof props.roleDefinitionId !== 'string' || typeof props.principalId !== 'string') {
        return armError(400, 'InvalidRequestContent', 'The request content was invalid and could not be deserialized: roleDefinitionId and principalId are required.');
      }
      const defName = props.roleDefinitionId.split('/').pop()!;
      if (!state.roleDefinitions.has(defName.toLowerCase())) {
        return armError(400, 'RoleDefinitionDoesNotExist', `The specified role definition with ID '${defName}' does not exist.`);
      }
      const principalId = props.principalId;
      const principal = state.directoryObject(principalId);
      // ARM reads principals from its own directory replica, which lags behind Graph.
      if (!principal || (principal.kind === 'servicePrincipal' && principal.sp.armVisibleAt > state.now())) {
        return armError(400, 'PrincipalNotFound', `Principal ${principalId.replace(/-/g, '')} does not exist in the directory ${state.tenantId}. Check that you have the correct principal ID. If you are creating this principal and then immediately assigning a role, this error might be related to a replication delay. In this case, set the role assignment principalType property to a value, such as ServicePrincipal, User, or Group.  See https://aka.ms/docs-principaltype`);
      }
      const id = `${scope === '/' ? '' : scope}/providers/Microsoft.Authorization/roleAssignments/${name}`;
      const roleDefinitionId = definitionId(scope, defName.toLowerCase());
      const sameAs = (ra: RoleAssignment): boolean =>
        ra.principalId === principalId && ra.roleDefinitionId.toLowerCase() === roleDefinitionId.toLowerCase() && ra.scope.toLowerCase() === scope.toLowerCase();
      const existing = state.roleAssignments.get(id.toLowerCase());
      if (existing) {
        if (sameAs(existing)) return json(201, assignmentView(existing));
        return armError(409, 'RoleAssignmentUpdateNotPermitted', 'Tenant ID, application ID, principal ID, and scope are not allowed to be updated.');
      }
      if ([...state.roleAssignments.values()].some(sameAs)) return armError(409, 'RoleAssignmentExists', 'The role assignment already exists.');
      const principalType = principal.kind === 'group' ? 'Group' : 'ServicePrincipal';
      const ra: RoleAssignment = { id, name, scope, roleDefinitionId, principalId, principalType, createdOn: state.isoNow() };
      state.roleAssignments.set(id.toLowerCase(), ra);
      return json(201, assignmentView(ra));
    }))
    .add('GET', new RegExp(`^(?<scope>.*?)${PROVIDER}/roleAssignments/(?<name>[^/]+)$`, 'i'), armGuarded(ctx, 'Microsoft.Authorization/roleAssignments/read', scopeParam, ({ req }) => {
      const ra = state.roleAssignments.get(`${req.params.scope}/providers/Microsoft.Authorization/roleAssignments/${req.params.name}`.toLowerCase());
      return ra ? json(200, assignmentView(ra)) : armError(404, 'RoleAssignmentNotFound', `The role assignment '${req.params.name}' is not found.`);
    }))
    .add('DELETE', new RegExp(`^(?<scope>.*?)${PROVIDER}/roleAssignments/(?<name>[^/]+)$`, 'i'), armGuarded(ctx, 'Microsoft.Authorization/roleAssignments/delete', scopeParam, ({ req }) => {
      const key = `${req.params.scope}/providers/Microsoft.Authorization/roleAssignments/${req.params.name}`.toLowerCase();
      const ra = state.roleAssignments.get(key);
      if (!ra) return json(204);
      state.roleAssignments.delete(key);
      return json(200, assignmentView(ra));
    }));
}
