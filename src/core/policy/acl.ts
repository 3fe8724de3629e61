/**
 * ACL policies: parsing (Vault's HCL/JSON policy language) and evaluation of the merged policies a
 * token carries. Matching follows Vault exactly because operators port policies from Vault and
 * expect the same paths to be reachable; see the reference notes, section 5.
 */
import { isDeepStrictEqual } from 'node:util';
import { decodeIfBase64, labelledBlocks, parseHcl, PolicyParseError, toPlain } from './hcl.ts';
import type { HclBlock, HclItem, HclNode, HclObject } from './hcl.ts';
import { DurationError, parseDurationSecond } from '../durations.ts';
import { globMatches } from '../events/glob.ts';

export { PolicyParseError } from './hcl.ts';

export type Operation = 'read' | 'list' | 'create' | 'update' | 'delete' | 'patch';
export type Capability = 'create' | 'read' | 'update' | 'patch' | 'delete' | 'list' | 'sudo' | 'deny' | 'subscribe';

export interface PathRule {
  /** As written minus a leading "/"; `*` and `+` kept; may still hold `{{identity...}}` templates. */
  path: string;
  capabilities: Capability[];
  /** Keys lower-cased; an empty list means any value. */
  allowedParameters: Map<string, unknown[]>;
  deniedParameters: Map<string, unknown[]>;
  requiredParameters: string[];
  /** Seconds; 0 means unset. */
  minWrappingTtl: number;
  maxWrappingTtl: number;
  /** Event type globs the `subscribe` capability covers on this path (docs/events.md); none means no event. */
  subscribeEventTypes: string[];
}

export interface AclPolicy {
  /** Already normalised by the caller (trimmed, lower-cased); `root` makes the ACL a root ACL. */
  name: string;
  /** The policy text after base64 decoding, as stored and read back. */
  raw: string;
  paths: PathRule[];
}

export interface AclDecision {
  allowed: boolean;
  /** The matched rule grants sudo; callers need it for in-handler checks (token `id`, `period`...). */
  sudo: boolean;
}

export interface AllowOptions {
  /** The path is on the root-protected list, so the matched rule must also grant sudo. */
  rootProtected?: boolean;
  /** Requested response-wrapping TTL in seconds; undefined when the response is not wrapped. */
  wrapTtl?: number;
  /** How the endpoint's fields name and spell parameters; without it, names and values compare as written. */
  parameters?: ParameterSpelling;
}

/**
 * The endpoint's field table as the parameter rules need it (core/field-aliases.ts builds it). The request's data
 * arrives with every alias already folded into its field and list elements canonical; a rule is read the same way.
 */
export interface ParameterSpelling {
  /** The field a (lower-cased) parameter name stands for: a rule on an alias is a rule on its field. */
  field(name: string): string;
  /** A string in the form a denied value compares in: the handler's identity of it (`Svc` and `svc` are one account). */
  denyForm(field: string, value: string): string;
  /** A string in the form an allowed value compares in: the spelling that takes effect, never broader. */
  allowForm(field: string, value: string): string;
}

/** Identity values substituted into templated policy paths such as `{{identity.entity.id}}`. */
export interface TemplateEntity {
  id: string;
  name: string;
  metadata?: Record<string, string>;
}

const BITS: Record<Capability, number> = {
  deny: 1, create: 2, read: 4, update: 8, delete: 16, list: 32, sudo: 64, patch: 128, subscribe: 256,
};
const CAPABILITIES = Object.keys(BITS) as Capability[];

const LEGACY_POLICIES: Record<string, Capability[]> = {
  deny: ['deny'],
  read: ['read', 'list'],
  write: ['create', 'read', 'update', 'delete', 'list'],
  sudo: ['create', 'read', 'update', 'delete', 'list', 'sudo'],
};

const PATH_KEYS = new Set([
  'comment', 'policy', 'capabilities', 'allowed_parameters', 'denied_parameters', 'required_parameters',
  'min_wrapping_ttl', 'max_wrapping_ttl', 'subscribe_event_types',
]);
// Accepting these silently would let an author believe MFA or control groups are enforced.
const UNSUPPORTED_PATH_KEYS = new Set(['mfa_methods', 'control_group']);

export function parseAclPolicy(name: string, text: string): AclPolicy {
  const raw = decodeIfBase64(text);
  if (raw.trim() === '') throw new PolicyParseError("'policy' parameter not supplied or empty");
  try {
    return { name, raw, paths: parseDocument(parseHcl(raw)) };
  } catch (err) {
    if (!(err instanceof PolicyParseError)) throw err;
    throw new PolicyParseError(`failed to parse policy: ${err.message}`);
  }
}

