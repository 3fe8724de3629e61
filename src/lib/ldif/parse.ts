// RFC 2849 change-record parser for the LDAP engine's creation/deletion/rollback LDIF.
// Deliberately stricter than go-ldap/ldif (what Vault uses): `:<` URL values are refused (Vault reads
// files on its own server), controls and modrdn/moddn are refused instead of ignored or half-done,
// and a changetype applies to its own record only (the pinned go-ldap remembered it across records).

import type { LdifAttribute, LdifModification, LdifRecord } from './types.ts';

export class LdifParseError extends Error {
  line: number;

  constructor(line: number, rule: string) {
    super(`LDIF line ${line}: ${rule}`);
    this.name = 'LdifParseError';
    this.line = line;
  }
}

/** One logical line: folded continuations joined, numbered by its first physical line. */
interface Line {
  text: string;
  line: number;
}

interface Field {
  name: string;
  value: string | Buffer;
  line: number;
}

const ATTRIBUTE_DESCRIPTION = /^([A-Za-z][A-Za-z0-9-]*|[0-9]+(\.[0-9]+)*)(;[A-Za-z0-9-]+)*$/;

export function parseLdif(text: string): LdifRecord[] {
  const blocks = recordBlocks(logicalLines(text));
  if (blocks.length > 0 && /^version:/i.test(blocks[0][0].text)) {
    const version = field(blocks[0][0]);
    if (String(version.value).trim() !== '1') throw new LdifParseError(version.line, `unsupported LDIF version "${String(version.value)}" (only 1)`);
    blocks[0].shift();
    if (blocks[0].length === 0) blocks.shift();
  }
  if (blocks.length === 0) throw new LdifParseError(1, 'no records');
  return blocks.map(parseRecord);
}

function logicalLines(text: string): Line[] {
  const lines: Line[] = [];
  let inComment = false;
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = i + 1;
    if (raw.startsWith(' ')) {
      // A folded line continues the previous one; a comment's continuations belong to the comment.
      if (inComment) return;
      const previous = lines.at(-1);
      if (!previous || previous.text === '') throw new LdifParseError(line, 'continuation line (starting with a space) without a line to continue');
      previous.text += raw.slice(1);
      return;
    }
    inComment = raw.startsWith('#');
    if (!inComment) lines.push({ text: raw, line });
  });
  return lines;
}

/** Records are separated by one or more empty lines. */
function recordBlocks(lines: Line[]): Line[][] {
  const blocks: Line[][] = [];
  let current: Line[] = [];
  for (const l of lines) {
    if (l.text === '') {
      if (current.length > 0) blocks.push(current);
      current = [];
    } else current.push(l);
  }
  if (current.length > 0) blocks.push(current);
  return blocks;
}

function field(l: Line): Field {
  const colon = l.text.indexOf(':');
  if (colon < 0) throw new LdifParseError(l.line, 'expected "attribute: value" (no colon found)');
  const name = l.text.slice(0, colon);
  if (!ATTRIBUTE_DESCRIPTION.test(name)) throw new LdifParseError(l.line, `invalid attribute description "${name}"`);
  const rest = l.text.slice(colon + 1);
  if (rest.startsWith('<')) throw new LdifParseError(l.line, `URL values (":<") are not accepted, for attribute "${name}"`);
  if (rest.startsWith(':')) return { name, value: decodeBase64(rest.slice(1).trimStart(), l.line, name), line: l.line };
  const value = rest.trimStart();
  if (value === '') throw new LdifParseError(l.line, `empty value for attribute "${name}"`);
  return { name, value, line: l.line };
}

/** `::` values: text when the bytes are UTF-8, else the raw bytes (e.g. a binary certificate). */
function decodeBase64(encoded: string, line: number, name: string): string | Buffer {
  if (encoded === '' || !/^[A-Za-z0-9+/]*={0,2}$/.test(encoded) || encoded.length % 4 !== 0) {
    throw new LdifParseError(line, `invalid base64 value for attribute "${name}"`);
  }
  const bytes = Buffer.from(encoded, 'base64');
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return bytes;
  }
}

