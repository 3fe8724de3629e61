import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { visibleMounts } from './ui-mounts.ts';

/**
 * How old the storage-read families may be for a scrape without a token: a stranger's scrapes, however many, make
 * the server count leases and library accounts at most once per interval (docs/telemetry.md). A token's scrape
 * reads them afresh.
 */
export const UNAUTHENTICATED_SCRAPE_MAX_AGE_MS = 15_000;

export interface TelemetryPathOptions {
  /** STRONGROOM_UNAUTHENTICATED_METRICS: sys/metrics without a token (Vault's unauthenticated_metrics_access). */
  unauthenticatedMetrics: boolean;
  version: string;
}

/** What operators read about the server itself: its metrics and the OpenAPI document of its mounts. */
export function telemetryPaths(core: Core, opts: TelemetryPathOptions): PathDefinition[] {
  return [
    definePath({
      pattern: 'metrics',
      description: 'The server\'s metrics: Prometheus text with format=prometheus, otherwise Vault\'s JSON shape (docs/telemetry.md).',
      unauthenticated: opts.unauthenticatedMetrics,
      rawResponse: ['application/json', 'text/plain'],
      fields: { format: field.string('"prometheus" for the Prometheus text exposition; empty for JSON.', { oneOf: ['', 'prometheus'] }) },
      operations: {
        read: async (req) => {
          const telemetry = core.options.telemetry;
          if (!telemetry) throw new BadRequestError('this server runs without metrics');
          const format = req.data.format?.trim().toLowerCase() === 'prometheus' ? 'prometheus' : 'json';
          const { contentType, body } = await telemetry.render(format, req.caller ? 0 : UNAUTHENTICATED_SCRAPE_MAX_AGE_MS);
          return { raw: { status: 200, headers: { 'content-type': contentType }, body } };
        },
      },
    }),
    definePath({
      pattern: 'internal/specs/openapi',
      description: 'An OpenAPI 3 document of the mounts the caller can see (all of them for a token with access; without a token, those tuned listing_visibility "unauth").',
      // As in Vault: no token needed, and the token sent (if any) decides which mounts appear.
      unauthenticated: true,
      rawResponse: ['application/json'],
      fields: { generic_mount_paths: field.bool('Use {<mount>_mount_path} parameters instead of the mounts\' own paths.') },
      operations: {
        read: async (req) => {
          const mounts = await Promise.all((await visibleMounts(core, req.caller)).map(async (entry) => ({ path: entry.path, paths: (await core.servingBackend(entry.path))?.paths ?? [] })));
          // Loaded at the first document asked for, not at start.
          const { openApiDocument } = await import('../../core/openapi.ts');
          const doc = openApiDocument(mounts, { version: opts.version, genericMountPaths: req.data.generic_mount_paths ?? false });
          return { raw: { status: 200, body: JSON.stringify(doc) } };
        },
      },
    }),
  ];
}
