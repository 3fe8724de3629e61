/**
 * Password policies (Vault's `sys/policies/password`): a length plus charset rules with minimum
 * counts, and the generator engines use. Generation is rejection sampling end to end: characters
 * are drawn uniformly and whole candidates that miss a rule are thrown away, so every password
 * that satisfies the rules is equally likely (placing required characters first would not be).
 */
import { decodeIfBase64, labelledBlocks, parseHcl, PolicyParseError } from './hcl.ts';
import type { HclBlock, HclItem } from './hcl.ts';
import { secureRandomBytes as cryptoRandomBytes } from '../random.ts';

export { PolicyParseError } from './hcl.ts';

export interface CharsetRule {
  /** Distinct characters (code points), in first-seen order. */
  readonly charset: readonly string[];
  readonly minChars: number;
}

export interface PasswordPolicy {
  readonly length: number;
  readonly rules: readonly CharsetRule[];
  /** De-duplicated union of every rule's charset: the alphabet passwords are drawn from. */
  readonly charset: readonly string[];
}

const MIN_LENGTH = 4;
const MAX_LENGTH = 100;
// One random byte picks one character, so the alphabet cannot exceed a byte's range.
const MAX_CHARSET = 256;
// Vault gives generation one second; the attempt cap also ends it when a test injects a bad RNG.
const GENERATION_TIMEOUT_MS = 1000;
const MAX_ATTEMPTS = 100_000;

const PREFIX = 'invalid password policy: ';

export function parsePasswordPolicy(text: string): PasswordPolicy {
  let policy: PasswordPolicy;
  try {
    policy = parseDocument(decodeIfBase64(text));
  } catch (err) {
    if (err instanceof PolicyParseError) throw new PolicyParseError(PREFIX + err.message);
    throw err;
  }
  // Like Vault, these two checks sit outside the parser and so carry no prefix.
  if (policy.length < MIN_LENGTH || policy.length > MAX_LENGTH) {
    throw new PolicyParseError(`passwords must be between ${MIN_LENGTH} and ${MAX_LENGTH} characters`);
  }
  // Rules can be consistent on paper yet so improbable together that generation never succeeds.
  if (tryGenerate(policy, cryptoRandomBytes) === undefined) {
    throw new PolicyParseError('unable to construct test password from provided policy: are the rules impossible?');
  }
  return policy;
}

function parseDocument(text: string): PasswordPolicy {
  let doc;
  try {
    doc = parseHcl(text);
  } catch (err) {
    if (err instanceof PolicyParseError) throw new PolicyParseError(`unable to decode: ${err.message}`);
    throw err;
  }
  let lengthItem: HclItem | undefined;
  const rules: CharsetRule[] = [];
  for (const item of doc.items) {
    if (item.key === 'length') {
      if (lengthItem) throw new PolicyParseError(`duplicate key "length" on line ${item.line}`);
      lengthItem = item;
    } else if (item.key === 'rule') {
      rules.push(...labelledBlocks(item).map(parseRule));
    } else {
      throw new PolicyParseError(`invalid key "${item.key}" on line ${item.line}`);
    }
  }
  const length = lengthItem ? integer(lengthItem, 'length') : 0;

  const charset = distinct(rules.flatMap((r) => r.charset));
  const problems: string[] = [];
  const required = rules.reduce((sum, r) => sum + r.minChars, 0);
  if (length <= 0) problems.push('length must be > 0');
  else if (length < required) problems.push(`specified rules require at least ${required} characters but ${length} is specified`);
  if (charset.length === 0) problems.push('no charset specified');
  else if (charset.some((c) => !PRINTABLE.test(c))) problems.push('non-printable character in charset');
  if (charset.length > MAX_CHARSET) problems.push(`charset is too long: limited to ${MAX_CHARSET} characters`);
  if (problems.length > 0) throw new PolicyParseError(problems.join('; '));
  return { length, rules, charset };
}

/** Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space. */
const PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;

