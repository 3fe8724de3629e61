/**
 * The bounded history of bind passwords the bind account may still have (config-store.ts `unconfirmed_bind_passwords`):
 * a rotate-root whose directory write is late, or never answered, can leave the directory with a password that no
 * longer is the config's `bindpass`. Each is kept as a bind fallback until rotate-root.ts verifies a bind with
 * `bindpass`; past the bound the oldest are dropped (each took a rotate-root that the directory answered since).
 */
export const MAX_UNCONFIRMED_BIND_PASSWORDS = 8;

/** The passwords in order (newest first), without blanks, repeats and `current`, at most `max`. */
export function bindHistory(passwords: ReadonlyArray<string | undefined>, current: string, max = MAX_UNCONFIRMED_BIND_PASSWORDS): string[] {
  const out: string[] = [];
  for (const p of passwords) if (p && p !== current && !out.includes(p)) out.push(p);
  return out.slice(0, max);
}
