/**
 * ACL evaluation: the merged policies a token carries (parsed by parse.ts) decide each request. Matching follows
 * Vault exactly because operators port policies from Vault and expect the same paths to be reachable; see the
 * reference notes, section 5.
 */
import { isDeepStrictEqual } from 'node:util';
import { BITS } from './parse.ts';
import type { AclPolicy, Capability, PathRule } from './parse.ts';
import { setBounded } from '../bounded-map.ts';
import { globMatches } from '../events/glob.ts';

/** Paths whose non-exact rule one ACL keeps (Acl.#nonExact). */
const NON_EXACT_LIMIT = 1024;

export type Operation = 'read' | 'list' | 'create' | 'update' | 'delete' | 'patch';

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

const CAPABILITIES = Object.keys(BITS) as Capability[];

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

  /**
   * The non-exact rule of each path asked lately (an ACL never changes once built): the search walks every prefix and
   * `+` rule, ~3% of a policy-checked read's CPU, for the same few paths a token asks again and again.
   */
  readonly #nonExact = new Map<string, Permissions | null>();

  #bestNonExact(path: string): Permissions | undefined {
    const known = this.#nonExact.get(path);
    if (known !== undefined) return known ?? undefined;
    const found = this.#searchNonExact(path);
    setBounded(this.#nonExact, NON_EXACT_LIMIT, path, found ?? null);
    return found;
  }

  #searchNonExact(path: string): Permissions | undefined {
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