function parseDocument(doc: HclObject): PathRule[] {
  const invalid = doc.items.filter((i) => i.key !== 'name' && i.key !== 'path');
  if (invalid.length > 0) throw new PolicyParseError(invalid.map(invalidKey).join('; '));
  for (const item of doc.items) {
    // The stored name comes from the API path; the one in the text is only checked for shape.
    if (item.key === 'name' && (item.labels.length > 0 || item.value.type !== 'string')) {
      throw new PolicyParseError(`"name" on line ${item.line} must be a string`);
    }
  }
  return doc.items.filter((i) => i.key === 'path').flatMap(labelledBlocks).map(parsePathBlock);
}

function invalidKey(item: HclItem): string {
  return `invalid key on line ${item.line}`;
}

function parsePathBlock(block: HclBlock): PathRule {
  // Named by line, never by label or unknown key: text pasted in the wrong place (a secret) is not repeated back.
  const where = `path block on line ${block.line}`;
  const fail = (detail: string): never => {
    throw new PolicyParseError(`${where}: ${detail}`);
  };
  const fields = new Map<string, HclItem>();
  const invalid: string[] = [];
  for (const item of block.body.items) {
    if (UNSUPPORTED_PATH_KEYS.has(item.key)) fail(`"${item.key}" on line ${item.line} is not supported by Strongroom`);
    if (!PATH_KEYS.has(item.key)) invalid.push(`${where}: ${invalidKey(item)}`);
    else if (fields.has(item.key)) fail(`duplicate key "${item.key}" on line ${item.line}`);
    else if (item.labels.length > 0) fail(`"${item.key}" on line ${item.line} takes a value, not a labelled block`);
    else fields.set(item.key, item);
  }
  if (invalid.length > 0) throw new PolicyParseError(invalid.join('; '));

  const path = block.label.startsWith('/') ? block.label.slice(1) : block.label;
  if (path.includes('+*')) fail("invalid use of wildcards ('+*' is forbidden)");

  const comment = fields.get('comment');
  if (comment && comment.value.type !== 'string') fail(`comment on line ${comment.line} must be a string`);

  const names = stringList(fields.get('capabilities'), fail);
  const legacy = fields.get('policy');
  if (legacy) {
    const value = legacy.value.type === 'string' ? legacy.value.value : undefined;
    const mapped = value === undefined ? undefined : LEGACY_POLICIES[value];
    // The value is not quoted (a secret pasted in the wrong place would be): the line says where.
    if (!mapped) fail(`invalid policy on line ${legacy.line}`);
    names.push(...mapped!);
  }
  const capabilities: Capability[] = [];
  for (const c of names) {
    if (!Object.hasOwn(BITS, c)) fail(`invalid capability on line ${fields.get('capabilities')?.line ?? legacy?.line}`);
    // An explicit deny in a block discards everything else the block grants.
    if (c === 'deny') {
      capabilities.splice(0, capabilities.length, 'deny');
      break;
    }
    if (!capabilities.includes(c as Capability)) capabilities.push(c as Capability);
  }

  const minWrappingTtl = wrappingTtl(fields.get('min_wrapping_ttl'), fail);
  const maxWrappingTtl = wrappingTtl(fields.get('max_wrapping_ttl'), fail);
  if (minWrappingTtl && maxWrappingTtl && maxWrappingTtl < minWrappingTtl) {
    fail('max_wrapping_ttl cannot be less than min_wrapping_ttl');
  }

  return {
    path,
    capabilities,
    allowedParameters: parameterMap(fields.get('allowed_parameters'), fail),
    deniedParameters: parameterMap(fields.get('denied_parameters'), fail),
    requiredParameters: stringList(fields.get('required_parameters'), fail).map((p) => p.toLowerCase()),
    minWrappingTtl,
    maxWrappingTtl,
    subscribeEventTypes: stringList(fields.get('subscribe_event_types'), fail),
  };
}

function stringList(item: HclItem | undefined, fail: (detail: string) => never): string[] {
  if (!item) return [];
  const out: string[] = [];
  if (item.value.type === 'list') {
    for (const v of item.value.items) if (v.type === 'string') out.push(v.value);
    if (out.length === item.value.items.length) return out;
  }
  return fail(`${item.key} on line ${item.line} must be a list of strings`);
}

