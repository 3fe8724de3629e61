// Templates of dynamic roles: the username template and the creation/deletion/rollback LDIF.
//
// Everything that turns caller-influenced data (a token's display name, a role name, a generated
// username or password) into LDIF goes through `renderLdifTemplate`, whose action guard refuses values that
// could add lines, records or attributes. Usernames get one more rule here: they usually sit inside a
// DN (`dn: cn={{.Username}},ou=users,...`), so characters that are special in RFC 4514 DNs are refused
// rather than letting a display name such as `x,ou=admins` move the account to another branch.
//
// Templates render synchronously on the event loop, at role write (with sample data) and on every
// creds request, so each runs within the gotemplate budget (steps, output, nesting) and its text has
// a maximum length; going past any of them is a 400 naming the field, never a stalled server.

import { BadRequestError } from '../../core/errors.ts';
import { parseTemplate, TemplateBudgetError, TemplateExecError, TemplateParseError, vaultFuncs, type Template } from '../../lib/gotemplate/index.ts';
import { ldifActionGuard, LdifInjectionError, LdifParseError, parseLdif, type LdifRecord } from '../../lib/ldif/index.ts';

export const DEFAULT_USERNAME_TEMPLATE = 'v_{{.DisplayName}}_{{.RoleName}}_{{random 10}}_{{unix_time}}';

export const LDIF_FIELDS = ['creation_ldif', 'deletion_ldif', 'rollback_ldif'] as const;
export type LdifField = (typeof LDIF_FIELDS)[number];

/** Longest template texts accepted: several times the largest real ones (a 4 KiB Active Directory LDIF). */
export const LDIF_TEMPLATE_MAX_LENGTH = 16 * 1024;
export const USERNAME_TEMPLATE_MAX_LENGTH = 1024;

/** The data LDIF templates see, named as in Vault so existing templates keep working. */
export interface LdifTemplateData {
  Username: string;
  Password: string;
  RoleName: string;
  DisplayName: string;
  IssueTime: string;
  IssueTimeSeconds: number;
  ExpirationTime: string;
  ExpirationTimeSeconds: number;
}

export interface UsernameTemplateData {
  DisplayName: string;
  RoleName: string;
}

/**
 * Vault's rule: a value that decodes as standard, padded base64 is taken to be base64 (line breaks in
 * it are ignored). LDIF text never qualifies because ": " is not in the alphabet. On top of Vault,
 * the decoded bytes must be UTF-8 text, so a short plain word that happens to be valid base64 (say
 * "abcd") is not turned into binary noise.
 */
export function decodeLdifInput(value: string): string {
  const compact = value.replace(/[\r\n]/g, '');
  if (compact === '' || compact.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(compact)) return value;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(compact, 'base64'));
  } catch {
    return value;
  }
}

/** Compiled templates kept per DynamicTemplates: roles are few, and every credential request renders theirs. */
const CACHE_LIMIT = 256;

/**
 * Compiles templates with the Vault functions, reading time from the engine's clock. A compiled template
 * is immutable, so one compiled from the same text (and field, which names it in errors) is reused.
 */
export class DynamicTemplates {
  readonly #ldifFuncs;
  readonly #usernameFuncs;
  readonly #compiled = new Map<string, Template>();

  constructor(now: () => number) {
    const clockNow = () => new Date(now());
    this.#ldifFuncs = vaultFuncs({ now: clockNow, includeUtf16le: true });
    this.#usernameFuncs = vaultFuncs({ now: clockNow, includeUtf16le: false });
  }

  /** Parses an LDIF template; a syntax error, or a text too long or too deeply nested, is a 400 naming the field, line and column. */
  ldif(field: string, text: string): Template {
    return this.#cached(field, text, this.#ldifFuncs, LDIF_TEMPLATE_MAX_LENGTH);
  }

  username(text: string): Template {
    return this.#cached('username_template', text, this.#usernameFuncs, USERNAME_TEMPLATE_MAX_LENGTH);
  }

  #cached(field: string, text: string, funcs: ReturnType<typeof vaultFuncs>, maxLength: number): Template {
    const key = `${field}\n${text}`;
    let template = this.#compiled.get(key);
    if (!template) {
      // A text that does not parse throws here and is never cached, so its 400 is raised every time.
      template = compile(field, text, funcs, maxLength);
      if (this.#compiled.size >= CACHE_LIMIT) this.#compiled.delete(this.#compiled.keys().next().value!);
      this.#compiled.set(key, template);
    }
    return template;
  }

  /** Renders the username; a result that is empty or unsafe in a DN or LDIF line is a 400. */
  renderUsername(template: Template, data: UsernameTemplateData): string {
    const username = execute('username_template', () => template.execute(data));
    checkUsername(username);
    return username;
  }
}

export interface RenderedLdif {
  text: string;
  records: LdifRecord[];
}

/** Renders LDIF through the injection guard and parses it; every failure is a 400 naming the field. */
export function renderLdifTemplate(field: string, template: Template, data: LdifTemplateData): RenderedLdif {
  return execute(field, () => {
    const text = template.execute(data, { filterAction: ldifActionGuard });
    return { text, records: parseLdif(text) };
  });
}

function compile(field: string, text: string, funcs: ReturnType<typeof vaultFuncs>, maxSourceLength: number): Template {
  try {
    return parseTemplate(text, { name: field, funcs, limits: { maxSourceLength } });
  } catch (err) {
    if (err instanceof TemplateParseError) {
      throw new BadRequestError(`invalid value for field "${field}": template error at line ${err.line}, column ${err.col}: ${err.reason}`);
    }
    if (err instanceof TemplateBudgetError) throw budgetExceeded(field, err);
    throw err;
  }
}

/**
 * Too long or too deeply nested text, or a render past its budget. A render at role write uses the
 * sample data; on a creds request it means real data (a long display name, say) took a template that
 * passed with the sample past its budget, and the role's field is still the cause.
 */
function budgetExceeded(field: string, err: TemplateBudgetError): BadRequestError {
  return new BadRequestError(`invalid value for field "${field}": template limit reached at line ${err.line}, column ${err.col}: ${err.reason}`);
}

function execute<T>(field: string, run: () => T): T {
  try {
    return run();
  } catch (err) {
    // Messages of these errors name template actions, limits and LDIF lines, never the data values.
    if (err instanceof TemplateExecError) throw new BadRequestError(`invalid value for field "${field}": ${err.message}`);
    if (err instanceof LdifInjectionError) throw new BadRequestError(`invalid value for field "${field}": ${err.message}`);
    if (err instanceof LdifParseError) throw new BadRequestError(`invalid value for field "${field}": rendered LDIF is invalid: ${err.message}`);
    if (err instanceof TemplateBudgetError) throw budgetExceeded(field, err);
    throw err;
  }
}

const DN_SPECIAL = /[,+"\\<>;=\0\r\n]/;

function checkUsername(username: string): void {
  if (username === '') throw new BadRequestError('invalid value for field "username_template": the generated username is empty');
  const special = DN_SPECIAL.exec(username);
  if (special) {
    const shown = JSON.stringify(special[0]);
    throw new BadRequestError(`invalid value for field "username_template": the generated username contains ${shown}, which is special in a DN (strip it with replace, e.g. {{.DisplayName | replace ${shown} "_"}})`);
  }
  if (/^[ #]|[ ]$/.test(username)) {
    throw new BadRequestError('invalid value for field "username_template": the generated username starts with a space or "#", or ends with a space, which is special in a DN');
  }
}
