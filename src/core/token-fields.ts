/**
 * The standard token_* role fields every Vault auth method shares (sdk/helper/tokenutil), their
 * write-time rules and how they become a login's token parameters.
 */
import { z } from 'zod';
import { addressInCidrs, parseCidr } from '../lib/cidr.ts';
import { normalizePolicies, normalizePolicyName } from './policy-store.ts';
import { BadRequestError, invalidField, PermissionDeniedError } from './errors.ts';
import { field } from './fields.ts';
import type { AuthResponse } from './framework.ts';
import { refuseReservedPolicies } from './policy/reserved.ts';

export const tokenFields = {
  token_policies: field.commaList('Policies attached to tokens issued with this role.', { canonicalItem: normalizePolicyName }),
  token_ttl: field.duration('Initial TTL of issued tokens (0: the mount default).'),
  token_max_ttl: field.duration('Maximum lifetime of issued tokens (0: the mount maximum).'),
  token_period: field.duration('Makes tokens periodic: each renewal resets the TTL to this period.'),
  token_num_uses: field.int('Maximum number of uses of an issued token (0: unlimited).'),
  token_no_default_policy: field.bool('Do not add the "default" policy to issued tokens.'),
  token_bound_cidrs: field.commaList('CIDR blocks allowed to log in with this role and to use its tokens.'),
};

/**
 * The role field names auth methods had before tokenutil, and the token_* field each is upgraded into. Vault
 * still accepts them (hvac 0.11's auth.azure.create_role sends only these), so an auth method's role path
 * declares `legacyTokenFields` beside `tokenFields`.
 */
export const LEGACY_TOKEN_FIELDS = {
  policies: 'token_policies',
  ttl: 'token_ttl',
  max_ttl: 'token_max_ttl',
  period: 'token_period',
  num_uses: 'token_num_uses',
  bound_cidrs: 'token_bound_cidrs',
} as const;
type LegacyName = keyof typeof LEGACY_TOKEN_FIELDS;
const LEGACY_NAMES = Object.keys(LEGACY_TOKEN_FIELDS) as LegacyName[];

const deprecated = (name: LegacyName) => `Deprecated alias of ${LEGACY_TOKEN_FIELDS[name]}; sending both with different values is a 400.`;
const aliasOf = (name: LegacyName) => ({ aliasOf: LEGACY_TOKEN_FIELDS[name] });

/** The deprecated names, each an alias (`aliasOf`) the pipeline folds into its token_* field before the ACL sees it. */
export const legacyTokenFields = {
  policies: field.commaList(deprecated('policies'), { canonicalItem: normalizePolicyName, ...aliasOf('policies') }),
  ttl: field.duration(deprecated('ttl'), aliasOf('ttl')),
  max_ttl: field.duration(deprecated('max_ttl'), aliasOf('max_ttl')),
  period: field.duration(deprecated('period'), aliasOf('period')),
  num_uses: field.int(deprecated('num_uses'), aliasOf('num_uses')),
  bound_cidrs: field.commaList(deprecated('bound_cidrs'), aliasOf('bound_cidrs')),
};

export const tokenSettingsSchema = z.object({
  token_policies: z.array(z.string()),
  token_ttl: z.number().int().nonnegative(),
  token_max_ttl: z.number().int().nonnegative(),
  token_period: z.number().int().nonnegative(),
  token_num_uses: z.number().int().nonnegative(),
  token_no_default_policy: z.boolean(),
  token_bound_cidrs: z.array(z.string()),
  /**
   * The deprecated names whose value the token_* twin holds (written under the old name and not since under
   * the new one). Vault keeps such a value in both fields and its read shows the old name too; older clients
   * read it back there. Roles stored before aliases were tracked have none.
   */
  legacy_names: z.array(z.enum(LEGACY_NAMES)).default([]),
});

export type TokenSettings = z.infer<typeof tokenSettingsSchema>;

export const DEFAULT_TOKEN_SETTINGS: TokenSettings = {
  token_policies: [], token_ttl: 0, token_max_ttl: 0, token_period: 0, token_num_uses: 0, token_no_default_policy: false, token_bound_cidrs: [], legacy_names: [],
};

type TokenFieldName = keyof typeof tokenFields;
type TokenFieldValues = { [K in TokenFieldName]?: unknown };
/** What mergeTokenSettings reads of a request: the fields sent (aliases already folded in) and the name each came under. */
interface SentTokenFields {
  data: TokenFieldValues;
  has(name: TokenFieldName): boolean;
  sentAs(name: TokenFieldName): string | undefined;
}

