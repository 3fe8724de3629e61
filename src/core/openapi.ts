import { z } from 'zod';
import type { Field, Fields } from './fields.ts';
import type { Operation, PathDefinition } from './framework.ts';
import { isRootProtected } from './router.ts';

/**
 * The OpenAPI 3.0 document of the mounted backends, generated from their path tables alone (docs/telemetry.md lists
 * the rules). A pattern becomes one or more path templates: named groups are `{name}` parameters, optional parts and
 * alternatives are expanded, LIST is Vault's `GET` with `list=true` on a template ending in `/`. Fields become a JSON
 * body for writes and query parameters for a path that only reads. What a template cannot say (a character class or
 * repetition outside a named group) is listed under `x-strongroom-unexpressed` instead.
 */
export interface OpenApiMount {
  /** "ldap/", "auth/cloud/". */
  path: string;
  paths: PathDefinition[];
}

export interface OpenApiOptions {
  version: string;
  /** Vault's generic_mount_paths: `{<mount>_mount_path}` instead of each mount's own path (built-in mounts keep theirs). */
  genericMountPaths: boolean;
}

type Schema = Record<string, unknown>;
type Parameter = { name: string; in: 'path' | 'query'; required: boolean; description: string; schema: Schema };
type OperationObject = Record<string, unknown>;
type PathItem = Record<string, unknown> & { parameters?: Parameter[] };

/** Mounts whose path is the same on every server: Vault keeps them in generic documents too. */
const BUILT_IN = new Set(['sys/', 'identity/', 'cubbyhole/', 'auth/token/']);
const TOKEN_SECURITY = [{ vaultToken: [] }, { serviceToken: [] }, { bearerToken: [] }];

export function openApiDocument(mounts: OpenApiMount[], opts: OpenApiOptions): Record<string, unknown> {
  const paths: Record<string, PathItem> = {};
  const unexpressed: Array<{ path: string; reason: string }> = [];
  const operationIds = new Set<string>();
  for (const mount of mounts) {
    const prefix = mountPrefix(mount.path, opts.genericMountPaths);
    for (const def of mount.paths) {
      const expanded = templates(def.pattern);
      if ('reason' in expanded) {
        unexpressed.push({ path: `${mount.path}${def.pattern}`, reason: expanded.reason });
        continue;
      }
      for (const [operation, method] of methods(def)) {
        const list = operation === 'list';
        for (const variant of forOperation(expanded.variants, list)) {
          const key = `/${prefix.text}${variant.text}`;
          const item = (paths[key] ??= { parameters: [...prefix.params, ...variant.params.map((p) => pathParameter(p, def.fields, list))] });
          // The first definition in match order wins, as the router's would for the same request.
          if (item[method]) continue;
          item[method] = operationObject(def, operation, list, operationId(operation, `${mount.path}${variant.text}`, operationIds), `${mount.path}${variant.text}`);
        }
      }
    }
  }
  for (const item of Object.values(paths)) if (item.parameters?.length === 0) delete item.parameters;
  return {
    openapi: '3.0.3',
    info: {
      title: 'Strongroom API',
      description: 'The HTTP API of a Strongroom server: every mounted secrets engine and auth method, generated from their path tables.',
      version: opts.version,
      license: { name: 'MPL-2.0', url: 'https://www.mozilla.org/en-US/MPL/2.0/' },
    },
    servers: [{ url: '/v1', description: 'Every path is below /v1 on the server.' }],
    security: TOKEN_SECURITY,
    paths,
    components: {
      securitySchemes: {
        vaultToken: { type: 'apiKey', in: 'header', name: 'X-Vault-Token' },
        serviceToken: { type: 'apiKey', in: 'header', name: 'X-Service-Token' },
        bearerToken: { type: 'http', scheme: 'bearer' },
      },
      schemas: {
        StandardResponse: {
          type: 'object',
          description: 'The envelope of every answer that is not raw.',
          properties: {
            request_id: { type: 'string' },
            lease_id: { type: 'string' },
            renewable: { type: 'boolean' },
            lease_duration: { type: 'integer', description: 'Seconds.' },
            data: { type: 'object', nullable: true, additionalProperties: true },
            wrap_info: { type: 'object', nullable: true, additionalProperties: true },
            warnings: { type: 'array', nullable: true, items: { type: 'string' } },
            auth: { type: 'object', nullable: true, additionalProperties: true },
            mount_type: { type: 'string' },
          },
        },
        ErrorResponse: { type: 'object', properties: { errors: { type: 'array', items: { type: 'string' } } } },
      },
    },
    ...(unexpressed.length ? { 'x-strongroom-unexpressed': unexpressed } : {}),
  };
}

