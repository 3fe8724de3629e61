// The Azure Instance Metadata Service's managed-identity endpoint as a VM sees it
// (http://169.254.169.254/metadata/identity/oauth2/token): GET ?api-version=2018-02-01&resource=... with the
// `Metadata: true` header returns an access token of the VM's system-assigned identity, or of one of its
// user-assigned identities named by client_id, object_id or mi_res_id. Real IMDS answers for the VM the call comes
// from; the emulator answers for the one VM it was told it runs on (`npm run emulator` seeds one), so a shell on
// this machine can play the workload that logs in through the cloud auth method.
import { json, type EmulatorResponse, type Router } from './http.ts';
import type { EmulatedResource } from './arm-compute.ts';
import type { ManagedIdentityTokens } from './managed-identity-tokens.ts';
import type { TokenService } from './entra.ts';
import type { EmulatorState } from './state.ts';

export const IMDS_TOKEN_PATH = '/metadata/identity/oauth2/token';

export interface ImdsHost {
  vm: EmulatedResource;
  miTokens: ManagedIdentityTokens;
  tokens: TokenService;
  state: EmulatorState;
}

// Managed identity tokens live 24 hours in Azure.
const LIFETIME_SEC = 24 * 3600;

const imdsError = (status: number, error: string, description: string): EmulatorResponse =>
  json(status, { error, error_description: description });

/** `host()` is the VM the endpoint answers for (undefined: none yet, every request is refused). */
export function registerImds(router: Router, host: () => ImdsHost | undefined): void {
  router.add('GET', IMDS_TOKEN_PATH, async (req) => {
    if (req.headers.metadata !== 'true') return imdsError(400, 'invalid_request', 'Required metadata header not specified');
    if (req.query.get('api-version') !== '2018-02-01') return imdsError(400, 'invalid_request', 'api-version must be 2018-02-01.');
    const resource = req.query.get('resource');
    if (!resource) return imdsError(400, 'invalid_request', 'Required audience parameter not specified');
    const h = host();
    if (!h) return imdsError(400, 'invalid_request', 'Identity not found: this emulator runs on no VM.');
    if (!h.tokens.isKnownResource(resource)) return imdsError(400, 'invalid_resource', `AADSTS500011: The resource principal named ${resource} was not found in the tenant.`);
    const clientId = req.query.get('client_id');
    const objectId = req.query.get('object_id');
    const resId = req.query.get('mi_res_id');
    const userAssigned = h.vm.userAssigned.find((u) =>
      clientId ? u.identity.clientId === clientId : objectId ? u.identity.principalId === objectId : resId ? u.id.toLowerCase() === resId.toLowerCase() : false);
    const identity = userAssigned?.identity ?? (clientId || objectId || resId ? undefined : h.vm.systemIdentity);
    if (!identity) return imdsError(400, 'invalid_request', 'Identity not found');
    const iat = Math.floor(h.state.now() / 1000);
    const token = await h.miTokens.mint({
      identity, audience: resource, hostResourceId: h.vm.id, userAssignedResourceId: userAssigned?.id, issuedAtSec: iat, expiresAtSec: iat + LIFETIME_SEC,
    });
    return json(200, {
      access_token: token, client_id: identity.clientId, expires_in: String(LIFETIME_SEC), expires_on: String(iat + LIFETIME_SEC),
      ext_expires_in: String(LIFETIME_SEC), not_before: String(iat), resource, token_type: 'Bearer',
    });
  });
}
