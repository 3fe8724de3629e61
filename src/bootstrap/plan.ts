/**
 * What a bootstrap file declares, as API objects in the order they are applied (docs/bootstrap.md): mounts and auth
 * methods (with their tuning), policies, audit devices, configs, roles, tokens; then what `prune` removes.
 */
import { ROLE_KINDS, type Body, type BootstrapFile, type RoleKind, type YamlPath } from './schema.ts';

/**
 * - `mount`: `path` is `sys/mounts/<p>` or `sys/auth/<p>`; created when missing, its type never changed in place.
 * - `object`: read at `path`, written there when created or changed (tuning, policies, configs, roles).
 * - `audit`: the device at `path` (`sys/audit/<p>`); a change disables and enables it again.
 * - `token`: `body` is auth/token/create-orphan's; a change revokes it and creates it again.
 */
export type DeclaredKind = 'mount' | 'object' | 'audit' | 'token';

export interface Declared {
  kind: DeclaredKind;
  /** How the report and the log name it; never a secret (a token is named by its place and display name). */
  name: string;
  /** Where the file declares it, for errors met while applying. */
  at: YamlPath;
  path: string;
  body: Body;
  /** Mounts only: the report names the mount, not its tuning, so the tuning reports under the mount's name. */
  partOf?: string;
}

/** A kind the file asked to prune: everything `list` finds that the file does not declare is deleted. */
export interface PruneScope {
  /** `sys/mounts`, `sys/auth`, `sys/audit` (read as maps) or a path to LIST. */
  list: string;
  /** Prefix of each object's path (`ldap/static-role/`). */
  prefix: string;
  /** Declared names, compared as the server compares them. */
  keep: Set<string>;
  caseInsensitive: boolean;
}

/** The path segment of each role kind, by mount class. */
const ROLE_SEGMENT: Record<'secret' | 'auth', Record<RoleKind, string>> = {
  secret: { static_roles: 'static-role', dynamic_roles: 'role', library_sets: 'library', roles: 'roles' },
  auth: { static_roles: 'static-role', dynamic_roles: 'role', library_sets: 'library', roles: 'role' },
};

/** Built-in mounts a prune never removes. */
export const BUILTIN_TYPES = new Set(['system', 'identity', 'token']);
/** Policies a prune never removes. */
export const BUILTIN_POLICIES = new Set(['root', 'default']);

/** `fromReference`: whether a value came from a reference, so that a name never shows what one resolved to. */
export function declaredObjects(spec: BootstrapFile, fromReference: (at: YamlPath) => boolean): Declared[] {
  const mounts: Declared[] = [];
  const configs: Declared[] = [];
  const roles: Declared[] = [];
  for (const [cls, list] of [['secret', spec.mounts ?? []], ['auth', spec.auth ?? []]] as const) {
    list.forEach((m, i) => {
      const at: YamlPath = [cls === 'secret' ? 'mounts' : 'auth', i];
      const full = cls === 'auth' ? `auth/${m.path}` : m.path;
      const sys = cls === 'auth' ? `sys/auth/${m.path}` : `sys/mounts/${m.path}`;
      const name = `${full}/`;
      mounts.push({ kind: 'mount', name, at, path: sys, body: { type: m.type, ...(m.description === undefined ? {} : { description: m.description }) } });
      const tune = { ...(m.description === undefined ? {} : { description: m.description }), ...m.tune };
      if (Object.keys(tune).length) mounts.push({ kind: 'object', name: `${name} tuning`, partOf: name, at: [...at, 'tune'], path: `${sys}/tune`, body: tune });
      if (m.config) configs.push({ kind: 'object', name: `${full}/config`, at: [...at, 'config'], path: `${full}/config`, body: m.config });
      for (const kind of ROLE_KINDS) {
        ((m as Partial<Record<RoleKind, Array<{ name: string } & Body>>>)[kind] ?? []).forEach(({ name: roleName, ...body }, j) => {
          const path = `${full}/${ROLE_SEGMENT[cls][kind]}/${roleName}`;
          roles.push({ kind: 'object', name: path, at: [...at, kind, j], path, body });
        });
      }
    });
  }
  const policies: Declared[] = [];
  for (const kind of ['acl', 'password'] as const) {
    spec.policies?.[kind]?.forEach((p, i) => {
      const path = `sys/policies/${kind}/${p.name}`;
      policies.push({ kind: 'object', name: path, at: ['policies', kind, i], path, body: { policy: p.policy } });
    });
  }
  // flatMap skips the holes a file with invalid elements leaves in its lists (salvage, schema.ts); map keeps them.
  const audit: Declared[] = (spec.audit ?? []).flatMap(({ path, ...body }, i) => [{ kind: 'audit', name: `sys/audit/${path}`, at: ['audit', i], path: `sys/audit/${path}`, body }]);
  const tokens: Declared[] = (spec.tokens ?? []).flatMap((t, i) => [{
    kind: 'token', name: `tokens[${i}]${typeof t.display_name === 'string' && !fromReference(['tokens', i, 'display_name']) ? ` (${t.display_name})` : ''}`,
    at: ['tokens', i], path: 'auth/token/create-orphan', body: t,
  }]);
  return [...mounts, ...policies, ...audit, ...configs, ...roles, ...tokens];
}

