import { BadRequestError } from '../errors.ts';
/**
 * The HCL subset that ACL and password policies are written in, plus JSON (which HCL accepts too).
 * Every node keeps its 1-based line and column so validation errors can point at the offending text.
 * Anything outside the subset is an error rather than a guess: a policy that half-parses is a
 * policy that silently grants or denies something its author did not write.
 */

/** A policy document that cannot be accepted; the HTTP layer answers it with 400. */
/** A policy that does not parse is the caller's mistake: a 400 through the core's one error renderer. */
export class PolicyParseError extends BadRequestError {
  constructor(message: string) {
    super(message);
  }
  override name = 'PolicyParseError';
}

export class HclParseError extends PolicyParseError {
  override name = 'HclParseError';
  readonly line: number;
  readonly column: number;
  constructor(line: number, column: number, detail: string) {
    super(`line ${line}, column ${column}: ${detail}`);
    this.line = line;
    this.column = column;
  }
}

export interface Position {
  line: number;
  column: number;
}
export interface HclObject extends Position {
  type: 'object';
  items: HclItem[];
}
export type HclNode =
  | (Position & { type: 'string'; value: string })
  | (Position & { type: 'number'; value: number })
  | (Position & { type: 'bool'; value: boolean })
  | (Position & { type: 'list'; items: HclNode[] })
  | HclObject;
/** `key "label" ... = value` or `key "label" { ... }`; JSON members have no labels. */
export interface HclItem extends Position {
  key: string;
  labels: string[];
  value: HclNode;
}

type TokenKind = 'string' | 'number' | 'ident' | 'punct' | 'eof';
interface Token extends Position {
  kind: TokenKind;
  text: string;
  value: string | number;
}

const PUNCT = new Set(['{', '}', '[', ']', '=', ',', ':']);
const IDENT = /[A-Za-z_][A-Za-z0-9_.-]*/y;
const NUMBER = /-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/y;
const HEREDOC_START = /<<(-?)([A-Za-z_][A-Za-z0-9_]*)[ \t]*\r?\n/y;
const SIMPLE_ESCAPES: Record<string, string> = {
  n: '\n', r: '\r', t: '\t', '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', a: '\x07', v: '\v',
};

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  let pos = 0;
  let line = 1;
  let lineStart = 0;
  const col = (at: number) => at - lineStart + 1;
  const fail = (at: number, detail: string): never => {
    throw new HclParseError(line, col(at), detail);
  };
  const advanceTo = (end: number) => {
    for (let i = pos; i < end; i++) {
      if (src[i] === '\n') {
        line++;
        lineStart = i + 1;
      }
    }
    pos = end;
  };

  while (pos < src.length) {
    const ch = src[pos];
    if (ch === ' ' || ch === '\t' || ch === '\r' || ch === '\n' || ch === '\uFEFF') {
      advanceTo(pos + 1);
      continue;
    }
    if (ch === '#' || src.startsWith('//', pos)) {
      const nl = src.indexOf('\n', pos);
      advanceTo(nl === -1 ? src.length : nl);
      continue;
    }
    if (src.startsWith('/*', pos)) {
      const end = src.indexOf('*/', pos + 2);
      if (end === -1) fail(pos, 'unterminated /* comment');
      advanceTo(end + 2);
      continue;
    }
    const start = { line, column: col(pos) };
    if (PUNCT.has(ch)) {
      tokens.push({ ...start, kind: 'punct', text: ch, value: ch });
      advanceTo(pos + 1);
      continue;
    }
    if (ch === '"') {
      const { value, end } = readString(src, pos, (at, detail) => fail(at, detail));
      tokens.push({ ...start, kind: 'string', text: src.slice(pos, end), value });
      advanceTo(end);
      continue;
    }
    if (src.startsWith('<<', pos)) {
      HEREDOC_START.lastIndex = pos;
      const m = HEREDOC_START.exec(src);
      if (!m) fail(pos, 'expected a heredoc marker such as <<EOT followed by a newline');
      const { value, end } = readHeredoc(src, HEREDOC_START.lastIndex, m![2], m![1] === '-');
      if (end === -1) fail(pos, 'unterminated heredoc: no line closes it with its marker');
      tokens.push({ ...start, kind: 'string', text: m![0].trim(), value });
      advanceTo(end);
      continue;
    }
    NUMBER.lastIndex = pos;
    const num = NUMBER.exec(src);
    if (num) {
      const after = src[NUMBER.lastIndex];
      if (after !== undefined && /[A-Za-z0-9_.]/.test(after)) {
        fail(pos, 'invalid number (quote values that carry units, such as "30m")');
      }
      tokens.push({ ...start, kind: 'number', text: num[0], value: Number(num[0]) });
      advanceTo(NUMBER.lastIndex);
      continue;
    }
    IDENT.lastIndex = pos;
    const id = IDENT.exec(src);
    if (id) {
      tokens.push({ ...start, kind: 'ident', text: id[0], value: id[0] });
      advanceTo(IDENT.lastIndex);
      continue;
    }
    fail(pos, 'unexpected character');
  }
  tokens.push({ line, column: col(pos), kind: 'eof', text: '', value: '' });
  return tokens;
}

