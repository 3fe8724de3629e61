import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type Backend, type PathDefinition } from '../../core/framework.ts';
import { PathTable, pathProblem } from '../../core/router.ts';

/** Compiled path tables of mounted backends; a backend's paths never change after it is built. */
const tables = new WeakMap<Backend, PathTable>();

/**
 * A path as a request to it would be spelled after routing: canonical names below its mount (PathDefinition's
 * `canonical`), so the capabilities reported are the ones a request there would meet. Undefined when a request
 * would be refused for its spelling alone.
 */
export async function requestPath(core: Core, raw: string): Promise<string | undefined> {
  const path = raw.replace(/^\/+/, '');
  if (pathProblem(path)) return undefined;
  const entry = core.mounts.match(path);
  const backend = entry && await core.servingBackend(entry.path);
  if (!entry || !backend) return path;
  let table = tables.get(backend);
  if (!table) tables.set(backend, (table = new PathTable(backend)));
  const relative = path.slice(entry.path.length);
  const match = table.match(relative);
  if (!match?.def.canonical) return path;
  try {
    return entry.path + table.canonicalise(relative, match).path;
  } catch (err) {
    if (err instanceof BadRequestError) return undefined;
    throw err;
  }
}

const pathFields = {
  paths: field.commaList('Paths to report capabilities on.'),
  path: field.commaList('Deprecated alias of paths.', { aliasOf: 'paths' }),
};

/**
 * sys/capabilities-self, sys/capabilities (a token) and sys/capabilities-accessor (a token's accessor): the
 * capabilities of a token's policies on each path, `["root"]` for a root token, `["deny"]` where nothing is granted.
 * The pipeline copies the answer to the top level for older clients.
 */
export function capabilitiesPaths(core: Core): PathDefinition[] {
  const answer = async (policies: string[], data: { paths?: string[] }) => {
    const paths = data.paths ?? [];
    if (paths.length === 0) throw new BadRequestError('missing required field "paths": paths must be supplied');
    const acl = await core.policies.aclFor(policies);
    const out: Record<string, unknown> = {};
    for (const p of paths) {
      const routed = await requestPath(core, p);
      out[p] = routed === undefined ? ['deny'] : acl.capabilities(routed);
    }
    if (paths.length === 1) out.capabilities = out[paths[0]];
    return { data: out };
  };
  return [
    definePath({
      pattern: 'capabilities-self',
      description: 'The calling token\'s capabilities on the given paths.',
      fields: pathFields,
      operations: { update: async (req) => answer(req.caller?.policies ?? [], req.data) },
    }),
    definePath({
      pattern: 'capabilities',
      description: 'A token\'s capabilities on the given paths.',
      fields: { token: field.string('The token to report on.'), ...pathFields },
      operations: {
        update: async (req) => {
          if (!req.data.token) throw new BadRequestError('missing required field "token"');
          const entry = await core.tokens.lookup(req.data.token);
          if (!entry) throw new BadRequestError('invalid value for field "token": invalid token');
          return answer(entry.policies, req.data);
        },
      },
    }),
    definePath({
      pattern: 'capabilities-accessor',
      description: 'The capabilities, on the given paths, of the token an accessor names.',
      fields: { accessor: field.string('Accessor of the token to report on.'), ...pathFields },
      operations: {
        update: async (req) => {
          if (!req.data.accessor) throw new BadRequestError('missing required field "accessor"');
          const named = await core.tokens.lookupAccessor(req.data.accessor);
          const entry = named && (await core.tokens.lookupLive(named.salted));
          if (!entry) throw new BadRequestError('invalid value for field "accessor": invalid accessor');
          return answer(entry.policies, req.data);
        },
      },
    }),
  ];
}
