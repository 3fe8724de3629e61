// Recursive-descent parser following Go's text/template/parse grammar and error wording.
// Differences from Go: parse errors carry a column, and {{define}}/{{template}}/{{block}} are refused.

import { positionOf, TemplateBudgetError, TemplateParseError } from './errors.ts';
import { lex, type Token, type TokenType } from './lexer.ts';
import type { TemplateLimits } from './limits.ts';
import type { Command, Node, NumberValue, Operand, Pipe } from './nodes.ts';

type ParseLimits = Pick<TemplateLimits, 'maxSourceLength' | 'maxDepth'>;

export function parse(text: string, name: string, isFunction: (name: string) => boolean, limits: ParseLimits): Node[] {
  if (text.length > limits.maxSourceLength) {
    const max = limits.maxSourceLength;
    throw new TemplateBudgetError(name, positionOf(text, max), 'maxSourceLength', max, `template text exceeded the limit of ${max} characters`);
  }
  return new Parser(text, name, isFunction, limits.maxDepth).parseRoot();
}

type Terminal = { kind: 'end' | 'else'; pos: number };

class Parser {
  private readonly tokens: Token[];
  private index = 0;
  private vars: string[] = ['$'];
  private rangeDepth = 0;
  /** Open control structures and parentheses: parsing (and later execution) recurses once per level. */
  private depth = 0;
  private readonly text: string;
  private readonly name: string;
  private readonly isFunction: (name: string) => boolean;
  private readonly maxDepth: number;

  constructor(text: string, name: string, isFunction: (name: string) => boolean, maxDepth: number) {
    this.text = text;
    this.name = name;
    this.isFunction = isFunction;
    this.maxDepth = maxDepth;
    this.tokens = lex(text);
  }

  parseRoot(): Node[] {
    const root: Node[] = [];
    while (this.peek().type !== 'eof') {
      const n = this.textOrAction();
      if ('kind' in n && (n.kind === 'end' || n.kind === 'else')) this.fail(`unexpected {{${n.kind}}}`, n.pos);
      root.push(n as Node);
    }
    return root;
  }

  // --- token helpers -------------------------------------------------------------------------

  private peek(): Token {
    return this.tokens[this.index];
  }
  private next(): Token {
    const t = this.tokens[this.index];
    if (t.type !== 'eof') this.index++;
    return t;
  }
  private peekNonSpace(): Token {
    while (this.peek().type === 'space') this.index++;
    return this.peek();
  }
  private nextNonSpace(): Token {
    this.peekNonSpace();
    return this.next();
  }
  private backup(): void {
    this.index--;
  }

  private fail(reason: string, pos: number): never {
    const { line, col } = positionOf(this.text, pos);
    throw new TemplateParseError(this.name, line, col, reason);
  }

  /** Runs `parse` one nesting level deeper; past maxDepth the template is refused, not the stack overflowed. */
  private nested<T>(pos: number, parse: () => T): T {
    if (this.depth >= this.maxDepth) {
      throw new TemplateBudgetError(this.name, positionOf(this.text, pos), 'maxDepth', this.maxDepth, `nesting exceeded the limit of ${this.maxDepth} levels`);
    }
    this.depth++;
    try {
      return parse();
    } finally {
      this.depth--;
    }
  }

  private unexpected(token: Token, context: string): never {
    if (token.type === 'error') this.fail(token.val, token.pos);
    this.fail(`unexpected ${tokenString(token)} in ${context}`, token.pos);
  }

  private expect(type: TokenType, context: string): Token {
    const token = this.nextNonSpace();
    if (token.type !== type) this.unexpected(token, context);
    return token;
  }

  // --- structure -----------------------------------------------------------------------------

  private textOrAction(): Node | Terminal {
    const token = this.nextNonSpace();
    if (token.type === 'text') return { kind: 'text', pos: token.pos, text: token.val };
    if (token.type === 'leftDelim') return this.action();
    this.unexpected(token, 'input');
  }

  private itemList(): { list: Node[]; next: Terminal } {
    const list: Node[] = [];
    while (this.peekNonSpace().type !== 'eof') {
      const n = this.textOrAction();
      if (n.kind === 'end' || n.kind === 'else') return { list, next: n as Terminal };
      list.push(n as Node);
    }
    this.fail('unexpected EOF', this.peek().pos);
  }

