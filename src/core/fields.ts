import { z } from 'zod';
import { DurationError, DurationTooLongError, MAX_DURATION_SECONDS, parseDurationSecond } from './durations.ts';

/**
 * Field builders with Vault's weak decoding (sdk/framework): strings from numbers and bools, bools from
 * "true"/"1"/"t", ints from numeric strings, durations in seconds, comma lists. Every field carries a
 * description because the path table doubles as API documentation.
 *
 * Every builder bounds its input (docs/limits.md lists the bounds): a value past a bound is a 400 naming the
 * field and the bound, decided before anything downstream sizes a loop, a timer or an allocation by it.
 */
/** What a client sends, for documentation and for tests that choose values by it. */
export type FieldKind = 'string' | 'bool' | 'int' | 'duration' | 'list' | 'map' | 'custom';

export interface Field<T = unknown> {
  kind: FieldKind;
  schema: z.ZodType<T>;
  description: string;
  default?: T;
  required?: boolean;
  /** Secret fields are never echoed back and are redacted in logs. */
  secret?: boolean;
  /** The values a string field accepts (compared trimmed and without case; the handler canonicalises): its enum. */
  oneOf?: readonly string[];
  /**
   * This field is another name of the field `aliasOf` (a deprecated or Vault spelling). The pipeline folds it into
   * that field before the ACL and the handler see the request (core/field-aliases.ts), so one effect has one name.
   */
  aliasOf?: string;
  /** A list element's canonical spelling, already applied to the decoded value (ListOptions.canonicalItem). */
  canonicalItem?: (item: string) => string;
  /**
   * How the handler tells values apart, for a string or a list's elements it identifies without regard to spelling
   * (directory account names without case, DNs as the directory compares them). `denied_parameters` compare under
   * it, so every spelling of a denied value is denied. Defaults to canonicalItem.
   */
  matchKey?: (value: string) => string;
}

interface FieldOptions<T> {
  default?: T;
  required?: boolean;
  secret?: boolean;
  aliasOf?: string;
  matchKey?: (value: string) => string;
}

export const FIELD_LIMITS = Object.freeze({
  /** Characters (UTF-16 code units) of a string field: room for a policy, a PEM bundle or an LDIF template. */
  stringLength: 64 * 1024,
  /** Elements of a list field. */
  listItems: 1_000,
  /** Characters of one list element or map key: names, ids, CIDRs and DNs are far shorter. */
  itemLength: 4_096,
  /** Keys of a map field. */
  mapKeys: 1_000,
});

interface StringOptions extends FieldOptions<string> {
  maxLength?: number;
  oneOf?: readonly string[];
}
interface IntOptions extends FieldOptions<number> {
  min?: number;
  max?: number;
}
interface DurationOptions extends FieldOptions<number> {
  /** Seconds; a field may only lower the system-wide MAX_DURATION_SECONDS. */
  max?: number;
}
interface ListOptions extends FieldOptions<string[]> {
  maxItems?: number;
  maxItemLength?: number;
  /**
   * Each element's canonical spelling, for lists of names the server normalises (policy names): the ACL's
   * parameter rules then judge the spelling that takes effect, so `ADMIN` meets a denied `admin`.
   */
  canonicalItem?: (item: string) => string;
}
interface MapOptions<T> extends FieldOptions<T> {
  maxKeys?: number;
}

/** A refusal whose message completes `invalid value for field "<name>": `. */
class FieldError extends Error {}

/**
 * A schema from a plain decoding function, so each rule (and the order the bounds are checked in, before any
 * per-element work) reads top to bottom. Only refusals become issues; anything else thrown is a bug.
 */
function decoder<T>(decode: (v: unknown) => T): z.ZodType<T> {
  return z.unknown().transform((v, ctx) => {
    try {
      return decode(v);
    } catch (err) {
      if (!(err instanceof FieldError || err instanceof DurationError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.message });
      return z.NEVER;
    }
  });
}

/** The bound options are spent on the schema; the field keeps what the pipeline reads. */
function build<T>(kind: FieldKind, schema: z.ZodType<T>, description: string, { default: def, required, secret, aliasOf, matchKey }: FieldOptions<T>): Field<T> {
  return { kind, schema, description, default: def, required, secret, aliasOf, matchKey };
}

/** A list field keeps its element canonicaliser: the ACL spells a rule's values the way the request's were. */
function buildList(schema: z.ZodType<string[]>, description: string, opts: ListOptions): Field<string[]> {
  return { ...build('list', schema, description, opts), canonicalItem: opts.canonicalItem, matchKey: opts.matchKey ?? opts.canonicalItem };
}

