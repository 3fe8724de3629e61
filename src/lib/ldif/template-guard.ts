// Keeps data rendered into an LDIF template from changing the LDIF's structure.
//
// Threat: template text is the operator's; the data is not (a token's display name, a role name,
// a generated username or password). Vault inserts values raw, so a display name such as
// "x\ndn: cn=admin,..." or "x\r\n changetype: delete" can add attributes or whole records.
//
// Approach: the template engine hands every printed {{action}} to `ldifActionGuard` together with
// the text already on its output line; the guard refuses (never rewrites) a value that could
// change how that line is read. Rules, from RFC 2849's line grammar:
//   1. No CR, LF or NUL anywhere. So every line break in the output is one the template wrote: the
//      number and order of lines, and thus blank-line record separators, belong to the template.
//   2. At the start of a line, no value that is empty (the line could become a record separator) or
//      that begins with " " (a folded continuation of the previous line), "#" (a comment) or "-"
//      (a modify separator).
//   3. Before the line's first colon (the attribute-name position), no ":" — data cannot choose
//      where the name ends and the value begins, so it cannot turn a line into `changetype:` etc.
//   4. Directly after a colon (`cn:{{.X}}`), no leading ":" or "<", which would switch the value to
//      base64 or to a URL.
// With these, each output line has the kind (record separator, comment, continuation, separator,
// attribute line) and attribute/value split that the template text gave it; data can only fill in
// characters of a value (or of an attribute name the operator left open). Rejection is a 400 for
// the caller; the message names the template action, never the value (it may be a password).
// Not covered here: RFC 4514 escaping of values placed inside a DN, which is a DN concern.

import type { ActionContext, Template } from '../gotemplate/index.ts';
import { parseLdif } from './parse.ts';
import type { LdifRecord } from './types.ts';

export class LdifInjectionError extends Error {
  /** The template action whose value was refused, e.g. `.DisplayName`. */
  action: string;

  constructor(action: string, rule: string) {
    super(`LDIF template value {{${action}}} ${rule}`);
    this.name = 'LdifInjectionError';
    this.action = action;
  }
}

export function ldifActionGuard(printed: string, { action, lineBefore }: ActionContext): string {
  if (/[\r\n\0]/.test(printed)) throw new LdifInjectionError(action, 'contains a line break or NUL character');
  if (lineBefore === '') {
    if (printed === '') throw new LdifInjectionError(action, 'is empty at the start of a line');
    if (/^[ #-]/.test(printed)) throw new LdifInjectionError(action, `starts a line with "${printed[0]}"`);
  }
  if (!lineBefore.includes(':') && printed.includes(':')) {
    throw new LdifInjectionError(action, 'contains ":" in an attribute name');
  }
  if (lineBefore.endsWith(':') && /^[:<]/.test(printed)) {
    throw new LdifInjectionError(action, `starts a value with "${printed[0]}"`);
  }
  return printed;
}

/** Renders an LDIF template with the guard and parses the result: the one safe path to records. */
export function renderLdif(template: Template, data: unknown): LdifRecord[] {
  return parseLdif(template.execute(data, { filterAction: ldifActionGuard }));
}
