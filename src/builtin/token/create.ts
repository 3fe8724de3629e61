import type { Core } from '../../core/core.ts';
import { BadRequestError, PermissionDeniedError } from '../../core/errors.ts';
import { normalizePolicies } from '../../core/policy-store.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, type PathDefinition } from '../../core/framework.ts';
import { minPositive } from '../../core/leases.ts';
import { issueToken } from '../../core/token-issue.ts';
import { TokenStore } from '../../core/tokens.ts';

const createFields = {
  id: field.string('Custom token id (sudo only).'),
  policies: field.commaList('Policies for the token; defaults to the parent\'s.'),
  meta: field.kvPairs('Metadata attached to the token.'),
  no_parent: field.bool('Create an orphan (sudo only).'),
  no_default_policy: field.bool('Do not attach the default policy.'),
  renewable: field.bool('Whether the token can be renewed.', { default: true }),
  ttl: field.duration('Initial TTL.'),
  lease: field.duration('Deprecated alias of ttl.'),
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

export function createPaths(core: Core): PathDefinition[] {
  const create = (orphanPath: boolean) => async (req: BackendRequest<typeof createFields>) => {
    const d = req.data;
    const caller = req.caller!;
    const parent = (await core.tokens.lookupAccessor(caller.accessor))!;
    const sudo = await hasSudo(core, req);
    const isRootParent = parent.policies.includes('root');
    if (parent.numUses > 0) throw new BadRequestError('restricted use token cannot generate child tokens');
    if (!orphanPath && !d.no_parent && (await core.tokens.depth(parent)) + 1 > TokenStore.MAX_DEPTH) {
      throw new BadRequestError(`a token tree may be at most ${TokenStore.MAX_DEPTH} levels deep: create an orphan token instead`);
    }
    if (d.type && d.type !== 'service') throw new BadRequestError(`invalid value for field "type": only "service" tokens are supported`);
    if (d.no_parent && !orphanPath && !sudo) throw new PermissionDeniedError('root or sudo privileges required to create orphan token');
    if (d.id !== undefined && !sudo) throw new PermissionDeniedError('root or sudo privileges required to specify token id');
    if (d.id !== undefined && (d.id.includes('.') || d.id === '')) throw new BadRequestError('invalid value for field "id": a custom token id must not be empty or contain "."');
    if (d.id !== undefined && (await core.tokens.lookup(d.id))) throw new BadRequestError('cannot create a token with a duplicate ID');
    if (d.period && !sudo) throw new PermissionDeniedError('root or sudo privileges required to create periodic token');
    let policies = d.policies && d.policies.length ? normalizePolicies(d.policies, false) : parent.policies.filter((p) => p !== 'default' || !d.no_default_policy);
    if (policies.includes('response-wrapping')) throw new BadRequestError('cannot assign policy "response-wrapping"');
    if (policies.includes('root') && !isRootParent) throw new PermissionDeniedError('root tokens may not be created without parent token being root');
    if (!isRootParent && !sudo) {
      const allowed = new Set(parent.policies);
      const extra = policies.filter((p) => p !== 'default' && !allowed.has(p));
      if (extra.length) throw new PermissionDeniedError(`child policies must be subset of parent: ${extra.join(', ')} not held by the caller`);
    }
    if (!d.no_default_policy && !policies.includes('root')) policies = normalizePolicies(policies, true);
    const warnings: string[] = [];
    for (const p of policies) if (!(await core.policies.exists(p))) warnings.push(`Policy "${p}" does not exist`);
    const ttls = core.effectiveTtls(core.mounts.get('auth/token/'));
    const requested = d.ttl || d.lease || 0;
    let ttl: number;
    if (policies.includes('root') && !requested && !d.period && !d.explicit_max_ttl) ttl = 0;
    else {
      const max = minPositive(ttls.max, d.explicit_max_ttl ?? 0);
      ttl = d.period ? d.period : requested || ttls.default;
      if (max > 0 && ttl > max) {
        warnings.push(`TTL of "${ttl}s" exceeded the effective max_ttl of "${max}s"; TTL value is capped accordingly`);
        ttl = max;
      }
    }
    if (ttl === 0 && parent.ttl !== 0) throw new BadRequestError('expiring root tokens cannot create non-expiring root tokens');
    const orphan = orphanPath || (d.no_parent ?? false);
    const issued = await issueToken(core, {
      id: d.id, policies, path: orphanPath ? 'auth/token/create-orphan' : 'auth/token/create', displayName: tokenDisplayName(d.display_name),
      ttl, explicitMaxTtl: d.explicit_max_ttl ?? 0, period: d.period ?? 0, numUses: d.num_uses ?? 0, meta: d.meta ?? {},
      parent: orphan ? '' : parent.salted, renewable: ttl === 0 ? false : (d.renewable ?? true), entityId: orphan ? '' : parent.entityId,
      mountAccessor: core.mounts.get('auth/token/')?.accessor ?? '',
    });
    return { data: null, authBlock: issued.auth, warnings };
  };
  return [
    definePath({ pattern: 'create', description: 'Create a child token.', fields: createFields, operations: { update: create(false) } }),
    definePath({ pattern: 'create-orphan', description: 'Create a token without a parent.', fields: createFields, operations: { update: create(true) } }),
  ];
}
