/**
 * RFC 4514 distinguished names. DNs are parsed and compared as DNs, never as strings: Vault's
 * string handling turned `cn=Smith\, John` into a filter error (vault#25249) and compared DNs
 * that differ only in case or spacing as different accounts.
 */
import { setBounded } from '../../core/bounded-map.ts';

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
    // Spaces after "=" are not part of the value (directories accept and drop them, as they do before ",").
    while (dn[i] === ' ') i++;
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
        // An ASCII character is its own byte: a Buffer per character made parsing the costliest part of a check.
        const code = dn.charCodeAt(i);
        if (code < 0x80) bytes.push(code);
        else bytes.push(...Buffer.from(c, 'utf8'));
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

const HEX_VALUE = /^#(?:[0-9A-Fa-f]{2})+$/;

function formatValue(value: string): string {
  return HEX_VALUE.test(value) ? value : escapeDnValue(value);
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
 * Attribute types a DN may name by a long name or an OID instead of the short name (RFC 4519 and the
 * COSINE types directories put in DNs); directories resolve them through their schema, so
 * `2.5.4.3=x` and `commonName=x` name the entry `cn=x`.
 */
const TYPE_ALIASES: Record<string, string> = Object.fromEntries(([
  ['cn', 'commonname', '2.5.4.3'], ['sn', 'surname', '2.5.4.4'], ['serialnumber', '2.5.4.5'], ['c', 'countryname', '2.5.4.6'],
  ['l', 'localityname', '2.5.4.7'], ['st', 'stateorprovincename', '2.5.4.8'], ['street', 'streetaddress', '2.5.4.9'],
  ['o', 'organizationname', '2.5.4.10'], ['ou', 'organizationalunitname', '2.5.4.11'], ['title', '2.5.4.12'],
  ['name', '2.5.4.41'], ['givenname', 'gn', '2.5.4.42'], ['initials', '2.5.4.43'], ['generationqualifier', '2.5.4.44'],
  ['dnqualifier', '2.5.4.46'], ['dc', 'domaincomponent', '0.9.2342.19200300.100.1.25'], ['uid', 'userid', '0.9.2342.19200300.100.1.1'],
  ['mail', 'rfc822mailbox', '0.9.2342.19200300.100.1.3'],
] as string[][]).flatMap(([short, ...aliases]) => [short, ...aliases].map((name) => [name, short!])));

/**
 * A string value prepared as directories match names (RFC 4518 caseIgnoreMatch, as slapd does it):
 * compatibility characters folded (NFKC: a full-width "ｅ" is "e"), case ignored (simple mappings: "İ" is
 * "i", a final "ς" is "σ"), and white space insignificant (any run of it one space, none at either end,
 * escaped or not).
 */
function prepareValue(value: string): string {
  return value.normalize('NFKC').replace(/\u0130/g, 'i').toLowerCase().replace(/\u03c2/g, '\u03c3').replace(/\s+/gu, ' ').trim();
}

/**
 * Canonical form for comparing DNs: attribute types by their short name, string values prepared as
 * directories match them (prepareValue; the naming attributes in use — cn, uid, ou, dc — match
 * case-insensitively), BER (#hex) values lower-cased, AVAs of a multi-valued RDN sorted, spacing and
 * escaping normalised.
 */
export function normalizeDn(dn: string): string {
  const known = normalized.get(dn);
  if (known !== undefined) return known;
  const rdns = parseDn(dn).map((rdn) =>
    rdn.map((a) => {
      const type = a.type.toLowerCase();
      return { type: TYPE_ALIASES[type] ?? type, value: HEX_VALUE.test(a.value) ? a.value.toLowerCase() : prepareValue(a.value) };
    }).sort((x, y) => (x.type + '=' + x.value < y.type + '=' + y.value ? -1 : 1)));
  const out = formatDn(rdns);
  setBounded(normalized, NORMALIZED_LIMIT, dn, out);
  return out;
}

/**
 * DNs normalised lately, with their forms (~9 µs each to compute): the bind account's and a role's group DN are
 * compared again at every credential request.
 */
const normalized = new Map<string, string>();
const NORMALIZED_LIMIT = 1024;

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
