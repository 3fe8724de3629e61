/**
 * Reading a bootstrap file: bounded, parsed as YAML (JSON is YAML too), checked whole against the schema and the
 * rules between objects, its references resolved. Every problem is collected with its YAML path and line before
 * anything is applied; none carries a resolved value.
 */
import { isMap, isSeq, LineCounter, parseDocument, type Document, type Node } from 'yaml';
import type { z } from 'zod';
import type { AuditSettings } from '../core/audit/options.ts';
import { parseDurationSecond } from '../core/durations.ts';
import { checkAuditDevices, checkBodies, checkDeclaredTokens, suggestion } from './bodies.ts';
import { roleKinds } from './endpoints.ts';
import { BOOTSTRAP_LIMITS, DURATION_KEY, ROLE_KINDS, bootstrapSchema, keysAt, salvage, type BootstrapFile, type YamlPath } from './schema.ts';
import { ReferenceError, describeReference, parseTemplate, processReferences, readBounded, renderTemplate, type Reference, type ReferenceSource } from './references.ts';


export interface BootstrapIssue {
  /** `mounts[0].static_roles[1].rotation_period`, or "" for the file as a whole. */
  path: string;
  line: number;
  message: string;
}

export class BootstrapInvalidError extends Error {
  readonly file: string;
  readonly issues: BootstrapIssue[];
  constructor(file: string, issues: BootstrapIssue[]) {
    super(`${file}: ${issues.length} error${issues.length === 1 ? '' : 's'}`);
    this.file = file;
    this.issues = issues;
  }

  /** One line per issue: `file:line: path: message`. */
  lines(): string[] {
    return this.issues.map((i) => `${this.file}:${i.line}: ${i.path ? `${i.path}: ` : ''}${i.message}`);
  }
}

export interface LoadOptions {
  /** Tokens with fixed ids are declared only in dev mode or with STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS. */
  allowTokenIds: boolean;
  /** What the server lets audit devices turn on (STRONGROOM_AUDIT_ALLOW_*); neither when not given. */
  audit?: AuditSettings;
  references?: ReferenceSource;
}

export interface LoadedFile {
  /** The file's objects with every reference resolved. */
  spec: BootstrapFile;
  /** The line an object or field was written on, for errors met while applying. */
  lineOf(path: YamlPath): number;
  /** Whether the file wrote the value at `path` with a reference: what it resolved to is never shown. */
  fromReference(path: YamlPath): boolean;
  /** Each value a reference resolved to, with the reference's own text (`${file:/run/bindpass}`) to name it by. */
  resolved: ReadonlyMap<string, string>;
}

export function formatPath(path: YamlPath): string {
  return path.map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? p : `.${p}`)).join('');
}

/** Reads, checks and resolves the file; throws BootstrapInvalidError listing every problem. */
export function loadBootstrapFile(file: string, options: LoadOptions): LoadedFile {
  return parseBootstrap(file, readFileBounded(file), options);
}

function readFileBounded(file: string): string {
  const max = BOOTSTRAP_LIMITS.fileBytes;
  let bytes: Buffer;
  try {
    bytes = readBounded(file, max);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : err instanceof ReferenceError ? err.message : 'cannot be read';
    throw new BootstrapInvalidError(file, [{ path: '', line: 0, message: why }]);
  }
  if (bytes.length > max) throw new BootstrapInvalidError(file, [{ path: '', line: 0, message: `larger than the maximum of ${max} bytes` }]);
  return bytes.toString('utf8');
}

