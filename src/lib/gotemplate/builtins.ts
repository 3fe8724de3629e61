// Go's predefined template functions. `and`/`or` short-circuit, so exec evaluates them itself; they
// are listed here so that parsing knows the names and a FuncMap may still override them, as in Go.

import { EvalError } from './errors.ts';
import { quoteBody, sprint, sprintf, sprintln } from './fmt.ts';
import { bytesOf, kindOf, stringOf, truth, typeName } from './values.ts';

export type TemplateFunc = (...args: unknown[]) => unknown;
export type FuncMap = Record<string, TemplateFunc>;

interface Arity {
  min: number;
  max: number;
}

const arities = new WeakMap<TemplateFunc, Arity>();

/**
 * Declares how many arguments a function takes so exec can answer with Go's "wrong number of args"
 * before calling it. Functions without a declaration receive whatever the template passes.
 */
export function withArity(fn: TemplateFunc, min: number, max = min): TemplateFunc {
  arities.set(fn, { min, max });
  return fn;
}

export function arityOf(fn: TemplateFunc): Arity | undefined {
  return arities.get(fn);
}

const MANY = Number.POSITIVE_INFINITY;

export const builtins: FuncMap = {
  // exec evaluates these two lazily; the bodies give the same answer when called eagerly.
  and: withArity((...args) => args.find((a) => !truth(a)) ?? args.at(-1), 1, MANY),
  or: withArity((...args) => args.find((a) => truth(a)) ?? args.at(-1), 1, MANY),
  not: withArity((a) => !truth(a), 1),
  len: withArity(length, 1),
  index: withArity(index, 1, MANY),
  slice: withArity(slice, 1, 4),
  print: withArity((...args) => sprint(args), 0, MANY),
  println: withArity((...args) => sprintln(args), 0, MANY),
  printf: withArity((format, ...args) => sprintf(stringArg(format, 'printf'), args), 1, MANY),
  html: withArity((...args) => htmlEscape(escapeInput(args)), 0, MANY),
  js: withArity((...args) => jsEscape(escapeInput(args)), 0, MANY),
  urlquery: withArity((...args) => queryEscape(escapeInput(args)), 0, MANY),
  call: withArity(call, 1, MANY),
  eq: withArity(eq, 1, MANY),
  ne: withArity((a, b) => !eq(a, b), 2),
  lt: withArity((a, b) => less(a, b), 2),
  le: withArity((a, b) => less(a, b) || eq(a, b), 2),
  gt: withArity((a, b) => !less(a, b) && !eq(a, b), 2),
  ge: withArity((a, b) => !less(a, b), 2),
};

function stringArg(v: unknown, fn: string): string {
  if (kindOf(v) !== 'string') throw new EvalError(`wrong type for value; expected string; got ${typeName(v)} (in ${fn})`);
  return stringOf(v as string | Buffer);
}

function length(v: unknown): number {
  switch (kindOf(v)) {
    case 'string':
      return bytesOf(v as string | Buffer).length;
    case 'array':
      return (v as unknown[]).length;
    case 'map':
      return (v as Map<unknown, unknown>).size;
    case 'invalid':
    case 'nil':
      throw new EvalError('len of nil pointer');
    default:
      throw new EvalError(`len of type ${typeName(v)}`);
  }
}

function intIndex(v: unknown, cap: number, what = 'index'): number {
  if (kindOf(v) !== 'int') throw new EvalError(`cannot index slice/array with type ${typeName(v)}`);
  const i = Number(v);
  if (i < 0 || i > cap) throw new EvalError(`${what} out of range: ${i}`);
  return i;
}

function index(item: unknown, ...indexes: unknown[]): unknown {
  let v = item;
  for (const ix of indexes) {
    switch (kindOf(v)) {
      case 'array': {
        const arr = v as unknown[];
        const i = intIndex(ix, arr.length);
        if (i === arr.length) throw new EvalError(`index out of range: ${i}`);
        v = arr[i];
        break;
      }
      case 'string': {
        const bytes = bytesOf(v as string | Buffer);
        const i = intIndex(ix, bytes.length);
        if (i === bytes.length) throw new EvalError(`index out of range: ${i}`);
        v = bytes[i];
        break;
      }
      case 'map':
        // A missing key yields the zero value, which prints as "<no value>" in an interface map.
        v = (v as Map<unknown, unknown>).get(ix);
        break;
      case 'invalid':
      case 'nil':
        throw new EvalError('index of untyped nil');
      default:
        throw new EvalError(`can't index item of type ${typeName(v)}`);
    }
  }
  return v;
}

