/**
 * Token roles: `auth/token/roles/:name` (CRUD, LIST) and the policy rules `auth/token/create/:role` applies
 * (Vault's token store roles). Roles live in the token mount's storage, `roles/<name>`.
 */
import { z } from 'zod';
import { normalizePolicies, normalizePolicyName } from '../../core/policy-store.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, lowerName, type BackendRequest, type PathDefinition } from '../../core/framework.ts';
import { refuseReservedPolicies } from '../../core/policy/reserved.ts';
import type { StorageView } from '../../core/storage/view.ts';
import { legacyTokenFields, tokenFields, validateTokenSettings, type TokenSettings } from '../../core/token-fields.ts';

/** Vault's role-name grammar: word characters at both ends, `-` and `.` inside. */
export const ROLE_NAME = String.raw`\w(?:[\w.-]*\w)?`;
const PATH_SUFFIX_MAX = 256;

const tokenRoleSchema = z.object({
  allowed_policies: z.array(z.string()),
  disallowed_policies: z.array(z.string()),
  allowed_policies_glob: z.array(z.string()),
  disallowed_policies_glob: z.array(z.string()),
  orphan: z.boolean(),
  renewable: z.boolean(),
  path_suffix: z.string(),
  allowed_entity_aliases: z.array(z.string()),
  token_type: z.enum(['default-service', 'service']),
  token_period: z.number().int().nonnegative(),
  token_explicit_max_ttl: z.number().int().nonnegative(),
  token_num_uses: z.number().int().nonnegative(),
  token_no_default_policy: z.boolean(),
  token_bound_cidrs: z.array(z.string()),
});
export type TokenRole = z.infer<typeof tokenRoleSchema>;

const NEW_ROLE: TokenRole = {
  allowed_policies: [], disallowed_policies: [], allowed_policies_glob: [], disallowed_policies_glob: [], orphan: false, renewable: true,
  path_suffix: '', allowed_entity_aliases: [], token_type: 'default-service', token_period: 0, token_explicit_max_ttl: 0, token_num_uses: 0,
  token_no_default_policy: false, token_bound_cidrs: [],
};

const roleFields = {
  allowed_policies: field.commaList('Policies tokens of this role may have (instead of a subset of the caller\'s); the default when a create names none.', { canonicalItem: normalizePolicyName }),
  disallowed_policies: field.commaList('Policies tokens of this role may never have.', { canonicalItem: normalizePolicyName }),
  allowed_policies_glob: field.commaList('Glob patterns (`*`) of policies tokens of this role may have.', { canonicalItem: normalizePolicyName }),
  disallowed_policies_glob: field.commaList('Glob patterns (`*`) of policies tokens of this role may never have.', { canonicalItem: normalizePolicyName }),
  orphan: field.bool('Tokens of this role have no parent (no sudo needed).'),
  renewable: field.bool('Whether tokens of this role can be renewed (default true).'),
  path_suffix: field.string('Appended to the tokens\' creation path (auth/token/create/<role>/<suffix>), so revoke-prefix can end one generation.', { maxLength: PATH_SUFFIX_MAX }),
  allowed_entity_aliases: field.commaList('Entity alias names (or `*` globs) a create may ask tokens to be bound to.'),
  token_type: field.string('"service" or "default-service" (batch tokens are not supported).'),
  token_period: tokenFields.token_period,
  period: legacyTokenFields.period,
  token_explicit_max_ttl: field.duration('Hard limit on the life of tokens of this role.'),
  explicit_max_ttl: field.duration('Deprecated alias of token_explicit_max_ttl; sending both with different values is a 400.', { aliasOf: 'token_explicit_max_ttl' }),
  token_num_uses: tokenFields.token_num_uses,
  token_no_default_policy: tokenFields.token_no_default_policy,
  token_bound_cidrs: tokenFields.token_bound_cidrs,
  bound_cidrs: legacyTokenFields.bound_cidrs,
};
type RoleRequest = BackendRequest<typeof roleFields>;

/** Policy names and globs as tokens hold them: trimmed, lower-cased, no repeats, sorted. */
const policyList = (names: string[]) => normalizePolicies(names, false);

