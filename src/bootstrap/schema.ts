/**
 * The bootstrap file's shape (docs/bootstrap.md): kinds of object grouped as the API groups them, each object's
 * body in the API's own field names. The structure is strict (an unknown key is an error naming it); the bodies
 * sent to an endpoint (`config`, roles, `tune`, token fields, audit `options`) are only bounded here, and checked
 * against the endpoint's own field definitions by bodies.ts.
 */
import { z } from 'zod';
import { FIELD_LIMITS } from '../core/fields.ts';

/** Where in the file: `['mounts', 0, 'static_roles', 1, 'rotation_period']`. */
export type YamlPath = ReadonlyArray<string | number>;

/** Every bound of a bootstrap file (docs/limits.md, docs/bootstrap.md). */
export const BOOTSTRAP_LIMITS = Object.freeze({
  /** Bytes of the file itself, checked before it is read. */
  fileBytes: 1024 * 1024,
  /** Objects of every kind together (mounts, roles, policies, devices, tokens). */
  objects: 1_000,
  /** `${...}` references in the whole file. */
  references: 256,
  /** Characters between `${` and `}`. */
  referenceLength: 1_024,
  /** Bytes a file reference may read, and characters an environment variable may hold. */
  referenceValueBytes: 64 * 1024,
  /** YAML aliases (`*anchor`): a few save repetition; many are how a small file becomes a huge document. */
  yamlAliases: 64,
  /** Nesting of values inside a body (a role's `cloud_roles` list of objects is two). */
  valueDepth: 4,
});

const IDENTIFIER_LENGTH = 256;

/**
 * The role kinds of each engine and auth method type the file knows, by the type the server stores a mount under;
 * Vault's names for the same types resolve to these through the server's own alias table (roleKinds, endpoints.ts).
 */
export const TYPE_ROLE_KINDS: Record<'secret' | 'auth', Record<string, readonly RoleKind[]>> = {
  secret: { ldap: ['static_roles', 'dynamic_roles', 'library_sets'], cloud: ['roles'] },
  auth: { cloud: ['roles'] },
};

export const ROLE_KINDS = ['static_roles', 'dynamic_roles', 'library_sets', 'roles'] as const;
export type RoleKind = (typeof ROLE_KINDS)[number];

/** A value inside a body: JSON scalars, lists and maps, nested at most BOOTSTRAP_LIMITS.valueDepth deep. */
type Value = string | number | boolean | Value[] | { [key: string]: Value };
const scalar = z.union([
  z.string().max(FIELD_LIMITS.stringLength, `a string longer than the maximum of ${FIELD_LIMITS.stringLength} characters`),
  z.number().finite(),
  z.boolean(),
]);
function valueSchema(depth: number): z.ZodType<Value> {
  if (depth === 0) return scalar;
  const inner = z.lazy(() => valueSchema(depth - 1));
  return z.union([
    scalar,
    z.array(inner).max(FIELD_LIMITS.listItems, `more than the maximum of ${FIELD_LIMITS.listItems} elements`),
    z.record(z.string().max(FIELD_LIMITS.itemLength), inner).refine((m) => Object.keys(m).length <= FIELD_LIMITS.mapKeys, `more than the maximum of ${FIELD_LIMITS.mapKeys} keys`),
  ]);
}
const value = valueSchema(BOOTSTRAP_LIMITS.valueDepth);

const fieldName = z.string().regex(/^[a-z][a-z0-9_]{0,127}$/, 'expected an API field name (lower case letters, digits and "_")');
/** A request body: the endpoint's field names and their values. */
const body = z.record(fieldName, value).refine((b) => Object.keys(b).length <= 100, 'more than the maximum of 100 fields');
export type Body = Record<string, Value>;

const name = z.string().min(1, 'must not be empty').max(IDENTIFIER_LENGTH).regex(/^[\w][\w\-.@]*$/, 'expected letters, digits and "_", "-", ".", "@"');
/** A mount path as the file writes it: no leading or trailing slash. */
const mountPath = z.string().min(1).max(IDENTIFIER_LENGTH).regex(/^[\w\-.]+(\/[\w\-.]+)*$/, 'expected a mount path without leading or trailing "/" (e.g. "ldap" or "ci/ldap")');
const typeName = z.string().min(1).max(64).regex(/^[a-z][a-z0-9_-]*$/, 'expected a backend type such as "ldap" or "cloud"');
const description = z.string().max(FIELD_LIMITS.stringLength);

/** A role, static role, library set: its name and the rest of its endpoint's body. */
const named = z.object({ name }).catchall(value);
export type Named = { name: string } & Body;

const prune = <K extends string>(kinds: readonly K[]) =>
  z.strictObject(Object.fromEntries(kinds.map((k) => [k, z.boolean().optional()])) as Record<K, z.ZodOptional<z.ZodBoolean>>).optional();

const mountFields = {
  path: mountPath,
  type: typeName,
  description: description.optional(),
  /** `sys/mounts/<path>/tune` (or `sys/auth/<path>/tune`). */
  tune: body.optional(),
  /** `<path>/config`. */
  config: body.optional(),
  roles: z.array(named).optional(),
};

