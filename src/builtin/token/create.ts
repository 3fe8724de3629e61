import type { Core } from '../../core/core.ts';
import { BadRequestError, PermissionDeniedError } from '../../core/errors.ts';
import { normalizePolicies, normalizePolicyName } from '../../core/policy-store.ts';
import { field } from '../../core/fields.ts';
import { definePath, lowerName, type BackendRequest, type PathDefinition } from '../../core/framework.ts';
import { minPositive } from '../../core/leases.ts';
import { refuseReservedPolicies } from '../../core/policy/reserved.ts';
import { issueToken } from '../../core/token-issue.ts';
import { TokenStore, type TokenEntry } from '../../core/tokens.ts';
import { ROLE_NAME, globMatch, rolePolicies, type TokenRole, type TokenRoleStore } from './roles.ts';

const createFields = {
  id: field.string('Custom token id (sudo only).', { secret: true }),
  policies: field.commaList('Policies for the token; defaults to the parent\'s.', { canonicalItem: normalizePolicyName }),
  meta: field.kvPairs('Metadata attached to the token.'),
  no_parent: field.bool('Create an orphan (sudo only).'),
  no_default_policy: field.bool('Do not attach the default policy.'),
  renewable: field.bool('Whether the token can be renewed.', { default: true }),
  ttl: field.duration('Initial TTL.'),
  lease: field.duration('Deprecated alias of ttl.', { aliasOf: 'ttl' }),
  explicit_max_ttl: field.duration('Hard limit on the token\'s life.'),
  display_name: field.string('Display name; stored as "token-<name>".'),
  num_uses: field.int('Number of uses before the token dies (0 = unlimited).'),
  period: field.duration('Renewal period of a periodic token (sudo only).'),
  type: field.string('Token type; only "service" is supported.'),
};

/** Display names keep only [A-Za-z0-9-] (Vault's rule), prefixed with "token-". */
export function tokenDisplayName(name: string | undefined): string {
  if (!name) return 'token';
  return `token-${name}`.replace(/[^A-Za-z0-9-]/g, '-').replace(/-$/, '');
}

async function hasSudo(core: Core, req: BackendRequest): Promise<boolean> {
  const acl = await core.policies.aclFor(req.caller?.policies ?? []);
  const caps = acl.capabilities(`auth/token/${req.path}`);
  return caps.includes('root') || caps.includes('sudo');
}

/** create/:role also takes the entity alias a role may allow. */
const roleCreateFields = {
  ...createFields,
  entity_alias: field.string('Name of an entity alias (on the token mount) the token is bound to; the role\'s allowed_entity_aliases must allow it.', { maxLength: 512 }),
};
type CreateRequest = BackendRequest<typeof roleCreateFields>;

/** The policies of a token created without a role's lists: a subset of the parent's unless sudo, root only from root. */
function ordinaryPolicies(d: CreateRequest['data'], noDefaultPolicy: boolean, parent: TokenEntry, sudo: boolean): string[] {
  let policies = d.policies && d.policies.length ? normalizePolicies(d.policies, false) : parent.policies.filter((p) => p !== 'default' || !noDefaultPolicy);
  if (policies.includes('response-wrapping')) throw new BadRequestError('cannot assign policy "response-wrapping"');
  const isRootParent = parent.policies.includes('root');
  if (policies.includes('root') && !isRootParent) throw new PermissionDeniedError('root tokens may not be created without parent token being root');
  if (!isRootParent && !sudo) {
    const allowed = new Set(parent.policies);
    const extra = policies.filter((p) => p !== 'default' && !allowed.has(p));
    if (extra.length) throw new PermissionDeniedError(`child policies must be subset of parent: ${extra.join(', ')} not held by the caller`);
  }
  if (!noDefaultPolicy && !policies.includes('root')) policies = normalizePolicies(policies, true);
  return policies;
}

/** The lesser of a value set both in the request and in the role (0 = unset), with Vault's warning when both were. */
function lesser(what: string, requested: number, fromRole: number, warnings: string[]): number {
  const value = minPositive(requested, fromRole);
  if (requested > 0 && fromRole > 0) warnings.push(`${what} specified both during creation call and in role; using the lesser value of ${value} seconds`);
  return value;
}