/** The kinds `prune` names, in the order they are pruned: the most dependent first, mounts last. */
export function pruneScopes(spec: BootstrapFile): PruneScope[] {
  const scopes: PruneScope[] = [];
  for (const [cls, list] of [['secret', spec.mounts ?? []], ['auth', spec.auth ?? []]] as const) {
    for (const m of list) {
      const full = cls === 'auth' ? `auth/${m.path}` : m.path;
      for (const kind of ROLE_KINDS) {
        if (!(m.prune as Partial<Record<RoleKind, boolean>> | undefined)?.[kind]) continue;
        const declared = (m as Partial<Record<RoleKind, Array<{ name: string }>>>)[kind] ?? [];
        const prefix = `${full}/${ROLE_SEGMENT[cls][kind]}/`;
        scopes.push({ list: prefix, prefix, keep: new Set(declared.map((r) => r.name.toLowerCase())), caseInsensitive: true });
      }
    }
  }
  if (spec.prune?.audit) scopes.push({ list: 'sys/audit', prefix: 'sys/audit/', keep: new Set((spec.audit ?? []).map((d) => `${d.path}/`)), caseInsensitive: false });
  for (const kind of ['acl', 'password'] as const) {
    if (!spec.policies?.prune?.[kind]) continue;
    const keep = new Set((spec.policies[kind] ?? []).map((p) => p.name.toLowerCase()));
    scopes.push({ list: `sys/policies/${kind}/`, prefix: `sys/policies/${kind}/`, keep, caseInsensitive: true });
  }
  if (spec.prune?.auth) scopes.push({ list: 'sys/auth', prefix: 'sys/auth/', keep: new Set((spec.auth ?? []).map((m) => `${m.path}/`)), caseInsensitive: false });
  if (spec.prune?.mounts) scopes.push({ list: 'sys/mounts', prefix: 'sys/mounts/', keep: new Set((spec.mounts ?? []).map((m) => `${m.path}/`)), caseInsensitive: false });
  return scopes;
}

/** What a file declares, counted by kind, for `--check`. */
export function describeSpec(spec: BootstrapFile): string {
  const mounts = [...(spec.mounts ?? []), ...(spec.auth ?? [])];
  const counts: Array<[string, number]> = [
    ['mounts', spec.mounts?.length ?? 0],
    ['auth methods', spec.auth?.length ?? 0],
    ['policies', (spec.policies?.acl?.length ?? 0) + (spec.policies?.password?.length ?? 0)],
    ['audit devices', spec.audit?.length ?? 0],
    ['configs', mounts.filter((m) => m.config).length],
    ['roles', mounts.reduce((n, m) => n + ROLE_KINDS.reduce((k, kind) => k + ((m as Partial<Record<RoleKind, unknown[]>>)[kind]?.length ?? 0), 0), 0)],
    ['tokens', spec.tokens?.length ?? 0],
  ];
  return counts.map(([what, n]) => `${n} ${what}`).join(', ');
}
