import type { Core } from '../../core/core.ts';
import { BadRequestError, PermissionDeniedError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, type PathDefinition } from '../../core/framework.ts';
import { minPositive } from '../../core/leases.ts';
import { authBlock } from '../../core/token-issue.ts';
import { tokenLeaseId, type TokenEntry } from '../../core/tokens.ts';
import { addressInCidrs } from '../../lib/cidr.ts';

const iso = (ms: number) => new Date(ms).toISOString();

export function lookupData(core: Core, entry: TokenEntry, id: string): Record<string, unknown> {
  const expire = core.tokens.expireTime(entry);
  return {
    accessor: entry.accessor, creation_time: Math.floor(entry.creationTime / 1000), creation_ttl: entry.ttl, display_name: entry.displayName,
    entity_id: entry.entityId, expire_time: expire ? iso(expire) : null, explicit_max_ttl: entry.explicitMaxTtl, id,
    issue_time: iso(entry.creationTime), meta: Object.keys(entry.meta).length ? entry.meta : null, num_uses: entry.numUses,
    orphan: entry.parent === '', path: entry.path, policies: entry.policies, renewable: entry.renewable,
    // Vault stores the role in the entry; the creation path says it (auth/token/create/<role>[/<suffix>]).
    role: /^auth\/token\/create\/([^/]+)/.exec(entry.path)?.[1] ?? '', bound_cidrs: entry.boundCidrs.length ? entry.boundCidrs : null,
    ttl: expire ? Math.max(0, Math.floor((expire - core.clock.now()) / 1000)) : 0, type: 'service',
    ...(entry.period ? { period: entry.period } : {}),
    ...(entry.lastRenewal ? { last_renewal_time: Math.floor(entry.lastRenewal / 1000), last_renewal: iso(entry.lastRenewal) } : {}),
  };
}

/**
 * Renewal: periodic tokens get their period again; others the increment or their original TTL, never past
 * explicit_max_ttl or the mount max. Tokens from an auth method ask it first (the role may have changed).
 */
async function renew(core: Core, entry: TokenEntry, increment: number): Promise<TokenEntry> {
  if (!entry.renewable || entry.ttl === 0) throw new BadRequestError('lease is not renewable');
  let ttl = entry.period || increment || entry.ttl;
  let maxTtl = minPositive(core.effectiveTtls(core.mounts.all().find((m) => m.accessor === entry.mountAccessor)).max, entry.explicitMaxTtl);
  const mount = core.mounts.all().find((m) => m.accessor === entry.mountAccessor && m.path !== 'auth/token/');
  if (mount) {
    const backend = await core.servingBackend(mount.path);
    if (backend?.renewAuth) {
      const fresh = await backend.renewAuth({ accessor: entry.accessor, entityId: entry.entityId, policies: entry.policies, metadata: entry.meta, internal: entry.internal, issueTime: entry.creationTime });
      ttl = fresh.period || increment || fresh.ttl || ttl;
      maxTtl = minPositive(maxTtl, fresh.maxTtl);
    }
  }
  const now = core.clock.now();
  if (maxTtl > 0) {
    const left = Math.floor((entry.creationTime + maxTtl * 1000 - now) / 1000);
    if (left <= 0) throw new BadRequestError('past the max TTL, cannot renew');
    ttl = Math.min(ttl, left);
  }
  // Over the entry as stored: a revocation (on any node) since the token was looked up is never undone.
  const updated = await core.tokens.update(entry.salted, (current) => ({ ...current, ttl, lastRenewal: now }));
  if (!updated) throw new PermissionDeniedError();
  await core.leases.extend(tokenLeaseId(entry), now + ttl * 1000);
  return updated;
}

