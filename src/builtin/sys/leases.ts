import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';

const iso = (ms: number) => new Date(ms).toISOString();

export function leasePaths(core: Core): PathDefinition[] {
  const leases = core.leases;
  const leaseIdOf = (req: { params: Record<string, string>; data: { lease_id?: string } }) => {
    const id = req.params.url_lease_id ?? req.data.lease_id;
    if (!id) throw new BadRequestError('missing required field "lease_id": lease_id must be specified');
    return id;
  };
  /**
   * Lease ids are `<mount><request path>/<id>`, the request path canonical (lower-case names): a prefix is spelled
   * canonically below its mount (mount paths are case-sensitive) before the ACL sees it, and matched without case
   * so leases an earlier version issued under another spelling are reached too.
   */
  const mountLength = (prefix: string) => {
    const entry = core.mounts.match(prefix);
    return entry && prefix.startsWith(entry.path) ? entry.path.length : undefined;
  };
  const canonicalPrefix = (raw: string) => {
    const at = mountLength(raw);
    return at === undefined ? raw : raw.slice(0, at) + raw.slice(at).toLowerCase();
  };
  const revokePrefix = (force: boolean) => async (req: { params: Record<string, string> }) => {
    const ids = await leases.idsUnder(req.params.prefix, mountLength(req.params.prefix));
    for (const [i, id] of ids.entries()) {
      try {
        await leases.revoke(id, { force });
      } catch (err) {
        throw new BadRequestError(`failed to revoke "${id}" (${i + 1} / ${ids.length}): ${(err as Error).message}`);
      }
    }
  };
  const revokeFields = { lease_id: field.string('The lease to act on.'), sync: field.bool('Wait for the revocation (default true).', { default: true }), increment: field.duration('Requested TTL extension.') };
  return [
    definePath({
      pattern: 'leases/lookup/(?<prefix>.*)',
      canonical: { prefix: canonicalPrefix },
      description: 'List lease ids under a prefix (sudo).',
      secretResponseKeys: ['keys'],
      operations: { list: async (req) => ({ data: { keys: await leases.list(req.params.prefix, mountLength(req.params.prefix)) } }) },
    }),
    definePath({
      pattern: 'leases/lookup',
      description: 'Look up a lease.',
      fields: { lease_id: field.string('The lease id.') },
      operations: {
        update: async (req) => {
          const lease = await leases.get(leaseIdOf(req));
          if (!lease) throw new BadRequestError('invalid lease');
          const now = core.clock.now();
          return {
            data: {
              id: lease.id, issue_time: iso(lease.issueTime), expire_time: iso(lease.expireTime),
              last_renewal: lease.lastRenewal ? iso(lease.lastRenewal) : null, renewable: lease.renewable && !lease.irrevocable,
              ttl: Math.max(0, Math.floor((lease.expireTime - now) / 1000)),
              ...(lease.irrevocable ? { revoke_error: lease.revokeError } : {}),
            },
          };
        },
      },
    }),
    definePath({
      pattern: '(?:leases/)?renew(?:/(?<url_lease_id>.+))?',
      description: 'Renew a lease.',
      fields: revokeFields,
      operations: {
        update: async (req) => {
          const lease = await leases.renew(leaseIdOf(req), req.data.increment ?? 0);
          const duration = Math.round((lease.expireTime - core.clock.now()) / 1000);
          return { data: {}, lease: { id: lease.id, duration, renewable: true } };
        },
      },
    }),
    definePath({
      pattern: '(?:leases/)?revoke(?:/(?<url_lease_id>.+))?',
      description: 'Revoke a lease.',
      fields: revokeFields,
      operations: {
        update: async (req) => {
          const id = leaseIdOf(req);
          if (req.data.sync === false) {
            void leases.revoke(id).catch((err) => core.logger.warn({ lease_id: id, err: (err as Error).message }, 'asynchronous revocation failed'));
            return { status: 202, data: null, warnings: [] };
          }
          try {
            await leases.revoke(id);
          } catch (err) {
            throw new BadRequestError(`failed to revoke lease: ${(err as Error).message}`);
          }
        },
      },
    }),
    definePath({
      pattern: '(?:leases/)?revoke-prefix/(?<prefix>.+)',
      canonical: { prefix: canonicalPrefix },
      description: 'Revoke every lease under a prefix (sudo).',
      fields: { sync: field.bool('Accepted for compatibility; revocation is synchronous.') },
      operations: { update: revokePrefix(false) },
    }),
    definePath({
      pattern: '(?:leases/)?revoke-force/(?<prefix>.+)',
      canonical: { prefix: canonicalPrefix },
      description: 'Delete every lease under a prefix even when the engine cannot revoke it (sudo).',
      operations: { update: revokePrefix(true) },
    }),
  ];
}
