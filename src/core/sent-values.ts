/**
 * The last line behind messages that name fields, not values (errors.ts `invalidField`): an error answer in which a
 * string the request sent appears says which field it was instead. A directory's or a library's message may quote
 * what it was given (a bind DN, a URL); a secret sent in the wrong field would otherwise come back in the answer,
 * and from there reach the bootstrap's log and report and every audit entry's error.
 */

/**
 * Which sent strings are replaced: at least 8 characters, and a digit in them or at least 20 characters. Words a
 * message names as its rule ("nothing", "moved", the reserved policy "response-wrapping") are sent as values too,
 * and replacing them would shred the message; a password, a token or a pasted key is past this bar.
 */
const MIN_LENGTH = 8;
const MIN_LENGTH_WITHOUT_DIGIT = 20;
const mayBeSecret = (s: string) => s.length >= MIN_LENGTH && (s.length >= MIN_LENGTH_WITHOUT_DIGIT || /\d/.test(s));
/** Bounds the work per answer, as audit hashing is bounded. */
const MAX_VALUES = 10_000;
const MAX_DEPTH = 64;

/** Every string in `value` that may be a secret, at any depth (bounded), with the top-level key it was under. */
export function sentStrings(value: unknown, into = new Map<string, string>(), key = '', budget = { left: MAX_VALUES }, depth = 0): Map<string, string> {
  if (--budget.left < 0 || depth > MAX_DEPTH) return into;
  if (typeof value === 'string') {
    if (mayBeSecret(value) && !into.has(value)) into.set(value, key);
  } else if (Array.isArray(value)) {
    for (const v of value) sentStrings(v, into, key, budget, depth + 1);
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) sentStrings(v, into, depth === 0 ? k : key, budget, depth + 1);
  }
  return into;
}

/** `messages` with every sent string replaced by a mention of its field, longest first. */
export function withoutSentValues(messages: string[], ...sent: unknown[]): string[] {
  const values = new Map<string, string>();
  for (const s of sent) sentStrings(s, values);
  if (values.size === 0) return messages;
  const ordered = [...values].sort(([a], [b]) => b.length - a.length);
  return messages.map((m) => {
    let out = m;
    for (const [value, field] of ordered) if (out.includes(value)) out = out.replaceAll(value, `<the value of "${field}">`);
    return out;
  });
}