export function createPaths(core: Core, roles: TokenRoleStore): PathDefinition[] {
  const tokenMountAccessor = () => core.mounts.get('auth/token/')?.accessor ?? '';
  const create = async (req: CreateRequest, mode: { orphanPath: boolean; role?: { name: string; entry: TokenRole } }) => {
    const d = req.data;
    const role = mode.role?.entry;
    const parent = (await core.tokens.lookupAccessor(req.caller!.accessor))!;
    const sudo = await hasSudo(core, req);
    if (parent.numUses > 0) throw new BadRequestError('restricted use token cannot generate child tokens');
    // A role decides orphanhood itself (no sudo needed); no_parent is for the plain create paths.
    const orphan = role ? role.orphan : mode.orphanPath || (d.no_parent ?? false);
    if (!orphan && (await core.tokens.depth(parent)) + 1 > TokenStore.MAX_DEPTH) {
      throw new BadRequestError(`a token tree may be at most ${TokenStore.MAX_DEPTH} levels deep: create an orphan token instead`);
    }
    if (d.type && d.type !== 'service') throw new BadRequestError(`invalid value for field "type": only "service" tokens are supported`);
    if (!role && d.no_parent && !mode.orphanPath && !sudo) throw new PermissionDeniedError('root or sudo privileges required to create orphan token');
    if (d.id !== undefined && !sudo) throw new PermissionDeniedError('root or sudo privileges required to specify token id');
    if (d.id !== undefined && (d.id.includes('.') || d.id === '')) throw new BadRequestError('invalid value for field "id": a custom token id must not be empty or contain "."');
    if (d.id !== undefined && (await core.tokens.lookup(d.id))) throw new BadRequestError('cannot create a token with a duplicate ID');
    if (d.period && !sudo) throw new PermissionDeniedError('root or sudo privileges required to create periodic token');
    // A role's token_no_default_policy is the request's no_default_policy for every create through it.
    const noDefaultPolicy = (d.no_default_policy ?? false) || (role?.token_no_default_policy ?? false);
    const policies = (role && rolePolicies(role, d.policies ?? [], noDefaultPolicy, parent.policies)) ?? ordinaryPolicies(d, noDefaultPolicy, parent, sudo);
    // No role hands out root or response-wrapping, whatever its lists (a glob like `*`) or the parent allow.
    if (role) refuseReservedPolicies('policies', policies);
    const warnings: string[] = [];
    for (const p of policies) if (!(await core.policies.exists(p))) warnings.push(`Policy "${p}" does not exist`);
    const period = lesser('Period', d.period ?? 0, role?.token_period ?? 0, warnings);
    const explicitMaxTtl = lesser('Explicit max TTL', d.explicit_max_ttl ?? 0, role?.token_explicit_max_ttl ?? 0, warnings);
    const ttls = core.effectiveTtls(core.mounts.get('auth/token/'));
    const requested = d.ttl ?? 0;
    let ttl: number;
    if (policies.includes('root') && !requested && !period && !explicitMaxTtl) ttl = 0;
    else {
      const max = minPositive(ttls.max, explicitMaxTtl);
      ttl = period ? period : requested || ttls.default;
      if (max > 0 && ttl > max) {
        warnings.push(`TTL of "${ttl}s" exceeded the effective max_ttl of "${max}s"; TTL value is capped accordingly`);
        ttl = max;
      }
    }
    if (ttl === 0 && parent.ttl !== 0) throw new BadRequestError('expiring root tokens cannot create non-expiring root tokens');
    let entityId = orphan ? '' : parent.entityId;
    if (d.entity_alias !== undefined) {
      const alias = d.entity_alias.toLowerCase();
      if (!role?.allowed_entity_aliases.some((allowed) => globMatch(allowed, alias))) {
        throw new BadRequestError('invalid value for field "entity_alias": the role\'s allowed_entity_aliases do not allow it');
      }
      entityId = (await core.identity.upsertAlias(tokenMountAccessor(), d.entity_alias, {}, [])).id;
    }
    const path = mode.role ? `auth/token/create/${mode.role.name}${role!.path_suffix ? `/${role!.path_suffix}` : ''}` : orphan && mode.orphanPath ? 'auth/token/create-orphan' : 'auth/token/create';
    const roleUses = role?.token_num_uses ?? 0;
    const issued = await issueToken(core, {
      id: d.id, policies, path, displayName: tokenDisplayName(d.display_name),
      ttl, explicitMaxTtl, period, numUses: roleUses > 0 && (!d.num_uses || roleUses < d.num_uses) ? roleUses : d.num_uses ?? 0, meta: d.meta ?? {},
      parent: orphan ? '' : parent.salted, renewable: ttl === 0 ? false : (d.renewable ?? true) && (role?.renewable ?? true), entityId,
      boundCidrs: role?.token_bound_cidrs ?? [], mountAccessor: tokenMountAccessor(),
    });
    core.options.telemetry?.tokenCreated(req.mount, issued.entry.ttl);
    return { data: null, authBlock: issued.auth, warnings };
  };
  return [
    definePath({ pattern: 'create', description: 'Create a child token.', fields: createFields, operations: { update: (req) => create(req as CreateRequest, { orphanPath: false }) } }),
    definePath({ pattern: 'create-orphan', description: 'Create a token without a parent.', fields: createFields, operations: { update: (req) => create(req as CreateRequest, { orphanPath: true }) } }),
    definePath({
      pattern: `create/(?<role_name>${ROLE_NAME})`,
      canonical: { role_name: lowerName },
      description: 'Create a token with a token role\'s rules.',
      fields: roleCreateFields,
      operations: {
        update: async (req) => {
          const entry = await roles.get(req.params.role_name);
          if (!entry) throw new BadRequestError(`invalid value for field "role_name": unknown role "${req.params.role_name}"`);
          return create(req, { orphanPath: false, role: { name: req.params.role_name, entry } });
        },
      },
    }),
  ];
}
