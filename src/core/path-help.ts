import type { Fields } from './fields.ts';
import type { PathDefinition } from './framework.ts';

/**
 * Vault's path help (`GET <path>?help=1`, what `vault path-help` and node-vault's `help` send): `{help, see_also,
 * openapi}`, written from the path's own definition, the same fields and description the OpenAPI document
 * (src/core/openapi.ts) is made of, so the two never disagree.
 */
const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);

export function wantsHelp(query: Record<string, string | string[]>): boolean {
  const v = query.help;
  return v !== undefined && TRUE.has(Array.isArray(v) ? v[0] : v);
}

/** The OpenAPI writer loads at the first help asked for (or document), not at start. */
export async function pathHelp(mountPath: string, relative: string, def: PathDefinition, version: string): Promise<Record<string, unknown>> {
  const { openApiDocument } = await import('./openapi.ts');
  return {
    help: helpText(relative, def),
    see_also: null,
    openapi: openApiDocument([{ path: mountPath, paths: [def] }], { version, genericMountPaths: false }),
  };
}

function helpText(relative: string, def: PathDefinition): string {
  const captures = [...def.pattern.matchAll(/\(\?<(\w+)>/g)].map((m) => m[1]);
  const fields: Fields = def.fields ?? {};
  const lines = [
    ...captures.filter((name) => !Object.hasOwn(fields, name)).map((name) => parameter(name, 'string, in the path', 'A part of the request path.')),
    ...Object.entries(fields).map(([name, f]) => {
      const notes = [f.required ? 'Required.' : '', f.default !== undefined && !f.secret ? `Default: ${JSON.stringify(f.default)}.` : '', f.oneOf ? `One of: ${f.oneOf.join(', ')}.` : ''].filter(Boolean);
      return parameter(name, f.kind, [f.description, ...notes].join(' '));
    }),
  ];
  const operations = Object.keys(def.operations).join(', ');
  return [
    `Request:        ${relative}`,
    `Matching Route: ^${def.pattern}$`,
    '',
    def.description,
    '',
    '## OPERATIONS',
    '',
    `    ${operations}${def.unauthenticated ? ' (no token needed)' : ''}`,
    '',
    '## PARAMETERS',
    '',
    ...(lines.length ? lines : ['    This path takes no parameters.', '']),
  ].join('\n');
}

function parameter(name: string, kind: string, description: string): string {
  return `    ${name} (${kind})\n        ${description}\n`;
}
