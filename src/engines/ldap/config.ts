/**
 * `ldap/config`: the connection settings, their typed storage helpers, and the state every part of
 * the engine shares (the cached directory client, locks, the managed-account registry).
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import { BadRequestError, ConflictError, invalidField } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendContext, type PathDefinition, type SecretType } from '../../core/framework.ts';
import { randomBase62 } from '../../core/ids.ts';
import type { KeyedLock } from '../../core/keyed-lock.ts';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type StorageView } from '../../core/storage/view.ts';
import type { LdapClient, LdapConnectionConfig, TlsVersionName } from '../../providers/ldap/client.ts';
import { dnEquals, isValidDn } from '../../providers/ldap/dn.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import { isValidAttributeName } from '../../providers/ldap/filter.ts';
import { parseUrlList } from '../../providers/ldap/ldapts-client.ts';
import { LDAP_SCHEMAS, defaultUserAttr, isLdapSchema } from '../../providers/ldap/schemas.ts';
import { accountKeys, describeOwner, type AccountIdentity, type ManagedAccounts } from './accounts.ts';
import { applyScheduleFields, rootScheduleFields, rootScheduleShape, rootScheduleView } from '../root-rotation.ts';
import { bindHistory } from './bind-history.ts';
import type { RotationScheduler } from './scheduler.ts';

export const CONFIG_KEY = 'config';
/** Write-ahead entry of an unfinished rotate-root (see rotate-root.ts). */
export const ROOT_WAL_KEY = 'wal/root';
/** How long binds fall back to the previous bind password after rotate-root (replication lag). */
export const ROOT_GRACE_MS = 10 * 60_000;

const TLS_NAMES = ['tls10', 'tls11', 'tls12', 'tls13'] as const;
const DEFAULT_URL = 'ldap://127.0.0.1';
const DEFAULT_REQUEST_TIMEOUT = 90;
const DEFAULT_CONNECTION_TIMEOUT = 30;

/**
 * Drift verification binds per second: a handful of simple binds a second is background noise for any directory
 * (a single OpenLDAP or AD domain controller serves thousands), yet 10,000 accounts are still verified within an hour.
 */
export const DEFAULT_VERIFY_RATE = 5;
export const MAX_VERIFY_RATE = 100;
/** A drifted account is bound with a refused password once per round: shorter rounds would feed lockout policies. */
export const MIN_VERIFY_PERIOD = 60;
export const DRIFT_ACTIONS = ['report', 'rotate'] as const;

const storedConfigSchema = z.object({
  url: z.string(),
  binddn: z.string(),
  bindpass: z.string(),
  userdn: z.string().default(''),
  userattr: z.string().default(''),
  upndomain: z.string().default(''),
  schema: z.enum(LDAP_SCHEMAS).default('openldap'),
  credential_type: z.enum(['password', 'phrase']).default('password'),
  password_policy: z.string().default(''),
  /** 0 = default generator length. */
  length: z.number().int().default(0),
  request_timeout: z.number().int().default(DEFAULT_REQUEST_TIMEOUT),
  /** 0 = not set by the operator (reads back as 30 but does not shorten request_timeout). */
  connection_timeout: z.number().int().default(0),
  starttls: z.boolean().default(false),
  insecure_tls: z.boolean().default(false),
  certificate: z.string().default(''),
  client_tls_cert: z.string().default(''),
  client_tls_key: z.string().default(''),
  tls_min_version: z.enum(TLS_NAMES).default('tls12'),
  tls_max_version: z.enum(TLS_NAMES).default('tls13'),
  case_sensitive_names: z.boolean().default(false),
  skip_static_role_import_rotation: z.boolean().default(false),
  /** The bind password before the last rotate-root: a fallback until the grace is over and bindpass verified (rotate-root.ts). */
  last_bind_password: z.string().default(''),
  /**
   * Older bind passwords of this account that a rotate-root WAL or the config held and that a late directory write may
   * still put back: bind fallbacks, newest first, bounded (bind-history.ts), erased with last_bind_password.
   */
  unconfirmed_bind_passwords: z.array(z.string()).default([]),
  /** Unix ms of the last rotate-root; 0 = never. */
  last_bind_password_rotation: z.number().default(0),
  /** Automated rotation of the bind password and its state (root-rotation.ts). */
  ...rootScheduleShape,
  /** Seconds between drift verification rounds (drift.ts); 0 = off. */
  verify_period: z.number().int().default(0),
  drift_action: z.enum(DRIFT_ACTIONS).default('report'),
  verify_rate: z.number().int().default(DEFAULT_VERIFY_RATE),
});

