/**
 * The ACL policy language (Vault's HCL/JSON): policy text parsed and validated into path rules, and the built-in
 * policies' texts. Evaluating the rules is acl.ts's job.
 */
import { decodeIfBase64, labelledBlocks, parseHcl, PolicyParseError, toPlain } from './hcl.ts';
import type { HclBlock, HclItem, HclObject } from './hcl.ts';
import { DurationError, parseDurationSecond } from '../durations.ts';

export { PolicyParseError } from './hcl.ts';

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

export const BITS: Record<Capability, number> = {
  deny: 1, create: 2, read: 4, update: 8, delete: 16, list: 32, sudo: 64, patch: 128, subscribe: 256,
};

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
