/**
 * RFC 4515 search filters. Values are always escaped: Vault builds `(attr=value)` by string
 * concatenation, so a username like `*)(cn=*` widens the search; here it matches literally.
 */

/** Escapes the five characters RFC 4515 reserves in assertion values; UTF-8 passes through. */
export function escapeFilterValue(value: string): string {
  return value.replace(/[*()\\\u0000]/g, (c) => `\\${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

// An attribute description: a descriptor or a numeric OID, optionally with options (`;binary`).
const ATTRIBUTE_RE = /^(?:[A-Za-z][A-Za-z0-9-]*|[0-9]+(?:\.[0-9]+)*)(?:;[A-Za-z0-9-]+)*$/;

export function isValidAttributeName(name: string): boolean {
  return ATTRIBUTE_RE.test(name);
}

export function equalityFilter(attribute: string, value: string): string {
  if (!isValidAttributeName(attribute)) throw new TypeError(`invalid attribute name "${attribute}"`);
  return `(${attribute}=${escapeFilterValue(value)})`;
}

/** AND of the given filters; one filter stays as is. */
export function andFilter(...filters: string[]): string {
  return filters.length === 1 ? filters[0]! : `(&${filters.join('')})`;
}
