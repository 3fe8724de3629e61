/**
 * Replacing known values (secrets, a stored config's identities, a bootstrap reference's resolved text) in a message
 * by a name. One rule for every caller (docs/security.md, "Short secrets"): a value of at least MIN_SUBSTRING_VALUE
 * characters is replaced wherever it appears; a shorter one only where it stands alone, between characters that are
 * not letters or digits. Replacing a one-letter password inside words turned "dc=example" into
 * "dc=e[redacted]ample": that hides nothing (the letter is in every message) and shreds the text.
 */
export const MIN_SUBSTRING_VALUE = 8;

const SYNTAX = /[\\^$.*+?()[\]{}|/]/g;

/** `text` with each value replaced by its name, longest first (one value inside another is fully hidden). */
export function replaceValues(text: string, named: Iterable<readonly [value: string, name: string]>): string {
  const pairs = new Map<string, string>();
  for (const [value, name] of named) if (value && !pairs.has(value)) pairs.set(value, name);
  let out = text;
  for (const [value, name] of [...pairs].sort(([a], [b]) => b.length - a.length)) {
    if (value.length >= MIN_SUBSTRING_VALUE) out = out.split(value).join(name);
    else out = out.replace(new RegExp(`(?<![\\p{L}\\p{N}])${value.replace(SYNTAX, '\\$&')}(?![\\p{L}\\p{N}])`, 'gu'), () => name);
  }
  return out;
}
