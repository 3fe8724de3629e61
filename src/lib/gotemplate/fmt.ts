// Go fmt semantics for print, println and printf: the verbs templates actually use, with widths,
// precisions and flags. Integral JS numbers are Go ints, but %e/%f/%g accept them (JS cannot keep
// 3.0 apart from 3, and failing `printf "%.2f" 3.0` would surprise more than it protects).

import { ArgumentLimitError } from './errors.ts';
import { MAX_BUILT_LENGTH, MAX_FORMAT_WIDTH } from './limits.ts';
import { bytesOf, kindOf, sortedEntries, stringOf, structFields, typeName } from './values.ts';

interface Spec {
  minus: boolean;
  plus: boolean;
  sharp: boolean;
  space: boolean;
  zero: boolean;
  /** %+v: struct field names, and no plus sign on the numbers inside. */
  plusV: boolean;
  width: number | null;
  prec: number | null;
}

const PLAIN: Spec = { minus: false, plus: false, sharp: false, space: false, zero: false, plusV: false, width: null, prec: null };

/** fmt.Sprint: a space between operands when neither side is a string. */
export function sprint(args: unknown[]): string {
  let out = '';
  let prevString = false;
  args.forEach((arg, i) => {
    const isString = kindOf(arg) === 'string';
    if (i > 0 && !isString && !prevString) out += ' ';
    out += format(arg, 'v', PLAIN);
    prevString = isString;
  });
  return out;
}

/** fmt.Sprintln: always a space between operands, and a newline. */
export function sprintln(args: unknown[]): string {
  return `${args.map((a) => format(a, 'v', PLAIN)).join(' ')}\n`;
}

export function sprintf(fmt: string, args: unknown[]): string {
  let out = '';
  let argNum = 0;
  const chars = [...fmt];
  let i = 0;
  while (i < chars.length) {
    const c = chars[i++];
    if (c !== '%') {
      out += c;
      continue;
    }
    const spec: Spec = { ...PLAIN };
    for (; i < chars.length; i++) {
      const f = chars[i];
      if (f === '-') spec.minus = true;
      else if (f === '+') spec.plus = true;
      else if (f === '#') spec.sharp = true;
      else if (f === ' ') spec.space = true;
      else if (f === '0') spec.zero = true;
      else break;
    }
    // Padding is allocated up front, so `%1000000000d` is refused rather than built.
    const number = (what: string): number | null => {
      let n: number | null = null;
      if (chars[i] === '*') {
        i++;
        const a = args[argNum++];
        if (kindOf(a) === 'int') n = Number(a);
      } else {
        let digits = '';
        while (i < chars.length && /[0-9]/.test(chars[i])) digits += chars[i++];
        if (digits !== '') n = Number(digits);
      }
      if (n !== null && Math.abs(n) > MAX_FORMAT_WIDTH) throw new ArgumentLimitError(what, MAX_FORMAT_WIDTH);
      return n;
    };
    spec.width = number('width');
    if (spec.width !== null && spec.width < 0) {
      spec.minus = true;
      spec.width = -spec.width;
    }
    if (chars[i] === '.') {
      i++;
      spec.prec = number('precision') ?? 0;
    }
    const verb = chars[i++];
    if (verb === undefined) {
      out += '%!(NOVERB)';
      break;
    }
    if (verb === '%') {
      out += '%';
      continue;
    }
    if (verb === 'v' && spec.plus) {
      spec.plus = false;
      spec.plusV = true;
    }
    if (argNum >= args.length) {
      out += `%!${verb}(MISSING)`;
      continue;
    }
    out += format(args[argNum++], verb, spec);
    // Each verb's padding is capped, but a format can hold thousands of verbs.
    if (out.length > MAX_BUILT_LENGTH) throw new ArgumentLimitError('result length', MAX_BUILT_LENGTH);
  }
  if (argNum < args.length) {
    out += `%!(EXTRA ${args.slice(argNum).map((a) => `${typeName(a)}=${format(a, 'v', PLAIN)}`).join(', ')})`;
  }
  return out;
}

