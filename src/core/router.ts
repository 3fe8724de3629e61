import { BadRequestError } from './errors.ts';
import type { Backend, PathDefinition } from './framework.ts';

export interface PathMatch {
  def: PathDefinition;
  params: Record<string, string>;
}

/**
 * Compiled path table of one backend; patterns are tried in the backend's declared order. A pattern's expression
 * runs only when the path starts with the pattern's literal prefix: an engine declares dozens of patterns, and
 * every request used to run the expressions of all those declared before its own.
 */
export class PathTable {
  readonly #entries: Array<{ literal: string; re: RegExp; def: PathDefinition }>;
  /**
   * The same expressions with capture positions ('d'), for the definitions that declare canonical names. Positions
   * cost ~1 µs a match, so they are asked for only when a spelling has to be rewritten, never for one already
   * canonical (the usual request).
   */
  readonly #withIndices = new Map<PathDefinition, RegExp>();

  constructor(backend: Backend) {
    this.#entries = backend.paths.map((def) => ({ literal: literalPrefix(def.pattern), re: new RegExp(`^(?:${def.pattern})$`), def }));
    for (const def of backend.paths) if (def.canonical) this.#withIndices.set(def, new RegExp(`^(?:${def.pattern})$`, 'd'));
  }

  match(path: string): PathMatch | undefined {
    for (const { literal, re, def } of this.#entries) {
      if (!path.startsWith(literal)) continue;
      const m = re.exec(path);
      if (!m) continue;
      const params: Record<string, string> = {};
      if (m.groups) for (const name in m.groups) if (m.groups[name] !== undefined) params[name] = m.groups[name];
      return { def, params };
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
    if (!canonical || isCanonical(canonical, match.params)) return { path, match };
    const names = Object.keys(canonical).filter((n) => match.params[n] !== undefined);
    const values = new Map(names.map((n) => [n, canonical[n]!(match.params[n]!)]));
    const spans = this.#withIndices.get(match.def)!.exec(path)!.indices!.groups!;
    let out = path;
    // Right to left, so earlier spans keep their positions.
    names.sort((a, b) => spans[b]![0] - spans[a]![0]);
    for (const name of names) {
      const [start, end] = spans[name]!;
      out = out.slice(0, start) + values.get(name)! + out.slice(end);
    }
    const again = this.match(out);
    if (!again || again.def !== match.def || names.some((n) => again.params[n] !== canonical[n]!(again.params[n]!))) {
      throw new BadRequestError('the request path names an object in a spelling that cannot be made canonical');
    }
    return { path: out, match: again };
  }
}

/** Whether every canonical-named param is spelled canonically already (the usual request), without allocating. */
function isCanonical(canonical: NonNullable<PathDefinition['canonical']>, params: Record<string, string>): boolean {
  for (const name in canonical) {
    const value = params[name];
    if (value !== undefined && canonical[name]!(value) !== value) return false;
  }
  return true;
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

/** Every request asks; only paths under the two prefixes the list names can match, so no expression runs for the rest. */
export const isRootProtected = (path: string): boolean =>
  (path.startsWith('sys/') || path.startsWith('auth/token/')) && ROOT_PROTECTED.some((re) => re.test(path));
