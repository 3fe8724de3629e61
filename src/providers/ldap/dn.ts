/**
 * RFC 4514 distinguished names. DNs are parsed and compared as DNs, never as strings: Vault's
 * string handling turned `cn=Smith\, John` into a filter error (vault#25249) and compared DNs
 * that differ only in case or spacing as different accounts.
 */

export interface Ava {
  type: string;
  value: string;
}
/** One RDN; several AVAs when joined with `+` (multi-valued RDN). */
export type Rdn = Ava[];

export class DnSyntaxError extends Error {
  constructor(dn: string, reason: string) {
    super(`invalid DN "${dn}": ${reason}`);
    this.name = 'DnSyntaxError';
  }
}

/** Escapes an attribute value for use inside a DN string. */
export function escapeDnValue(value: string): string {
  let out = value.replace(/[\\"+,;<>\u0000]/g, (c) => (c === '\u0000' ? '\\00' : `\\${c}`));
  if (out.startsWith(' ') || out.startsWith('#')) out = `\\${out}`;
  if (out.endsWith(' ') && !out.endsWith('\\ ')) out = `${out.slice(0, -1)}\\ `;
  return out;
}

const TYPE_RE = /^(?:[A-Za-z][A-Za-z0-9-]*|[0-9]+(?:\.[0-9]+)*)$/;
const HEX2 = /^[0-9A-Fa-f]{2}$/;

/** Parses a DN string into RDNs, first (leftmost, most specific) RDN first. "" is the root DSE. */
export function parseDn(dn: string): Rdn[] {
  const rdns: Rdn[] = [];
  if (dn.trim() === '') return rdns;
  let i = 0;
  let rdn: Rdn = [];
  const fail = (reason: string): never => { throw new DnSyntaxError(dn, reason); };
  while (i <= dn.length) {
    while (dn[i] === ' ') i++;
    const eq = dn.indexOf('=', i);
    if (eq < 0) fail(`missing "=" after position ${i}`);
    const type = dn.slice(i, eq).trim();
    if (!TYPE_RE.test(type)) fail(`bad attribute type "${type}"`);
    i = eq + 1;
    let value: string;
    if (dn[i] === '#') {
      // BER-encoded value: kept in its hex form, it has no string representation to unescape.
      const m = /^#(?:[0-9A-Fa-f]{2})+/.exec(dn.slice(i));
      if (!m) fail('bad hex value');
      value = m![0];
      i += value.length;
      while (dn[i] === ' ') i++;
    } else {
      const bytes: number[] = [];
      let lastEscapedLen = 0; // bytes up to and including the last escaped char; trailing spaces before it are kept
      while (i < dn.length && dn[i] !== ',' && dn[i] !== '+') {
        const c = dn[i]!;
        if (c === '\\') {
          const next = dn.slice(i + 1, i + 3);
          if (HEX2.test(next)) {
            bytes.push(parseInt(next, 16));
            i += 3;
          } else if (i + 1 < dn.length) {
            bytes.push(...Buffer.from(dn[i + 1]!, 'utf8'));
            i += 2;
          } else {
            fail('dangling backslash');
          }
          lastEscapedLen = bytes.length;
          continue;
        }
        if (c === '"' || c === ';' || c === '<' || c === '>' || c === '\u0000') fail(`unescaped "${c}" in a value`);
        bytes.push(...Buffer.from(c, 'utf8'));
        i++;
      }
      let end = bytes.length;
      while (end > lastEscapedLen && bytes[end - 1] === 0x20) end--;
      value = Buffer.from(bytes.slice(0, end)).toString('utf8');
    }
    rdn.push({ type, value });
    if (i >= dn.length) {
      rdns.push(rdn);
      break;
    }
    if (dn[i] === ',') {
      rdns.push(rdn);
      rdn = [];
    }
    i++;
    if (i >= dn.length) fail('ends with a separator');
  }
  return rdns;
}

function formatValue(value: string): string {
  return /^#(?:[0-9A-Fa-f]{2})+$/.test(value) ? value : escapeDnValue(value);
}

export function formatDn(rdns: readonly Rdn[]): string {
  return rdns.map((rdn) => rdn.map((a) => `${a.type}=${formatValue(a.value)}`).join('+')).join(',');
}

export function isValidDn(dn: string): boolean {
  try {
    parseDn(dn);
    return true;
  } catch {
    return false;
  }
}

/**
 * Canonical form for comparing DNs: types and values lower-cased (the naming attributes in use
 * — cn, uid, ou, dc — match case-insensitively), AVAs of a multi-valued RDN sorted, spacing
 * and escaping normalised.
 */
export function normalizeDn(dn: string): string {
  const rdns = parseDn(dn).map((rdn) =>
    rdn.map((a) => ({ type: a.type.toLowerCase(), value: a.value.toLowerCase() }))
      .sort((x, y) => (x.type + '=' + x.value < y.type + '=' + y.value ? -1 : 1)));
  return formatDn(rdns);
}

export function dnEquals(a: string, b: string): boolean {
  return normalizeDn(a) === normalizeDn(b);
}

/** True when `dn` is `base` or below it (compared RDN by RDN, so an escaped comma cannot fake a parent). */
export function isDnWithin(dn: string, base: string): boolean {
  const d = parseDn(normalizeDn(dn)).map((r) => formatDn([r]));
  const b = parseDn(normalizeDn(base)).map((r) => formatDn([r]));
  if (b.length > d.length) return false;
  const offset = d.length - b.length;
  return b.every((rdn, k) => d[offset + k] === rdn);
}