function parameterMap(item: HclItem | undefined, fail: (detail: string) => never): Map<string, unknown[]> {
  const out = new Map<string, unknown[]>();
  if (!item) return out;
  const { value } = item;
  if (value.type !== 'object') return fail(`${item.key} on line ${item.line} must be a map of parameter name to a list of values`);
  for (const entry of value.items) {
    const name = entry.key.toLowerCase();
    if (entry.labels.length > 0 || entry.value.type !== 'list') {
      fail(`${item.key} entry on line ${entry.line} must be a list of values (an empty list allows any value)`);
    }
    if (out.has(name)) fail(`${item.key} entry on line ${entry.line} names a parameter listed before`);
    out.set(name, toPlain(entry.value) as unknown[]);
  }
  return out;
}

function wrappingTtl(item: HclItem | undefined, fail: (detail: string) => never): number {
  if (!item) return 0;
  const node = item.value;
  let seconds: number;
  try {
    // The shared parser (and its bound); Go's "time: " prefix kept, as Vault's parse errors read.
    if (node.type !== 'number' && node.type !== 'string') throw new DurationError('could not parse duration from input');
    seconds = parseDurationSecond(node.value);
  } catch (err) {
    const message = (err as Error).message;
    return fail(`error parsing ${item.key}: ${/(in|invalid) duration/.test(message) ? `time: ${message}` : message}`);
  }
  if (seconds < 0) fail(`${item.key} on line ${item.line} must not be negative`);
  return seconds;
}

interface Permissions {
  bits: number;
  allowed: Map<string, unknown[]>;
  denied: Map<string, unknown[]>;
  required: string[];
  minWrap: number;
  maxWrap: number;
  eventTypes: string[];
}

interface Candidate {
  pattern: string;
  isPrefix: boolean;
  wildcards: number;
  firstWildcard: number;
  perms: Permissions;
}

const ROOT_POLICY: AclPolicy = { name: 'root', raw: '', paths: [] };
const PARAMETER_CHECKED = new Set<Operation>(['read', 'create', 'update', 'patch']);
const DENIED: AclDecision = Object.freeze({ allowed: false, sudo: false });

/**
 * The merged view of a token's policies. Rules are keyed by their exact path string and merged
 * only with identical strings; a request is then decided by one best-matching rule.
 */
export class Acl {
  readonly isRoot: boolean;
  readonly #exact = new Map<string, Permissions>();
  /** Keyed by the pattern without its trailing `*`. */
  readonly #prefix = new Map<string, Permissions>();
  /** Rules with `+` segments, keyed by the full pattern (trailing `*` kept). */
  readonly #segment = new Map<string, Permissions>();
  readonly #prefixesLongestFirst: string[];

  constructor(policies: readonly AclPolicy[], opts: { entity?: TemplateEntity } = {}) {
    this.isRoot = policies.some((p) => p.name === 'root');
    if (this.isRoot && policies.length !== 1) throw new Error('other policies present along with root');
    for (const policy of policies) {
      for (const rule of policy.paths) {
        // Like Vault, a templated rule the token cannot fill (no entity, missing metadata), or one
        // whose filled-in value forms a forbidden "+*", is skipped rather than failing the request.
        const path = fillTemplate(rule.path, opts.entity);
        if (path !== undefined && !path.includes('+*')) this.#insert(path, rule);
      }
    }
    this.#prefixesLongestFirst = [...this.#prefix.keys()].sort((a, b) => b.length - a.length);
  }

  static #root: Acl | undefined;
  /** One shared instance: an ACL never changes after construction, and root tokens ask for it on every request. */
  static root(): Acl {
    return (Acl.#root ??= new Acl([ROOT_POLICY]));
  }

  #insert(path: string, rule: PathRule): void {
    const segmented = path === '+' || path.includes('/+') || path.startsWith('+/');
    let table = this.#exact;
    let key = path;
    if (segmented) table = this.#segment;
    else if (path.endsWith('*')) {
      table = this.#prefix;
      key = path.slice(0, -1);
    }
    const incoming: Permissions = {
      bits: rule.capabilities.reduce((bits, c) => bits | BITS[c], 0),
      allowed: new Map([...rule.allowedParameters].map(([k, v]) => [k, [...v]])),
      denied: new Map([...rule.deniedParameters].map(([k, v]) => [k, [...v]])),
      required: [...rule.requiredParameters],
      minWrap: rule.minWrappingTtl,
      maxWrap: rule.maxWrappingTtl,
      eventTypes: [...rule.subscribeEventTypes],
    };
    const existing = table.get(key);
    if (existing) mergeInto(existing, incoming);
    else table.set(key, incoming);
  }