/** The pure part of loading, given the file's text: tested without files. */
export function parseBootstrap(file: string, text: string, options: LoadOptions): LoadedFile {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false, strict: true });
  const lineAt = (offset: number) => lineCounter.linePos(offset).line;
  if (doc.errors.length) {
    throw new BootstrapInvalidError(file, doc.errors.map((e) => ({ path: '', line: lineAt(e.pos[0]), message: e.message.split('\n')[0] })));
  }
  const lineOf = (path: YamlPath) => lineAt(locate(doc, path));
  const issues: BootstrapIssue[] = [];
  const add = (path: YamlPath, message: string) => issues.push({ path: formatPath(path), line: lineOf(path), message });

  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: BOOTSTRAP_LIMITS.yamlAliases }) ?? {};
  } catch (err) {
    throw new BootstrapInvalidError(file, [{ path: '', line: 1, message: (err as Error).message }]);
  }
  const parsed = bootstrapSchema.safeParse(raw);
  if (!parsed.success) for (const issue of parsed.error.issues) addSchemaIssue(issue, raw, add);
  const spec = parsed.success ? parsed.data : salvage(raw);
  checkRules(spec, options, add);
  const values = new Map<string, string>();
  const resolved = resolveReferences(spec, options.references ?? processReferences, add, (ref, value) => {
    if (value && !values.has(value)) values.set(value, `<the value of ${describeReference(ref)}>`);
  });
  // A value already found wrong (a duration, a reference that failed) is not judged a second time.
  const reported = (at: YamlPath) => {
    const p = formatPath(at);
    return issues.some((i) => i.path === p || i.path.startsWith(`${p}.`) || i.path.startsWith(`${p}[`));
  };
  const fromReference = (at: YamlPath) => JSON.stringify(valueAt(spec, at) ?? '').includes('${');
  checkBodies(resolved, add, reported, fromReference);
  checkDeclaredTokens(resolved.tokens, add, reported);
  checkAuditDevices(resolved.audit, options.audit ?? { allowPrefix: false, allowRaw: false, dir: undefined }, add, reported);
  if (issues.length) throw new BootstrapInvalidError(file, sortIssues(issues));
  return { spec: resolved, lineOf, fromReference, resolved: values };
}

function sortIssues(issues: BootstrapIssue[]): BootstrapIssue[] {
  return issues.sort((a, b) => a.line - b.line);
}

function addSchemaIssue(issue: z.core.$ZodIssue, raw: unknown, add: (path: YamlPath, message: string) => void): void {
  const path = issue.path as Array<string | number>;
  const given = valueAt(raw, path);
  if (issue.code === 'unrecognized_keys') {
    for (const key of issue.keys) add([...path, key], `unknown key "${key}"${suggestion(key, keysAt(path))}`);
    return;
  }
  // A union reports its members' failures; what the file needed is said once.
  if (issue.code === 'invalid_union') {
    add(path, 'expected a string, number, boolean, list or map (nested at most 4 deep)');
    return;
  }
  if (issue.code === 'invalid_type' && given === undefined) {
    add(path, `missing required key (${issue.expected})`);
    return;
  }
  add(path, issue.message.replace(/^Invalid input: /, ''));
}

function valueAt(root: unknown, path: YamlPath): unknown {
  return path.reduce<unknown>((v, seg) => (v && typeof v === 'object' ? (v as Record<string | number, unknown>)[seg] : undefined), root);
}

/** Offset of the node at `path`, or of the nearest enclosing one that exists (a missing key's map). */
function locate(doc: Document, path: YamlPath): number {
  let node: Node | null | undefined = doc.contents;
  let offset = node?.range?.[0] ?? 0;
  for (const seg of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => (p.key as { value?: unknown } | null)?.value === seg);
      if (!pair) break;
      offset = (pair.key as Node).range?.[0] ?? offset;
      node = pair.value as Node | null;
    } else if (isSeq(node) && typeof seg === 'number' && node.items[seg]) {
      node = node.items[seg] as Node;
      offset = node.range?.[0] ?? offset;
    } else {
      break;
    }
  }
  return offset;
}