function mountPrefix(mountPath: string, generic: boolean): { text: string; params: Parameter[] } {
  if (!generic || BUILT_IN.has(mountPath)) return { text: mountPath, params: [] };
  const auth = mountPath.startsWith('auth/');
  const own = (auth ? mountPath.slice('auth/'.length) : mountPath).replace(/\/$/, '');
  const name = `${own.replace(/\W/g, '_')}_mount_path`;
  return {
    text: `${auth ? 'auth/' : ''}{${name}}/`,
    params: [{ name, in: 'path', required: true, description: 'Path that the backend was mounted at', schema: { type: 'string', default: own } }],
  };
}

/** HTTP methods of a definition's operations: create and update share POST. */
function methods(def: PathDefinition): Array<[Operation, string]> {
  const out: Array<[Operation, string]> = [];
  const ops = def.operations;
  if (ops.read) out.push(['read', 'get']);
  if (ops.list) out.push(['list', 'get']);
  if (ops.update || ops.create) out.push([ops.update ? 'update' : 'create', 'post']);
  if (ops.patch) out.push(['patch', 'patch']);
  if (ops.delete) out.push(['delete', 'delete']);
  return out;
}

function operationObject(def: PathDefinition, operation: Operation, list: boolean, operationId: string, fullPath: string): OperationObject {
  const fields = Object.entries(def.fields ?? {}).filter(([name]) => !fullPath.includes(`{${name}}`));
  const writes = Boolean(def.operations.update || def.operations.create || def.operations.patch);
  const op: OperationObject = { operationId, summary: def.description, tags: [fullPath.split('/')[0] === 'auth' ? `auth/${fullPath.split('/')[1]}` : fullPath.split('/')[0]] };
  const parameters: Parameter[] = [];
  if (list) parameters.push({ name: 'list', in: 'query', required: true, description: 'Must be `true`: Vault\'s LIST as a GET.', schema: { type: 'string', enum: ['true'] } });
  if (operation === 'update' || operation === 'create' || operation === 'patch') {
    const properties = Object.fromEntries(fields.map(([name, f]) => [name, fieldSchema(f)]));
    const required = fields.filter(([, f]) => f.required).map(([name]) => name);
    const schema: Schema = { type: 'object', properties, ...(required.length ? { required } : {}) };
    op.requestBody = { required: required.length > 0, content: { [operation === 'patch' ? 'application/merge-patch+json' : 'application/json']: { schema } } };
  } else if (!writes) {
    // A path that only reads takes its fields from the query string (sys/health?standbyok=true).
    for (const [name, f] of fields) if (f.kind !== 'map') parameters.push({ name, in: 'query', required: f.required ?? false, description: f.description, schema: fieldSchema(f) });
  }
  if (parameters.length) op.parameters = parameters;
  op.responses = responses(def, operation);
  if (def.unauthenticated) {
    op.security = [];
    op['x-vault-unauthenticated'] = true;
  }
  if (isRootProtected(fullPath.replace(/\{[^}]+\}/g, 'x'))) op['x-vault-sudo'] = true;
  if (def.existenceCheck && (operation === 'update' || operation === 'create')) op['x-vault-createSupported'] = true;
  return op;
}