export type LdapConfig = z.infer<typeof storedConfigSchema>;

/** Fields never returned by a read and kept on update when not sent. */
export const CONFIG_SECRET_FIELDS = ['bindpass', 'client_tls_key', 'last_bind_password'] as const;

export async function readConfig(storage: StorageView): Promise<LdapConfig | undefined> {
  return (await readConfigSnapshot(storage))?.config;
}

/** The config with the bytes it was read from, for a write guarded on the config as read. */
export async function readConfigSnapshot(storage: StorageView): Promise<{ config: LdapConfig; raw: Buffer } | undefined> {
  const raw = await storage.get(CONFIG_KEY);
  return raw && { config: storedConfigSchema.parse(JSON.parse(raw.toString('utf8'))), raw };
}

export async function writeConfig(storage: StorageView, config: LdapConfig): Promise<void> {
  await storage.transaction([putConfigOp(config)]);
}

export function putConfigOp(config: LdapConfig): StorageOp {
  return { type: 'put', key: CONFIG_KEY, value: jsonBytes(storedConfigSchema.parse(config)) };
}

/** The password of a stored rotate-root WAL (read here without rotation.ts, which imports this file). */
function walPassword(walRaw: Buffer | undefined): string | undefined {
  return walRaw && (JSON.parse(walRaw.toString('utf8')) as { new_password?: string }).new_password;
}

export function missingConfigError(): BadRequestError {
  return new BadRequestError('missing LDAP configuration: write ldap/config first');
}

// ---- shared engine state ---------------------------------------------------------------------------

/** What one part of the engine (a path file) contributes to the backend. */
export interface LdapEnginePart {
  paths: PathDefinition[];
  secrets?: SecretType[];
  /** On every node at mount and start: storage-only preparation any node may repeat. */
  initialize?(): Promise<void>;
  /** On the cluster's leader, when it takes over (or at mount on it): finishing interrupted work, scheduling. */
  lead?(): Promise<void>;
  /** When this node stops leading (and at cleanup): stops what lead started and waits for it. */
  stepDown?(): Promise<void>;
  cleanup?(): Promise<void>;
}

/** Something that must not outlive the config; DELETE config is refused while any exists. */
export interface ConfigDependent {
  /** Plural noun for the message, e.g. "static roles". */
  what: string;
  /** Names of the objects that still need the config (empty when none). */
  names(): Promise<string[]>;
  /** What the operator does to them first; "delete" unless said. */
  remedy?: 'delete' | 'revoke';
}

export interface LdapEngineOptions {
  createClient: (config: LdapConnectionConfig) => LdapClient;
  /** Parallel directory password changes run by the scheduler. */
  rotationConcurrency: number;
  /** Retry delays after a failed scheduled rotation: base * 2^(n-1), capped, with jitter. */
  retryBaseMs: number;
  retryMaxMs: number;
  /** Check-outs that may wait on one library set at once, across the cluster. */
  libraryMaxWaiters: number;
}

/** State shared by every part of one mount of the engine. */
export interface LdapEngine {
  ctx: BackendContext;
  storage: StorageView;
  clock: Clock;
  options: LdapEngineOptions;
  connections: LdapConnections;
  accounts: ManagedAccounts;
  /** Per-name locks for read-modify-write of roles and sets; keys are namespaced (`static-role/<name>`). */
  locks: KeyedLock;
  scheduler: RotationScheduler;
  /** Registered by parts whose objects need the config (static roles, dynamic roles, library sets). */
  configDependents: ConfigDependent[];
  /**
   * Registered by parts whose leader work follows the config (automated root rotation, drift verification): run after
   * a config write or delete on this node, and on a shared store by the leader's periodic refresh (a write elsewhere).
   */
  configWatchers: Array<() => Promise<void>>;
}

/** A password from the configured policy, or the default generator (optionally with the deprecated length). */
export async function generatePassword(engine: Pick<LdapEngine, 'ctx'>, config: LdapConfig): Promise<string> {
  if (config.password_policy) return engine.ctx.system.generatePassword(config.password_policy);
  if (config.length > 0) return randomBase62(config.length);
  return engine.ctx.system.generatePassword();
}

