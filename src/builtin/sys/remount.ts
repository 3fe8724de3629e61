import { randomUUID } from 'node:crypto';
import { setBounded } from '../../core/bounded-map.ts';
import type { Core } from '../../core/core.ts';
import { NotFoundError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { normalizeMountPath } from '../../core/mounts.ts';

interface Migration {
  source_mount: string;
  target_mount: string;
  status: 'success';
}

/** Migrations remembered for sys/remount/status; Vault too keeps them in memory only. */
const MIGRATIONS_KEPT = 1_000;

/**
 * sys/remount moves a secrets engine or auth method (`auth/x` → `auth/y`) with its data, config, leases and tokens
 * (see Core.remountMount). Vault answers with a migration id to poll; here the move has finished when the answer
 * comes, so its status is `success` at once. Root-protected (sudo), as in Vault.
 */
export function remountPaths(core: Core): PathDefinition[] {
  const migrations = new Map<string, Migration>();
  return [
    definePath({
      pattern: 'remount',
      description: 'Move a mount to another path, keeping its data, config, leases and tokens (sudo).',
      fields: {
        from: field.string('The mount path to move ("ldap", or "auth/x" for an auth method).', { required: true, maxLength: 1024 }),
        to: field.string('The new mount path, of the same class.', { required: true, maxLength: 1024 }),
      },
      operations: {
        update: async (req) => {
          const from = normalizeMountPath(req.data.from!, 'from');
          const to = normalizeMountPath(req.data.to!, 'to');
          await core.remountMount(from, to);
          const id = randomUUID();
          setBounded(migrations, MIGRATIONS_KEPT, id, { source_mount: from, target_mount: to, status: 'success' });
          return { data: { migration_id: id } };
        },
      },
    }),
    definePath({
      pattern: 'remount/status/(?<migration_id>[^/]+)',
      description: 'The status of a mount move.',
      operations: {
        read: async (req) => {
          const migration = migrations.get(req.params.migration_id);
          if (!migration) throw new NotFoundError(`no mount migration has the id "${req.params.migration_id}"`);
          return { data: { migration_id: req.params.migration_id, migration_info: migration } };
        },
      },
    }),
  ];
}