/**
 * Every string a builder returns is bounded and well-formed: a lone surrogate has no UTF-8 form, so storing it, a
 * directory and an HTTP client would each change or refuse it differently (a client secret would fail far from here).
 */
function checkString(s: string, max: number, what: string): string {
  if (s.length > max) throw new FieldError(`${what} longer than the maximum of ${max} characters`);
  if (!s.isWellFormed()) throw new FieldError(`${what} that is not well-formed Unicode (a lone surrogate)`);
  return s;
}

function decodeString(v: unknown, { maxLength = FIELD_LIMITS.stringLength, oneOf }: StringOptions): string {
  const s = typeof v === 'number' ? String(v) : typeof v === 'boolean' ? (v ? '1' : '0') : v;
  if (typeof s !== 'string') throw new FieldError('expected a string');
  checkString(s, maxLength, 'a string');
  if (oneOf && !oneOf.includes(s.trim().toLowerCase())) throw new FieldError(`expected one of ${oneOf.map((o) => JSON.stringify(o)).join(', ')}`);
  return s;
}

const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False', '']);

function decodeBool(v: unknown): boolean {
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string' && TRUE.has(v)) return true;
  if (typeof v === 'string' && FALSE.has(v)) return false;
  if (typeof v === 'number') return v !== 0;
  throw new FieldError('expected a boolean (true/false)');
}

function decodeInt(v: unknown, { min = -Number.MAX_SAFE_INTEGER, max = Number.MAX_SAFE_INTEGER }: IntOptions): number {
  let n = v;
  if (v === '') n = 0;
  else if (typeof v === 'string') {
    const m = /^([-+]?)(0x[0-9a-f]+|\d+)$/i.exec(v.trim());
    // 0 - x rather than -x: "-0" is zero, not negative zero.
    if (m) n = m[1] === '-' ? 0 - Number(m[2]) : Number(m[2]);
  }
  if (typeof n !== 'number' || !Number.isInteger(n)) throw new FieldError('expected an integer');
  // Past 2^53 a number no longer holds every integer: "9007199254740993" would silently become ...992.
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new FieldError(`expected an integer from ${min} to ${max}`);
  return n;
}

const DURATION_SYNTAX = 'use integer seconds, a Go duration like "1h30m", or "<n>d"';

function decodeDuration(v: unknown, max: number): number {
  if (typeof v === 'number' && Number.isFinite(v) && !Number.isInteger(v)) throw new FieldError('expected whole seconds');
  let seconds: number;
  try {
    seconds = parseDurationSecond(v);
  } catch (err) {
    if (err instanceof DurationTooLongError) throw err;
    throw new FieldError(`${(err as Error).message} (${DURATION_SYNTAX})`);
  }
  if (seconds < 0) throw new FieldError('a duration cannot be negative');
  if (seconds > max) throw new DurationTooLongError(max);
  return seconds;
}

/**
 * Lists are counted before their elements are looked at, and a string is split no further than one element past
 * the bound, so a million commas cost no more than a thousand.
 */
function decodeList(v: unknown, split: (s: string, limit: number) => string[], { maxItems = FIELD_LIMITS.listItems, maxItemLength = FIELD_LIMITS.itemLength, canonicalItem }: ListOptions, expected: string): string[] {
  let items: unknown[];
  if (typeof v === 'string') items = v === '' ? [] : split(v, maxItems + 1);
  else if (typeof v === 'number') items = [String(v)];
  else if (Array.isArray(v)) items = v;
  else throw new FieldError(expected);
  if (items.length > maxItems) throw new FieldError(`more than the maximum of ${maxItems} elements`);
  return items.map((e) => {
    const s = typeof e === 'string' ? e.trim() : typeof e === 'number' || typeof e === 'boolean' ? String(e) : undefined;
    if (s === undefined) throw new FieldError('expected a list of strings');
    const checked = checkString(s, maxItemLength, 'an element');
    return canonicalItem ? canonicalItem(checked) : checked;
  });
}

function plainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkKeys(entries: Array<[string, unknown]>, maxKeys: number): Array<[string, unknown]> {
  if (entries.length > maxKeys) throw new FieldError(`more than the maximum of ${maxKeys} keys`);
  for (const [k] of entries) checkString(k, FIELD_LIMITS.itemLength, 'a key');
  return entries;
}

