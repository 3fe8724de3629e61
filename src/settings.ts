import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import type { AuditSettings } from './core/audit/options.ts';
import { parseDurationSecond } from './core/durations.ts';
import { POSTGRES_DEFAULTS, type PostgresOptions } from './core/storage/postgres-options.ts';
import { validateIssuer } from './core/oidc/issuer.ts';

/**
 * Every server knob, from environment variables or matching flags (`--max-request-size 1048576` sets
 * STRONGROOM_MAX_REQUEST_SIZE). `.env.example` documents each one; `--help` lists them with their defaults, read from
 * here (durations default as the text an operator would write, hence `prefault`).
 */
const duration = (name: string) => z.string().transform((v, ctx) => {
  try {
    return parseDurationSecond(v);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: `${name}: ${(err as Error).message}` });
    return z.NEVER;
  }
});
/** A connection timeout: at least a second (0 would mean none), at most an hour. */
const timeout = (name: string) => duration(name).refine((v) => v >= 1 && v <= 3600, { message: `${name} must be between 1s and 1h` });
const bool = z.string().transform((v) => ['1', 'true', 'yes', 'on'].includes(v.toLowerCase()));

export const settingsSchema = z.object({
  STRONGROOM_ADDR: z.string().regex(/^(\[[0-9a-fA-F:]+\]|[^:]+):\d{1,5}$/, 'expected host:port')
    .refine((a) => Number(a.slice(a.lastIndexOf(':') + 1)) <= 65535, 'the port must be between 0 and 65535').default('127.0.0.1:8200'),
  STRONGROOM_API_ADDR: z.string().optional(),
  STRONGROOM_STORAGE: z.string().regex(/^(memory|sqlite:.+|postgres(ql)?:\/\/.+)$/, 'expected "memory", "sqlite:<path>" or "postgres://..."').optional(),
  STRONGROOM_POSTGRES_POOL_SIZE: z.coerce.number().int().min(1).max(1000).default(POSTGRES_DEFAULTS.poolSize),
  STRONGROOM_POSTGRES_STATEMENT_TIMEOUT: timeout('STRONGROOM_POSTGRES_STATEMENT_TIMEOUT').prefault(`${POSTGRES_DEFAULTS.statementTimeoutMs / 1000}s`),
  STRONGROOM_UNSEAL_KEY: z.string().optional(),
  STRONGROOM_UNSEAL_KEY_FILE: z.string().optional(),
  STRONGROOM_DEV: bool.default(false),
  STRONGROOM_DEV_ROOT_TOKEN: z.string().optional(),
  STRONGROOM_TLS_CERT_FILE: z.string().optional(),
  STRONGROOM_TLS_KEY_FILE: z.string().optional(),
  STRONGROOM_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  STRONGROOM_MAX_REQUEST_SIZE: z.coerce.number().int().positive().default(32 * 1024 * 1024),
  STRONGROOM_MAX_UNAUTHENTICATED_REQUEST_SIZE: z.coerce.number().int().positive().default(1024 * 1024),
  STRONGROOM_HEADERS_TIMEOUT: timeout('STRONGROOM_HEADERS_TIMEOUT').prefault('10s'),
  STRONGROOM_REQUEST_TIMEOUT: timeout('STRONGROOM_REQUEST_TIMEOUT').prefault('60s'),
  STRONGROOM_KEEP_ALIVE_TIMEOUT: timeout('STRONGROOM_KEEP_ALIVE_TIMEOUT').prefault('72s'),
  STRONGROOM_DEFAULT_LEASE_TTL: duration('STRONGROOM_DEFAULT_LEASE_TTL').prefault('768h'),
  STRONGROOM_MAX_LEASE_TTL: duration('STRONGROOM_MAX_LEASE_TTL').prefault('768h'),
  STRONGROOM_REVOKE_RETRY_BASE: duration('STRONGROOM_REVOKE_RETRY_BASE').prefault('10s'),
  STRONGROOM_REVOKE_MAX_ATTEMPTS: z.coerce.number().int().positive().default(6),
  // The event log (docs/events.md): kept this long, and never more than this many records.
  STRONGROOM_EVENTS_RETENTION: duration('STRONGROOM_EVENTS_RETENTION').refine((v) => v >= 60 && v <= 30 * 86400, { message: 'STRONGROOM_EVENTS_RETENTION must be between 1m and 30d' }).default(24 * 3600),
  STRONGROOM_EVENTS_MAX_RECORDS: z.coerce.number().int().min(1000).max(100_000_000).default(1_000_000),
  STRONGROOM_EVENTS_WEBHOOK_ALLOW_HTTP: bool.default(false),
  STRONGROOM_EVENTS_WEBHOOK_RETRY_BASE: duration('STRONGROOM_EVENTS_WEBHOOK_RETRY_BASE').refine((v) => v >= 1 && v <= 3600, { message: 'STRONGROOM_EVENTS_WEBHOOK_RETRY_BASE must be between 1s and 1h' }).default(1),
  STRONGROOM_EVENTS_WEBHOOK_ATTEMPTS: z.coerce.number().int().min(1).max(20).default(5),
  STRONGROOM_UNAUTHENTICATED_METRICS: bool.default(false),
  STRONGROOM_AUDIT_ALLOW_PREFIX: bool.default(false),
  STRONGROOM_AUDIT_ALLOW_RAW: bool.default(false),
  /** The only directory file audit devices may write in (default: `audit/` beside the SQLite database, else ./data/audit). */
  STRONGROOM_AUDIT_DIR: z.string().min(1).optional(),
  /** A declarative bootstrap file (docs/bootstrap.md), applied after unseal at start and again on SIGUSR2. */
  STRONGROOM_BOOTSTRAP: z.string().optional(),
  /** Lets the bootstrap file declare tokens with fixed ids outside dev mode (a known id is a guessable one). */
  STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS: bool.default(false),
  /** Check-outs that may wait (`wait`) on one library set at once, across the cluster; past it 429 (docs/ldap-library.md). */
  STRONGROOM_LIBRARY_MAX_WAITERS: z.coerce.number().int().min(1).max(100_000).default(1024),
}).refine((s) => s.STRONGROOM_DEFAULT_LEASE_TTL <= s.STRONGROOM_MAX_LEASE_TTL, { message: 'STRONGROOM_DEFAULT_LEASE_TTL must not exceed STRONGROOM_MAX_LEASE_TTL' })
  .refine((s) => s.STRONGROOM_HEADERS_TIMEOUT <= s.STRONGROOM_REQUEST_TIMEOUT, { message: 'STRONGROOM_HEADERS_TIMEOUT must not exceed STRONGROOM_REQUEST_TIMEOUT' })
  .refine((s) => !s.STRONGROOM_TLS_CERT_FILE === !s.STRONGROOM_TLS_KEY_FILE, { message: 'STRONGROOM_TLS_CERT_FILE and STRONGROOM_TLS_KEY_FILE go together' })
  // It doubles as the default OIDC issuer, which Vault restricts to an origin.
  .refine((s) => s.STRONGROOM_API_ADDR === undefined || isOrigin(s.STRONGROOM_API_ADDR), { message: 'STRONGROOM_API_ADDR must include only a scheme, host and optional port (e.g. https://strongroom.example.com:8200)' });