/** `*` matches any run of characters, anywhere in the pattern (Vault's glob for policies and entity aliases). */
export function globMatch(pattern: string, value: string): boolean {
  const parts = pattern.split('*');
  const first = parts[0];
  const last = parts[parts.length - 1];
  if (parts.length === 1) return pattern === value;
  if (value.length < first.length + last.length || !value.startsWith(first) || !value.endsWith(last)) return false;
  // The middle parts in order, each at its earliest place (enough for `*`, and linear where a regex could backtrack).
  let at = first.length;
  const end = value.length - last.length;
  for (const part of parts.slice(1, -1)) {
    const found = value.indexOf(part, at);
    if (found === -1 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

function checkPathSuffix(suffix: string): void {
  if (suffix !== '' && (!/^[\w.\-/]+$/.test(suffix) || suffix.split('/').some((s) => s === '' || s === '.' || s === '..'))) {
    throw new BadRequestError('invalid value for field "path_suffix": it may only hold letters, digits, "_", "-", "." and "/" between non-empty segments other than "." and ".."');
  }
}

function tokenType(raw: string): TokenRole['token_type'] {
  const type = raw === '' ? 'default-service' : raw.toLowerCase();
  if (type === 'service' || type === 'default-service') return type;
  if (type === 'batch' || type === 'default-batch') throw new BadRequestError('invalid value for field "token_type": only service tokens are supported');
  throw new BadRequestError('invalid value for field "token_type": expected one of service, default-service');
}

/** The sent fields over `current` (a partial update keeps what is not sent); legacy names arrive folded into the token_ ones. */
function merged(current: TokenRole, req: RoleRequest): TokenRole {
  const d = req.data;
  // A role may never hand out root or response-wrapping, in any spelling; create refuses them again (globs may match them).
  for (const name of ['allowed_policies', 'allowed_policies_glob'] as const) if (req.has(name)) refuseReservedPolicies(name, d[name]!);
  const next = { ...current };
  for (const name of ['allowed_policies', 'disallowed_policies', 'allowed_policies_glob', 'disallowed_policies_glob', 'allowed_entity_aliases'] as const) {
    if (req.has(name)) next[name] = policyList(d[name]!);
  }
  if (req.has('orphan')) next.orphan = d.orphan!;
  if (req.has('renewable')) next.renewable = d.renewable!;
  if (req.has('path_suffix')) next.path_suffix = d.path_suffix!.trim();
  if (req.has('token_type')) next.token_type = tokenType(d.token_type!);
  if (req.has('token_period')) next.token_period = d.token_period!;
  if (req.has('token_explicit_max_ttl')) next.token_explicit_max_ttl = d.token_explicit_max_ttl!;
  if (req.has('token_num_uses')) next.token_num_uses = d.token_num_uses!;
  if (req.has('token_no_default_policy')) next.token_no_default_policy = d.token_no_default_policy!;
  if (req.has('token_bound_cidrs')) next.token_bound_cidrs = d.token_bound_cidrs!.filter((c) => c !== '');
  checkPathSuffix(next.path_suffix);
  return next;
}

/** A role's read view: Vault's fields, the legacy names beside the token_ ones. */
function roleView(name: string, r: TokenRole): Record<string, unknown> {
  return {
    name, allowed_policies: r.allowed_policies, disallowed_policies: r.disallowed_policies, allowed_policies_glob: r.allowed_policies_glob,
    disallowed_policies_glob: r.disallowed_policies_glob, orphan: r.orphan, renewable: r.renewable, path_suffix: r.path_suffix,
    allowed_entity_aliases: r.allowed_entity_aliases, token_type: r.token_type, token_period: r.token_period, period: r.token_period,
    token_explicit_max_ttl: r.token_explicit_max_ttl, explicit_max_ttl: r.token_explicit_max_ttl, token_num_uses: r.token_num_uses,
    token_no_default_policy: r.token_no_default_policy, token_bound_cidrs: r.token_bound_cidrs, bound_cidrs: r.token_bound_cidrs,
  };
}

/** Typed storage of token roles. */
export class TokenRoleStore {
  readonly #view: StorageView;

  constructor(view: StorageView) {
    this.#view = view;
  }

  get(name: string): Promise<TokenRole | undefined> {
    return this.#view.getJson(`roles/${name}`, (raw) => tokenRoleSchema.parse(raw));
  }

  put(name: string, role: TokenRole): Promise<void> {
    return this.#view.putJson(`roles/${name}`, tokenRoleSchema.parse(role));
  }

  delete(name: string): Promise<void> {
    return this.#view.delete(`roles/${name}`);
  }

  list(): Promise<string[]> {
    return this.#view.list('roles/');
  }
}

/**
 * The policies of a token created with a role (Vault's rules). A role with allowed or disallowed lists decides on
 * its own: the requested policies (or else the role's allowed_policies, or else the parent's) must each be allowed
 * by name or glob when the role allows any, and none may be disallowed; `default` is added unless asked not to (the
 * request's no_default_policy or the role's token_no_default_policy: the caller passes either as `noDefaultPolicy`)
 * or disallowed by name or glob (Vault's resolveTokenPolicies). A role with no lists leaves the ordinary rules
 * (`undefined`). Root and response-wrapping are not refused here: create refuses them for every role, whichever
 * rules chose the policies (a glob such as `*` would let them through).
 */
export function rolePolicies(role: TokenRole, requested: string[], noDefaultPolicy: boolean, parentPolicies: string[]): string[] | undefined {
  const allowing = role.allowed_policies.length > 0 || role.allowed_policies_glob.length > 0;
  if (!allowing && role.disallowed_policies.length === 0 && role.disallowed_policies_glob.length === 0) return undefined;
  const addDefault = !noDefaultPolicy && !role.disallowed_policies.includes('default') && !role.disallowed_policies_glob.some((g) => globMatch(g, 'default'));
  let policies = normalizePolicies(requested.length > 0 ? requested : allowing ? role.allowed_policies : parentPolicies, addDefault);
  if (requested.length > 0 && allowing) {
    const allowed = normalizePolicies(role.allowed_policies, addDefault);
    if (policies.some((p) => !allowed.includes(p) && !role.allowed_policies_glob.some((g) => globMatch(g, p)))) {
      throw new BadRequestError(`invalid value for field "policies": token policies (${JSON.stringify(policies)}) must be subset of the role's allowed policies (${JSON.stringify(allowed)}) or glob policies (${JSON.stringify(role.allowed_policies_glob)})`);
    }
  }
  const disallowed = policies.find((p) => role.disallowed_policies.includes(p) || role.disallowed_policies_glob.some((g) => globMatch(g, p)));
  if (disallowed) throw new BadRequestError(`invalid value for field "policies": token policy "${disallowed}" is disallowed by this role`);
  if (noDefaultPolicy) policies = policies.filter((p) => p !== 'default');
  return policies;
}

export function rolePaths(roles: TokenRoleStore, mountMaxTtl: () => number): PathDefinition[] {
  return [
    definePath({
      pattern: 'roles/?',
      description: 'List token roles.',
      operations: { list: async () => ({ data: { keys: await roles.list() } }) },
    }),
    definePath({
      pattern: `roles/(?<name>${ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Create, read, update or delete a token role.',
      fields: roleFields,
      existenceCheck: async (req) => (await roles.get(req.params.name)) !== undefined,
      operations: {
        read: async (req) => {
          const role = await roles.get(req.params.name);
          return role && { data: roleView(req.params.name, role) };
        },
        create: async (req) => writeRole(roles, req, mountMaxTtl()),
        update: async (req) => writeRole(roles, req, mountMaxTtl()),
        delete: async (req) => roles.delete(req.params.name),
      },
    }),
  ];
}

async function writeRole(roles: TokenRoleStore, req: RoleRequest, mountMaxTtl: number): Promise<void> {
  const next = merged((await roles.get(req.params.name)) ?? NEW_ROLE, req);
  // The rules every auth method's token_* fields follow (bound CIDRs parse, period within the mount's maximum),
  // their errors naming the field the client sent.
  const sentAsLegacy = (['period', 'bound_cidrs'] as const).filter((old) => req.sentAs(`token_${old}`) === old);
  const settings: TokenSettings = {
    token_policies: [], token_ttl: 0, token_max_ttl: next.token_explicit_max_ttl, token_period: next.token_period, token_num_uses: next.token_num_uses,
    token_no_default_policy: next.token_no_default_policy, token_bound_cidrs: next.token_bound_cidrs, legacy_names: sentAsLegacy,
  };
  validateTokenSettings(settings, mountMaxTtl);
  await roles.put(req.params.name, next);
}