function readString(
  src: string,
  open: number,
  fail: (at: number, detail: string) => never,
): { value: string; end: number } {
  let out = '';
  let i = open + 1;
  for (;;) {
    const ch = src[i];
    if (ch === undefined || ch === '\n') fail(open, 'unterminated string (use a heredoc for multi-line text)');
    if (ch === '"') return { value: out, end: i + 1 };
    if (ch !== '\\') {
      out += ch;
      i++;
      continue;
    }
    const esc = src[i + 1];
    if (esc !== undefined && esc in SIMPLE_ESCAPES) {
      out += SIMPLE_ESCAPES[esc];
      i += 2;
      continue;
    }
    const width = esc === 'u' ? 4 : esc === 'U' ? 8 : 0;
    const hex = src.slice(i + 2, i + 2 + width);
    if (width === 0 || !/^[0-9a-fA-F]+$/.test(hex) || hex.length !== width) {
      fail(i, 'invalid escape sequence in string');
    }
    const code = parseInt(hex, 16);
    if (code > 0x10ffff) fail(i, 'the escape is not a Unicode code point');
    // \uXXXX stays a UTF-16 unit so JSON surrogate pairs recombine; validity is the consumer's call.
    out += width === 4 ? String.fromCharCode(code) : String.fromCodePoint(code);
    i += 2 + width;
  }
}

/** Reads heredoc lines up to the closing marker; returns end -1 when the marker never comes. */
function readHeredoc(src: string, bodyStart: number, marker: string, indented: boolean): { value: string; end: number } {
  const lines: string[] = [];
  let at = bodyStart;
  while (at <= src.length) {
    const nl = src.indexOf('\n', at);
    const lineEnd = nl === -1 ? src.length : nl;
    const text = src.slice(at, lineEnd).replace(/\r$/, '');
    if (text.trim() === marker) {
      return { value: dedent(lines, indented), end: lineEnd };
    }
    lines.push(text);
    if (nl === -1) break;
    at = nl + 1;
  }
  return { value: '', end: -1 };
}

function dedent(lines: string[], indented: boolean): string {
  if (lines.length === 0) return '';
  let cut = 0;
  if (indented) {
    const widths = lines.filter((l) => l.trim() !== '').map((l) => /^[ \t]*/.exec(l)![0].length);
    cut = widths.length ? Math.min(...widths) : 0;
  }
  return lines.map((l) => l.slice(cut)).join('\n') + '\n';
}

function describe(t: Token): string {
  switch (t.kind) {
    case 'eof':
      return 'end of input';
    case 'punct':
      return `"${t.text}"`;
    // A token's text may be a secret pasted in the wrong place: its kind and position say enough.
    case 'string':
      return 'a string';
    case 'number':
      return 'a number';
    case 'ident':
      return 'an identifier';
  }
}

