import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { normalizeMountPath } from '../../core/mounts.ts';
import { canonicalMountPath } from './mounts.ts';

/** sys/audit and sys/audit-hash: Vault's audit device API (root-protected: every path needs sudo). */
export function auditPaths(core: Core): PathDefinition[] {
  return [
    definePath({
      pattern: 'audit',
      description: 'List the enabled audit devices.',
      operations: {
        read: async () => ({
          data: Object.fromEntries(core.audit.list().map((e) => [e.path, { type: e.type, description: e.description, options: e.options, local: e.local, path: e.path }])),
        }),
      },
    }),
    definePath({
      pattern: 'audit/(?<path>.+)',
      canonical: { path: canonicalMountPath },
      description: 'Enable or disable an audit device.',
      fields: {
        type: field.string('Device type: "file" or "socket".'),
        description: field.string('Human-friendly description.', { default: '' }),
        options: field.kvPairs('Device options (docs/audit.md), e.g. file_path, mode, address, socket_type, hmac_accessor.'),
        local: field.bool('Kept and shown; every node of a cluster opens every device, each writing its own log.', { default: false }),
      },
      operations: {
        update: async (req) => {
          if (!req.data.type) throw new BadRequestError('missing required field "type": the audit device type must be specified');
          await core.audit.enable(normalizeMountPath(req.params.path), req.data.type, req.data.description ?? '', req.data.options ?? {}, req.data.local ?? false);
        },
        delete: async (req) => core.audit.disable(normalizeMountPath(req.params.path)),
      },
    }),
    definePath({
      pattern: 'audit-hash/(?<path>.+)',
      canonical: { path: canonicalMountPath },
      description: 'The HMAC an audit device writes for a value, to search its log for it.',
      fields: { input: field.string('The value to hash.', { secret: true }) },
      operations: {
        update: async (req) => {
          if (req.data.input === undefined) throw new BadRequestError('missing required field "input"');
          return { data: { hash: core.audit.hash(normalizeMountPath(req.params.path), req.data.input) } };
        },
      },
    }),
  ];
}