function parseRule(block: HclBlock): CharsetRule {
  if (block.label !== 'charset') {
    throw new PolicyParseError(`unable to parse rule ${block.label}: unrecognized rule type ${block.label}`);
  }
  let charset: string[] = [];
  let minChars = 0;
  const seen = new Set<string>();
  for (const item of block.body.items) {
    const where = `rule "charset" on line ${block.line}`;
    if (item.key !== 'charset' && item.key !== 'min-chars') {
      throw new PolicyParseError(`${where}: invalid key "${item.key}" on line ${item.line}`);
    }
    if (seen.has(item.key)) throw new PolicyParseError(`${where}: duplicate key "${item.key}" on line ${item.line}`);
    seen.add(item.key);
    if (item.key === 'min-chars') {
      minChars = integer(item, 'min-chars');
      if (minChars < 0) throw new PolicyParseError(`${where}: min-chars must not be negative`);
      continue;
    }
    if (item.labels.length > 0 || item.value.type !== 'string') {
      throw new PolicyParseError(`${where}: charset on line ${item.line} must be a string`);
    }
    if (!item.value.value.isWellFormed()) throw new PolicyParseError(`${where}: charset is not valid UTF-8`);
    charset = distinct(Array.from(item.value.value));
  }
  return { charset, minChars };
}

function integer(item: HclItem, field: string): number {
  if (item.labels.length > 0 || item.value.type !== 'number' || !Number.isSafeInteger(item.value.value)) {
    throw new PolicyParseError(`${field} on line ${item.line} must be an integer`);
  }
  return item.value.value;
}

function distinct(chars: string[]): string[] {
  return [...new Set(chars)];
}

/**
 * A password satisfying every rule of `policy`. Throws (a server-side failure, not bad input) when
 * no candidate passes within the time and attempt budget.
 */
export function generatePassword(
  policy: PasswordPolicy,
  randomBytes: (n: number) => Buffer = cryptoRandomBytes,
): string {
  const password = tryGenerate(policy, randomBytes);
  if (password === undefined) {
    throw new Error('timed out generating password: no candidate met every min-chars rule within the time and attempt budget');
  }
  return password;
}

/** Each rule's characters as a set, made once per policy: engines generate on every rotation and check-in. */
const ruleSets = new WeakMap<PasswordPolicy, Array<{ chars: Set<string>; min: number }>>();

function tryGenerate(policy: PasswordPolicy, randomBytes: (n: number) => Buffer): string | undefined {
  const { charset, length } = policy;
  if (charset.length === 0 || charset.length > MAX_CHARSET) return undefined;
  let rules = ruleSets.get(policy);
  if (!rules) {
    rules = policy.rules.map((r) => ({ chars: new Set(r.charset), min: r.minChars }));
    ruleSets.set(policy, rules);
  }
  // Bytes at or above the largest multiple of the alphabet size would favour the first characters.
  const limit = 256 - (256 % charset.length);
  const deadline = performance.now() + GENERATION_TIMEOUT_MS;
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
    const candidate: string[] = [];
    while (candidate.length < length) {
      if (performance.now() > deadline) return undefined;
      for (const byte of randomBytes(length - candidate.length)) {
        if (byte < limit) candidate.push(charset[byte % charset.length]);
      }
    }
    if (rules.every((r) => countIn(candidate, r.chars) >= r.min)) return candidate.join('');
  }
  return undefined;
}

function countIn(candidate: string[], chars: Set<string>): number {
  let n = 0;
  for (const c of candidate) if (chars.has(c)) n++;
  return n;
}

/** Strongroom's generator when an engine names no policy: 64 of A–Z a–z 0–9, each class present. */
export const DEFAULT_PASSWORD_POLICY: PasswordPolicy = deepFreeze(
  parsePasswordPolicy(`
length = 64
rule "charset" {
  charset   = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
  min-chars = 1
}
rule "charset" {
  charset   = "abcdefghijklmnopqrstuvwxyz"
  min-chars = 1
}
rule "charset" {
  charset   = "0123456789"
  min-chars = 1
}
`),
);

function deepFreeze(policy: PasswordPolicy): PasswordPolicy {
  for (const rule of policy.rules) Object.freeze(rule.charset);
  Object.freeze(policy.rules);
  Object.freeze(policy.charset);
  return Object.freeze(policy);
}