function isOrigin(url: string): boolean {
  try {
    validateIssuer(url);
    return true;
  } catch {
    return false;
  }
}

export type Settings = z.infer<typeof settingsSchema>;

/** Flags win over the environment; `--dev` alone means true. */
export function loadSettings(env: NodeJS.ProcessEnv, argv: string[]): Settings {
  const merged: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(env)) if (k.startsWith('STRONGROOM_') && v !== '') merged[k] = v;
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new SettingsError(`unexpected argument "${argv[i]}" (flags look like --storage=memory)`);
    const name = `STRONGROOM_${m[1].toUpperCase().replace(/-/g, '_')}`;
    if (!(name in settingsSchema.shape)) throw new SettingsError(`unknown flag --${m[1]}`);
    merged[name] = m[2] ?? (argv[i + 1] && !argv[i + 1].startsWith('--') ? argv[++i] : 'true');
  }
  const parsed = settingsSchema.safeParse(merged);
  if (!parsed.success) throw new SettingsError(parsed.error.issues.map((i) => `${i.path.join('.') || 'settings'}: ${i.message}`).join('; '));
  return parsed.data;
}

export class SettingsError extends Error {}

export function storageUrl(s: Settings): string {
  return s.STRONGROOM_STORAGE ?? (s.STRONGROOM_DEV ? 'memory' : 'sqlite:./data/strongroom.db');
}

/** Where file audit devices may write: the setting, or an `audit/` directory beside the data. */
export function auditDirectory(s: Settings): string {
  if (s.STRONGROOM_AUDIT_DIR) return resolve(s.STRONGROOM_AUDIT_DIR);
  const url = storageUrl(s);
  return resolve(url.startsWith('sqlite:') ? dirname(url.slice('sqlite:'.length)) : './data', 'audit');
}

/** What audit devices may be enabled with (server settings, docs/audit.md). */
export function auditSettings(s: Settings): AuditSettings {
  return { allowPrefix: s.STRONGROOM_AUDIT_ALLOW_PREFIX, allowRaw: s.STRONGROOM_AUDIT_ALLOW_RAW, dir: auditDirectory(s) };
}

export function postgresOptions(s: Settings): PostgresOptions {
  return { poolSize: s.STRONGROOM_POSTGRES_POOL_SIZE, statementTimeoutMs: s.STRONGROOM_POSTGRES_STATEMENT_TIMEOUT * 1000 };
}

/** Where clients (and cloud directories fetching our OIDC keys) reach this server. */
export function apiAddress(s: Settings): string {
  return s.STRONGROOM_API_ADDR ? validateIssuer(s.STRONGROOM_API_ADDR) : `${s.STRONGROOM_TLS_CERT_FILE ? 'https' : 'http'}://${s.STRONGROOM_ADDR}`;
}

export function readTls(s: Settings): { cert: Buffer; key: Buffer } | undefined {
  if (!s.STRONGROOM_TLS_CERT_FILE || !s.STRONGROOM_TLS_KEY_FILE) return undefined;
  return { cert: readSettingFile(s, 'STRONGROOM_TLS_CERT_FILE'), key: readSettingFile(s, 'STRONGROOM_TLS_KEY_FILE') };
}

function readSettingFile(s: Settings, name: 'STRONGROOM_TLS_CERT_FILE' | 'STRONGROOM_TLS_KEY_FILE'): Buffer {
  try {
    return readFileSync(s[name]!);
  } catch (err) {
    const { code, message } = err as NodeJS.ErrnoException;
    throw new SettingsError(`${name}: cannot read "${s[name]}": ${code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : message}`);
  }
}
