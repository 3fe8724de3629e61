/** The stored `ldap/config` record: its schema, typed storage helpers, validation, and what is derived from it. */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { z } from 'zod';
import { BadRequestError, invalidField } from '../../core/errors.ts';
import type { BackendContext } from '../../core/framework.ts';
import { randomBase62 } from '../../core/ids.ts';
import type { StorageOp } from '../../core/storage/types.ts';
import { jsonBytes, type StorageView } from '../../core/storage/view.ts';
import type { LdapConnectionConfig, TlsVersionName } from '../../providers/ldap/client.ts';
import { dnEquals, isValidDn } from '../../providers/ldap/dn.ts';
import { isValidAttributeName } from '../../providers/ldap/filter.ts';
import { parseUrlList } from '../../providers/ldap/ldapts-client.ts';
import { LDAP_SCHEMAS, defaultUserAttr } from '../../providers/ldap/schemas.ts';
import type { AccountIdentity } from './accounts.ts';
import { rootScheduleShape } from '../root-rotation.ts';
import { bindHistory } from './bind-history.ts';

export const CONFIG_KEY = 'config';
/** Write-ahead entry of an unfinished rotate-root (see rotate-root.ts). */
export const ROOT_WAL_KEY = 'wal/root';
/** How long binds fall back to the previous bind password after rotate-root (replication lag). */
export const ROOT_GRACE_MS = 10 * 60_000;

export const TLS_NAMES = ['tls10', 'tls11', 'tls12', 'tls13'] as const;
export const DEFAULT_URL = 'ldap://127.0.0.1';
export const DEFAULT_REQUEST_TIMEOUT = 90;
export const DEFAULT_CONNECTION_TIMEOUT = 30;

/**
 * Drift verification binds per second: a handful of simple binds a second is background noise for any directory
 * (a single OpenLDAP or AD domain controller serves thousands), yet 10,000 accounts are still verified within an hour.
 */
export const DEFAULT_VERIFY_RATE = 5;
export const MAX_VERIFY_RATE = 100;
/** A drifted account is bound with a refused password once per round: shorter rounds would feed lockout policies. */
export const MIN_VERIFY_PERIOD = 60;
export const DRIFT_ACTIONS = ['report', 'rotate'] as const;

export const storedConfigSchema = z.object({
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
export function walPassword(walRaw: Buffer | undefined): string | undefined {
  return walRaw && (JSON.parse(walRaw.toString('utf8')) as { new_password?: string }).new_password;
}

export function missingConfigError(): BadRequestError {
  return new BadRequestError('missing LDAP configuration: write ldap/config first');
}

/** A password from the configured policy, or the default generator (optionally with the deprecated length). */
export async function generatePassword(engine: { ctx: BackendContext }, config: LdapConfig): Promise<string> {
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
export function sameBindAccount(a: LdapConfig, b: LdapConfig): boolean {
  if (a.upndomain || b.upndomain) return `${a.binddn}@${a.upndomain}`.toLowerCase() === `${b.binddn}@${b.upndomain}`.toLowerCase();
  return dnEquals(a.binddn, b.binddn);
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