class Parser {
  readonly #tokens: Token[];
  readonly #json: boolean;
  #at = 0;

  constructor(tokens: Token[], json: boolean) {
    this.#tokens = tokens;
    this.#json = json;
  }

  document(): HclObject {
    const first = this.#peek();
    const doc = this.#json ? this.#object() : this.#body('eof', first);
    const rest = this.#peek();
    if (rest.kind !== 'eof') this.#fail(rest, 'expected end of input');
    return doc;
  }

  #peek(): Token {
    return this.#tokens[this.#at];
  }
  #next(): Token {
    return this.#tokens[this.#at++];
  }
  #isPunct(t: Token, p: string): boolean {
    return t.kind === 'punct' && t.text === p;
  }
  #fail(t: Token, expected: string): never {
    throw new HclParseError(t.line, t.column, `${expected}, found ${describe(t)}`);
  }
  #expectPunct(p: string, context: string): Token {
    const t = this.#next();
    if (!this.#isPunct(t, p)) this.#fail(t, `expected "${p}" ${context}`);
    return t;
  }

  /** HCL body: items until `closer`; commas between items are optional, as in HCL. */
  #body(closer: '}' | 'eof', open: Position): HclObject {
    const items: HclItem[] = [];
    for (;;) {
      const t = this.#peek();
      if (closer === 'eof' ? t.kind === 'eof' : this.#isPunct(t, '}')) break;
      if (t.kind === 'eof') this.#fail(t, `expected "}" to close the block opened at line ${open.line}`);
      items.push(this.#hclItem());
      if (this.#isPunct(this.#peek(), ',')) this.#next();
    }
    return { type: 'object', items, line: open.line, column: open.column };
  }

  #hclItem(): HclItem {
    const keyTok = this.#next();
    if (keyTok.kind !== 'ident' && keyTok.kind !== 'string') {
      this.#fail(keyTok, 'expected a key (identifier or quoted string)');
    }
    const key = String(keyTok.value);
    const labels: string[] = [];
    while (this.#peek().kind === 'string') labels.push(String(this.#next().value));
    const t = this.#peek();
    let value: HclNode;
    if (this.#isPunct(t, '=') && labels.length === 0) {
      this.#next();
      value = this.#value();
    } else if (this.#isPunct(t, '{')) {
      value = this.#value();
    } else {
      this.#fail(t, labels.length ? `expected "{" to open the block of the key on line ${keyTok.line}` : `expected "=" or "{" after the key on line ${keyTok.line}`);
    }
    return { key, labels, value, line: keyTok.line, column: keyTok.column };
  }

  #value(): HclNode {
    const t = this.#next();
    const pos = { line: t.line, column: t.column };
    switch (t.kind) {
      case 'string':
        return { ...pos, type: 'string', value: String(t.value) };
      case 'number':
        return { ...pos, type: 'number', value: Number(t.value) };
      case 'ident':
        if (t.text === 'true' || t.text === 'false') return { ...pos, type: 'bool', value: t.text === 'true' };
        if (t.text === 'null') this.#fail(t, 'null is not supported; expected a value');
        this.#fail(t, 'expected a value (quoted string, number, true/false, list or object)');
      case 'punct':
        if (t.text === '[') return this.#list(pos);
        if (t.text === '{' && !this.#json) return this.#closeBody(pos);
        if (t.text === '{') {
          this.#at--;
          return this.#object();
        }
        this.#fail(t, 'expected a value (quoted string, number, true/false, list or object)');
      case 'eof':
        this.#fail(t, 'expected a value');
    }
  }

  #closeBody(open: Position): HclObject {
    const body = this.#body('}', open);
    this.#expectPunct('}', `to close the block opened at line ${open.line}`);
    return body;
  }

  #list(open: Position): HclNode {
    const items: HclNode[] = [];
    for (;;) {
      if (this.#isPunct(this.#peek(), ']')) {
        const closing = this.#next();
        if (this.#json && items.length > 0 && this.#isPunct(this.#tokens[this.#at - 2], ',')) {
          this.#fail(closing, 'expected a value after "," (JSON has no trailing commas)');
        }
        break;
      }
      items.push(this.#value());
      const sep = this.#peek();
      if (this.#isPunct(sep, ',')) this.#next();
      else if (!this.#isPunct(sep, ']')) this.#fail(sep, `expected "," or "]" in the list opened at line ${open.line}`);
    }
    return { ...open, type: 'list', items };
  }

  /** JSON object: quoted keys, ":" separators, commas required between members. */
  #object(): HclObject {
    const open = this.#expectPunct('{', 'to open a JSON object');
    const items: HclItem[] = [];
    if (this.#isPunct(this.#peek(), '}')) {
      this.#next();
      return { type: 'object', items, line: open.line, column: open.column };
    }
    for (;;) {
      const keyTok = this.#next();
      if (keyTok.kind !== 'string') this.#fail(keyTok, 'expected a quoted key in JSON object');
      this.#expectPunct(':', `after JSON key ${keyTok.text}`);
      items.push({ key: String(keyTok.value), labels: [], value: this.#value(), line: keyTok.line, column: keyTok.column });
      const sep = this.#next();
      if (this.#isPunct(sep, '}')) break;
      if (!this.#isPunct(sep, ',')) this.#fail(sep, `expected "," or "}" in the JSON object opened at line ${open.line}`);
    }
    return { type: 'object', items, line: open.line, column: open.column };
  }
}

/** Parses HCL, or JSON when the document starts with "{" (an HCL body never can). */
export function parseHcl(text: string): HclObject {
  const tokens = tokenize(text);
  const json = tokens[0].kind === 'punct' && tokens[0].text === '{';
  return new Parser(tokens, json).document();
}

export interface HclBlock extends Position {
  label: string;
  body: HclObject;
}

/**
 * The blocks of one kind, whichever way they were written: `path "a" { }` in HCL, or
 * `"path": {"a": {...}}` / `"path": [{"a": {...}}]` in JSON.
 */
export function labelledBlocks(item: HclItem): HclBlock[] {
  const where = `"${item.key}" on line ${item.line}`;
  if (item.labels.length > 1) {
    throw new PolicyParseError(`${where}: expected one label, found ${item.labels.length}`);
  }
  if (item.labels.length === 1) {
    if (item.value.type !== 'object') throw new PolicyParseError(`${where}: expected a block body`);
    return [{ label: item.labels[0], body: item.value, line: item.line, column: item.column }];
  }
  const groups = item.value.type === 'list' ? item.value.items : [item.value];
  const blocks: HclBlock[] = [];
  for (const group of groups) {
    if (group.type !== 'object') {
      throw new PolicyParseError(`${where}: expected ${item.key} "<label>" { ... } blocks`);
    }
    for (const inner of group.items) {
      const bodies = inner.value.type === 'list' ? inner.value.items : [inner.value];
      for (const body of bodies) {
        if (inner.labels.length > 0 || body.type !== 'object') {
          throw new PolicyParseError(`${item.key} block on line ${inner.line}: expected a block body`);
        }
        blocks.push({ label: inner.key, body, line: inner.line, column: inner.column });
      }
    }
  }
  return blocks;
}

/** Plain JavaScript value of a node, for comparisons against request data. */
export function toPlain(node: HclNode): unknown {
  switch (node.type) {
    case 'list':
      return node.items.map(toPlain);
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const item of node.items) Object.defineProperty(out, item.key, { value: toPlain(item.value), enumerable: true });
      return out;
    }
    default:
      return node.value;
  }
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * Vault accepts a policy body either as text or as base64 of it. Text that is valid base64 and
 * decodes to UTF-8 is taken as encoded; no HCL or JSON policy is itself valid base64.
 */
export function decodeIfBase64(text: string): string {
  const compact = text.replace(/[\r\n]/g, '');
  if (compact === '' || !BASE64.test(compact)) return text;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(compact, 'base64'));
  } catch {
    return text;
  }
}
