/**
 * One error type for everything the LDAP provider throws. `kind` says whose fault it is, which is
 * what the engine needs to answer 502 (the directory or the network) or 400 (what the caller sent or
 * configured). Messages are scrubbed of every password the failing call knew about.
 */
import { StrongroomError } from '../../core/errors.ts';
import { replaceValues } from '../../lib/redact.ts';

export type LdapErrorKind = 'connection' | 'upstream' | 'input';

export class LdapProviderError extends StrongroomError {
  readonly kind: LdapErrorKind;
  /** LDAP result code when the server answered, e.g. 32 noSuchObject, 49 invalidCredentials. */
  readonly ldapCode: number | undefined;
  /** The cause without the operation context, for callers that add their own (already scrubbed). */
  readonly detail: string;
  constructor(kind: LdapErrorKind, message: string, ldapCode?: number, detail?: string) {
    super(kind === 'input' ? 400 : 502, message);
    this.name = 'LdapProviderError';
    this.kind = kind;
    this.ldapCode = ldapCode;
    this.detail = detail ?? message;
  }
}

/**
 * A password write whose request may have reached the directory but whose answer never came (a timeout, the
 * connection lost after sending). It is never re-sent: the first request may still land, later than anything sent
 * after it. The connection is closed; the engine treats the write as possibly applied until a bind proves otherwise.
 */
export class UnknownWriteOutcomeError extends LdapProviderError {
  constructor(message: string, detail: string) {
    super('connection', `${message} (the request may still reach the directory: its outcome is unknown)`, undefined, detail);
    this.name = 'UnknownWriteOutcomeError';
  }
}

/**
 * Result codes that describe the request rather than the server: a missing or duplicate entry,
 * a schema violation, a malformed DN. Everything else (bind failures, busy, unwilling, access
 * rights of the bind account) is the directory's side.
 */
const INPUT_CODES = new Set([16, 17, 18, 19, 20, 21, 32, 34, 64, 65, 66, 67, 68, 69]);

export const LDAP_RESULT_NAMES: Readonly<Record<number, string>> = {
  1: 'operationsError', 2: 'protocolError', 3: 'timeLimitExceeded', 4: 'sizeLimitExceeded',
  7: 'authMethodNotSupported', 8: 'strongerAuthRequired', 11: 'adminLimitExceeded',
  13: 'confidentialityRequired', 16: 'noSuchAttribute', 17: 'undefinedAttributeType',
  18: 'inappropriateMatching', 19: 'constraintViolation', 20: 'attributeOrValueExists',
  21: 'invalidAttributeSyntax', 32: 'noSuchObject', 34: 'invalidDNSyntax', 48: 'inappropriateAuthentication',
  49: 'invalidCredentials', 50: 'insufficientAccessRights', 51: 'busy', 52: 'unavailable',
  53: 'unwillingToPerform', 54: 'loopDetect', 64: 'namingViolation', 65: 'objectClassViolation',
  66: 'notAllowedOnNonLeaf', 67: 'notAllowedOnRDN', 68: 'entryAlreadyExists', 69: 'objectClassModsProhibited',
  80: 'other', 122: 'assertionFailed',
};

/** A value a message may hold that is named rather than quoted: a stored config's bind DN is "the configured binddn". */
export type NamedValue = readonly [value: string, name: string];

/** Every secret replaced by "[redacted]" and every named value by its name (lib/redact.ts says how short ones are). */
export function scrub(text: string, secrets: ReadonlyArray<string | NamedValue | undefined>): string {
  return replaceValues(text, secrets.flatMap((s): NamedValue[] => (typeof s === 'string' ? [[s, '[redacted]']] : s ? [s] : [])));
}

export function ldapResultCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** Anything without an LDAP result code (socket, DNS, TLS handshake, timeout) is a connection problem. */
export function isConnectionError(err: unknown): boolean {
  if (err instanceof LdapProviderError) return err.kind === 'connection';
  return ldapResultCode(err) === undefined;
}

/** Socket and DNS failures in words an operator acts on (which side is down), not Node's error codes alone. */
const CONNECT_REASONS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused', ENOTFOUND: 'host not found', EAI_AGAIN: 'host name lookup failed (temporary)',
  ETIMEDOUT: 'timed out', ECONNRESET: 'connection reset', EHOSTUNREACH: 'host unreachable', ENETUNREACH: 'network unreachable',
};

/**
 * "cannot connect to <url>: <reason>": a directory that could not be reached is never reported as a bind (password)
 * failure, which would send the operator to check credentials.
 */
export function connectFailure(url: string, err: unknown, secrets: ReadonlyArray<string | NamedValue | undefined>): string {
  const sysCode = (err as { code?: unknown } | null)?.code;
  const reason = typeof sysCode === 'string' && CONNECT_REASONS[sysCode] ? CONNECT_REASONS[sysCode] : err instanceof LdapProviderError ? err.detail : describe(err);
  return scrub(`cannot connect to ${url}: ${reason}`, secrets);
}

function describe(err: unknown): string {
  const code = ldapResultCode(err);
  const raw = err instanceof Error ? err.message : String(err);
  // ldapts puts the server's diagnostic message in `message`; keep it to one line.
  const msg = raw.replace(/\s+/g, ' ').trim();
  if (code === undefined) {
    const sysCode = (err as { code?: unknown } | null)?.code;
    return typeof sysCode === 'string' && !msg.includes(sysCode) ? `${msg} (${sysCode})` : msg;
  }
  return `LDAP result code ${code} "${LDAP_RESULT_NAMES[code] ?? 'unknown'}": ${msg}`;
}

export function toProviderError(err: unknown, context: string, secrets: ReadonlyArray<string | NamedValue | undefined>): LdapProviderError {
  if (err instanceof LdapProviderError) {
    return new LdapProviderError(err.kind, scrub(`${context}: ${err.message}`, secrets), err.ldapCode, scrub(err.detail, secrets));
  }
  const code = ldapResultCode(err);
  const kind: LdapErrorKind = code === undefined ? 'connection' : INPUT_CODES.has(code) ? 'input' : 'upstream';
  const detail = scrub(describe(err), secrets);
  return new LdapProviderError(kind, scrub(`${context}: ${detail}`, secrets), code, detail);
}
