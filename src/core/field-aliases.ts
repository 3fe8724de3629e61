/**
 * One name per effect: a field declared as another name of a field (`aliasOf`: `policies` for `token_policies`,
 * `azure_roles` for `cloud_roles`, `lease` for `ttl`, ...) is folded into that field before the ACL judges the
 * request, so `allowed_parameters`, `denied_parameters` and `required_parameters` meet the spelling that takes effect,
 * and the handler reads one field. The ACL reads its rules through the same table (`parameterSpelling`): a rule on an
 * alias is a rule on its field, and values compare in the form the handler identifies them by.
 */
import { isDeepStrictEqual } from 'node:util';
import { BadRequestError } from './errors.ts';
import type { Fields } from './fields.ts';
import type { ParameterSpelling } from './policy/acl.ts';

/** The request after folding: `sentAs` gives, for each field sent under an alias only, that alias. */
export interface FoldedRequest {
  input: Record<string, unknown>;
  values: Record<string, unknown>;
  sentAs: ReadonlyMap<string, string>;
}

const NOTHING_FOLDED: ReadonlyMap<string, string> = new Map();

/**
 * Moves every alias the client sent into its field, in `input` (what was sent) and `values` (decoded). Sending two
 * names of one field is fine when they decode to the same value and a 400 naming both when they do not: which one
 * should win is exactly what a client that sends both may not decide. A value that failed to decode is left to the
 * field's own 400.
 */
export function foldAliases(fields: Fields | undefined, input: Record<string, unknown>, values: Record<string, unknown>): FoldedRequest {
  if (!fields) return { input, values, sentAs: NOTHING_FOLDED };
  let sentAs: Map<string, string> | undefined;
  for (const [alias, target] of aliasesOf(fields)) {
    if (!Object.hasOwn(input, alias)) continue;
    if (Object.hasOwn(input, target)) {
      const decoded = values[alias] !== undefined && values[target] !== undefined;
      if (decoded && !isDeepStrictEqual(values[alias], values[target])) {
        const other = sentAs?.get(target) ?? target;
        throw new BadRequestError(`invalid value for field "${alias}": "${alias}" and "${other}" name one field and were sent with different values; send one of them`);
      }
    } else {
      input[target] = input[alias];
      values[target] = values[alias];
      (sentAs ??= new Map()).set(target, alias);
    }
    delete input[alias];
    values[alias] = fields[alias]!.default;
  }
  return { input, values, sentAs: sentAs ?? NOTHING_FOLDED };
}

/** Each table's [alias, field] pairs, read once: a backend's fields never change, and most paths have no alias. */
const aliasTables = new WeakMap<Fields, Array<[string, string]>>();
function aliasesOf(fields: Fields): Array<[string, string]> {
  let pairs = aliasTables.get(fields);
  if (!pairs) aliasTables.set(fields, (pairs = Object.entries(fields).flatMap(([name, def]) => (def.aliasOf === undefined ? [] : [[name, def.aliasOf] as [string, string]]))));
  return pairs;
}

/** Spellings by field table, likewise read once. */
const spellings = new WeakMap<Fields, ParameterSpelling>();

/** How the ACL reads parameter names and values for an endpoint with these fields. */
export function parameterSpelling(fields: Fields): ParameterSpelling {
  let spelling = spellings.get(fields);
  if (spelling) return spelling;
  const lower = new Map(Object.entries(fields).map(([name, def]) => [name.toLowerCase(), def]));
  const targetOf = (name: string) => lower.get(name)?.aliasOf?.toLowerCase() ?? name;
  spelling = {
    field: targetOf,
    denyForm: (field, v) => lower.get(field)?.matchKey?.(v) ?? v,
    allowForm: (field, v) => lower.get(field)?.canonicalItem?.(v) ?? v,
  };
  spellings.set(fields, spelling);
  return spelling;
}

/**
 * What the ACL's parameter rules compare: the request's own values (aliases already folded), except that a list-typed
 * field is compared element by element after decoding, so `"default,admin"` and `["admin"]` meet a `denied_parameters`
 * entry for "admin" the same way the plain string does.
 */
export function parameterView(input: Record<string, unknown>, values: Record<string, unknown>, fields: Fields | undefined): Record<string, unknown> {
  if (!fields) return input;
  let view: Record<string, unknown> | undefined;
  for (const name in input) {
    if (Object.hasOwn(fields, name) && Array.isArray(values[name])) (view ??= { ...input })[name] = values[name];
  }
  return view ?? input;
}
