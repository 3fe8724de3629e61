// Tokeniser for Go text/template. Mirrors the token kinds of Go's text/template/parse lexer so the
// parser can apply Go's grammar and error wording; the whole input is tokenised eagerly.

export type TokenType =
  | 'text' | 'leftDelim' | 'rightDelim' | 'space' | 'pipe' | 'leftParen' | 'rightParen'
  | 'declare' | 'assign' | 'char' | 'string' | 'rawString' | 'charConstant' | 'number'
  | 'bool' | 'nil' | 'dot' | 'field' | 'variable' | 'identifier' | 'keyword' | 'eof' | 'error';

export interface Token {
  type: TokenType;
  val: string;
  /** Offset of the token in the template text. */
  pos: number;
}

const KEYWORDS = new Set(['block', 'break', 'continue', 'define', 'else', 'end', 'if', 'range', 'template', 'with']);
const LEFT = '{{';
const RIGHT = '}}';

function isSpace(c: string | undefined): boolean {
  return c === ' ' || c === '\t' || c === '\r' || c === '\n';
}

function isAlphaNumeric(c: string | undefined): boolean {
  return c !== undefined && (c === '_' || /[\p{L}\p{Nd}]/u.test(c));
}

/** Go's `%#U` rendering, used in lexer error messages. */
function unicodeName(c: string): string {
  const cp = c.codePointAt(0) ?? 0;
  return `U+${cp.toString(16).toUpperCase().padStart(4, '0')} '${c}'`;
}

