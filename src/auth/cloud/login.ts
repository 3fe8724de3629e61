import type { Logger } from 'pino';
import { z } from 'zod';
import { BadRequestError, PermissionDeniedError, isStrongroomError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type AuthResponse, type PathDefinition, type TokenView } from '../../core/framework.ts';
import { reservedPolicyIn } from '../../core/policy/reserved.ts';
import type { StorageView } from '../../core/storage/view.ts';
import type { MountMetrics } from '../../core/framework.ts';
import { CLOUD_LOGIN_FAILURES, type LoginFailure } from '../../telemetry/families.ts';
import { checkBoundCidrs, grantsSamePolicies, tokenParams } from '../../core/token-fields.ts';
import { checkPlacementBounds, checkPrincipalBounds, hasResourceBounds, type VerifiedPlacement } from './bounds.ts';
import { parseClaims } from './claims.ts';
import type { CloudAuthProviders } from './providers.ts';
import { validateResourceLogin, verifyResource, type ResourceLogin } from './resource-check.ts';
import { readRole, type RoleCache } from './roles.ts';

/** Azure's naming rules, as Vault checks them before any call (digits may start a VM name here; Vault PR #259). */
const FORMATS: Record<keyof ResourceLogin, { re: RegExp; rule: string }> = {
  subscription_id: { re: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i, rule: 'expected a subscription GUID' },
  resource_group_name: { re: /^[\p{L}\p{N}_\-.()]{1,90}(?<!\.)$/u, rule: 'letters, digits, "-_.()", at most 90 characters, not ending with "."' },
  vm_name: { re: /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9_])?$/, rule: 'letters, digits, "._-", at most 64 characters, starting with a letter or digit and ending with a letter, digit or "_"' },
  vmss_name: { re: /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,62}[A-Za-z0-9_])?$/, rule: 'letters, digits, "._-", at most 64 characters, starting with a letter or digit and ending with a letter, digit or "_"' },
  resource_id: { re: /^\/subscriptions\/[^\s]{1,1000}$/i, rule: 'expected an ARM resource id starting with /subscriptions/' },
};

export function validateLoginFields(login: ResourceLogin): void {
  for (const [name, { re, rule }] of Object.entries(FORMATS) as Array<[keyof ResourceLogin, { re: RegExp; rule: string }]>) {
    const v = login[name];
    if (v && !re.test(v)) throw new BadRequestError(`invalid value for field "${name}": ${rule}`);
  }
}

/** What a token keeps for renewal: the role and what login verified, so renewal re-checks the current role. */
const internalSchema = z.object({
  role: z.string(),
  oid: z.string(),
  groups: z.array(z.string()),
  placement: z.object({ subscriptionId: z.string(), resourceGroup: z.string(), location: z.string(), scaleSet: z.string().optional() }).optional(),
});

const fields = {
  role: field.lowercase('Name of the role.', { required: true }),
  jwt: field.string('JWT issued by the directory for the configured resource (e.g. a managed identity access token).', { required: true, secret: true }),
  subscription_id: field.string('Subscription of the caller\'s resource (from instance metadata).'),
  resource_group_name: field.string('Resource group of the caller\'s resource (from instance metadata).'),
  vm_name: field.string('Virtual machine name.'),
  vmss_name: field.string('Virtual machine scale set name (uniform or flexible orchestration).'),
  resource_id: field.string('ARM id of the resource the token was obtained on (App Service, Functions, Arc ...).'),
};

export interface LoginDeps {
  providers: CloudAuthProviders;
  roles: RoleCache;
  logger: Logger;
  metrics: MountMetrics;
}

function aliasMetadata(appid: string | undefined, login: ResourceLogin, placement: VerifiedPlacement | undefined): Record<string, string> {
  const meta: Record<string, string> = {};
  // Request fields are recorded only when ARM verified them (Vault copies them unverified).
  if (placement) {
    meta.subscription_id = placement.subscriptionId;
    meta.resource_group_name = placement.resourceGroup;
    for (const name of ['vm_name', 'vmss_name', 'resource_id'] as const) if (login[name]) meta[name] = login[name]!;
  }
  if (appid) meta.app_id = appid;
  return meta;
}

/**
 * `check` follows the login through its checks, so a refusal is counted by the one that refused it (a bounded reason,
 * never the role name or a claim).
 */