function format(arg: unknown, verb: string, spec: Spec): string {
  if (verb === 'T') return pad(typeName(arg), spec);
  const kind = kindOf(arg);
  switch (kind) {
    case 'invalid':
    case 'nil':
      return verb === 'v' ? pad('<nil>', spec) : `%!${verb}(<nil>)`;
    case 'bool':
      return verb === 'v' || verb === 't' ? pad(String(arg), spec) : badVerb(arg, verb);
    case 'int':
      return formatInt(Number(arg), verb, spec) ?? badVerb(arg, verb);
    case 'float':
      return formatFloat(arg as number, verb === 'v' ? 'g' : verb, spec) ?? badVerb(arg, verb);
    case 'string':
      return formatString(arg as string | Buffer, verb, spec) ?? badVerb(arg, verb);
    case 'array':
      return pad(`[${(arg as unknown[]).map((e) => format(e, verb, nested(spec))).join(' ')}]`, spec);
    case 'map': {
      const items = sortedEntries(arg as Map<unknown, unknown>).map(([k, v]) => `${format(k, verb, nested(spec))}:${format(v, verb, nested(spec))}`);
      return pad(`map[${items.join(' ')}]`, spec);
    }
    case 'struct': {
      const items = structFields(arg as object).map(([k, v]) => (spec.plusV ? `${k}:` : '') + format(v, verb, nested(spec)));
      return pad(`{${items.join(' ')}}`, spec);
    }
    case 'func':
      return verb === 'v' ? pad('func', spec) : badVerb(arg, verb);
  }
}

/** Elements of composites keep the verb and flags but not the width, which pads the whole. */
function nested(spec: Spec): Spec {
  return { ...spec, width: null };
}

function badVerb(arg: unknown, verb: string): string {
  return `%!${verb}(${typeName(arg)}=${format(arg, 'v', PLAIN)})`;
}

function pad(s: string, spec: Spec, zeroOk = false): string {
  const width = spec.width ?? 0;
  if (width === 0) return s;
  const length = [...s].length;
  if (length >= width) return s;
  const fill = (zeroOk && spec.zero && !spec.minus ? '0' : ' ').repeat(width - length);
  return spec.minus ? s + fill : fill + s;
}

function sign(negative: boolean, spec: Spec): string {
  return negative ? '-' : spec.plus ? '+' : spec.space ? ' ' : '';
}

function formatInt(n: number, verb: string, spec: Spec): string | null {
  switch (verb) {
    case 'c':
      return pad(runeString(n), spec);
    case 'q':
      return pad(`'${quoteBody(runeString(n), "'", spec.plus)}'`, spec);
    case 'U': {
      const u = `U+${n.toString(16).toUpperCase().padStart(4, '0')}`;
      return pad(spec.sharp ? `${u} '${runeString(n)}'` : u, spec);
    }
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
      return formatFloat(n, verb, spec);
  }
  const radix: Record<string, number> = { v: 10, d: 10, b: 2, o: 8, O: 8, x: 16, X: 16 };
  if (!(verb in radix)) return null;
  let digits = Math.abs(n).toString(radix[verb]);
  if (verb === 'X') digits = digits.toUpperCase();
  const signText = sign(n < 0, spec);
  if (spec.prec !== null) {
    if (spec.prec === 0 && n === 0) digits = '';
    digits = digits.padStart(spec.prec, '0');
  } else if (spec.zero && !spec.minus && spec.width !== null) {
    // Go pads the digits, leaving room for the sign but not for a 0x prefix.
    digits = digits.padStart(spec.width - signText.length, '0');
  }
  let prefix = '';
  if (verb === 'O') prefix = '0o';
  else if (spec.sharp) prefix = { b: '0b', o: digits.startsWith('0') ? '' : '0', x: '0x', X: '0X' }[verb] ?? '';
  return pad(signText + prefix + digits, spec);
}

function runeString(n: number): string {
  return n >= 0 && n <= 0x10ffff && !(n >= 0xd800 && n < 0xe000) ? String.fromCodePoint(n) : '\uFFFD';
}

function formatFloat(x: number, verb: string, spec: Spec): string | null {
  const lower = verb.toLowerCase();
  if (!'efg'.includes(lower) || verb.length !== 1) return null;
  let body: string;
  if (Number.isNaN(x)) body = 'NaN';
  else if (!Number.isFinite(x)) body = 'Inf';
  else if (lower === 'f') body = fixed(Math.abs(x), spec.prec ?? 6);
  else if (lower === 'e') body = exponential(Math.abs(x), spec.prec ?? 6);
  else body = general(Math.abs(x), spec.prec);
  if (verb !== lower) body = body.toUpperCase();
  const negative = x < 0 || Object.is(x, -0);
  const signText = Number.isNaN(x) ? (spec.plus ? '+' : spec.space ? ' ' : '') : !Number.isFinite(x) && !negative ? '+' : sign(negative, spec);
  if (spec.zero && !spec.minus && spec.width !== null && Number.isFinite(x)) {
    body = body.padStart(spec.width - signText.length, '0');
  }
  return pad(signText + body, spec);
}

