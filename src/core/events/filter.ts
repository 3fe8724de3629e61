/**
 * Subscription filters in the syntax of Vault's (go-bexpr): `selector == "value"`, `!=`, `is empty`, `is not empty`,
 * `"value" in selector`, `not in`, `selector contains "value"`, `not contains`, `selector matches "regex"`,
 * `not matches`, joined by `and`, `or`, `not` and parentheses. Selectors are the fields Vault documents for events
 * (`event_type`, `operation`, `source_plugin_mount`, `source_plugin_subtype`, `data_path`, `path`) and any metadata
 * key; a selector starting with `/` is a JSON pointer into the event. A value may be quoted or a bare word.
 */
import { BadRequestError } from '../errors.ts';
import type { CloudEvent } from './envelope.ts';

export type EventFilter = (event: CloudEvent) => boolean;

/** A longer filter is refused: it is evaluated against every event for as long as the subscription lasts. */
export const MAX_FILTER_LENGTH = 2048;
const MAX_DEPTH = 32;

type Token = { kind: 'word' | 'string' | 'op' | 'paren'; text: string };

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  const re = /\s*(?:(\(|\))|("(?:[^"\\]|\\.)*"|`[^`]*`)|(==|!=)|([^\s()"`=!]+))/gy;
  let at = 0;
  while (at < source.length) {
    if (/^\s*$/.test(source.slice(at))) break;
    re.lastIndex = at;
    const m = re.exec(source);
    if (!m) throw new BadRequestError(`filter: unexpected character at offset ${at}`);
    at = re.lastIndex;
    if (m[1]) tokens.push({ kind: 'paren', text: m[1] });
    else if (m[2]) tokens.push({ kind: 'string', text: m[2].startsWith('`') ? m[2].slice(1, -1) : (JSON.parse(m[2]) as string) });
    else if (m[3]) tokens.push({ kind: 'op', text: m[3] });
    else tokens.push({ kind: 'word', text: m[4]! });
  }
  return tokens;
}

/** The value a selector names in an event: a documented field, a metadata key, or a JSON pointer. */
function select(event: CloudEvent, selector: string): unknown {
  if (selector.startsWith('/')) {
    let value: unknown = event;
    for (const part of selector.slice(1).split('/').map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))) {
      if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part)) return undefined;
      value = (value as Record<string, unknown>)[part];
    }
    return value;
  }
  const meta = event.data.metadata;
  switch (selector) {
    case 'event_type': return event.data.event_type;
    case 'source_plugin_mount': return event.data.plugin_info?.mount_path;
    case 'source_plugin_subtype': return event.data.plugin_info?.plugin;
    case 'data_path': return meta.data_path ?? (event.data.plugin_info?.mount_path ?? '') + (meta.path ?? '');
    default: return Object.hasOwn(meta, selector) ? meta[selector] : undefined;
  }
}

const asText = (v: unknown): string => (typeof v === 'string' ? v : v === undefined ? '' : JSON.stringify(v));

/** Parses `source`; a 400 naming the problem when it is not a filter. */
export function parseFilter(source: string): EventFilter {
  if (source.length > MAX_FILTER_LENGTH) throw new BadRequestError(`filter: longer than ${MAX_FILTER_LENGTH} characters`);
  const tokens = tokenize(source);
  let i = 0;
  const peek = (text?: string) => (i < tokens.length && (text === undefined || (tokens[i]!.kind !== 'string' && tokens[i]!.text === text)) ? tokens[i] : undefined);
  const next = (what: string): Token => {
    const t = tokens[i++];
    if (!t) throw new BadRequestError(`filter: expected ${what} at the end`);
    return t;
  };
  const value = (): string => {
    const t = next('a value');
    if (t.kind !== 'string' && t.kind !== 'word') throw new BadRequestError(`filter: expected a value, found "${t.text}"`);
    return t.text;
  };

  const or = (depth: number): EventFilter => {
    if (depth > MAX_DEPTH) throw new BadRequestError('filter: nested too deeply');
    let left = and(depth);
    while (peek('or')) {
      i++;
      const [a, b] = [left, and(depth)];
      left = (e) => a(e) || b(e);
    }
    return left;
  };
  const and = (depth: number): EventFilter => {
    let left = unary(depth);
    while (peek('and')) {
      i++;
      const [a, b] = [left, unary(depth)];
      left = (e) => a(e) && b(e);
    }
    return left;
  };
  const unary = (depth: number): EventFilter => {
    if (peek('not')) {
      i++;
      const inner = unary(depth + 1);
      return (e) => !inner(e);
    }
    if (peek('(')) {
      i++;
      const inner = or(depth + 1);
      if (next('")"').text !== ')') throw new BadRequestError('filter: expected ")"');
      return inner;
    }
    return comparison();
  };
  const comparison = (): EventFilter => {
    const first = next('a selector or value');
    // `"value" in selector` and `"value" not in selector`
    if (peek('in') || (peek('not') && tokens[i + 1]?.text === 'in')) {
      const negate = peek('not') !== undefined;
      i += negate ? 2 : 1;
      const selector = value();
      return (e) => {
        const v = select(e, selector);
        const found = Array.isArray(v) ? v.map(asText).includes(first.text) : asText(v).includes(first.text);
        return found !== negate;
      };
    }
    const selector = first.text;
    const op = next('an operator');
    if (op.text === '==' || op.text === '!=') {
      const expected = value();
      return (e) => (asText(select(e, selector)) === expected) === (op.text === '==');
    }
    const negate = op.text === 'not';
    const verb = negate ? next('an operator').text : op.text;
    if (verb === 'is') {
      const not = peek('not') !== undefined;
      if (not) i++;
      if (next('"empty"').text !== 'empty') throw new BadRequestError('filter: expected "empty" after "is"');
      return (e) => (asText(select(e, selector)) === '') !== not;
    }
    if (verb === 'contains') {
      const part = value();
      return (e) => {
        const v = select(e, selector);
        return (Array.isArray(v) ? v.map(asText).includes(part) : asText(v).includes(part)) !== negate;
      };
    }
    if (verb === 'matches') {
      const source = value();
      let re: RegExp;
      try {
        re = new RegExp(source);
      } catch {
        throw new BadRequestError(`filter: "${source.slice(0, 64)}" is not a regular expression`);
      }
      return (e) => re.test(asText(select(e, selector))) !== negate;
    }
    throw new BadRequestError(`filter: unknown operator "${op.text}"`);
  };

  if (tokens.length === 0) return () => true;
  const filter = or(0);
  if (i < tokens.length) throw new BadRequestError(`filter: unexpected "${tokens[i]!.text}"`);
  return filter;
}