function decodeMap(v: unknown, maxKeys: number): Record<string, unknown> {
  if (!plainObject(v)) throw new FieldError('expected a JSON object');
  // fromEntries defines own properties: a "__proto__" key stays a key instead of replacing the prototype.
  return Object.fromEntries(checkKeys(Object.entries(v), maxKeys));
}

function decodeKvPairs(v: unknown, maxKeys: number): Record<string, string> {
  const expected = 'expected a map of strings or a list of key=value strings';
  let entries: Array<[string, unknown]>;
  if (Array.isArray(v)) {
    if (v.length > maxKeys) throw new FieldError(`more than the maximum of ${maxKeys} keys`);
    entries = v.map((item) => {
      const s = typeof item === 'string' ? item : typeof item === 'number' || typeof item === 'boolean' ? String(item) : '';
      const eq = s.indexOf('=');
      if (eq <= 0) throw new FieldError('expected key=value pairs');
      return [s.slice(0, eq), s.slice(eq + 1)];
    });
  } else if (plainObject(v)) {
    entries = Object.entries(v);
  } else {
    throw new FieldError(expected);
  }
  return Object.fromEntries(checkKeys(entries, maxKeys).map(([k, value]) => {
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') throw new FieldError(expected);
    return [k, checkString(String(value), FIELD_LIMITS.stringLength, 'a value')];
  }));
}

const splitComma = (s: string, limit: number) => s.split(',', limit);
const whole = (s: string) => [s];

export const field = {
  string: (description: string, opts: StringOptions = {}) => ({ ...build('string', decoder((v) => decodeString(v, opts)), description, opts), oneOf: opts.oneOf }),
  lowercase: (description: string, opts: StringOptions = {}) => ({ ...build('string', decoder((v) => decodeString(v, opts).toLowerCase()), description, opts), oneOf: opts.oneOf }),
  bool: (description: string, opts: FieldOptions<boolean> = {}) => build('bool', decoder(decodeBool), description, opts),
  int: (description: string, opts: IntOptions = {}) => build('int', decoder((v) => decodeInt(v, opts)), description, opts),
  duration: (description: string, opts: DurationOptions = {}) => {
    const max = Math.min(opts.max ?? MAX_DURATION_SECONDS, MAX_DURATION_SECONDS);
    return build('duration', decoder((v) => decodeDuration(v, max)), description, opts);
  },
  commaList: (description: string, opts: ListOptions = {}) => buildList(decoder((v) => decodeList(v, splitComma, opts, 'expected a list or a comma-separated string')), description, opts),
  stringList: (description: string, opts: ListOptions = {}) => buildList(decoder((v) => decodeList(v, whole, opts, 'expected a list of strings')), description, opts),
  map: (description: string, opts: MapOptions<Record<string, unknown>> = {}) => build('map', decoder((v) => decodeMap(v, opts.maxKeys ?? FIELD_LIMITS.mapKeys)), description, opts),
  kvPairs: (description: string, opts: MapOptions<Record<string, string>> = {}) => build('map', decoder((v) => decodeKvPairs(v, opts.maxKeys ?? FIELD_LIMITS.mapKeys)), description, opts),
  /** Any zod schema, for fields whose rule is specific to one endpoint. */
  custom: <T>(schema: z.ZodType<T>, description: string, opts: FieldOptions<T> = {}) => build('custom', schema, description, opts),
};

export type Fields = Record<string, Field<any>>;
export type FieldValues<F extends Fields> = { [K in keyof F]: F[K] extends Field<infer T> ? T | undefined : never };

/** Validates the supplied fields; returns typed values (defaults for unsent fields) or the first error. */
export function validateFields<F extends Fields>(fields: F, input: Record<string, unknown>): { values: FieldValues<F>; errors: string[] } {
  const values: Record<string, unknown> = {};
  const errors: string[] = [];
  // for-in rather than Object.entries: no array of pairs on every request (field tables are plain literals).
  for (const name in fields) {
    const def = fields[name]!;
    if (!Object.hasOwn(input, name) || input[name] === undefined) {
      if (def.required) errors.push(`missing required field "${name}"`);
      values[name] = def.default;
      continue;
    }
    const parsed = def.schema.safeParse(input[name]);
    if (parsed.success) values[name] = parsed.data;
    // One message per rule: a custom schema reports the same rule once per offending element.
    else errors.push(`invalid value for field "${name}": ${[...new Set(parsed.error.issues.map((i) => i.message))].join('; ')}`);
  }
  return { values: values as FieldValues<F>, errors };
}