async function login(deps: LoginDeps, storage: StorageView, remoteAddress: string, data: Record<string, string | undefined>, check: { now: LoginFailure }): Promise<AuthResponse> {
  const roleName = data.role ?? '';
  if (!roleName) throw new BadRequestError('missing required field "role": role is required');
  if (!data.jwt) throw new BadRequestError('missing required field "jwt": jwt is required');
  check.now = 'unknown_role';
  const role = await deps.roles.get(storage, roleName);
  if (!role) throw new BadRequestError(`invalid value for field "role": invalid role name "${roleName}"`);
  check.now = 'bound_cidrs';
  checkBoundCidrs(role, remoteAddress);
  check.now = 'invalid_request';
  const request: ResourceLogin = {
    subscription_id: data.subscription_id || undefined, resource_group_name: data.resource_group_name || undefined,
    vm_name: data.vm_name || undefined, vmss_name: data.vmss_name || undefined, resource_id: data.resource_id || undefined,
  };
  validateLoginFields(request);
  const resourceBound = hasResourceBounds(role);
  if (resourceBound) validateResourceLogin(request);

  check.now = 'not_configured';
  const config = await deps.providers.config(storage);
  if (!config) throw new BadRequestError('the auth method is not configured: write tenant_id and resource to config first');
  check.now = 'jwt';
  const claims = parseClaims(await deps.providers.verifier(config).verify(data.jwt));
  check.now = 'bound_principal';
  checkPrincipalBounds(role, claims);
  check.now = 'resource';
  const placement = resourceBound ? await verifyResource(deps.providers.compute(config), role, request, claims) : undefined;

  const alias = aliasMetadata(claims.appid, request, placement);
  return {
    ...tokenParams(role),
    displayName: claims.oid,
    metadata: { ...alias, role: roleName },
    renewable: true,
    alias: { name: claims.oid, metadata: alias },
    groupAliases: claims.groups,
    internal: internalSchema.parse({ role: roleName, oid: claims.oid, groups: claims.groups, placement }),
  };
}

export function loginPaths(deps: LoginDeps): PathDefinition[] {
  return [
    definePath({
      pattern: 'login',
      description: 'Log in with a JWT issued by the directory; returns a client token with the role\'s policies.',
      unauthenticated: true,
      fields,
      operations: {
        update: async (req) => {
          const check: { now: LoginFailure } = { now: 'invalid_request' };
          try {
            return { auth: await login(deps, req.storage, req.remoteAddress, req.data, check) };
          } catch (err) {
            // A directory or ARM that did not answer is not the caller's failure.
            deps.metrics.counter(CLOUD_LOGIN_FAILURES).inc({ reason: isStrongroomError(err) && err.status >= 500 ? 'upstream' : check.now });
            // The reason names the failed check only; the JWT and claim values never reach the log.
            if (isStrongroomError(err) && err.status < 500) deps.logger.info({ requestId: req.requestId, role: req.data.role, status: err.status, reason: err.message }, 'cloud login refused');
            else deps.logger.warn({ requestId: req.requestId, role: req.data.role, err: isStrongroomError(err) ? err.message : (err as Error).name }, 'cloud login failed');
            throw err;
          }
        },
      },
    }),
  ];
}

/**
 * Renewal: the role must still exist, still grant the token's policies and still admit what login verified;
 * TTLs come from the role as it is now. A token whose policies the role no longer grants is not renewed
 * (rather than renewed with other policies): its holder logs in again and gets the current ones.
 */
export async function renewLogin(storage: StorageView, token: TokenView): Promise<{ ttl: number; maxTtl: number; period?: number }> {
  const parsed = internalSchema.safeParse(token.internal);
  if (!parsed.success) throw new PermissionDeniedError('permission denied: token was not issued by this auth method\'s login');
  const { role: roleName, oid, groups, placement } = parsed.data;
  const role = await readRole(storage, roleName);
  if (!role) throw new PermissionDeniedError('permission denied: the role this token was issued for no longer exists; log in with another role');
  // A token minted before roles were barred from reserved policies must not renew its way past the fix.
  const reserved = reservedPolicyIn(token.policies);
  if (reserved) throw new PermissionDeniedError(`permission denied: the token carries the "${reserved}" policy, which no role may grant; not renewing`);
  if (!grantsSamePolicies(role, token.policies)) {
    throw new PermissionDeniedError("permission denied: the role's policies have changed since this token was issued, not renewing; log in again for a token with the current policies");
  }
  checkPrincipalBounds(role, { oid, groups, groupsOverage: false });
  if (hasResourceBounds(role)) {
    if (!placement) throw new PermissionDeniedError('permission denied: the role now requires resource verification; log in again');
    checkPlacementBounds(role, placement);
  }
  return { ttl: role.token_ttl, maxTtl: role.token_max_ttl, period: role.token_period || undefined };
}