/** Identifies the generator, so a write-ahead password made under another policy is not reused. */
export function passwordSource(config: LdapConfig): string {
  return config.password_policy ? `policy:${config.password_policy}` : `length:${config.length || 64}`;
}

/**
 * Bind passwords tried after `bindpass`: an unfinished rotate-root's new password (the directory may already have it),
 * then the previous password and the unconfirmed older ones, for as long as they are kept: a late directory write may
 * have put one of them back, and they are erased only once a bind with bindpass was verified.
 */
export function bindFallbacks(config: LdapConfig, rootWalPassword: string | undefined): string[] {
  return bindHistory([rootWalPassword, config.last_bind_password, ...config.unconfirmed_bind_passwords], config.bindpass, Number.POSITIVE_INFINITY);
}

export function toConnectionConfig(config: LdapConfig, fallbacks: string[] = []): LdapConnectionConfig {
  return {
    url: config.url,
    binddn: config.binddn,
    bindpass: config.bindpass,
    fallback_bindpass: fallbacks,
    upndomain: config.upndomain || undefined,
    request_timeout: config.request_timeout,
    connection_timeout: config.connection_timeout || undefined,
    starttls: config.starttls,
    insecure_tls: config.insecure_tls,
    certificate: config.certificate || undefined,
    client_tls_cert: config.client_tls_cert || undefined,
    client_tls_key: config.client_tls_key || undefined,
    tls_min_version: config.tls_min_version as TlsVersionName,
    tls_max_version: config.tls_max_version as TlsVersionName,
    schema: config.schema,
    credential_type: config.credential_type,
    userdn: config.userdn,
    userattr: config.userattr || defaultUserAttr(config.schema),
    case_sensitive_names: config.case_sensitive_names,
  };
}

/**
 * The bind account by the names the config gives it: its DN, or for a UPN bind its userPrincipalName, which
 * is a username wherever usernames are UPNs (userattr userPrincipalName, AD's default). A UPN bind's DN is
 * known only to the directory (LdapConnection.bindAccount).
 */
export function configuredBindAccount(config: Pick<LdapConfig, 'binddn' | 'upndomain' | 'userattr' | 'schema'>): AccountIdentity {
  if (!config.upndomain) return { dn: config.binddn };
  const userattr = config.userattr || defaultUserAttr(config.schema);
  return userattr.toLowerCase() === 'userprincipalname' ? { username: `${config.binddn}@${config.upndomain}` } : {};
}

/** Whether two (valid) configs bind as the same account: the DN compared as a DN, or the same UPN. */
function sameBindAccount(a: LdapConfig, b: LdapConfig): boolean {
  if (a.upndomain || b.upndomain) return `${a.binddn}@${a.upndomain}`.toLowerCase() === `${b.binddn}@${b.upndomain}`.toLowerCase();
  return dnEquals(a.binddn, b.binddn);
}

/** What the engine works with: the config (shared: never mutate it), a client for it, and who it binds as. */
export interface LdapConnection {
  config: Readonly<LdapConfig>;
  client: LdapClient;
  /**
   * The bind account by every name known for it, for refuseBindAccount. A UPN bind's entry is looked up
   * (as rotate-root finds it, under userdn) once per client; when it is not there, the UPN is all that is known.
   */
  bindAccount: () => Promise<AccountIdentity>;
}

function bindAccountOf(config: LdapConfig, client: LdapClient): () => Promise<AccountIdentity> {
  const known = configuredBindAccount(config);
  if (!config.upndomain) {
    const same = Promise.resolve(known);
    return () => same;
  }
  let found: Promise<AccountIdentity> | undefined;
  return () => found ??= client.findBindEntry().then((entry) => ({ ...known, dn: entry.dn }), (err: unknown) => {
    if (err instanceof LdapProviderError && err.ldapCode === 32) return known;
    // Anything else (the directory unreachable) is asked again next time.
    found = undefined;
    throw err;
  });
}

/** What LdapConnections derived from one pair of stored config and root-WAL bytes. */
interface ParsedConnection extends LdapConnection {
  configRaw: Buffer;
  walRaw: Buffer | undefined;
  key: string;
}

