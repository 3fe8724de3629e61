import type { Core } from '../../core/core.ts';
import { PermissionDeniedError } from '../../core/errors.ts';
import { definePath, type CallerInfo, type PathDefinition } from '../../core/framework.ts';
import type { MountEntry } from '../../core/mounts.ts';
import { parseAclPolicy, type Acl } from '../../core/policy/acl.ts';
import { mountInfo } from './mounts.ts';

/**
 * Whether a token may do anything below a mount (Vault's hasMountAccess): a capability on the mount path itself,
 * or a rule of its policies for a path below it that its merged ACL does not deny.
 */
async function hasMountAccess(core: Core, acl: Acl, policies: string[], mountPath: string): Promise<boolean> {
  if (!acl.capabilities(mountPath).includes('deny')) return true;
  for (const name of policies) {
    const stored = await core.policies.readAcl(name);
    if (!stored) continue;
    for (const rule of parseAclPolicy(name, stored.policy).paths) {
      const probe = rule.path.replace(/\*$/, '');
      if (probe.startsWith(mountPath) && !acl.capabilities(probe).includes('deny')) return true;
    }
  }
  return false;
}

/**
 * sys/internal/ui/mounts: the mounts a caller can use, as Vault's UI and CLI (`vault kv` detects a path's mount and
 * its version here) read them. Unauthenticated as in Vault, but answered by the token when one is sent: without a
 * token only mounts tuned `listing_visibility: "unauth"` are listed, in a short form.
 */
export function uiMountPaths(core: Core): PathDefinition[] {
  const access = async (caller: CallerInfo | undefined) => {
    if (!caller) return undefined;
    const acl = await core.policies.aclFor(caller.policies);
    return (entry: MountEntry) => hasMountAccess(core, acl, caller.policies, entry.path);
  };
  return [
    definePath({
      pattern: 'internal/ui/mounts',
      description: 'The secrets engines and auth methods the caller has access to.',
      unauthenticated: true,
      operations: {
        read: async (req) => {
          const visible = await access(req.caller);
          const data: Record<'secret' | 'auth', Record<string, unknown>> = { secret: {}, auth: {} };
          for (const entry of core.mounts.all()) {
            const key = entry.class === 'auth' ? entry.path.slice('auth/'.length) : entry.path;
            if (visible ? await visible(entry) : entry.config.listing_visibility === 'unauth') {
              data[entry.class][key] = visible ? mountInfo(entry) : { type: entry.type, description: entry.description, options: entry.options };
            }
          }
          return { data };
        },
      },
    }),
    definePath({
      pattern: 'internal/ui/mounts/(?<path>.+)',
      description: 'The mount a path belongs to (its type, options and full path), if the caller has access to it.',
      unauthenticated: true,
      operations: {
        read: async (req) => {
          const entry = core.mounts.match(req.params.path);
          const visible = await access(req.caller);
          // One answer for a missing mount and a hidden one: this path must not reveal which mounts exist.
          if (!entry || !visible || !(await visible(entry))) {
            throw new PermissionDeniedError(`preflight capability check returned 403, please ensure client's policies grant access to path "${req.params.path}"`);
          }
          return { data: { ...mountInfo(entry), path: entry.path } };
        },
      },
    }),
  ];
}