  allowOperation(
    path: string,
    operation: Operation,
    data?: Record<string, unknown>,
    opts: AllowOptions = {},
  ): AclDecision {
    if (this.isRoot) return { allowed: true, sudo: true };
    const perms = this.#match(path, operation === 'list');
    if (!perms || (perms.bits & BITS[operation]) === 0) return DENIED;
    const sudo = (perms.bits & BITS.sudo) !== 0;
    const allowed =
      (!opts.rootProtected || sudo) &&
      wrappingAllowed(perms, opts.wrapTtl) &&
      (!PARAMETER_CHECKED.has(operation) || parametersAllowed(perms, data, opts.parameters));
    return { allowed, sudo };
  }

  /**
   * Whether an event of `eventType` about `path` may be delivered: the rule matching the path grants `subscribe`
   * and one of its `subscribe_event_types` globs matches the type (docs/events.md).
   */
  allowSubscribe(path: string, eventType: string): boolean {
    if (this.isRoot) return true;
    const perms = this.#match(path, false);
    if (!perms || (perms.bits & BITS.deny) !== 0 || (perms.bits & BITS.subscribe) === 0) return false;
    return perms.eventTypes.some((pattern) => globMatches(pattern, eventType));
  }

  /** What sys/capabilities-self reports: matched with list semantics, sorted. */
  capabilities(path: string): string[] {
    if (this.isRoot) return ['root'];
    const bits = this.#match(path, true)?.bits ?? 0;
    if (bits & BITS.deny) return ['deny'];
    const granted = CAPABILITIES.filter((c) => bits & BITS[c]).sort();
    return granted.length > 0 ? granted : ['deny'];
  }