  private action(): Node | Terminal {
    const token = this.nextNonSpace();
    if (token.type === 'keyword') {
      switch (token.val) {
        case 'if':
        case 'with':
        case 'range': {
          const context = token.val;
          return this.nested(token.pos, () => this.control(context, token.pos));
        }
        case 'else': {
          // `{{else if}}` / `{{else with}}`: leave the keyword pending for the enclosing control.
          const peek = this.peekNonSpace();
          if (peek.type !== 'keyword' || (peek.val !== 'if' && peek.val !== 'with')) this.expect('rightDelim', 'else');
          return { kind: 'else', pos: token.pos };
        }
        case 'end':
          this.expect('rightDelim', 'end');
          return { kind: 'end', pos: token.pos };
        case 'break':
        case 'continue': {
          const close = this.nextNonSpace();
          if (close.type !== 'rightDelim') this.unexpected(close, `{{${token.val}}}`);
          if (this.rangeDepth === 0) this.fail(`{{${token.val}}} outside {{range}}`, token.pos);
          return { kind: token.val, pos: token.pos };
        }
        default:
          // Named templates are not needed by any Strongroom template and would widen the surface.
          this.fail(`{{${token.val}}} is not supported`, token.pos);
      }
    }
    this.backup();
    const pipe = this.pipeline('command', 'rightDelim');
    return { kind: 'action', pos: pipe.pos, pipe };
  }

  private control(context: 'if' | 'with' | 'range', pos: number): Node {
    const mark = this.vars.length;
    const pipe = this.pipeline(context, 'rightDelim');
    if (context === 'range') this.rangeDepth++;
    const body = this.itemList();
    if (context === 'range') this.rangeDepth--;
    let elseList: Node[] | null = null;
    if (body.next.kind === 'else') {
      const peek = this.peek();
      if (context !== 'range' && peek.type === 'keyword' && peek.val === context) {
        // `{{if a}}x{{else if b}}y{{end}}` is `{{if a}}x{{else}}{{if b}}y{{end}}{{end}}`, as in Go.
        this.next();
        elseList = [this.nested(peek.pos, () => this.control(context, peek.pos))];
      } else {
        const rest = this.itemList();
        if (rest.next.kind !== 'end') this.fail(`expected end; found {{${rest.next.kind}}}`, rest.next.pos);
        elseList = rest.list;
      }
    }
    this.vars.length = mark;
    return { kind: context, pos, pipe, list: body.list, elseList };
  }

  // --- pipelines -----------------------------------------------------------------------------

  private pipeline(context: string, end: 'rightDelim' | 'rightParen'): Pipe {
    const pipe: Pipe = { kind: 'pipe', pos: this.peekNonSpace().pos, isAssign: false, decl: [], cmds: [] };
    this.declarations(pipe, context);
    for (;;) {
      const token = this.nextNonSpace();
      if (token.type === end) {
        this.checkPipeline(pipe, context, token);
        return pipe;
      }
      switch (token.type) {
        case 'bool': case 'charConstant': case 'dot': case 'field': case 'identifier': case 'number':
        case 'nil': case 'rawString': case 'string': case 'variable': case 'leftParen':
          this.backup();
          pipe.cmds.push(this.command());
          break;
        default:
          this.unexpected(token, context);
      }
    }
  }

  private declarations(pipe: Pipe, context: string): void {
    for (;;) {
      const v = this.peekNonSpace();
      if (v.type !== 'variable') return;
      const start = this.index;
      this.next();
      const next = this.peekNonSpace();
      if (next.type === 'assign' || next.type === 'declare') {
        this.next();
        pipe.isAssign = next.type === 'assign';
        pipe.decl.push(v.val);
        this.vars.push(v.val);
        return;
      }
      if (next.type === 'char' && next.val === ',') {
        this.next();
        pipe.decl.push(v.val);
        this.vars.push(v.val);
        if (context === 'range' && pipe.decl.length < 2) {
          const after = this.peekNonSpace().type;
          if (after === 'variable' || after === 'rightDelim' || after === 'rightParen') continue;
          this.fail('range can only initialize variables', this.peek().pos);
        }
        this.fail(`too many declarations in ${context}`, next.pos);
      }
      // `$x` is an operand, not a declaration.
      this.index = start;
      return;
    }
  }

  private checkPipeline(pipe: Pipe, context: string, end: Token): void {
    if (pipe.cmds.length === 0) this.fail(`missing value for ${context}`, end.pos);
    pipe.cmds.slice(1).forEach((c, i) => {
      const first = c.args[0].kind;
      if (first === 'bool' || first === 'dot' || first === 'nil' || first === 'number' || first === 'string') {
        this.fail(`non executable command in pipeline stage ${i + 2}`, c.pos);
      }
    });
  }

  private command(): Command {
    const cmd: Command = { pos: this.peekNonSpace().pos, args: [] };
    for (;;) {
      this.peekNonSpace();
      const operand = this.operand();
      if (operand) cmd.args.push(operand);
      const token = this.next();
      if (token.type === 'space') continue;
      if (token.type === 'rightDelim' || token.type === 'rightParen') this.backup();
      else if (token.type !== 'pipe') this.unexpected(token, 'operand');
      break;
    }
    if (cmd.args.length === 0) this.fail('empty command', cmd.pos);
    return cmd;
  }