function slice(item: unknown, ...indexes: unknown[]): unknown {
  const kind = kindOf(item);
  if (kind !== 'array' && kind !== 'string') {
    if (kind === 'invalid' || kind === 'nil') throw new EvalError('slice of untyped nil');
    throw new EvalError(`can't slice item of type ${typeName(item)}`);
  }
  if (kind === 'string' && indexes.length > 2) throw new EvalError('cannot 3-index slice a string');
  const whole = kind === 'string' ? bytesOf(item as string | Buffer) : (item as unknown[]);
  const bounds = indexes.map((ix) => intIndex(ix, whole.length, 'slice bounds'));
  const [from = 0, to = whole.length] = bounds;
  if (from > to) throw new EvalError(`invalid slice index: ${from} > ${to}`);
  if (bounds[2] !== undefined && to > bounds[2]) throw new EvalError(`invalid slice index: ${to} > ${bounds[2]}`);
  const part = whole.slice(from, to);
  return Buffer.isBuffer(part) ? (typeof item === 'string' ? part.toString('utf8') : part) : part;
}

function call(fn: unknown, ...args: unknown[]): unknown {
  if (typeof fn !== 'function') {
    if (fn === null || fn === undefined) throw new EvalError('call of nil');
    throw new EvalError(`non-function of type ${typeName(fn)}`);
  }
  return (fn as TemplateFunc)(...args);
}

type Basic = 'bool' | 'number' | 'string';

function basic(v: unknown): Basic | null {
  switch (kindOf(v)) {
    case 'bool':
      return 'bool';
    case 'int':
    case 'float':
      return 'number';
    case 'string':
      return 'string';
    default:
      return null;
  }
}

function comparable(v: unknown): unknown {
  return kindOf(v) === 'string' ? stringOf(v as string | Buffer) : typeof v === 'bigint' ? Number(v) : v;
}

function eq(a: unknown, ...others: unknown[]): boolean {
  if (others.length === 0) throw new EvalError('missing argument for comparison');
  const ka = basic(a);
  const isNil = (v: unknown): boolean => v === null || v === undefined;
  for (const b of others) {
    const kb = basic(b);
    if (ka !== kb) {
      // Values of different kinds never compare, except that nil is simply unequal to anything.
      if (!isNil(a) && !isNil(b)) throw new EvalError('incompatible types for comparison');
    } else if (ka !== null) {
      if (comparable(a) === comparable(b)) return true;
    } else if (isNil(a) || isNil(b)) {
      if (isNil(a) && isNil(b)) return true;
    } else {
      const kind = kindOf(a);
      if (kind === 'array' || kind === 'map' || kind === 'func') throw new EvalError(`non-comparable type ${typeName(a)}`);
      if (a === b) return true;
    }
  }
  return false;
}

function less(a: unknown, b: unknown): boolean {
  const ka = basic(a);
  const kb = basic(b);
  if (ka === null || kb === null || ka === 'bool') throw new EvalError('invalid type for comparison');
  if (ka !== kb) throw new EvalError('incompatible types for comparison');
  return (comparable(a) as number | string) < (comparable(b) as number | string);
}

/** Go's evalArgs for html/js/urlquery: one string as is, otherwise Sprint with <no value> for nil. */
function escapeInput(args: unknown[]): string {
  if (args.length === 1 && typeof args[0] === 'string') return args[0];
  return sprint(args.map((a) => (a === null || a === undefined ? '<no value>' : a)));
}

function htmlEscape(s: string): string {
  const map: Record<string, string> = { '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&#39;', '"': '&#34;', '\0': '\uFFFD' };
  return s.replace(/[<>&'"\0]/g, (c) => map[c]);
}

function jsEscape(s: string): string {
  const map: Record<string, string> = { '\\': '\\\\', "'": "\\'", '"': '\\"', '<': '\\u003C', '>': '\\u003E', '&': '\\u0026', '=': '\\u003D' };
  let out = '';
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (ch in map) out += map[ch];
    else if (cp < 0x20) out += `\\u00${cp.toString(16).toUpperCase().padStart(2, '0')}`;
    else if (cp < 0x80 || quoteBody(ch, '"') === ch) out += ch;
    else out += `\\u${cp.toString(16).toUpperCase().padStart(4, '0')}`;
  }
  return out;
}

function queryEscape(s: string): string {
  return [...Buffer.from(s, 'utf8')]
    .map((b) => {
      const c = String.fromCharCode(b);
      if (/[A-Za-z0-9\-_.~]/.test(c)) return c;
      return c === ' ' ? '+' : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
    })
    .join('');
}