function fixed(x: number, prec: number): string {
  // toFixed switches to exponent notation from 1e21 on; such magnitudes are integral anyway.
  if (x >= 1e21) return BigInt(x).toString() + (prec > 0 ? `.${'0'.repeat(prec)}` : '');
  return x.toFixed(prec);
}

function exponential(x: number, prec: number): string {
  return withGoExponent(x.toExponential(prec));
}

/** JS writes `e+5`; Go writes at least two exponent digits: `e+05`. */
function withGoExponent(s: string): string {
  return s.replace(/e([+-])(\d)$/, 'e$10$2');
}

/** %g: shortest representation when no precision is given, switching to %e as Go's strconv does. */
function general(x: number, prec: number | null): string {
  const shortest = prec === null;
  const p = prec === 0 ? 1 : prec;
  const [mantissa, expText] = (shortest ? x.toExponential() : x.toExponential((p as number) - 1)).split('e');
  const digits = mantissa.replace('.', '').replace(/0+$/, '') || '0';
  const exp = Number(expText);
  const nd = digits.length;
  const dp = exp + 1;
  let eprec = shortest ? 6 : (p as number);
  if (!shortest && eprec > nd && nd >= dp) eprec = nd;
  if (exp < -4 || exp >= eprec) {
    const frac = digits.slice(1);
    return withGoExponent(`${digits[0]}${frac ? `.${frac}` : ''}e${exp < 0 ? '-' : '+'}${Math.abs(exp)}`);
  }
  const decimals = Math.max(nd - dp, 0);
  return x.toFixed(decimals);
}

function formatString(v: string | Buffer, verb: string, spec: Spec): string | null {
  switch (verb) {
    case 'v':
    case 's':
      return pad(truncateRunes(stringOf(v), spec.prec), spec);
    case 'q': {
      const s = truncateRunes(stringOf(v), spec.prec);
      if (spec.sharp && !/[`\u0000-\u0008\u000a-\u001f\u007f]/.test(s)) return pad(`\`${s}\``, spec);
      return pad(`"${quoteBody(s, '"', spec.plus)}"`, spec);
    }
    case 'x':
    case 'X': {
      let bytes = bytesOf(v);
      if (spec.prec !== null) bytes = bytes.subarray(0, spec.prec);
      const prefix = spec.sharp ? (verb === 'x' ? '0x' : '0X') : '';
      const hex = [...bytes].map((b) => b.toString(16).padStart(2, '0'));
      const cased = (s: string): string => (verb === 'X' ? s.toUpperCase() : s);
      if (spec.space) return pad(hex.map((h) => prefix + cased(h)).join(' '), spec);
      return pad(bytes.length === 0 ? '' : prefix + cased(hex.join('')), spec);
    }
    default:
      return null;
  }
}

function truncateRunes(s: string, prec: number | null): string {
  return prec === null ? s : [...s].slice(0, prec).join('');
}

/** The inside of strconv.Quote / QuoteRune (QuoteToASCII when asciiOnly). */
export function quoteBody(s: string, quote: string, asciiOnly = false): string {
  const named: Record<string, string> = { '\x07': '\\a', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v', '\\': '\\\\' };
  let out = '';
  for (const ch of s) {
    const cp = ch.codePointAt(0) ?? 0;
    if (ch === quote) out += `\\${ch}`;
    else if (ch in named) out += named[ch];
    else if (cp < 0x20 || cp === 0x7f) out += `\\x${cp.toString(16).padStart(2, '0')}`;
    else if (cp < 0x80 || (!asciiOnly && /[\p{L}\p{M}\p{N}\p{P}\p{S}]/u.test(ch))) out += ch;
    else if (cp < 0x10000) out += `\\u${cp.toString(16).padStart(4, '0')}`;
    else out += `\\U${cp.toString(16).padStart(8, '0')}`;
  }
  return out;
}
