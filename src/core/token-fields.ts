/**
 * The standard token_* role fields every Vault auth method shares (sdk/helper/tokenutil), their
 * write-time rules and how they become a login's token parameters.
 */
import { z } from 'zod';
import { addressInCidrs, parseCidr } from '../lib/cidr.ts';
import { normalizePolicies } from './core.ts';
import { BadRequestError, PermissionDeniedError } from './errors.ts';
import { field } from './fields.ts';
import type { AuthResponse } from './framework.ts';
import { refuseReservedPolicies } from './policy/reserved.ts';

export const tokenFields = {
  token_policies: field.commaList('Policies attached to tokens issued with this role.'),
  policies: field.commaList('Deprecated alias of token_policies; token_policies wins when both are sent.'),
  token_ttl: field.duration('Initial TTL of issued tokens (0: the mount default).'),
  token_max_ttl: field.duration('Maximum lifetime of issued tokens (0: the mount maximum).'),
  token_period: field.duration('Makes tokens periodic: each renewal resets the TTL to this period.'),
  token_num_uses: field.int('Maximum number of uses of an issued token (0: unlimited).'),
  token_no_default_policy: field.bool('Do not add the "default" policy to issued tokens.'),
  token_bound_cidrs: field.commaList('CIDR blocks allowed to log in with this role and to use its tokens.'),
};

export const tokenSettingsSchema = z.object({
  token_policies: z.array(z.string()),
  token_ttl: z.number().int().nonnegative(),
  token_max_ttl: z.number().int().nonnegative(),
  token_period: z.number().int().nonnegative(),
  token_num_uses: z.number().int().nonnegative(),
  token_no_default_policy: z.boolean(),
  token_bound_cidrs: z.array(z.string()),
});

export type TokenSettings = z.infer<typeof tokenSettingsSchema>;

export const DEFAULT_TOKEN_SETTINGS: TokenSettings = {
  token_policies: [], token_ttl: 0, token_max_ttl: 0, token_period: 0, token_num_uses: 0, token_no_default_policy: false, token_bound_cidrs: [],
};

type TokenFieldValues = { [K in keyof typeof tokenFields]?: unknown };

/**
 * Applies the sent token fields over `current` (partial update); policies/token_policies as in Vault.
 * A reserved policy is refused in either field, also in the legacy one that token_policies overrides:
 * the request asked for it, and the 400 names the field that did.
 */
export function mergeTokenSettings(current: TokenSettings, data: TokenFieldValues, has: (name: keyof typeof tokenFields) => boolean): TokenSettings {
  for (const name of ['token_policies', 'policies'] as const) if (has(name)) refuseReservedPolicies(name, data[name] as string[]);
  const next = { ...current };
  if (has('token_policies')) next.token_policies = data.token_policies as string[];
  else if (has('policies')) next.token_policies = data.policies as string[];
  next.token_policies = [...new Set(next.token_policies.map((p) => p.trim().toLowerCase()).filter(Boolean))];
  for (const name of ['token_ttl', 'token_max_ttl', 'token_period', 'token_num_uses', 'token_no_default_policy', 'token_bound_cidrs'] as const) {
    if (has(name)) (next as Record<string, unknown>)[name] = data[name];
  }
  next.token_bound_cidrs = next.token_bound_cidrs.filter((c) => c !== '');
  return next;
}

/** Write-time rules; `mountMaxTtl` is the mount's effective maximum in seconds. */
export function validateTokenSettings(s: TokenSettings, mountMaxTtl: number): void {
  if (s.token_num_uses < 0) throw new BadRequestError(`invalid value for field "token_num_uses": 'token_num_uses' cannot be negative`);
  if (s.token_max_ttl > 0 && s.token_ttl > s.token_max_ttl) throw new BadRequestError(`invalid value for field "token_ttl": 'token_ttl' cannot be greater than 'token_max_ttl'`);
  if (s.token_period > 0 && mountMaxTtl > 0 && s.token_period > mountMaxTtl) {
    throw new BadRequestError(`invalid value for field "token_period": token period of ${s.token_period}s is greater than the backend's maximum lease TTL of ${mountMaxTtl}s`);
  }
  for (const cidr of s.token_bound_cidrs) {
    if (!parseCidr(cidr)) throw new BadRequestError(`invalid value for field "token_bound_cidrs": "${cidr}" is not an IP address or CIDR block`);
  }
}

/** A warning when the role's max TTL will be cut by the mount, as Vault answers. */
export function tokenSettingsWarnings(s: TokenSettings, mountMaxTtl: number): string[] {
  return s.token_max_ttl > 0 && mountMaxTtl > 0 && s.token_max_ttl > mountMaxTtl
    ? ["token_max_ttl is greater than the system or backend mount's maximum TTL value; issued tokens' max TTL value will be truncated"]
    : [];
}

/** Refuses a login from outside the role's token_bound_cidrs. */
export function checkBoundCidrs(s: TokenSettings, remoteAddress: string): void {
  if (s.token_bound_cidrs.length > 0 && !addressInCidrs(remoteAddress, s.token_bound_cidrs)) {
    throw new PermissionDeniedError("permission denied: source address is outside the role's token_bound_cidrs");
  }
}

/**
 * Whether a token carries exactly the policies a login with these settings would give it now (the same
 * normalisation, `default` included unless token_no_default_policy). Renewal requires it, as Vault's approle
 * and userpass do (policyutil.EquivalentPolicies), so a policy removed from a role cannot live on in
 * periodic tokens that renew forever.
 */
export function grantsSamePolicies(s: TokenSettings, tokenPolicies: readonly string[]): boolean {
  const now = normalizePolicies(s.token_policies, !s.token_no_default_policy);
  const held = new Set(tokenPolicies);
  return now.length === held.size && now.every((p) => held.has(p));
}

/** A role's read view: everything stored, plus the legacy `policies` name older clients read. */
export function tokenSettingsView(s: TokenSettings): Record<string, unknown> {
  return { ...s, policies: s.token_policies };
}

/** The token part of a login answer. */
export function tokenParams(s: TokenSettings): Pick<AuthResponse, 'policies' | 'noDefaultPolicy' | 'ttl' | 'maxTtl' | 'period' | 'numUses' | 'boundCidrs'> {
  return {
    policies: s.token_policies, noDefaultPolicy: s.token_no_default_policy, ttl: s.token_ttl, maxTtl: s.token_max_ttl,
    period: s.token_period || undefined, numUses: s.token_num_uses || undefined, boundCidrs: s.token_bound_cidrs,
  };
}
