import { z } from 'zod';
import { DurationError, parseDurationSecond } from './durations.ts';

/**
 * Field builders with Vault's weak decoding (sdk/framework): strings from numbers and bools, bools from
 * "true"/"1"/"t", ints from numeric strings, durations in seconds, comma lists. Every field carries a
 * description because the path table doubles as API documentation.
 */
export interface Field<T = unknown> {
  schema: z.ZodType<T>;
  description: string;
  default?: T;
  required?: boolean;
  /** Secret fields are never echoed back and are redacted in logs. */
  secret?: boolean;
}

interface FieldOptions<T> {
  default?: T;
  required?: boolean;
  secret?: boolean;
}

const TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False', '']);

function build<T>(schema: z.ZodType<T>, description: string, opts: FieldOptions<T> = {}): Field<T> {
  return { schema, description, ...opts };
}

const stringSchema = z.preprocess((v) => (typeof v === 'number' || typeof v === 'bigint' ? String(v) : typeof v === 'boolean' ? (v ? '1' : '0') : v), z.string({ error: 'expected a string' }));

const boolSchema = z.preprocess((v) => {
  if (typeof v === 'string') return TRUE.has(v) ? true : FALSE.has(v) ? false : v;
  if (typeof v === 'number') return v !== 0;
  return v;
}, z.boolean({ error: 'expected a boolean (true/false)' }));

const intSchema = z.preprocess((v) => {
  if (v === '') return 0;
  if (typeof v === 'string' && /^[-+]?(0x[0-9a-fA-F]+|\d+)$/.test(v.trim())) return Number(v.trim());
  return v;
}, z.number({ error: 'expected an integer' }).int({ error: 'expected an integer' }));

const durationSchema = z.unknown().transform((v, ctx) => {
  try {
    if (typeof v === 'number' && !Number.isInteger(v)) throw new DurationError('expected whole seconds');
    if (v !== null && v !== undefined && typeof v !== 'string' && typeof v !== 'number') throw new DurationError('expected a duration');
    const seconds = parseDurationSecond(v);
    if (seconds < 0) throw new DurationError(`cannot provide negative value '${seconds}'`);
    return seconds;
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: `${(err as Error).message} (use integer seconds, a Go duration like "1h30m", or "<n>d")` });
    return z.NEVER;
  }
});

const commaListSchema = z.preprocess((v) => {
  if (typeof v === 'string') return v === '' ? [] : v.split(',').map((s) => s.trim());
  if (typeof v === 'number') return [String(v)];
  if (Array.isArray(v)) return v.map((e) => (typeof e === 'string' ? e.trim() : typeof e === 'number' || typeof e === 'boolean' ? String(e) : e));
  return v;
}, z.array(z.string({ error: 'expected a list of strings' }), { error: 'expected a list or a comma-separated string' }));

const stringListSchema = z.preprocess((v) => {
  if (typeof v === 'string') return v === '' ? [] : [v.trim()];
  if (Array.isArray(v)) return v.map((e) => (typeof e === 'string' ? e.trim() : typeof e === 'number' ? String(e) : e));
  return v;
}, z.array(z.string({ error: 'expected a list of strings' }), { error: 'expected a list of strings' }));

const mapSchema = z.record(z.string(), z.unknown(), { error: 'expected a JSON object' });

const kvPairsSchema = z.preprocess((v) => {
  if (Array.isArray(v)) {
    const out: Record<string, unknown> = {};
    for (const item of v) {
      const s = String(item);
      const eq = s.indexOf('=');
      if (eq <= 0) return { __invalid: s };
      out[s.slice(0, eq)] = s.slice(eq + 1);
    }
    return out;
  }
  return v;
}, z.record(z.string(), z.preprocess((v) => (typeof v === 'number' || typeof v === 'boolean' ? String(v) : v), z.string()), { error: 'expected a map of strings or a list of key=value strings' }).refine((m) => !('__invalid' in m), { message: 'expected key=value pairs' }));

export const field = {
  string: (description: string, opts?: FieldOptions<string>) => build(stringSchema, description, opts),
  lowercase: (description: string, opts?: FieldOptions<string>) => build(stringSchema.transform((s) => s.toLowerCase()), description, opts),
  bool: (description: string, opts?: FieldOptions<boolean>) => build(boolSchema, description, opts),
  int: (description: string, opts?: FieldOptions<number>) => build(intSchema, description, opts),
  duration: (description: string, opts?: FieldOptions<number>) => build(durationSchema, description, opts),
  commaList: (description: string, opts?: FieldOptions<string[]>) => build(commaListSchema, description, opts),
  stringList: (description: string, opts?: FieldOptions<string[]>) => build(stringListSchema, description, opts),
  map: (description: string, opts?: FieldOptions<Record<string, unknown>>) => build(mapSchema, description, opts),
  kvPairs: (description: string, opts?: FieldOptions<Record<string, string>>) => build(kvPairsSchema, description, opts),
  /** Any zod schema, for fields whose rule is specific to one endpoint. */
  custom: <T>(schema: z.ZodType<T>, description: string, opts?: FieldOptions<T>) => build(schema, description, opts),
};

export type Fields = Record<string, Field<any>>;
export type FieldValues<F extends Fields> = { [K in keyof F]: F[K] extends Field<infer T> ? T | undefined : never };

/** Validates the supplied fields; returns typed values (defaults for unsent fields) or the first error. */
export function validateFields<F extends Fields>(fields: F, input: Record<string, unknown>): { values: FieldValues<F>; errors: string[] } {
  const values: Record<string, unknown> = {};
  const errors: string[] = [];
  for (const [name, def] of Object.entries(fields)) {
    if (!(name in input) || input[name] === undefined) {
      if (def.required) errors.push(`missing required field "${name}"`);
      values[name] = def.default;
      continue;
    }
    const parsed = def.schema.safeParse(input[name]);
    if (parsed.success) values[name] = parsed.data;
    else errors.push(`invalid value for field "${name}": ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  }
  return { values: values as FieldValues<F>, errors };
}