const secretMount = z.strictObject({
  ...mountFields,
  static_roles: z.array(named).optional(),
  dynamic_roles: z.array(named).optional(),
  library_sets: z.array(named).optional(),
  prune: prune(ROLE_KINDS),
});
export type SecretMount = z.infer<typeof secretMount>;

const authMount = z.strictObject({ ...mountFields, prune: prune(['roles'] as const) });
export type AuthMount = z.infer<typeof authMount>;

const policy = z.strictObject({ name, policy: z.string().min(1).max(FIELD_LIMITS.stringLength) });

const auditDevice = z.strictObject({
  path: mountPath,
  type: typeName,
  description: description.optional(),
  options: z.record(fieldName, z.union([z.string().max(FIELD_LIMITS.stringLength), z.number().finite(), z.boolean()])).optional(),
  local: z.boolean().optional(),
});
export type AuditDevice = z.infer<typeof auditDevice>;

/** `auth/token/create-orphan` fields; `id` is required, because a token without one could not be found again. */
const token = z.object({ id: z.string().min(1).max(IDENTIFIER_LENGTH) }).catchall(value);
export type TokenSpec = { id: string } & Body;

export const bootstrapSchema = z.strictObject({
  mounts: z.array(secretMount).optional(),
  auth: z.array(authMount).optional(),
  policies: z.strictObject({
    acl: z.array(policy).optional(),
    password: z.array(policy).optional(),
    prune: prune(['acl', 'password'] as const),
  }).optional(),
  audit: z.array(auditDevice).optional(),
  tokens: z.array(token).optional(),
  /** Top-level kinds whose objects missing from the file are removed (tokens cannot be pruned). */
  prune: prune(['mounts', 'auth', 'audit'] as const),
});
export type BootstrapFile = z.infer<typeof bootstrapSchema>;

/** The keys the file's structure has at `path` (a map of it, or a list's element), for suggesting one a typo meant. */
export function keysAt(path: ReadonlyArray<string | number>): string[] {
  const unwrap = (s: z.ZodType): z.ZodType => (s instanceof z.ZodOptional ? unwrap(s.unwrap() as z.ZodType) : s);
  let schema: z.ZodType | undefined = bootstrapSchema;
  for (const seg of path) {
    const s = unwrap(schema);
    schema = s instanceof z.ZodArray ? s.element as z.ZodType : s instanceof z.ZodObject ? (s.shape as Record<string, z.ZodType>)[seg] : undefined;
    if (!schema) return [];
  }
  const s = unwrap(schema);
  return s instanceof z.ZodObject ? Object.keys(s.shape) : [];
}

/**
 * The parts of a file that are valid on their own, for the rules between objects to check while the schema's errors
 * are reported too. An invalid element leaves a hole at its index (skipped by forEach and map), so every later
 * element keeps its place and its errors their YAML path.
 */
export function salvage(raw: unknown): BootstrapFile {
  const record = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? v as Record<string, unknown> : {});
  const list = <T>(v: unknown, schema: z.ZodType<T>): T[] | undefined => {
    if (!Array.isArray(v)) return undefined;
    const out = new Array<T>(v.length);
    v.forEach((e, i) => {
      const r = parseWithout(schema, e);
      if (r !== undefined) out[i] = r;
    });
    return out;
  };
  const top = record(raw);
  const policies = record(top.policies);
  const prunes = bootstrapSchema.shape.prune.safeParse(top.prune);
  const policyPrunes = z.strictObject({ acl: z.boolean().optional(), password: z.boolean().optional() }).optional().safeParse(policies.prune);
  return {
    mounts: list(top.mounts, secretMount),
    auth: list(top.auth, authMount),
    policies: { acl: list(policies.acl, policy), password: list(policies.password, policy), prune: policyPrunes.data },
    audit: list(top.audit, auditDevice),
    tokens: list(top.tokens, token),
    prune: prunes.data,
  };
}

/** The element with its invalid optional parts (unknown keys, values of a wrong type) left out, if that makes it valid. */
function parseWithout<T>(schema: z.ZodType<T>, element: unknown): T | undefined {
  let e = structuredClone(element);
  for (let attempt = 0; attempt < 3; attempt++) {
    const r = schema.safeParse(e);
    if (r.success) return r.data;
    for (const issue of r.error.issues) {
      const path = issue.code === 'unrecognized_keys' ? issue.keys.map((k) => [...issue.path, k]) : [issue.path];
      for (const p of path) e = without(e, p as PropertyKey[]);
    }
  }
  return undefined;
}

function without(value: unknown, path: PropertyKey[]): unknown {
  if (path.length === 0) return undefined;
  if (!value || typeof value !== 'object') return value;
  const [head, ...rest] = path;
  const copy = (Array.isArray(value) ? [...value] : { ...value }) as Record<PropertyKey, unknown>;
  if (rest.length === 0) delete copy[head];
  else copy[head] = without(copy[head], rest);
  return copy;
}

/** Body keys that hold a duration in this API (`ttl`, `max_ttl`, `token_period`, `rotation_period`, `rotation_window`...). */
export const DURATION_KEY = /(^|_)(ttl|period|window)$/;
