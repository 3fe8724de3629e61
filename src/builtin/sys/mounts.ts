import { z } from 'zod';
import type { Core } from '../../core/core.ts';
import { BadRequestError, NotFoundError } from '../../core/errors.ts';
import { parseDurationSecond } from '../../core/durations.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { normalizeMountPath, type MountEntry } from '../../core/mounts.ts';

/** sys/mounts and sys/auth: the same table, seen through a secret or an auth lens. */
export function mountPaths(core: Core): PathDefinition[] {
  return (['mounts', 'auth'] as const).flatMap((kind) => {
    const cls = kind === 'auth' ? 'auth' : 'secret';
    const full = (p: string) => (kind === 'auth' ? `auth/${normalizeMountPath(p)}` : normalizeMountPath(p));
    const shown = (e: MountEntry) => (kind === 'auth' ? e.path.slice('auth/'.length) : e.path);
    const find = (p: string) => {
      const e = core.mounts.get(full(p));
      if (!e) throw new NotFoundError(`no ${kind === 'auth' ? 'auth method' : 'secrets engine'} is mounted at "${normalizeMountPath(p)}"`);
      return e;
    };
    // Auth methods are enabled and disabled through sys/auth, which needs sudo; sys/mounts/auth/... would skip it.
    const refuseAuthUnderMounts = (path: string) => {
      if (kind === 'mounts' && (path === 'auth' || path.startsWith('auth/'))) throw new BadRequestError(`cannot enable or disable "${path}" through sys/mounts: use sys/auth`);
    };
    return [
      definePath({
        pattern: kind,
        description: `List the enabled ${kind === 'auth' ? 'auth methods' : 'secrets engines'}.`,
        operations: {
          read: async () => ({ data: Object.fromEntries(core.mounts.all().filter((e) => e.class === cls).map((e) => [shown(e), mountInfo(e)])) }),
        },
      }),
      definePath({
        pattern: `${kind}/(?<path>.+)/tune`,
        canonical: { path: canonicalMountPath },
        description: 'Read or tune a mount\'s lease TTLs and options.',
        fields: {
          default_lease_ttl: field.string('Default lease TTL ("system" resets to the server default).'),
          max_lease_ttl: field.string('Maximum lease TTL ("system" resets to the server default).'),
          description: field.string('Human-friendly description.'),
          identity_token_key: field.string('OIDC key that signs this mount\'s plugin identity tokens.'),
          audit_non_hmac_request_keys: field.commaList('Request data keys audit devices write in the clear (credential names stay hashed).'),
          audit_non_hmac_response_keys: field.commaList('Response data keys audit devices write in the clear (credential names stay hashed).'),
        },
        operations: {
          read: async (req) => {
            const e = find(req.params.path);
            const ttls = core.effectiveTtls(e);
            return { data: { default_lease_ttl: ttls.default, max_lease_ttl: ttls.max, description: e.description, force_no_cache: false, ...optionalConfig(e) } };
          },
          update: async (req) => {
            const e = find(req.params.path);
            const config = { ...e.config };
            const ttl = (name: 'default_lease_ttl' | 'max_lease_ttl') => {
              const v = req.data[name];
              if (v === undefined || v === '') return;
              config[name] = v === 'system' ? 0 : durationField(name, v);
            };
            ttl('default_lease_ttl');
            ttl('max_lease_ttl');
            const eff = core.effectiveTtls({ ...e, config });
            if (config.max_lease_ttl && config.default_lease_ttl > config.max_lease_ttl || eff.default > eff.max) {
              throw new BadRequestError(`invalid value for field "max_lease_ttl": backend max lease TTL of ${eff.max} would be less than backend default lease TTL of ${eff.default}`);
            }
            if (req.data.identity_token_key !== undefined) config.identity_token_key = req.data.identity_token_key || undefined;
            for (const name of AUDIT_KEYS) if (req.data[name] !== undefined) config[name] = req.data[name]!.length ? req.data[name] : undefined;
            await core.tuneMount({ ...e, config, description: req.data.description ?? e.description });
          },
        },
      }),
      definePath({
        pattern: `${kind}/(?<path>.+)`,
        canonical: { path: canonicalMountPath },
        description: `Enable, read or disable the ${kind === 'auth' ? 'auth method' : 'secrets engine'} at a path.`,
        fields: {
          type: field.string('Backend type, e.g. "ldap" or "cloud".'),
          description: field.string('Human-friendly description.', { default: '' }),
          config: field.custom(mountConfigSchema, 'Mount configuration: default_lease_ttl, max_lease_ttl, identity_token_key, audit_non_hmac_request_keys, audit_non_hmac_response_keys.'),
          local: field.bool('Accepted for compatibility; a single-node store has no replication.'),
          // Vault clients send these on every enable (hvac always sends seal_wrap); nothing here acts on them.
          seal_wrap: field.bool('Accepted for compatibility: every value is already encrypted by the barrier.'),
          external_entropy_access: field.bool('Accepted for compatibility; there is no external entropy source.'),
          plugin_name: field.string('Accepted for compatibility; backends are built in (use type).'),
          plugin_version: field.string('Accepted for compatibility; backends are built in.'),
          options: field.map('Backend options (accepted for compatibility).'),
        },
        operations: {
          read: async (req) => ({ data: mountInfo(find(req.params.path)) }),
          update: async (req) => {
            refuseAuthUnderMounts(req.params.path);
            if (!req.data.type) throw new BadRequestError('missing required field "type": backend type must be specified as a string');
            const c = req.data.config ?? {};
            const config = {
              default_lease_ttl: c.default_lease_ttl ?? 0, max_lease_ttl: c.max_lease_ttl ?? 0, ...(c.identity_token_key ? { identity_token_key: c.identity_token_key } : {}),
              ...Object.fromEntries(AUDIT_KEYS.filter((k) => c[k]?.length).map((k) => [k, c[k]])),
            };
            if (config.max_lease_ttl && config.default_lease_ttl > config.max_lease_ttl) throw new BadRequestError('invalid value for field "config.default_lease_ttl": given default lease TTL greater than given max lease TTL');
            if (!config.max_lease_ttl && config.default_lease_ttl > core.options.maxLeaseTtl) throw new BadRequestError(`invalid value for field "config.default_lease_ttl": given default lease TTL greater than system max lease TTL of ${core.options.maxLeaseTtl}`);
            await core.enableMount(full(req.params.path), req.data.type, req.data.description ?? '', config);
          },
          delete: async (req) => {
            refuseAuthUnderMounts(req.params.path);
            const path = full(req.params.path);
            if (path === 'auth/token/') throw new BadRequestError('token credential backend cannot be disabled');
            if (['sys/', 'identity/'].includes(path)) throw new BadRequestError(`cannot unmount "${path}"`);
            await core.disableMount(path);
          },
        },
      }),
    ];
  });
}

