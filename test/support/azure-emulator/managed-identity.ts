// App Service-style managed identity endpoint (what IDENTITY_ENDPOINT/IDENTITY_HEADER point at):
// GET ?resource=...&api-version=2019-08-01 with the X-IDENTITY-HEADER secret returns a token for the
// hosting resource's identity, system-assigned by default or user-assigned by client_id/principal_id/mi_res_id.
import { randomUUID } from 'node:crypto';
import { json, type EmulatorResponse, type Router, type ServiceContext } from './http.ts';
import type { EmulatorState, ManagedIdentity } from './state.ts';

export const MANAGED_IDENTITY_PATH = '/msi/token';

export function addManagedIdentity(
  state: EmulatorState,
  input: { name?: string; systemAssigned?: boolean; resourceId?: string; claims?: Record<string, unknown> } = {},
): ManagedIdentity {
  const clientId = randomUUID();
  const sp = state.createServicePrincipal({ appId: clientId, displayName: input.name ?? `mi-${clientId.slice(0, 8)}` }, 'ManagedIdentity');
  const identity: ManagedIdentity = {
    principalId: sp.id,
    clientId,
    resourceId: input.resourceId ?? '',
    systemAssigned: input.systemAssigned ?? true,
    claims: input.claims ?? {},
  };
  state.managedIdentities.push(identity);
  return identity;
}

const msiError = (status: number, message: string): EmulatorResponse => json(status, { statusCode: status, message });

export function registerManagedIdentity(router: Router, ctx: ServiceContext, identityHeader: string): void {
  const { state, tokens } = ctx;
  router.add('GET', MANAGED_IDENTITY_PATH, async (req) => {
    if (req.headers['x-identity-header'] !== identityHeader) return msiError(401, 'X-IDENTITY-HEADER is missing or invalid.');
    if (req.query.get('api-version') !== '2019-08-01') return msiError(400, 'api-version must be 2019-08-01.');
    const resource = req.query.get('resource');
    if (!resource) return msiError(400, 'resource is required.');
    if (!tokens.isKnownResource(resource)) return msiError(400, `The resource principal named ${resource} was not found in the tenant.`);
    const clientId = req.query.get('client_id');
    const principalId = req.query.get('principal_id') ?? req.query.get('object_id');
    const resId = req.query.get('mi_res_id');
    const identity = state.managedIdentities.find((mi) =>
      clientId ? mi.clientId === clientId
      : principalId ? mi.principalId === principalId
      : resId ? mi.resourceId.toLowerCase() === resId.toLowerCase()
      : mi.systemAssigned);
    if (!identity) return msiError(400, 'No managed identity matches the request for this resource.');
    req.caller = { appId: identity.clientId, oid: identity.principalId };
    const { token, expiresOn } = await tokens.issue({
      audience: resource,
      oid: identity.principalId,
      appId: identity.clientId,
      appidacr: '2',
      claims: identity.claims,
      // Managed identity tokens live 24 hours in Azure.
      lifetimeSec: 24 * 3600,
    });
    return json(200, { access_token: token, expires_on: String(expiresOn), resource, token_type: 'Bearer', client_id: identity.clientId });
  });
}