const sameBytes = (a: Buffer | undefined, b: Buffer | undefined): boolean => (a === undefined || b === undefined ? a === b : a.equals(b));

/**
 * One directory client per distinct connection config, shared by all parts. The config is read from
 * storage on every call (right when several servers share a database) but parsed again only when its
 * bytes changed; the client, which holds a bound connection, is rebuilt only when the effective
 * connection settings change.
 */
export class LdapConnections {
  readonly #storage: StorageView;
  readonly #create: (config: LdapConnectionConfig) => LdapClient;
  #cached: ParsedConnection | undefined;

  constructor(storage: StorageView, create: (config: LdapConnectionConfig) => LdapClient) {
    this.#storage = storage;
    this.#create = create;
  }

  /** The current config and a client for it; 400 when the engine is not configured. */
  async get(): Promise<LdapConnection> {
    const configRaw = await this.#storage.get(CONFIG_KEY);
    if (!configRaw) throw missingConfigError();
    const walRaw = await this.#storage.get(ROOT_WAL_KEY);
    const cached = this.#cached;
    // Every credential request and rotation passes here: same bytes, same answer.
    if (cached && sameBytes(cached.configRaw, configRaw) && sameBytes(cached.walRaw, walRaw)) return cached;
    const config = Object.freeze(storedConfigSchema.parse(JSON.parse(configRaw.toString('utf8'))));
    const connection = toConnectionConfig(config, bindFallbacks(config, walPassword(walRaw)));
    const key = JSON.stringify(connection);
    // The key holds everything that names the bind account, so a kept client keeps its bind account too.
    const kept = cached?.key === key ? cached : undefined;
    const client = kept?.client ?? this.#create(connection);
    if (!kept && cached) {
      // Operations still running on the old client finish on their own connection; close it afterwards.
      const previous = cached.client;
      setTimeout(() => void previous.close().catch(() => undefined), 5_000).unref();
    }
    const bindAccount = kept?.bindAccount ?? bindAccountOf(config, client);
    this.#cached = { configRaw, walRaw, config, key, client, bindAccount };
    return this.#cached;
  }

  async close(): Promise<void> {
    const client = this.#cached?.client;
    this.#cached = undefined;
    await client?.close().catch(() => undefined);
  }
}

// ---- validation ------------------------------------------------------------------------------------

/** Cross-field and format rules of a complete (merged) config; the message names the field. */
export function validateConfig(config: LdapConfig): void {
  if (!config.binddn) throw new BadRequestError('binddn: a bind DN is required');
  if (!config.upndomain && !isValidDn(config.binddn)) throw invalidField('binddn', 'not a valid DN (RFC 4514)');
  if (!config.bindpass) throw new BadRequestError('bindpass: a bind password is required');
  if (config.userdn && !isValidDn(config.userdn)) throw invalidField('userdn', 'not a valid DN (RFC 4514)');
  if (config.userattr && !isValidAttributeName(config.userattr)) throw invalidField('userattr', 'not a valid attribute name');
  if (config.password_policy && config.length > 0) {
    throw new BadRequestError("password_policy: cannot set both 'password_policy' and 'length' (send length=0 or password_policy=\"\" to switch)");
  }
  if (config.length < 0) throw new BadRequestError('length: must not be negative');
  if (config.length > 0 && config.length < 4) throw new BadRequestError('length: must be at least 4');
  if (config.request_timeout <= 0) throw new BadRequestError('request_timeout: must be a positive number of seconds');
  if (config.verify_period > 0 && config.verify_period < MIN_VERIFY_PERIOD) {
    throw new BadRequestError(`verify_period: at least ${MIN_VERIFY_PERIOD} seconds, or 0 to turn drift verification off`);
  }
  if (TLS_NAMES.indexOf(config.tls_max_version) < TLS_NAMES.indexOf(config.tls_min_version)) {
    throw new BadRequestError("tls_max_version: must be greater than or equal to 'tls_min_version'");
  }
  if (!!config.client_tls_cert !== !!config.client_tls_key) {
    throw new BadRequestError('client_tls_cert: both client_tls_cert and client_tls_key must be set');
  }
  pem('certificate', config.certificate, (text) => new X509Certificate(text));
  pem('client_tls_cert', config.client_tls_cert, (text) => new X509Certificate(text));
  // Never echo key material: the message says only that it failed.
  if (config.client_tls_key) {
    try {
      createPrivateKey(config.client_tls_key);
    } catch {
      throw new BadRequestError('client_tls_key: not a PEM-encoded private key');
    }
  }
  try {
    parseUrlList(config.url);
  } catch (err) {
    throw new BadRequestError((err as Error).message);
  }
}

