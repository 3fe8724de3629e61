/**
 * `${VAR}` and `${file:/absolute/path}` inside a string value, so secrets stay out of the file. One pass: a
 * resolved value is never scanned again, so a variable holding `${OTHER}` is that text, never a second lookup, and
 * no loop can form. `$${` writes a literal `${`. Errors name the reference, never what it resolved to.
 */
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { isAbsolute } from 'node:path';
import { BOOTSTRAP_LIMITS } from './schema.ts';

export type Reference = { kind: 'env'; name: string } | { kind: 'file'; path: string };

/** Text and references of one string, in order; `refs[i]` goes between `texts[i]` and `texts[i + 1]`. */
export interface Template {
  texts: string[];
  refs: Reference[];
}

export class ReferenceError extends Error {}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** Splits a string into text and references; throws ReferenceError for a malformed one. */
export function parseTemplate(input: string): Template {
  const texts: string[] = [];
  const refs: Reference[] = [];
  let text = '';
  let i = 0;
  while (i < input.length) {
    if (input.startsWith('$${', i)) {
      text += '${';
      i += 3;
      continue;
    }
    if (!input.startsWith('${', i)) {
      text += input[i++];
      continue;
    }
    const end = input.indexOf('}', i + 2);
    if (end < 0) throw new ReferenceError('a "${" without its closing "}" (write "$${" for a literal "${")');
    const inner = input.slice(i + 2, end);
    if (inner.length > BOOTSTRAP_LIMITS.referenceLength) throw new ReferenceError(`a reference longer than the maximum of ${BOOTSTRAP_LIMITS.referenceLength} characters`);
    if (inner.includes('${') || inner.includes('$')) throw new ReferenceError('a reference inside a reference: references are resolved once and never nested');
    texts.push(text);
    refs.push(parseReference(inner));
    text = '';
    i = end + 1;
  }
  texts.push(text);
  return { texts, refs };
}

function parseReference(inner: string): Reference {
  if (inner.startsWith('file:')) {
    const path = inner.slice('file:'.length);
    if (!isAbsolute(path)) throw new ReferenceError(`\${file:${path}}: a file reference needs an absolute path`);
    return { kind: 'file', path };
  }
  if (!ENV_NAME.test(inner)) throw new ReferenceError(`\${${inner}}: expected \${NAME} (an environment variable) or \${file:/absolute/path}`);
  return { kind: 'env', name: inner };
}

export function describeReference(ref: Reference): string {
  return ref.kind === 'env' ? `\${${ref.name}}` : `\${file:${ref.path}}`;
}

/** Where references are looked up: the process's environment and files (tests pass their own). */
export interface ReferenceSource {
  env: Record<string, string | undefined>;
  readFile(path: string, maxBytes: number): Buffer;
}

/**
 * Reads at most `maxBytes + 1` bytes, so an oversized file is known without reading it all. Opened without blocking,
 * so a FIFO is refused as not a regular file instead of hanging the (synchronous) read until a writer appears.
 */
export function readBounded(path: string, maxBytes: number): Buffer {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    if (!fstatSync(fd).isFile()) throw new ReferenceError('not a regular file');
    const buf = Buffer.alloc(maxBytes + 1);
    let n = 0;
    for (let r = 1; r > 0 && n < buf.length; n += r) r = readSync(fd, buf, n, buf.length - n, null);
    return buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

export const processReferences: ReferenceSource = { env: process.env, readFile: readBounded };

/**
 * The reference's value. A file's single trailing newline is dropped (what `echo secret > file` and Docker or
 * Kubernetes secrets leave); nothing else is changed.
 */
export function resolveReference(ref: Reference, source: ReferenceSource): string {
  const max = BOOTSTRAP_LIMITS.referenceValueBytes;
  if (ref.kind === 'env') {
    // Only a string is a set variable: ${constructor} or ${__proto__} would otherwise find Object.prototype's members.
    const v = source.env[ref.name];
    if (typeof v !== 'string') throw new ReferenceError(`${describeReference(ref)}: the environment variable ${ref.name} is not set`);
    if (Buffer.byteLength(v) > max) throw new ReferenceError(`${describeReference(ref)}: longer than the maximum of ${max} bytes`);
    return v;
  }
  let bytes: Buffer;
  try {
    bytes = source.readFile(ref.path, max);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'not a regular file' : err instanceof ReferenceError ? err.message : 'cannot be read';
    throw new ReferenceError(`${describeReference(ref)}: ${why}`);
  }
  if (bytes.length > max) throw new ReferenceError(`${describeReference(ref)}: larger than the maximum of ${max} bytes`);
  const text = bytes.toString('utf8');
  return text.endsWith('\r\n') ? text.slice(0, -2) : text.endsWith('\n') ? text.slice(0, -1) : text;
}

/** The rendered string; `resolved` hears each reference's value, so messages can be cleaned of it later. */
export function renderTemplate(t: Template, source: ReferenceSource, resolved?: (ref: Reference, value: string) => void): string {
  let out = t.texts[0];
  for (let i = 0; i < t.refs.length; i++) {
    const value = resolveReference(t.refs[i], source);
    resolved?.(t.refs[i], value);
    out += value + t.texts[i + 1];
  }
  return out;
}