/** A mount path in a sys/mounts or sys/auth request path, without the slashes its spellings may add (`/ldap/`, `ldap/`). */
export const canonicalMountPath = (raw: string): string => normalizeMountPath(raw).slice(0, -1);

const ttlInput = z.union([z.string(), z.number()]).transform((v, ctx) => {
  if (v === 'system' || v === '') return 0;
  try {
    const s = parseDurationSecond(v);
    if (s < 0) throw new Error('must not be negative');
    return s;
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: `${(err as Error).message}` });
    return z.NEVER;
  }
});

const mountConfigSchema = z.object({
  default_lease_ttl: ttlInput.optional(),
  max_lease_ttl: ttlInput.optional(),
  identity_token_key: z.string().optional(),
  audit_non_hmac_request_keys: z.array(z.string()).optional(),
  audit_non_hmac_response_keys: z.array(z.string()).optional(),
}).passthrough();

const AUDIT_KEYS = ['audit_non_hmac_request_keys', 'audit_non_hmac_response_keys'] as const;

/** Config shown only when set, as Vault does. */
function optionalConfig(e: MountEntry): Record<string, unknown> {
  return Object.fromEntries((['identity_token_key', ...AUDIT_KEYS] as const).filter((k) => e.config[k] !== undefined).map((k) => [k, e.config[k]]));
}

function durationField(name: string, v: string): number {
  try {
    const s = parseDurationSecond(v);
    if (s < 0) throw new Error('must not be negative');
    return s;
  } catch (err) {
    throw new BadRequestError(`invalid value for field "${name}": ${(err as Error).message}`);
  }
}

export function mountInfo(e: MountEntry): Record<string, unknown> {
  return {
    type: e.type, description: e.description, accessor: e.accessor, local: e.local, seal_wrap: false,
    external_entropy_access: false, options: e.options, uuid: e.uuid, plugin_version: '', running_plugin_version: '',
    running_sha256: '',
    config: { default_lease_ttl: e.config.default_lease_ttl, max_lease_ttl: e.config.max_lease_ttl, force_no_cache: false, ...optionalConfig(e) },
  };
}