function pem(name: string, text: string, parse: (text: string) => unknown): void {
  if (!text) return;
  try {
    parse(text);
  } catch (err) {
    throw new BadRequestError(`${name}: failed to parse PEM certificate (${(err as Error).message})`);
  }
}

// ---- endpoint --------------------------------------------------------------------------------------

const configFields = {
  binddn: field.string('DN of the bind object; with upndomain, the user part of <binddn>@<upndomain>.'),
  bindpass: field.string('Password of the bind object. Never returned.', { secret: true }),
  url: field.string('LDAP URL, or a comma-separated list tried in order on connection errors.'),
  password_policy: field.string('Name of the password policy used to generate passwords (resolved at generation time).'),
  schema: field.string('Directory schema: openldap, ad or racf.', { oneOf: LDAP_SCHEMAS }),
  credential_type: field.string('racf only: "password" (racfPassword) or "phrase" (racfPassPhrase).', { oneOf: ['password', 'phrase'] }),
  userdn: field.string('Base DN of user searches (static roles, library accounts).'),
  userattr: field.string('Attribute matched against usernames; default cn (openldap), userPrincipalName (ad), racfid (racf).'),
  upndomain: field.string('Bind as <binddn>@<upndomain>.'),
  request_timeout: field.duration('Timeout of a connection attempt and of each request. Default 90s, at most 1h.', { max: 3600 }),
  connection_timeout: field.duration('Deprecated: when set, the smaller of this and request_timeout is used for both (at most 1h).', { max: 3600 }),
  starttls: field.bool('Issue StartTLS after connecting with ldap://.'),
  insecure_tls: field.bool('Skip server certificate verification (never do this in production).'),
  certificate: field.string('PEM CA certificate(s) trusted for the server.'),
  client_tls_cert: field.string('PEM client certificate.'),
  client_tls_key: field.string('PEM client key. Never returned.', { secret: true }),
  tls_min_version: field.string('Minimum TLS version: tls10, tls11, tls12 (default) or tls13.', { oneOf: TLS_NAMES }),
  tls_max_version: field.string('Maximum TLS version: tls10, tls11, tls12 or tls13 (default).', { oneOf: TLS_NAMES }),
  case_sensitive_names: field.bool('When true, a username lookup only accepts an entry whose userattr matches with the same case.'),
  skip_static_role_import_rotation: field.bool('Default of skip_import_rotation for new static roles.'),
  length: field.int('Deprecated: length of generated passwords (default 64, at most 100 like a password policy). Exclusive with password_policy.', { min: 0, max: 100 }),
  ...rootScheduleFields,
  verify_period: field.duration(`Drift detection: how often the leader binds as each static role and available library account with the password it holds (at least ${MIN_VERIFY_PERIOD}s); 0 (default): off.`, { max: 30 * 86_400 }),
  drift_action: field.string('What a detected drift does: report (default: marks the account) or rotate (also gives it a new password through the bind account).', { oneOf: DRIFT_ACTIONS }),
  verify_rate: field.int(`Drift verification binds per second (default ${DEFAULT_VERIFY_RATE}, at most ${MAX_VERIFY_RATE}).`, { min: 1, max: MAX_VERIFY_RATE }),
};

type ConfigFieldName = keyof typeof configFields;

function enumValue<T extends string>(name: string, value: string, allowed: readonly T[]): T {
  const v = value.trim().toLowerCase();
  if (!(allowed as readonly string[]).includes(v)) throw invalidField(name, `expected one of ${allowed.join(', ')}`);
  return v as T;
}