/** The rules between objects: kinds a type has, unique names, durations, reserved paths, fixed token ids, bounds. */
function checkRules(spec: BootstrapFile, options: LoadOptions, add: (path: YamlPath, message: string) => void): void {
  let objects = 0;
  const unique = (path: YamlPath, seen: Map<string, number>, key: string, what: string) => {
    const first = seen.get(key);
    // The value is not repeated: a token id is a secret.
    if (first !== undefined) add(path, `the same ${what} as ${formatPath([...path.slice(0, -2), first])}`);
    else seen.set(key, path.at(-2) as number);
  };
  const mountPaths = new Map<string, number>();
  const authPaths = new Map<string, number>();
  for (const [cls, list] of [['mounts', spec.mounts ?? []], ['auth', spec.auth ?? []]] as const) {
    list.forEach((m, i) => {
      objects++;
      const at: YamlPath = [cls, i];
      unique([...at, 'path'], cls === 'mounts' ? mountPaths : authPaths, m.path, 'path');
      if (cls === 'mounts' && /^(auth|sys|identity|cubbyhole)(\/|$)/.test(m.path)) add([...at, 'path'], `"${m.path}" is reserved (auth methods go under "auth:")`);
      if (cls === 'auth' && m.path === 'token') add([...at, 'path'], '"token" is the built-in token method and cannot be declared');
      checkDurations([...at, 'tune'], m.tune, add, true);
      checkDurations([...at, 'config'], m.config, add);
      if (m.config) objects++;
      const kinds = roleKinds(cls === 'auth' ? 'auth' : 'secret', m.type);
      for (const kind of ROLE_KINDS) {
        const roles = (m as Partial<Record<(typeof ROLE_KINDS)[number], Array<{ name: string }>>>)[kind];
        const pruned = (m.prune as Record<string, boolean | undefined> | undefined)?.[kind];
        if ((roles || pruned !== undefined) && !kinds.includes(kind)) {
          add([...at, roles ? kind : 'prune'], `a mount of type "${m.type}" has no ${kind}${kinds.length ? ` (it has ${kinds.join(', ')})` : ''}`);
          continue;
        }
        const names = new Map<string, number>();
        roles?.forEach((r, j) => {
          objects++;
          unique([...at, kind, j, 'name'], names, r.name.toLowerCase(), 'name');
          checkDurations([...at, kind, j], r, add);
        });
      }
    });
  }
  for (const kind of ['acl', 'password'] as const) {
    const names = new Map<string, number>();
    spec.policies?.[kind]?.forEach((p, i) => {
      objects++;
      unique(['policies', kind, i, 'name'], names, p.name.toLowerCase(), 'name');
      if (kind === 'acl' && p.name.toLowerCase() === 'root') add(['policies', kind, i, 'name'], '"root" cannot be changed');
    });
  }
  const devices = new Map<string, number>();
  spec.audit?.forEach((d, i) => {
    objects++;
    unique(['audit', i, 'path'], devices, d.path, 'path');
  });
  const ids = new Map<string, number>();
  spec.tokens?.forEach((t, i) => {
    objects++;
    unique(['tokens', i, 'id'], ids, t.id, 'id');
    checkDurations(['tokens', i], t, add);
    if (!options.allowTokenIds) add(['tokens', i, 'id'], 'tokens with fixed ids are declared only in dev mode or with STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS=true');
  });
  if (objects > BOOTSTRAP_LIMITS.objects) add([], `${objects} objects, more than the maximum of ${BOOTSTRAP_LIMITS.objects}`);
}

function checkDurations(at: YamlPath, body: Record<string, unknown> | undefined, add: (path: YamlPath, message: string) => void, tune = false): void {
  for (const [key, v] of Object.entries(body ?? {})) {
    if (!DURATION_KEY.test(key) || (typeof v !== 'string' && typeof v !== 'number')) continue;
    // A reference is checked by the server once resolved; mount tuning's "system" resets to the server default.
    if (typeof v === 'string' && (v.includes('${') || (tune && v === 'system'))) continue;
    try {
      if (parseDurationSecond(v) < 0) add([...at, key], 'a duration cannot be negative');
    } catch (err) {
      add([...at, key], (err as Error).message);
    }
  }
}

/** Keys whose values are identifiers: shown in reports and logs, so never a reference. */
const IDENTIFYING_KEYS = new Set(['path', 'type', 'name']);

/** A copy of the file with every `${...}` resolved, each problem added at its string's path. */
function resolveReferences(spec: BootstrapFile, source: ReferenceSource, add: (path: YamlPath, message: string) => void, heard: (ref: Reference, value: string) => void): BootstrapFile {
  let count = 0;
  const walk = (v: unknown, path: Array<string | number>): unknown => {
    if (typeof v === 'string') {
      if (!v.includes('${')) return v;
      try {
        const template = parseTemplate(v);
        if (template.refs.length === 0) return template.texts[0];
        if (IDENTIFYING_KEYS.has(String(path.at(-1)))) throw new ReferenceError('a name, path or type cannot be a reference (it is shown in reports and logs)');
        count += template.refs.length;
        if (count > BOOTSTRAP_LIMITS.references) {
          // Said once, where the bound was passed; the rest are not resolved.
          if (count - template.refs.length <= BOOTSTRAP_LIMITS.references) add(path, `more than the maximum of ${BOOTSTRAP_LIMITS.references} references in the file`);
          return v;
        }
        return renderTemplate(template, source, heard);
      } catch (err) {
        if (!(err instanceof ReferenceError)) throw err;
        add(path, err.message);
        return v;
      }
    }
    if (Array.isArray(v)) return v.map((item, i) => walk(item, [...path, i]));
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, item]) => [k, walk(item, [...path, k])]));
    return v;
  };
  return walk(spec, []) as BootstrapFile;
}