  /** Vault's order: exact, exact without the list slash, best non-exact, best non-exact without it. */
  #match(path: string, list: boolean): Permissions | undefined {
    const bare = list && path.endsWith('/') ? path.slice(0, -1) : undefined;
    return (
      this.#exact.get(path) ??
      (bare === undefined ? undefined : this.#exact.get(bare)) ??
      this.#bestNonExact(path) ??
      (bare === undefined ? undefined : this.#bestNonExact(bare))
    );
  }

  #bestNonExact(path: string): Permissions | undefined {
    let best: Candidate | undefined;
    const prefix = this.#prefixesLongestFirst.find((p) => path.startsWith(p));
    if (prefix !== undefined) {
      best = { pattern: `${prefix}*`, isPrefix: true, wildcards: 0, firstWildcard: prefix.length, perms: this.#prefix.get(prefix)! };
    }
    if (this.#segment.size === 0) return best?.perms;
    const parts = path.split('/');
    for (const [pattern, perms] of this.#segment) {
      const candidate = matchSegments(pattern, parts, perms);
      if (candidate && (!best || outranks(candidate, best))) best = candidate;
    }
    return best?.perms;
  }
}

function matchSegments(full: string, parts: string[], perms: Permissions): Candidate | undefined {
  const isPrefix = full.endsWith('*');
  const pattern = isPrefix ? full.slice(0, -1) : full;
  const segments = pattern.split('/');
  if (parts.length < segments.length || (!isPrefix && parts.length !== segments.length)) return undefined;
  let wildcards = 0;
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    if (seg === '+') wildcards++;
    else if (seg !== parts[i] && !(isPrefix && i === segments.length - 1 && parts[i].startsWith(seg))) return undefined;
  }
  return { pattern, isPrefix, wildcards, firstWildcard: full.indexOf('+'), perms };
}

/** Vault's priority among non-exact matches; each rule only breaks ties of the ones before it. */
function outranks(a: Candidate, b: Candidate): boolean {
  if (a.firstWildcard !== b.firstWildcard) return a.firstWildcard > b.firstWildcard;
  if (a.isPrefix !== b.isPrefix) return !a.isPrefix;
  if (a.wildcards !== b.wildcards) return a.wildcards < b.wildcards;
  if (a.pattern.length !== b.pattern.length) return a.pattern.length > b.pattern.length;
  return a.pattern > b.pattern;
}

function mergeInto(existing: Permissions, incoming: Permissions): void {
  if (existing.bits & BITS.deny) return;
  if (incoming.bits & BITS.deny) {
    existing.bits = BITS.deny;
    existing.allowed.clear();
    existing.denied.clear();
    return;
  }
  existing.bits |= incoming.bits;
  // The shorter wrapping bounds win, keeping wrapped responses as short-lived as any policy asks.
  if (incoming.maxWrap > 0 && (existing.maxWrap === 0 || incoming.maxWrap < existing.maxWrap)) existing.maxWrap = incoming.maxWrap;
  if (incoming.minWrap > 0 && (existing.minWrap === 0 || incoming.minWrap < existing.minWrap)) existing.minWrap = incoming.minWrap;
  mergeParameters(existing.allowed, incoming.allowed);
  mergeParameters(existing.denied, incoming.denied);
  for (const r of incoming.required) if (!existing.required.includes(r)) existing.required.push(r);
  for (const t of incoming.eventTypes) if (!existing.eventTypes.includes(t)) existing.eventTypes.push(t);
}

/** Value lists concatenate, except that an empty list (any value) absorbs the other side. */
function mergeParameters(into: Map<string, unknown[]>, from: Map<string, unknown[]>): void {
  for (const [key, values] of from) {
    const current = into.get(key);
    if (current === undefined) into.set(key, [...values]);
    else if (values.length === 0 || current.length === 0) into.set(key, []);
    else current.push(...values);
  }
}

function wrappingAllowed(perms: Permissions, wrapTtl: number | undefined): boolean {
  if (perms.minWrap > 0 && (wrapTtl === undefined || wrapTtl < perms.minWrap)) return false;
  if (perms.maxWrap > 0 && (wrapTtl === undefined || wrapTtl > perms.maxWrap)) return false;
  // Merging can leave max below min even though each policy was consistent on its own.
  return !(perms.minWrap > 0 && perms.maxWrap > 0 && perms.maxWrap < perms.minWrap);
}

function parametersAllowed(perms: Permissions, data: Record<string, unknown> | undefined, spelling: ParameterSpelling | undefined): boolean {
  const rules = spelling ? spelledRules(perms, spelling) : perms;
  for (const name of rules.required) if (!data || !Object.hasOwn(data, name)) return false;
  const keys = data ? Object.keys(data) : [];
  if (keys.length === 0) return true;
  if (rules.denied.has('*')) return false;
  const form = (kind: 'denyForm' | 'allowForm', key: string) => (spelling ? (v: string) => spelling[kind](key, v) : undefined);
  for (const key of keys) {
    const denied = rules.denied.get(key.toLowerCase());
    const as = form('denyForm', key.toLowerCase());
    if (denied && (valueInList(data![key], denied, as) || elements(data![key]).some((v) => valueInList(v, denied, as)))) return false;
  }
  if (rules.allowed.size === 0) return true;
  const allowAll = rules.allowed.has('*');
  for (const key of keys) {
    const allowed = rules.allowed.get(key.toLowerCase());
    const as = form('allowForm', key.toLowerCase());
    if (allowed ? !(valueInList(data![key], allowed, as) || elements(data![key]).every((v) => valueInList(v, allowed, as))) : !allowAll) return false;
  }
  return true;
}

/**
 * The rules as the endpoint's fields read them: a rule on an alias joins the rule on its field (lists merge as two
 * policies' would), and a required alias is required as its field. Only paths with parameter rules pay for this.
 */
function spelledRules(perms: Permissions, spelling: ParameterSpelling): Pick<Permissions, 'allowed' | 'denied' | 'required'> {
  if (perms.allowed.size === 0 && perms.denied.size === 0 && perms.required.length === 0) return perms;
  const fold = (rules: Map<string, unknown[]>) => {
    const out = new Map<string, unknown[]>();
    for (const [name, values] of rules) mergeParameters(out, new Map([[spelling.field(name), values]]));
    return out;
  };
  return { allowed: fold(perms.allowed), denied: fold(perms.denied), required: [...new Set(perms.required.map((name) => spelling.field(name)))] };
}

/**
 * A list value is judged as a whole (as Vault does) and also element by element (Vault stops there, so
 * `["admin"]` slipped past a denied "admin"): any denied element denies, and a list is allowed when it is an
 * allowed value itself or every element is. The caller passes list-typed fields already decoded, so the
 * comma-string form is a list here too.
 */
const elements = (value: unknown): unknown[] => (Array.isArray(value) ? value : [value]);

function valueInList(value: unknown, list: unknown[], as: ((v: string) => string) | undefined): boolean {
  if (list.length === 0) return true;
  return list.some((el) =>
    typeof el === 'string' && typeof value === 'string' ? (as ? globMatch(as(el), as(value)) : globMatch(el, value)) : isDeepStrictEqual(el, value),
  );
}

/** `*` at the start and/or end of a listed value means suffix / prefix / substring match. */
function globMatch(pattern: string, value: string): boolean {
  if (pattern.length < 2) return pattern === value;
  const lead = pattern.startsWith('*');
  const trail = pattern.endsWith('*');
  if (lead && trail) return value.includes(pattern.slice(1, -1));
  if (lead) return value.endsWith(pattern.slice(1));
  if (trail) return value.startsWith(pattern.slice(0, -1));
  return value === pattern;
}

const TEMPLATE = /\{\{\s*([^{}]*?)\s*\}\}/g;

function fillTemplate(path: string, entity: TemplateEntity | undefined): string | undefined {
  if (!path.includes('{{')) return path;
  if (!entity) return undefined;
  let unresolved = false;
  const filled = path.replace(TEMPLATE, (_, expr: string) => {
    const value = templateValue(expr, entity);
    if (!value) unresolved = true;
    return value ?? '';
  });
  return unresolved || filled.includes('{{') ? undefined : filled;
}

function templateValue(expr: string, entity: TemplateEntity): string | undefined {
  if (expr === 'identity.entity.id') return entity.id;
  if (expr === 'identity.entity.name') return entity.name;
  const key = expr.startsWith('identity.entity.metadata.') ? expr.slice('identity.entity.metadata.'.length) : undefined;
  return key !== undefined && entity.metadata && Object.hasOwn(entity.metadata, key) ? entity.metadata[key] : undefined;
}

/** Vault's built-in `default` policy (Enterprise-only control-group paths left out). */
export const DEFAULT_POLICY_HCL = `# Allow tokens to look up their own properties
path "auth/token/lookup-self" {
    capabilities = ["read"]
}

# Allow tokens to renew themselves
path "auth/token/renew-self" {
    capabilities = ["update"]
}

# Allow tokens to revoke themselves
path "auth/token/revoke-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own capabilities on a path
path "sys/capabilities-self" {
    capabilities = ["update"]
}

# Allow a token to look up its own entity by id or name
path "identity/entity/id/{{identity.entity.id}}" {
  capabilities = ["read"]
}
path "identity/entity/name/{{identity.entity.name}}" {
  capabilities = ["read"]
}

# Allow a token to look up its resultant ACL from all policies (used by UIs)
path "sys/internal/ui/resultant-acl" {
    capabilities = ["read"]
}

# Allow a token to renew a lease via lease_id in the request body; old path for
# old clients, new path for newer
path "sys/renew" {
    capabilities = ["update"]
}
path "sys/leases/renew" {
    capabilities = ["update"]
}

# Allow looking up lease properties. This requires knowing the lease ID ahead
# of time and does not divulge any sensitive information.
path "sys/leases/lookup" {
    capabilities = ["update"]
}

# Allow a token to manage its own cubbyhole
path "cubbyhole/*" {
    capabilities = ["create", "read", "update", "delete", "list"]
}

# Allow a token to wrap arbitrary values in a response-wrapping token
path "sys/wrapping/wrap" {
    capabilities = ["update"]
}

# Allow a token to look up the creation time and TTL of a given
# response-wrapping token
path "sys/wrapping/lookup" {
    capabilities = ["update"]
}

# Allow a token to unwrap a response-wrapping token
path "sys/wrapping/unwrap" {
    capabilities = ["update"]
}

# Allow general purpose tools
path "sys/tools/hash" {
    capabilities = ["update"]
}
path "sys/tools/hash/*" {
    capabilities = ["update"]
}

# Allow a token to make requests to the Authorization Endpoint for OIDC providers
path "identity/oidc/provider/+/authorize" {
    capabilities = ["read", "update"]
}
`;

/**
 * Vault's built-in `response-wrapping` policy, the only one a wrapping token holds: it can unwrap itself and nothing
 * else (its cubbyhole path is Vault's older way to read the answer, which Strongroom does not have). Built in, like
 * `root`: it can be neither written nor deleted.
 */
export const RESPONSE_WRAPPING_POLICY_HCL = `path "sys/wrapping/unwrap" {
    capabilities = ["update"]
}
`;