/** The stored config after applying the fields the request sent; unsent fields keep their value. */
export function mergeConfig(existing: LdapConfig | undefined, sent: Partial<Record<ConfigFieldName, unknown>>): LdapConfig {
  const base: LdapConfig = existing ?? storedConfigSchema.parse({ url: DEFAULT_URL, binddn: '', bindpass: '' });
  const next: LdapConfig = { ...base };
  const str = (k: ConfigFieldName) => (sent[k] as string).trim();
  for (const k of ['url', 'binddn', 'userdn', 'upndomain', 'userattr', 'password_policy'] as const) if (k in sent) next[k] = str(k);
  for (const k of ['bindpass', 'certificate', 'client_tls_cert', 'client_tls_key'] as const) if (k in sent) next[k] = sent[k] as string;
  for (const k of ['starttls', 'insecure_tls', 'case_sensitive_names', 'skip_static_role_import_rotation'] as const) if (k in sent) next[k] = sent[k] as boolean;
  if ('length' in sent) next.length = sent.length as number;
  if ('verify_period' in sent) next.verify_period = sent.verify_period as number;
  if ('verify_rate' in sent) next.verify_rate = sent.verify_rate as number;
  if ('drift_action' in sent) next.drift_action = enumValue('drift_action', sent.drift_action as string, DRIFT_ACTIONS);
  if ('request_timeout' in sent) next.request_timeout = (sent.request_timeout as number) || DEFAULT_REQUEST_TIMEOUT;
  if ('connection_timeout' in sent) next.connection_timeout = sent.connection_timeout as number;
  if ('schema' in sent) {
    const schema = (sent.schema as string).trim().toLowerCase();
    if (!schema) throw new BadRequestError('schema: must not be empty');
    if (!isLdapSchema(schema)) throw invalidField('schema', `not a supported schema (${LDAP_SCHEMAS.join(', ')})`);
    next.schema = schema;
  }
  if ('credential_type' in sent) next.credential_type = enumValue('credential_type', sent.credential_type as string, ['password', 'phrase']);
  if ('tls_min_version' in sent) next.tls_min_version = enumValue('tls_min_version', sent.tls_min_version as string, TLS_NAMES);
  if ('tls_max_version' in sent) next.tls_max_version = enumValue('tls_max_version', sent.tls_max_version as string, TLS_NAMES);
  if (next.url === '') next.url = DEFAULT_URL;
  // userattr follows the schema until the operator names one.
  if (!existing && !('userattr' in sent && next.userattr)) next.userattr = defaultUserAttr(next.schema);
  return next;
}

/** The read shape: bindpass, client_tls_key and the previous bind password are never returned. */
export function configReadData(config: LdapConfig, now: number): Record<string, unknown> {
  return {
    binddn: config.binddn,
    url: config.url,
    userdn: config.userdn,
    userattr: config.userattr || defaultUserAttr(config.schema),
    upndomain: config.upndomain,
    schema: config.schema,
    credential_type: config.credential_type,
    request_timeout: config.request_timeout,
    connection_timeout: config.connection_timeout || DEFAULT_CONNECTION_TIMEOUT,
    starttls: config.starttls,
    insecure_tls: config.insecure_tls,
    certificate: config.certificate,
    client_tls_cert: config.client_tls_cert,
    tls_min_version: config.tls_min_version,
    tls_max_version: config.tls_max_version,
    case_sensitive_names: config.case_sensitive_names,
    skip_static_role_import_rotation: config.skip_static_role_import_rotation,
    ...(config.length > 0 ? { length: config.length } : {}),
    ...(config.password_policy ? { password_policy: config.password_policy } : {}),
    ...(config.last_bind_password_rotation ? { last_bind_password_rotation: new Date(config.last_bind_password_rotation).toISOString() } : {}),
    ...rootScheduleView(config, now),
    verify_period: config.verify_period,
    drift_action: config.drift_action,
    verify_rate: config.verify_rate,
  };
}