  private operand(): Operand | null {
    const node = this.term();
    if (!node || this.peek().type !== 'field') return node;
    const fields: string[] = [];
    while (this.peek().type === 'field') fields.push(this.next().val.slice(1));
    switch (node.kind) {
      case 'field':
      case 'variable':
        return { ...node, idents: [...node.idents, ...fields] };
      case 'bool': case 'string': case 'number': case 'nil': case 'dot': {
        const shown = node.kind === 'string' ? node.quoted : node.kind === 'number' ? node.text : node.kind === 'dot' ? '.' : String(node.kind === 'bool' ? node.value : 'nil');
        this.fail(`unexpected . after term ${JSON.stringify(shown)}`, node.pos);
      }
      default:
        return { kind: 'chain', pos: node.pos, node, fields };
    }
  }

  private term(): Operand | null {
    const token = this.nextNonSpace();
    const pos = token.pos;
    switch (token.type) {
      case 'identifier':
        if (!this.isFunction(token.val)) this.fail(`function "${token.val}" not defined`, pos);
        return { kind: 'identifier', pos, name: token.val };
      case 'dot':
        return { kind: 'dot', pos };
      case 'nil':
        return { kind: 'nil', pos };
      case 'variable':
        if (!this.vars.includes(token.val)) this.fail(`undefined variable "${token.val}"`, pos);
        return { kind: 'variable', pos, idents: [token.val] };
      case 'field':
        return { kind: 'field', pos, idents: [token.val.slice(1)] };
      case 'bool':
        return { kind: 'bool', pos, value: token.val === 'true' };
      case 'number':
      case 'charConstant':
        return { kind: 'number', pos, text: token.val, ...this.number(token) };
      case 'leftParen':
        return this.nested(pos, () => this.pipeline('parenthesized pipeline', 'rightParen'));
      case 'string':
      case 'rawString':
        return { kind: 'string', pos, quoted: token.val, value: this.unquote(token) };
    }
    this.backup();
    return null;
  }

  // --- literals ------------------------------------------------------------------------------

  private number(token: Token): NumberValue {
    if (token.type === 'charConstant') {
      const s = this.unquote(token);
      const cps = [...s];
      if (cps.length !== 1) this.fail(`malformed character constant: ${token.val}`, token.pos);
      const r = cps[0].codePointAt(0) ?? 0;
      return { isInt: true, isFloat: true, int: r, float: r };
    }
    const text = token.val.replaceAll('_', '');
    const body = text.replace(/^[+-]/, '');
    const sign = text.startsWith('-') ? -1 : 1;
    const prefixed = /^0[xob]/i.exec(body);
    let int: number | null = null;
    if (prefixed && /^0[xob][0-9a-f]+$/i.test(body)) int = Number(body.toLowerCase());
    else if (/^0[0-7]+$/.test(body)) int = Number.parseInt(body, 8); // Go's base-0 rule: leading 0 is octal.
    else if (/^[0-9]+$/.test(body)) int = Number(body);
    if (int !== null) {
      if (!Number.isSafeInteger(int)) this.fail(`integer overflow: ${JSON.stringify(token.val)}`, token.pos);
      return { isInt: true, isFloat: true, int: sign * int, float: sign * int };
    }
    if (!prefixed && /^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/.test(body)) {
      const f = sign * Number(body);
      return { isInt: Number.isInteger(f), isFloat: true, int: f, float: f };
    }
    this.fail(`illegal number syntax: ${JSON.stringify(token.val)}`, token.pos);
  }

  private unquote(token: Token): string {
    const q = token.val;
    if (q.startsWith('`')) return q.slice(1, -1).replaceAll('\r', '');
    const quote = q[0];
    let out = '';
    for (let i = 1; i < q.length - 1; i++) {
      const c = q[i];
      if (c === quote) this.fail(`invalid syntax`, token.pos);
      if (c !== '\\') {
        out += c;
        continue;
      }
      const e = q[++i];
      const simple: Record<string, string> = { a: '\x07', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v', '\\': '\\' };
      if (e in simple) out += simple[e];
      else if (e === quote) out += e;
      else {
        const widths: Record<string, [number, number]> = { x: [2, 16], u: [4, 16], U: [8, 16] };
        const [width, radix] = widths[e] ?? (/[0-7]/.test(e) ? [3, 8] : [0, 0]);
        const digits = radix === 8 ? q.slice(i, i + 3) : q.slice(i + 1, i + 1 + width);
        const re = radix === 8 ? /^[0-7]{3}$/ : /^[0-9a-fA-F]+$/;
        if (width === 0 || digits.length !== width || !re.test(digits)) this.fail('invalid syntax', token.pos);
        const cp = Number.parseInt(digits, radix);
        if (cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) this.fail('invalid syntax', token.pos);
        out += String.fromCodePoint(cp);
        i += radix === 8 ? 2 : width;
      }
    }
    return out;
  }
}

/** Go's item.String(): how a token appears in "unexpected X in Y". */
function tokenString(t: Token): string {
  if (t.type === 'eof') return 'EOF';
  if (t.type === 'keyword') return `<${t.val}>`;
  if (t.type === 'leftDelim' || t.type === 'rightDelim') return JSON.stringify(t.val);
  const chars = [...t.val];
  return chars.length > 10 ? `${JSON.stringify(chars.slice(0, 10).join(''))}...` : JSON.stringify(t.val);
}