function text(f: Field, what: string): string {
  if (typeof f.value !== 'string') throw new LdifParseError(f.line, `${what} must be UTF-8 text`);
  return f.value;
}

function parseRecord(block: Line[]): LdifRecord {
  const [first, ...rest] = block;
  const dnField = field(first);
  if (dnField.name.toLowerCase() !== 'dn') throw new LdifParseError(first.line, `a record must start with "dn:", found "${dnField.name}:"`);
  const dn = text(dnField, 'dn');
  const line = first.line;
  if (rest.length === 0) throw new LdifParseError(line, 'a record needs attributes or a changetype after its dn');
  const head = field(rest[0]);
  if (head.name.toLowerCase() === 'control') throw new LdifParseError(head.line, 'controls are not supported');
  if (head.name.toLowerCase() !== 'changetype') return { changetype: 'add', dn, attributes: attributes(rest), line };

  const changetype = text(head, 'changetype');
  const body = rest.slice(1);
  switch (changetype) {
    case 'add':
      if (body.length === 0) throw new LdifParseError(head.line, 'changetype add needs at least one attribute');
      return { changetype: 'add', dn, attributes: attributes(body), line };
    case 'delete':
      if (body.length > 0) throw new LdifParseError(body[0].line, 'changetype delete takes no attributes');
      return { changetype: 'delete', dn, line };
    case 'modify':
      return { changetype: 'modify', dn, changes: modifications(body, head.line), line };
    case 'modrdn':
    case 'moddn':
      throw new LdifParseError(head.line, `changetype ${changetype} is not supported`);
    default:
      throw new LdifParseError(head.line, `invalid changetype "${changetype}" (expected add, delete or modify)`);
  }
}

/** Values of the same attribute description are gathered under its first occurrence. */
function attributes(lines: Line[]): LdifAttribute[] {
  const byName = new Map<string, LdifAttribute>();
  for (const l of lines) {
    const f = field(l);
    if (f.name.toLowerCase() === 'changetype') throw new LdifParseError(f.line, 'changetype must directly follow the dn');
    const key = f.name.toLowerCase();
    const existing = byName.get(key);
    if (existing) existing.values.push(f.value);
    else byName.set(key, { name: f.name, values: [f.value] });
  }
  return [...byName.values()];
}

function modifications(lines: Line[], changetypeLine: number): LdifModification[] {
  const changes: LdifModification[] = [];
  let current: LdifModification | null = null;
  for (const l of lines) {
    if (l.text === '-') {
      if (!current) throw new LdifParseError(l.line, '"-" without a preceding add:, replace: or delete: line');
      changes.push(current);
      current = null;
      continue;
    }
    const f = field(l);
    if (!current) {
      const operation = f.name.toLowerCase();
      if (operation !== 'add' && operation !== 'replace' && operation !== 'delete') {
        throw new LdifParseError(f.line, `invalid modify operation "${f.name}" (expected add, replace or delete)`);
      }
      const attribute = text(f, `${operation}: attribute`);
      if (!ATTRIBUTE_DESCRIPTION.test(attribute)) throw new LdifParseError(f.line, `invalid attribute description "${attribute}"`);
      current = { operation, attribute: { name: attribute, values: [] } };
      continue;
    }
    if (f.name.toLowerCase() !== current.attribute.name.toLowerCase()) {
      throw new LdifParseError(f.line, `attribute "${f.name}" inside a ${current.operation}: ${current.attribute.name} block (missing "-"?)`);
    }
    current.attribute.values.push(f.value);
  }
  const last = lines.at(-1)?.line ?? changetypeLine;
  if (current) throw new LdifParseError(last, `the ${current.operation}: ${current.attribute.name} block must end with a "-" line`);
  if (changes.length === 0) throw new LdifParseError(changetypeLine, 'changetype modify needs at least one add:, replace: or delete: block');
  for (const c of changes) {
    if (c.operation === 'add' && c.attribute.values.length === 0) {
      throw new LdifParseError(changetypeLine, `add: ${c.attribute.name} needs at least one value`);
    }
  }
  return changes;
}