export function configPart(engine: LdapEngine): LdapEnginePart {
  const { storage } = engine;
  const write = (sent: Partial<Record<ConfigFieldName, unknown>>) => engine.locks.run(CONFIG_KEY, async () => {
    const snapshot = await readConfigSnapshot(storage);
    const existing = snapshot?.config;
    const next = mergeConfig(existing, sent);
    Object.assign(next, applyScheduleFields(sent as Parameters<typeof applyScheduleFields>[0], next, engine.clock.now(), next.last_bind_password_rotation));
    validateConfig(next);
    // Values, not the keys sent: an operator or IaC re-posting the same binddn or bindpass changes nothing.
    const newPassword = existing !== undefined && next.bindpass !== existing.bindpass;
    const newAccount = existing !== undefined && !sameBindAccount(next, existing);
    // A new bind account or password ends any rotate-root grace: the operator states the directory's password, and a
    // wrong one must fail at once, not be hidden by an older one. Only an unfinished rotate-root's password, which this
    // write drops and which may still be on its way to the directory, stays a fallback (until a verified bind).
    const walRaw = await storage.get(ROOT_WAL_KEY);
    if (newPassword || newAccount) {
      next.last_bind_password = '';
      next.unconfirmed_bind_passwords = newAccount ? [] : bindHistory([walPassword(walRaw)], next.bindpass);
    }
    // Builds (without connecting) a client, so anything the provider refuses is a 400 now, not at first use.
    engine.options.createClient(toConnectionConfig(next));
    // An unfinished rotate-root's WAL may hold the only password the directory accepts for the bind account.
    // A bindpass the operator supplies supersedes it (they know the directory's password); a new account
    // without one would leave the WAL's password to be tried on, and finished against, the wrong entry.
    if (walRaw && newAccount && !newPassword) {
      throw new BadRequestError(`${next.upndomain !== existing!.upndomain ? 'upndomain' : 'binddn'}: a rotate-root of the current bind account is unfinished and ` +
        'its new password may be the only one the directory accepts; finish it with ldap/rotate-root, or send the bindpass of the new account with this change');
    }
    // The engine never manages itself, seen from this side: no role or set may already manage the new bind account.
    const bind = configuredBindAccount(next);
    if (!existing || accountKeys(bind).join() !== accountKeys(configuredBindAccount(existing)).join()) {
      const owner = await engine.accounts.ownerOf(bind);
      if (owner) {
        throw new BadRequestError(`binddn: the account is one this secrets engine manages (${describeOwner(owner)}); ` +
          'the engine never manages its own bind account, so take it out of there first');
      }
    }
    const ops = [putConfigOp(next), ...(walRaw && newPassword ? [{ type: 'delete', key: ROOT_WAL_KEY } as const] : [])];
    // Over the config as read, too: a whole rotate-root on another node between the read and this write leaves no
    // WAL behind, and writing the old bindpass back would lose the password the directory now has.
    if (!(await storage.transaction(ops, [{ key: ROOT_WAL_KEY, expected: walRaw }, { key: CONFIG_KEY, expected: snapshot?.raw }]))) {
      throw new ConflictError('a rotate-root changed the bind password meanwhile; retry the request');
    }
  });
  const changed = async () => {
    for (const watcher of engine.configWatchers) await watcher();
  };

  return {
    paths: [
      definePath({
        pattern: 'config',
        description: 'Connection to the directory and password generation settings.',
        fields: configFields,
        existenceCheck: async () => (await readConfig(storage)) !== undefined,
        operations: {
          read: async () => {
            const config = await readConfig(storage);
            return config ? { data: configReadData(config, engine.clock.now()) } : undefined;
          },
          update: async (req) => {
            const sent = Object.fromEntries((Object.keys(configFields) as ConfigFieldName[]).filter((k) => req.has(k)).map((k) => [k, req.data[k]]));
            await write(sent);
            await changed();
          },
          delete: async () => engine.locks.run(CONFIG_KEY, async () => {
            const blocking: string[] = [];
            const remedies = new Set<string>();
            for (const dep of engine.configDependents) {
              const names = await dep.names();
              if (!names.length) continue;
              blocking.push(`${names.length} ${dep.what} (${names.slice(0, 5).join(', ')}${names.length > 5 ? ', ...' : ''})`);
              remedies.add(dep.remedy ?? 'delete');
            }
            if (blocking.length) {
              throw new BadRequestError(`cannot delete the configuration while ${blocking.join(' and ')} use it; ${[...remedies].join(' or ')} them first`);
            }
            // Never with an unfinished rotate-root: its WAL may hold the bind account's only password.
            if (!(await storage.transaction([{ type: 'delete', key: CONFIG_KEY }], [{ key: ROOT_WAL_KEY, expected: undefined }]))) {
              throw new BadRequestError('cannot delete the configuration while a rotate-root is unfinished: its new password may be the only one the ' +
                'directory accepts for the bind account; finish it with ldap/rotate-root, or write the bind password you know to ldap/config, first');
            }
            await engine.connections.close();
          }).then(changed),
        },
      }),
    ],
  };
}
