import { BadRequestError } from './errors.ts';
import type { Backend, PathDefinition } from './framework.ts';

export interface PathMatch {
  def: PathDefinition;
  params: Record<string, string>;
  /** Where each named capture stands in the path; only for definitions that declare canonical names. */
  spans?: Record<string, [number, number]>;
}

/**
 * Compiled path table of one backend; patterns are tried in the backend's declared order. A pattern's expression
 * runs only when the path starts with the pattern's literal prefix: an engine declares dozens of patterns, and
 * every request used to run the expressions of all those declared before its own.
 */
export class PathTable {
  readonly #entries: Array<{ literal: string; re: RegExp; def: PathDefinition }>;

  constructor(backend: Backend) {
    // Capture positions cost every match, so only patterns with canonical names ask for them ('d').
    this.#entries = backend.paths.map((def) => ({ literal: literalPrefix(def.pattern), re: new RegExp(`^(?:${def.pattern})$`, def.canonical ? 'd' : ''), def }));
  }

  match(path: string): PathMatch | undefined {
    for (const { literal, re, def } of this.#entries) {
      if (!path.startsWith(literal)) continue;
      const m = re.exec(path);
      if (!m) continue;
      const params: Record<string, string> = {};
      if (m.groups) for (const name in m.groups) if (m.groups[name] !== undefined) params[name] = m.groups[name];
      if (!def.canonical) return { def, params };
      const spans: Record<string, [number, number]> = {};
      for (const name in params) spans[name] = m.indices!.groups![name]!;
      return { def, params, spans };
    }
    return undefined;
  }

  /**
   * The path and params spelled canonically (see PathDefinition.canonical). A rewritten path must resolve to the
   * same definition with the canonical values, or the spelling is refused: canonicalising may never move a
   * request to another endpoint.
   */
  canonicalise(path: string, match: PathMatch): { path: string; match: PathMatch } {
    const canonical = match.def.canonical;
    if (!canonical || !match.spans) return { path, match };
    let out = path;
    // Right to left, so earlier spans keep their positions.
    const names = Object.keys(canonical).filter((n) => match.params[n] !== undefined).sort((a, b) => match.spans![b]![0] - match.spans![a]![0]);
    for (const name of names) {
      const [start, end] = match.spans[name]!;
      out = out.slice(0, start) + canonical[name]!(match.params[name]!) + out.slice(end);
    }
    if (out === path) return { path, match };
    const again = this.match(out);
    if (!again || again.def !== match.def || names.some((n) => again.params[n] !== canonical[n]!(again.params[n]!))) {
      throw new BadRequestError('the request path names an object in a spelling that cannot be made canonical');
    }
    return { path: out, match: again };
  }
}

/** The text every path a pattern matches starts with ('' when the pattern could start with anything). */
export function literalPrefix(pattern: string): string {
  let depth = 0;
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') i++;
    else if (inClass) inClass = c !== ']';
    else if (c === '[') inClass = true;
    else if (c === '(') depth++;
    else if (c === ')') depth--;
    // A top-level alternative may start differently.
    else if (c === '|' && depth === 0) return '';
  }
  const literal = /^[^\\^$.|?*+()[\]{}]*/.exec(pattern)![0];
  // A quantifier that allows zero repeats takes the last literal character with it.
  return '?*{'.includes(pattern[literal.length] ?? '+') ? literal.slice(0, -1) : literal;
}

/**
 * Requests whose path could escape its meaning are refused before anything else: `.`/`..` segments
 * (also when percent-encoded, since the path arrives decoded), NUL and other control characters.
 */
export function pathProblem(path: string): string | undefined {
  if (/[\u0000-\u001f\u007f]/.test(path)) return 'the request path contains control characters';
  if (/(?:^|\/)\.\.?(?:\/|$)/.test(path)) return 'the request path must not contain "." or ".." segments';
  return undefined;
}

/** sys paths that need `sudo` on top of their capability (Vault's root-protected list). */
const ROOT_PROTECTED: RegExp[] = [
  /^sys\/auth\/.+/, /^sys\/remount$/, /^sys\/rotate$/, /^sys\/seal$/, /^sys\/raw(\/.*)?$/,
  /^sys\/leases\/revoke-prefix\/.*/, /^sys\/leases\/revoke-force\/.*/, /^sys\/leases\/lookup\/.*/,
  /^sys\/revoke-prefix\/.*/, /^sys\/revoke-force\/.*/, /^sys\/audit(\/.*)?$/, /^sys\/audit-hash\/.*/,
  /^auth\/token\/revoke-orphan(\/.*)?$/, /^auth\/token\/accessors\/?$/,
];

export const isRootProtected = (path: string): boolean => ROOT_PROTECTED.some((re) => re.test(path));
