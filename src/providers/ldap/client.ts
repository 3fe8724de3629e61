/**
 * The narrow contract the LDAP engine talks to. The real implementation is `ldapts-client.ts`;
 * unit tests may fake it, and every behaviour is proven against slapd in integration tests.
 */
// Adds and modifies take the LDIF model's types: a dynamic role's records and a schema's password change
// (schemas.ts) are the same requests, and schemas.ts then has no reason to import this contract.
import type { LdifAttribute, LdifModification, LdifRecord } from '../../lib/ldif/types.ts';
import type { LdapProviderError } from './errors.ts';
import type { CredentialType, LdapSchemaName } from './schemas.ts';

export type TlsVersionName = 'tls10' | 'tls11' | 'tls12' | 'tls13';

/** Mirrors the engine's `ldap/config` fields (snake_case), already validated and defaulted by the engine. */
export interface LdapConnectionConfig {
  /** One URL or a comma-separated list tried in order on connection errors. */
  url: string;
  binddn: string;
  bindpass: string;
  /**
   * Previous bind passwords tried, in order, when `bindpass` is rejected. Rotate-root puts the old
   * password here for its grace period so a lagging replica does not lock the engine out.
   */
  fallback_bindpass?: readonly string[];
  /** Bind as `<binddn, DN-escaped>@<upndomain>`; the bind entry is then found by userPrincipalName. */
  upndomain?: string;
  /** Seconds. Default 90. */
  request_timeout?: number;
  /** Seconds, deprecated; when set the smaller of this and request_timeout is used for both. */
  connection_timeout?: number;
  starttls?: boolean;
  /** Certificate verification stays on unless this is exactly true. */
  insecure_tls?: boolean;
  /** PEM CA bundle trusted instead of the system store. */
  certificate?: string;
  client_tls_cert?: string;
  client_tls_key?: string;
  tls_min_version?: TlsVersionName;
  tls_max_version?: TlsVersionName;
  schema?: LdapSchemaName;
  credential_type?: CredentialType;
  /** Search base for username lookups; "" searches from the root. */
  userdn?: string;
  /** Attribute matched against a username; default by schema. Matched case-insensitively (LDAP attribute names are). */
  userattr?: string;
  /** When true a username lookup only accepts an entry whose userattr value has the exact same case. */
  case_sensitive_names?: boolean;
}

export interface LdapEntry {
  dn: string;
  /** Attribute names lower-cased; values decoded as UTF-8. */
  attributes: Record<string, string[]>;
}

export interface BindCheck {
  /** The URL of the list that answered. */
  url: string;
  /** True when `bindpass` was refused and a fallback password bound. */
  usedFallback: boolean;
}

/**
 * An entry's change marker as read before a conditional write: the write is sent with the Assertion Control on
 * `(<attribute>=<value>)`, so the directory refuses it (result 122) once anything changed the entry since the read.
 */
export interface WriteGuard {
  attribute: string;
  value: string;
}

export interface AccountRef {
  /** Explicit DN: read at its own location, never re-resolved as a username or UPN. */
  dn?: string;
  username?: string;
}

export type LdifExecMode = 'stop-at-first-error' | 'continue-past-errors';

export interface LdifRecordResult {
  dn: string;
  changetype: LdifRecord['changetype'];
  line: number;
  status: 'ok' | 'already-gone' | 'failed' | 'not-run';
  error?: LdapProviderError;
}

export interface LdifExecResult {
  ok: boolean;
  results: LdifRecordResult[];
  /** Failures in record order, messages naming the request, DN and LDIF line. */
  errors: LdapProviderError[];
}

export interface LdapClient {
  /** Opens a fresh connection and binds with the configured account (current, then fallback passwords). */
  checkBind(): Promise<BindCheck>;
  /** ldapwhoami-style: does a simple bind with these credentials succeed? false on invalidCredentials. */
  authenticate(dn: string, password: string): Promise<boolean>;
  /** Base-object read; undefined when the entry does not exist. */
  findByDn(dn: string, attributes?: string[]): Promise<LdapEntry | undefined>;
  /** `(<userattr>=<escaped username>)` under userdn; undefined for none, input error for several. */
  findByUsername(username: string, attributes?: string[]): Promise<LdapEntry | undefined>;
  /** `dn` when given, else the username search; input error when the account does not exist. */
  resolveAccount(ref: AccountRef): Promise<LdapEntry>;
  /** The bind account's own entry (for rotate-root): by UPN under userdn when upndomain is set, else binddn. */
  findBindEntry(): Promise<LdapEntry>;
  /**
   * The entry's change marker for a conditional setPassword; undefined when the directory does not advertise the
   * Assertion Control in its rootDSE or the entry has no marker (the write is then unconditional).
   */
  writeGuard(dn: string): Promise<WriteGuard | undefined>;
  /**
   * Writes a password with the schema's modify request, conditional on `guard` when given (result 122 when the entry
   * changed since the guard was read). Never re-sent: a connection lost after the request left is an
   * UnknownWriteOutcomeError, the connection is closed, and the write may still land.
   */
  setPassword(dn: string, password: string, guard?: WriteGuard): Promise<void>;
  add(dn: string, attributes: LdifAttribute[]): Promise<void>;
  modify(dn: string, changes: LdifModification[]): Promise<void>;
  delete(dn: string): Promise<void>;
  executeLdif(records: readonly LdifRecord[], mode: LdifExecMode): Promise<LdifExecResult>;
  /** Unbinds the shared connection; the client may be used again (it reconnects). */
  close(): Promise<void>;
}