export function lex(input: string): Token[] {
  const tokens: Token[] = [];
  let pos = 0;
  let start = 0;
  let parenDepth = 0;

  const emit = (type: TokenType): void => {
    tokens.push({ type, val: input.slice(start, pos), pos: start });
    start = pos;
  };
  const fail = (message: string): Token[] => {
    tokens.push({ type: 'error', val: message, pos: start }, { type: 'eof', val: '', pos: input.length });
    return tokens;
  };
  // `-}}` only trims when preceded by a space, as in Go, so `{{3-}}` stays a syntax matter.
  const atRightDelim = (): { delim: boolean; trim: boolean } => {
    if (isSpace(input[pos]) && input[pos + 1] === '-' && input.startsWith(RIGHT, pos + 2)) return { delim: true, trim: true };
    return { delim: input.startsWith(RIGHT, pos), trim: false };
  };
  const skipSpaces = (): void => {
    while (isSpace(input[pos])) pos++;
  };
  const atTerminator = (): boolean => {
    const c = input[pos];
    return c === undefined || isSpace(c) || '.,|:()'.includes(c) || input.startsWith(RIGHT, pos);
  };
  const closeAction = (trim: boolean): void => {
    if (trim) pos += 2;
    start = pos;
    pos += RIGHT.length;
    emit('rightDelim');
    if (trim) skipSpaces();
    start = pos;
  };

  for (;;) {
    // Text up to the next action.
    const next = input.indexOf(LEFT, pos);
    if (next < 0) {
      pos = input.length;
      if (pos > start) emit('text');
      tokens.push({ type: 'eof', val: '', pos });
      return tokens;
    }
    const trimLeft = input[next + 2] === '-' && isSpace(input[next + 3]);
    let textEnd = next;
    if (trimLeft) while (textEnd > start && isSpace(input[textEnd - 1])) textEnd--;
    if (textEnd > start) tokens.push({ type: 'text', val: input.slice(start, textEnd), pos: start });
    start = next;
    pos = next + LEFT.length;
    const afterMarker = trimLeft ? pos + 2 : pos;

    if (input.startsWith('/*', afterMarker)) {
      const end = input.indexOf('*/', afterMarker + 2);
      if (end < 0) return fail('unclosed comment');
      pos = end + 2;
      const { delim, trim } = atRightDelim();
      if (!delim) return fail('comment ends before closing delimiter');
      pos += (trim ? 2 : 0) + RIGHT.length;
      if (trim) skipSpaces();
      start = pos;
      continue;
    }
    emit('leftDelim');
    if (trimLeft) {
      pos += 2;
      start = pos;
    }

    // Inside the action.
    for (;;) {
      const { delim, trim } = atRightDelim();
      if (delim) {
        if (parenDepth > 0) return fail('unclosed left paren');
        closeAction(trim);
        break;
      }
      const c = input[pos];
      if (c === undefined) return fail('unclosed action');
      pos++;
      if (isSpace(c)) {
        while (isSpace(input[pos])) pos++;
        // A single space that belongs to a ` -}}` trim marker is not a separator.
        if (input[pos - 1] !== undefined && isSpace(input[pos - 1]) && input[pos] === '-' && input.startsWith(RIGHT, pos + 1)) {
          pos--;
          if (pos === start) continue;
        }
        emit('space');
      } else if (c === '=') emit('assign');
      else if (c === ':') {
        if (input[pos] !== '=') return fail('expected :=');
        pos++;
        emit('declare');
      } else if (c === '|') emit('pipe');
      else if (c === '"' || c === "'") {
        const type = c === '"' ? 'string' : 'charConstant';
        for (;;) {
          const d = input[pos++];
          if (d === '\\' && input[pos] !== undefined && input[pos] !== '\n') pos++;
          else if (d === undefined || d === '\n') {
            return fail(type === 'string' ? 'unterminated quoted string' : 'unterminated character constant');
          } else if (d === c) break;
        }
        emit(type);
      } else if (c === '`') {
        const end = input.indexOf('`', pos);
        if (end < 0) return fail('unterminated raw quoted string');
        pos = end + 1;
        emit('rawString');
      } else if (c === '$' || (c === '.' && !/[0-9]/.test(input[pos] ?? ''))) {
        while (isAlphaNumeric(input[pos])) pos++;
        if (!atTerminator()) return fail(`bad character ${unicodeName(input[pos])}`);
        if (c === '$') emit('variable');
        else emit(pos - start === 1 ? 'dot' : 'field');
      } else if (c === '.' || c === '+' || c === '-' || /[0-9]/.test(c)) {
        pos--;
        if (!scanNumber()) {
          pos++;
          return fail(`bad number syntax: "${input.slice(start, pos)}"`);
        }
        emit('number');
      } else if (isAlphaNumeric(c)) {
        while (isAlphaNumeric(input[pos])) pos++;
        if (!atTerminator()) return fail(`bad character ${unicodeName(input[pos])}`);
        const word = input.slice(start, pos);
        emit(KEYWORDS.has(word) ? 'keyword' : word === 'true' || word === 'false' ? 'bool' : word === 'nil' ? 'nil' : 'identifier');
      } else if (c === '(') {
        parenDepth++;
        emit('leftParen');
      } else if (c === ')') {
        if (--parenDepth < 0) return fail('unexpected right paren');
        emit('rightParen');
      } else if (c.charCodeAt(0) < 0x7f && c.charCodeAt(0) >= 0x20) emit('char');
      else return fail(`unrecognized character in action: ${unicodeName(c)}`);
    }
  }

  // Accepts the same shapes as Go's scanNumber; the parser decides whether the text is a valid value.
  function scanNumber(): boolean {
    const accept = (chars: string): boolean => {
      if (input[pos] !== undefined && chars.includes(input[pos])) {
        pos++;
        return true;
      }
      return false;
    };
    const acceptRun = (chars: string): void => {
      while (accept(chars));
    };
    accept('+-');
    let digits = '0123456789_';
    if (accept('0')) {
      if (accept('xX')) digits = '0123456789abcdefABCDEF_';
      else if (accept('oO')) digits = '01234567_';
      else if (accept('bB')) digits = '01_';
    }
    acceptRun(digits);
    if (accept('.')) acceptRun(digits);
    if (digits.length === 11 && accept('eE')) {
      accept('+-');
      acceptRun('0123456789_');
    }
    if (digits.length === 23 && accept('pP')) {
      accept('+-');
      acceptRun('0123456789_');
    }
    return !isAlphaNumeric(input[pos]);
  }
}