function responses(def: PathDefinition, operation: Operation): Record<string, unknown> {
  const error = { description: 'Error', content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorResponse' } } } };
  const raw = (type: string) => [type, { schema: type === 'application/json' ? { type: 'object', additionalProperties: true } : { type: 'string' } }];
  const ok = def.rawResponse
    ? { description: 'OK (a raw answer, without the envelope)', content: Object.fromEntries(def.rawResponse.map(raw)) }
    : { description: 'OK', content: { 'application/json': { schema: { $ref: '#/components/schemas/StandardResponse' } } } };
  const out: Record<string, unknown> = { 200: ok };
  if (operation !== 'read' && operation !== 'list') out[204] = { description: 'Done; no body' };
  out.default = error;
  return out;
}

const KIND_SCHEMA: Record<Exclude<Field['kind'], 'custom'>, Schema> = {
  string: { type: 'string' },
  bool: { type: 'boolean' },
  int: { type: 'integer' },
  // As Vault documents its duration fields; integer seconds and Go durations ("90", "1h30m") are both accepted.
  duration: { type: 'string', format: 'duration' },
  list: { type: 'array', items: { type: 'string' } },
  map: { type: 'object', additionalProperties: true },
};

function fieldSchema(f: Field): Schema {
  const schema: Schema = { ...(f.kind === 'custom' ? zodSchema(f.schema) : KIND_SCHEMA[f.kind]), description: f.description };
  if (f.oneOf) schema.enum = [...f.oneOf];
  if (f.default !== undefined) schema.default = f.kind === 'duration' ? String(f.default) : f.default;
  if (f.secret) {
    schema.format = 'password';
    schema.writeOnly = true;
  }
  // Another name of a field: accepted for older clients, folded into that field before anything judges it.
  if (f.aliasOf) schema.deprecated = true;
  return schema;
}

/** The shape of an endpoint's own schema, as far as it says plainly; anything else is left open. */
function zodSchema(schema: z.ZodType): Schema {
  if (schema instanceof z.ZodEnum) return { type: 'string', enum: [...schema.options] };
  if (schema instanceof z.ZodString) return { type: 'string' };
  if (schema instanceof z.ZodBoolean) return { type: 'boolean' };
  if (schema instanceof z.ZodNumber) return { type: 'number' };
  if (schema instanceof z.ZodArray) return { type: 'array', items: {} };
  if (schema instanceof z.ZodObject || schema instanceof z.ZodRecord) return { type: 'object', additionalProperties: true };
  return {};
}

function pathParameter(p: TemplateParam, fields: Fields | undefined, list: boolean): Parameter {
  const field = fields?.[p.name];
  const schema: Schema = { type: 'string' };
  // A LIST template ends in "/" itself, so its last parameter is the folder without its slash: the group's
  // expression (which includes the slash) no longer applies.
  if (!list) schema.pattern = `^(?:${p.source})$`;
  return { name: p.name, in: 'path', required: true, description: field?.description ?? `The {${p.name}} segment of the path.`, schema };
}

function operationId(operation: Operation, path: string, taken: Set<string>): string {
  const verb = operation === 'update' || operation === 'create' ? 'write' : operation;
  const base = `${verb}-${path.replace(/[{}]/g, '').replace(/[^\w]+/g, '-').replace(/^-|-$/g, '')}`;
  let id = base;
  for (let n = 2; taken.has(id); n++) id = `${base}-${n}`;
  taken.add(id);
  return id;
}

// ---- patterns to templates ------------------------------------------------------------------------

interface TemplateParam {
  name: string;
  /** The group's expression. */
  source: string;
}
interface Template {
  text: string;
  params: TemplateParam[];
}

/** The templates of an operation: LIST on the ones ending in "/", everything else on the rest (Vault's convention). */
function forOperation(variants: Template[], list: boolean): Template[] {
  const texts = new Set(variants.map((v) => v.text));
  const out = new Map<string, Template>();
  for (const v of variants) {
    if (list) {
      const text = v.text === '' || v.text.endsWith('/') ? v.text : `${v.text}/`;
      out.set(text, { ...v, text });
    } else if (!(v.text.endsWith('/') && texts.has(v.text.slice(0, -1)))) {
      out.set(v.text, v);
    }
  }
  return [...out.values()];
}

/** A pattern's templates, or why it has none. */
export function templates(pattern: string): { variants: Template[] } | { reason: string } {
  let variants: Template[];
  try {
    const parser = new PatternParser(pattern);
    variants = parser.alternatives();
    if (!parser.done()) throw new Unexpressible(`unbalanced ")" at ${parser.position}`);
  } catch (err) {
    if (err instanceof Unexpressible) return { reason: err.message };
    throw err;
  }
  // A parameter must be a whole segment: `role{name}` names no path a client could fill in.
  const whole = variants.filter((v) => /^(?:[^{}]*(?:^|\/)\{\w+\}(?=\/|$))*[^{}]*$/.test(v.text) && new Set(v.params.map((p) => p.name)).size === v.params.length);
  if (whole.length === 0) return { reason: 'a parameter shares a path segment with literal text' };
  const unique = new Map(whole.map((v) => [v.text, v]));
  return { variants: [...unique.values()] };
}

class Unexpressible extends Error {}

/**
 * Recursive descent over the regex subset path tables use. Each method returns the templates its part can match,
 * each one a concatenation of literal text and parameters.
 */
class PatternParser {
  readonly #src: string;
  position = 0;

  constructor(src: string) {
    this.#src = src;
  }

  done(): boolean {
    return this.position === this.#src.length;
  }

  alternatives(): Template[] {
    const out = this.#sequence();
    while (this.#src[this.position] === '|') {
      this.position++;
      out.push(...this.#sequence());
    }
    return out;
  }

  #sequence(): Template[] {
    let out: Template[] = [{ text: '', params: [] }];
    while (this.position < this.#src.length && this.#src[this.position] !== '|' && this.#src[this.position] !== ')') {
      const item = this.#quantified(this.#atom());
      out = out.flatMap((a) => item.map((b) => ({ text: a.text + b.text, params: [...a.params, ...b.params] })));
    }
    return out;
  }

  #quantified(atom: Template[]): Template[] {
    const q = this.#src[this.position];
    if (q === '?') {
      this.position++;
      return [...atom, { text: '', params: [] }];
    }
    if (q === '*' || q === '+' || q === '{') throw new Unexpressible(`repetition ("${q}") outside a named group`);
    return atom;
  }

  #atom(): Template[] {
    const c = this.#src[this.position]!;
    if (c === '(') return this.#group();
    if (c === '\\') {
      const next = this.#src[this.position + 1] ?? '';
      this.position += 2;
      if (/[\w]/.test(next)) throw new Unexpressible(`a class ("\\${next}") outside a named group`);
      return [{ text: next, params: [] }];
    }
    if ('[.^$'.includes(c)) throw new Unexpressible(`"${c}" outside a named group`);
    this.position++;
    return [{ text: c, params: [] }];
  }

  #group(): Template[] {
    const named = /^\(\?<(\w+)>/.exec(this.#src.slice(this.position));
    if (named) {
      const start = this.position + named[0].length;
      const end = this.#closing(start);
      const source = this.#src.slice(start, end);
      this.position = end + 1;
      const param = { text: `{${named[1]}}`, params: [{ name: named[1]!, source }] };
      // A group that may match nothing is also the template without it (the parameter would be empty).
      return new RegExp(`^(?:${source})$`).test('') ? [param, { text: '', params: [] }] : [param];
    }
    if (this.#src.startsWith('(?', this.position) && !this.#src.startsWith('(?:', this.position)) throw new Unexpressible('a lookaround or unnamed special group');
    this.position += this.#src.startsWith('(?:', this.position) ? 3 : 1;
    const inner = this.alternatives();
    if (this.#src[this.position] !== ')') throw new Unexpressible('an unclosed group');
    this.position++;
    return inner;
  }

  /** The index of the ")" closing a group whose body starts at `from`. */
  #closing(from: number): number {
    let depth = 0;
    let inClass = false;
    for (let i = from; i < this.#src.length; i++) {
      const c = this.#src[i];
      if (c === '\\') i++;
      else if (inClass) inClass = c !== ']';
      else if (c === '[') inClass = true;
      else if (c === '(') depth++;
      else if (c === ')' && depth-- === 0) return i;
    }
    throw new Unexpressible('an unclosed group');
  }
}