export function managePaths(core: Core): PathDefinition[] {
  const byToken = async (token: string | undefined) => {
    if (!token) throw new BadRequestError('missing required field "token"');
    return core.tokens.lookup(token);
  };
  const byAccessor = async (accessor: string | undefined) => {
    if (!accessor) throw new BadRequestError('missing required field "accessor": missing accessor');
    const entry = await core.tokens.lookupAccessor(accessor);
    if (!entry) throw new BadRequestError('invalid accessor');
    return entry;
  };
  const self = async (req: BackendRequest) => (await core.tokens.lookupAccessor(req.caller!.accessor))!;
  const renewed = async (entry: TokenEntry, increment: number | undefined, token: string) => {
    const updated = await renew(core, entry, increment ?? 0);
    return { data: null, authBlock: authBlock(token, updated) };
  };
  const revokeTree = async (entry: TokenEntry | undefined) => {
    if (entry) await core.revokeTokenTree(entry.salted);
  };
  const tokenField = { token: field.string('The token.') };
  const accessorField = { accessor: field.string('The token accessor.') };
  const increment = { increment: field.duration('Requested TTL.') };
  return [
    definePath({
      pattern: 'lookup-self', description: 'Look up the calling token.', fields: {},
      operations: { read: async (req) => ({ data: lookupData(core, await self(req), req.caller!.clientToken) }) },
    }),
    definePath({
      pattern: 'lookup', description: 'Look up a token.', fields: tokenField,
      operations: {
        update: async (req) => {
          const entry = await byToken(req.data.token);
          if (!entry) throw new PermissionDeniedError('bad token');
          return { data: lookupData(core, entry, req.data.token!) };
        },
      },
    }),
    definePath({
      pattern: 'lookup-accessor', description: 'Look up a token by accessor.', fields: accessorField,
      operations: { update: async (req) => ({ data: lookupData(core, await byAccessor(req.data.accessor), '') }) },
    }),
    definePath({
      pattern: 'renew-self', description: 'Renew the calling token.', fields: increment,
      operations: { update: async (req) => renewed(await self(req), req.data.increment, req.caller!.clientToken) },
    }),
    definePath({
      pattern: 'renew', description: 'Renew a token.', fields: { ...tokenField, ...increment },
      operations: {
        update: async (req) => {
          const entry = await byToken(req.data.token);
          if (!entry) throw new BadRequestError('token not found');
          // Presenting a token to renew it is a use of it: its network bounds apply as on any request it makes.
          if (entry.boundCidrs.length > 0 && !addressInCidrs(req.remoteAddress, entry.boundCidrs)) throw new PermissionDeniedError();
          return renewed(entry, req.data.increment, req.data.token!);
        },
      },
    }),
    definePath({
      pattern: 'renew-accessor', description: 'Renew a token by accessor.', fields: { ...accessorField, ...increment },
      operations: { update: async (req) => renewed(await byAccessor(req.data.accessor), req.data.increment, '') },
    }),
    definePath({
      pattern: 'revoke-self', description: 'Revoke the calling token and its children.', fields: {},
      operations: { update: async (req) => revokeTree(await self(req)) },
    }),
    definePath({
      pattern: 'revoke', description: 'Revoke a token and its children.', fields: tokenField,
      operations: { update: async (req) => revokeTree(await byToken(req.data.token)) },
    }),
    definePath({
      pattern: 'revoke-accessor', description: 'Revoke a token by accessor.', fields: accessorField,
      operations: { update: async (req) => revokeTree(await byAccessor(req.data.accessor)) },
    }),
    definePath({
      pattern: 'revoke-orphan', description: 'Revoke a token; its children become orphans (sudo).', fields: tokenField,
      operations: {
        update: async (req) => {
          const entry = await byToken(req.data.token);
          if (!entry) return;
          for (const child of await core.tokens.children(entry.salted)) await core.tokens.detach(entry.salted, child);
          await core.revokeTokenTree(entry.salted);
        },
      },
    }),
    definePath({
      pattern: 'accessors/?', description: 'List token accessors (sudo).', secretResponseKeys: ['keys'],
      operations: { list: async () => ({ data: { keys: await core.tokens.accessors() } }) },
    }),
  ];
}
