// What every emulated ARM resource provider shares: bearer verification with ARM's audiences and
// error codes, api-version, subscription existence and RBAC (a caller needs a role assignment whose
// definition grants the action at or above the scope). arm-authorization.ts uses it now; the compute
// and managed-identity providers for the cloud auth method plug in the same way.
import { authenticateBearer } from './entra.ts';
import { json, parseJsonBody, type EmulatorRequest, type EmulatorResponse, type ServiceContext } from './http.ts';
import type { EmulatorState } from './state.ts';

export function armError(status: number, code: string, message: string): EmulatorResponse {
  return json(status, { error: { code, message } });
}

/** ARM scopes compare case-insensitively and on whole segments. */
export function scopeCovers(outer: string, inner: string): boolean {
  const o = outer.replace(/\/+$/, '').toLowerCase();
  const i = inner.replace(/\/+$/, '').toLowerCase();
  return o === '' || i === o || i.startsWith(`${o}/`);
}

function actionMatches(pattern: string, action: string): boolean {
  const re = new RegExp(`^${pattern.split('*').map((s) => s.replace(/[.+?^${}()|[\]\\/]/g, '\\$&')).join('.*')}$`, 'i');
  return re.test(action);
}

export function subscriptionOf(scope: string): string | undefined {
  return /^\/subscriptions\/([^/]+)/i.exec(scope)?.[1];
}

/** Whether `principalId` (directly or through a group) may perform `action` at `scope`. */
export function isAuthorized(state: EmulatorState, principalId: string, scope: string, action: string): boolean {
  const principals = new Set([principalId, ...[...state.groups.values()].filter((g) => g.members.has(principalId)).map((g) => g.id)]);
  for (const ra of state.roleAssignments.values()) {
    if (!principals.has(ra.principalId) || !scopeCovers(ra.scope, scope)) continue;
    const def = state.roleDefinitions.get(ra.roleDefinitionId.split('/').pop()!.toLowerCase());
    if (!def) continue;
    if (def.actions.some((a) => actionMatches(a, action)) && !def.notActions.some((a) => actionMatches(a, action))) return true;
  }
  return false;
}

export interface ArmCall {
  req: EmulatorRequest;
  body: Record<string, unknown>;
  callerOid: string;
}

/**
 * Wraps an ARM handler: api-version, bearer token, subscription, then RBAC for `action` at the scope
 * that `scopeOf` extracts from the request.
 */
export function armGuarded(
  ctx: ServiceContext,
  action: string,
  scopeOf: (req: EmulatorRequest) => string,
  handler: (call: ArmCall) => EmulatorResponse | Promise<EmulatorResponse>,
) {
  return async (req: EmulatorRequest): Promise<EmulatorResponse> => {
    if (!req.query.get('api-version')) {
      return armError(400, 'MissingApiVersionParameter', 'The api-version query parameter (?api-version=) is required for all requests.');
    }
    const auth = await authenticateBearer(ctx, req, 'arm');
    if (!auth.ok) {
      switch (auth.reason) {
        case 'missing':
          return armError(401, 'AuthenticationFailed', "Authentication failed. The 'Authorization' header is missing.");
        case 'expired':
          return armError(401, 'ExpiredAuthenticationToken', 'The access token expiry UTC time is earlier than current UTC time.');
        case 'audience':
          return armError(401, 'InvalidAuthenticationTokenAudience', `The access token has been obtained for wrong audience or resource. It should exactly match with one of the allowed audiences '${ctx.tokens.acceptedAudiences('arm').join("', '")}'.`);
        default:
          return armError(401, 'InvalidAuthenticationToken', 'The access token is invalid.');
      }
    }
    const scope = scopeOf(req);
    const sub = subscriptionOf(scope);
    if (sub !== undefined && !ctx.state.subscriptions.has(sub.toLowerCase())) {
      return armError(404, 'SubscriptionNotFound', `The subscription '${sub}' could not be found.`);
    }
    const callerOid = String(auth.claims.oid ?? '');
    if (!isAuthorized(ctx.state, callerOid, scope, action)) {
      return armError(403, 'AuthorizationFailed', `The client '${String(auth.claims.appid ?? '')}' with object id '${callerOid}' does not have authorization to perform action '${action}' over scope '${scope}' or the scope is invalid. If access was recently granted, please refresh your credentials.`);
    }
    const body = req.method === 'PUT' || req.method === 'POST' || req.method === 'PATCH' ? parseJsonBody(req) : {};
    if (body === undefined) return armError(400, 'InvalidRequestContent', 'The request content was invalid and could not be deserialized.');
    return handler({ req, body, callerOid });
  };
}