/**
 * Applies the sent token fields over `current` (partial update). The pipeline has already folded each deprecated
 * name into its token_* field (Vault's tokenutil.UpgradeValue, except that both names with different values is a
 * 400); the name it came under is remembered so the role's read shows it, as Vault's does. A reserved policy is
 * refused, the 400 naming the field the client sent.
 */
export function mergeTokenSettings(current: TokenSettings, req: SentTokenFields): TokenSettings {
  const { data, has } = req;
  if (has('token_policies')) refuseReservedPolicies(req.sentAs('token_policies')!, data.token_policies as string[]);
  const next: TokenSettings = { ...current };
  const set = (name: keyof TokenSettings, value: unknown) => { (next as Record<string, unknown>)[name] = value; };
  const legacy = new Set(current.legacy_names);
  for (const old of LEGACY_NAMES) {
    const name = LEGACY_TOKEN_FIELDS[old];
    if (!has(name)) continue;
    set(name, data[name]);
    if (req.sentAs(name) === old) legacy.add(old);
    else legacy.delete(old);
  }
  if (has('token_no_default_policy')) set('token_no_default_policy', data.token_no_default_policy);
  next.token_policies = [...new Set(next.token_policies.map((p) => p.trim().toLowerCase()).filter(Boolean))];
  next.token_bound_cidrs = next.token_bound_cidrs.filter((c) => c !== '');
  next.legacy_names = LEGACY_NAMES.filter((n) => legacy.has(n));
  return next;
}

/** Settings to validate; legacy_names only picks the name an error gives (settings without deprecated names have none). */
type CheckedSettings = Omit<TokenSettings, 'legacy_names'> & Partial<Pick<TokenSettings, 'legacy_names'>>;

/** The name a token_* value was written under, so an error names the field the client sent. */
function sentAs(s: CheckedSettings, name: (typeof LEGACY_TOKEN_FIELDS)[LegacyName]): string {
  return s.legacy_names?.find((old) => LEGACY_TOKEN_FIELDS[old] === name) ?? name;
}

/** Write-time rules; `mountMaxTtl` is the mount's effective maximum in seconds. */
export function validateTokenSettings(s: CheckedSettings, mountMaxTtl: number): void {
  const named = (name: Parameters<typeof sentAs>[1]) => sentAs(s, name);
  if (s.token_num_uses < 0) throw new BadRequestError(`invalid value for field "${named('token_num_uses')}": '${named('token_num_uses')}' cannot be negative`);
  if (s.token_max_ttl > 0 && s.token_ttl > s.token_max_ttl) {
    throw new BadRequestError(`invalid value for field "${named('token_ttl')}": '${named('token_ttl')}' cannot be greater than '${named('token_max_ttl')}'`);
  }
  if (s.token_period > 0 && mountMaxTtl > 0 && s.token_period > mountMaxTtl) {
    throw new BadRequestError(`invalid value for field "${named('token_period')}": token period of ${s.token_period}s is greater than the backend's maximum lease TTL of ${mountMaxTtl}s`);
  }
  for (const cidr of s.token_bound_cidrs) {
    if (!parseCidr(cidr)) throw invalidField(named('token_bound_cidrs'), 'an element is not an IP address or CIDR block');
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

/**
 * A role's read view: everything stored, and, as Vault's read does, each deprecated name the role's value was
 * written under, with that value, when it is set.
 */
export function tokenSettingsView<S extends TokenSettings>(s: S): Record<string, unknown> {
  const { legacy_names: legacy, ...view } = s;
  const out: Record<string, unknown> = view;
  for (const old of legacy) {
    const value = s[LEGACY_TOKEN_FIELDS[old]];
    if (Array.isArray(value) ? value.length > 0 : value) out[old] = value;
  }
  return out;
}

/** The token part of a login answer. */
export function tokenParams(s: TokenSettings): Pick<AuthResponse, 'policies' | 'noDefaultPolicy' | 'ttl' | 'maxTtl' | 'period' | 'numUses' | 'boundCidrs'> {
  return {
    policies: s.token_policies, noDefaultPolicy: s.token_no_default_policy, ttl: s.token_ttl, maxTtl: s.token_max_ttl,
    period: s.token_period || undefined, numUses: s.token_num_uses || undefined, boundCidrs: s.token_bound_cidrs,
  };
}
