import type { Core } from '../../core/core.ts';
import { PermissionDeniedError } from '../../core/errors.ts';
import { definePath, type CallerInfo, type PathDefinition } from '../../core/framework.ts';
import type { MountEntry } from '../../core/mounts.ts';
import type { Acl } from '../../core/policy/acl.ts';
import { parseAclPolicy } from '../../core/policy/parse.ts';
import { mountInfo } from './mounts.ts';

/** The paths the rules of a token's policies name (a trailing `*` dropped), each policy read and parsed once. */
async function rulePaths(core: Core, policies: string[]): Promise<string[]> {
  const paths: string[] = [];
  for (const name of policies) {
    const stored = await core.policies.readAcl(name);
    if (stored) for (const rule of parseAclPolicy(name, stored.policy).paths) paths.push(rule.path.replace(/\*$/, ''));
  }
  return paths;
}

/**
 * Whether a token may do anything below a mount (Vault's hasMountAccess): a capability on the mount path itself,
 * or a rule of its policies for a path below it that its merged ACL does not deny. `probes` are the rules' paths,
 * read only when a mount path itself is denied, and then once for every mount of the request.
 */
async function hasMountAccess(acl: Acl, probes: () => Promise<string[]>, mountPath: string): Promise<boolean> {
  if (!acl.capabilities(mountPath).includes('deny')) return true;
  return (await probes()).some((probe) => probe.startsWith(mountPath) && !acl.capabilities(probe).includes('deny'));
}

/** Whether a token may use a mount; undefined without a token. */
async function mountAccess(core: Core, caller: CallerInfo | undefined): Promise<((entry: MountEntry) => Promise<boolean>) | undefined> {
  if (!caller) return undefined;
  const acl = await core.policies.aclFor(caller.policies);
  let paths: Promise<string[]> | undefined;
  const probes = () => (paths ??= rulePaths(core, caller.policies));
  return (entry: MountEntry) => hasMountAccess(acl, probes, entry.path);
}

/**
 * The mounts a caller may see (Vault's rule for sys/internal/ui/mounts, and for the OpenAPI document): with a token,
 * those it has access to; without one, those tuned `listing_visibility: "unauth"`.
 */
export async function visibleMounts(core: Core, caller: CallerInfo | undefined): Promise<MountEntry[]> {
  const access = await mountAccess(core, caller);
  const out: MountEntry[] = [];
  for (const entry of core.mounts.all()) if (access ? await access(entry) : entry.config.listing_visibility === 'unauth') out.push(entry);
  return out;
}

/**
 * sys/internal/ui/mounts: the mounts a caller can use, as Vault's UI and CLI (`vault kv` detects a path's mount and
 * its version here) read them. Unauthenticated as in Vault, but answered by the token when one is sent: without a
 * token only mounts tuned `listing_visibility: "unauth"` are listed, in a short form.
 */
export function uiMountPaths(core: Core): PathDefinition[] {
  return [
    definePath({
      pattern: 'internal/ui/mounts',
      description: 'The secrets engines and auth methods the caller has access to.',
      unauthenticated: true,
      operations: {
        read: async (req) => {
          const data: Record<'secret' | 'auth', Record<string, unknown>> = { secret: {}, auth: {} };
          for (const entry of await visibleMounts(core, req.caller)) {
            const key = entry.class === 'auth' ? entry.path.slice('auth/'.length) : entry.path;
            data[entry.class][key] = req.caller ? mountInfo(entry) : { type: entry.type, description: entry.description, options: entry.options };
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
          const visible = await mountAccess(core, req.caller);
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
