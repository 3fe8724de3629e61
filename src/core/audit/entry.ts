import { createHmac } from 'node:crypto';
import { setBounded } from '../bounded-map.ts';
import { sentStrings } from '../sent-values.ts';
import type { CoreRequest, CoreResponse } from '../request.ts';
import type { Fields } from '../fields.ts';
import type { Operation } from '../framework.ts';
import type { MountEntry } from '../mounts.ts';
import type { TokenEntry } from '../tokens.ts';

/**
 * What the pipeline learnt about one request, filled in as it goes: an error before authentication leaves only the
 * raw method and path, a refusal by the ACL already knows who asked. Every device formats the same record with its
 * own salt and options.
 */
export class AuditRecord {
  readonly id: string;
  readonly request: CoreRequest;
  path: string;
  operation: Operation | undefined;
  mount: MountEntry | undefined;
  /** The token the request authenticated with (or presented, on an unauthenticated path), when the store knows it. */
  token: TokenEntry | undefined;
  data: Record<string, unknown> | undefined;
  /** The matched path's fields: those declared secret are hashed even where a mount exempts their name. */
  fields: Fields | undefined;
  /** The matched path's response keys declared secret (PathDefinition.secretResponseKeys), hashed likewise. */
  secretResponseKeys: readonly string[] | undefined;
  /** The answer's envelope (data, lease, auth block, warnings); raw answers and 204s have none. */
  envelope: Record<string, unknown> | undefined;
  /** `pending` until the request entry is written before the handler, `refused` when no device could write it. */
  state: 'pending' | 'logged' | 'refused' = 'pending';
  /** Per device, the parts both entries share, serialised by whichever entry comes first. */
  #shared: Map<EntryFormat, SharedParts> | undefined;

  constructor(request: CoreRequest, id: string) {
    this.request = request;
    this.id = id;
    this.path = request.path;
  }

  /** What the pipeline knows once it has routed the request and looked up its token. */
  identify(path: string, operation: Operation, mount: MountEntry | undefined, data: Record<string, unknown>, token: TokenEntry | undefined, fields: Fields | undefined, secretResponseKeys?: readonly string[]): void {
    this.path = path;
    this.operation = operation;
    this.mount = mount;
    this.data = data;
    this.token = token;
    this.fields = fields;
    this.secretResponseKeys = secretResponseKeys;
  }

  shared(format: EntryFormat, make: () => SharedParts): SharedParts {
    this.#shared ??= new Map();
    let parts = this.#shared.get(format);
    if (!parts) this.#shared.set(format, (parts = make()));
    return parts;
  }
}

interface SharedParts {
  auth: string;
  request: string;
}

/** A device's options that shape its entries (see options.ts). */
export interface EntryOptions {
  hmacAccessor: boolean;
  logRaw: boolean;
  elideListResponses: boolean;
}

/**
 * A device's HMAC: `hmac-sha256:` + hex(HMAC-SHA256(salt, value)), Vault's form, so `sys/audit-hash` answers what a
 * log search needs.
 */
export class Salt {
  readonly #key: Buffer;

  constructor(salt: string) {
    this.#key = Buffer.from(salt);
  }

  hash(value: string): string {
    return `hmac-sha256:${createHmac('sha256', this.#key).update(value).digest('hex')}`;
  }
}

const TOKEN_HASH_CACHE = 10_000;

/**
 * Names hashed even when a mount's audit_non_hmac_*_keys names them: those lists may say only which values are not
 * secret, and a tune (which needs no sudo) must not be able to put a credential in the clear in every log. Credentials
 * and the names that carry a token or what stands for one: a token lookup answers the token as `id` (and a custom
 * token is created with it), an accessor or a lease id is enough to look up, renew or revoke.
 */
const ALWAYS_HASHED = new Set(['password', 'last_password', 'current_password', 'new_password', 'bindpass', 'client_secret', 'secret', 'client_token', 'token', 'jwt', 'assertion',
  'id', 'accessor', 'lease_id', 'secret_id', 'private_key', 'key', 'input']);
/** Any name built on one of them: `db_password`, `refresh_token`, `signing_key`, `token_accessor`, ... */
const SECRET_SUFFIX = /(password|passwd|_secret|_token|_key|_jwt|_assertion|_accessor)$/;

/** Whether a mount's non-HMAC list may exempt `name`: never a credential name, nor one the endpoint declares secret. */
export function exemptable(name: string, fields: Fields | undefined, secret: readonly string[] | undefined): boolean {
  return !ALWAYS_HASHED.has(name) && !SECRET_SUFFIX.test(name) && !fields?.[name]?.secret && !secret?.includes(name);
}

/**
 * Bounds on what one entry's data costs, so a hostile body cannot turn auditing into an amplifier: nesting past
 * MAX_DEPTH (a body 5,000 levels deep would exhaust the stack; JSON.stringify cannot even serialise it) and values
 * past MAX_VALUES (a 1 MiB login body of 250,000 one-letter strings would be a third of a second of HMAC on the
 * event loop) are written as markers, and the request goes on. No endpoint takes anything near either bound.
 */
const MAX_DEPTH = 64;
const MAX_VALUES = 10_000;
export const TOO_DEEP = `[nested deeper than ${MAX_DEPTH} levels: not recorded]`;
export const TOO_MANY = `[more than ${MAX_VALUES} values: not recorded]`;

interface Walk {
  hash: (value: string) => string;
  exempt: ReadonlySet<string> | undefined;
  /** Values this entry's data may still visit. */
  left: number;
}

/**
 * Every string value, in objects and lists at any depth, hashed; keys, numbers and booleans kept. A string is left
 * in the clear when the nearest object key above it is exempt (Vault's rule, so an exempt list stays readable).
 */
function hashValues(value: unknown, walk: Walk, key: string, depth: number): unknown {
  if (--walk.left < 0) return TOO_MANY;
  if (typeof value === 'string') return walk.exempt?.has(key) ? value : walk.hash(value);
  if (value === null || typeof value !== 'object') return value;
  // What the client received: a Date (or anything with toJSON) as JSON writes it.
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return hashValues((value as { toJSON(): unknown }).toJSON(), walk, key, depth);
  if (depth >= MAX_DEPTH) return TOO_DEEP;
  if (Array.isArray(value)) return value.map((v) => hashValues(v, walk, key, depth + 1));
  // fromEntries defines own properties: a "__proto__" key stays a key.
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, hashValues(v, walk, k, depth + 1)]));
}

function exemptKeys(names: string[] | undefined, fields: Fields | undefined, secret?: readonly string[]): ReadonlySet<string> | undefined {
  if (!names?.length) return undefined;
  return new Set(names.filter((n) => exemptable(n, fields, secret)));
}

const rfc3339 = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
const nonEmpty = <T extends object>(o: T | undefined | null): T | undefined => (o && Object.keys(o).length ? o : undefined);

let lastMs = -1;
let lastIso = '';
/** Entries come in bursts within one millisecond: the last conversion is kept. */
function isoTime(ms: number): string {
  if (ms !== lastMs) {
    lastMs = ms;
    lastIso = new Date(ms).toISOString();
  }
  return lastIso;
}

/**
 * One device's entries: Vault's JSON schema, one line each, values hashed under the device's salt. The `auth` and
 * `request` objects of a request's two entries are the same, so they are serialised once per request; a token's
 * `auth` object is the same on every request it makes, so it is serialised once per token entry.
 */
export class EntryFormat {
  readonly #salt: Salt;
  readonly #opts: EntryOptions;
  readonly #prefix: string;
  /**
   * A client's token and accessor come back on every request it makes: their hashes are remembered, by the token
   * store's salted id (never by the token itself, which this map would otherwise keep in memory).
   */
  readonly #ids = new Map<string, { clientToken: string; accessor: string }>();
  readonly #auth = new WeakMap<TokenEntry, string>();

  constructor(salt: Salt, opts: EntryOptions, prefix: string) {
    this.#salt = salt;
    this.#opts = opts;
    this.#prefix = prefix;
  }

  hash(value: string): string {
    return this.#salt.hash(value);
  }

  line(kind: 'request' | 'response', rec: AuditRecord, time: number, error: string | undefined): string {
    const shared = rec.shared(this, () => ({ auth: this.#authJson(rec), request: JSON.stringify(this.#request(rec)) }));
    let line = `${this.#prefix}{"time":"${isoTime(time)}","type":"${kind}","auth":${shared.auth},"request":${shared.request}`;
    if (kind === 'response') line += `,"response":${JSON.stringify(this.#response(rec))}`;
    if (error !== undefined) line += `,"error":${JSON.stringify(this.#opts.logRaw ? error : this.#redact(error, rec))}`;
    return `${line}}\n`;
  }

  /**
   * Defence in depth behind messages that name fields, not values (errors.ts invalidField): any part of the error
   * equal to a string the request sent is replaced by its hash, as the request's data is written (sent-values.ts
   * already put the field's name in the answer's place of any it found there).
   */
  #redact(error: string, rec: AuditRecord): string {
    const sent = [...sentStrings(rec.data ?? rec.request.body).keys()].sort((a, b) => b.length - a.length);
    let out = error;
    for (const value of sent) if (out.includes(value)) out = out.replaceAll(value, this.#salt.hash(value));
    return out;
  }

  #id(value: string, hmac = true): string {
    return hmac && !this.#opts.logRaw ? this.#salt.hash(value) : value;
  }

  /** A token or accessor of an answer, when it has one (as Vault's JSON, empty ones are left out). */
  #optionalId(v: unknown, hmac: boolean): string | undefined {
    return typeof v === 'string' && v !== '' ? this.#id(v, hmac) : undefined;
  }

  /** The hashes of the request's token and its accessor; the token is the one the entry was found by. */
  #tokenIds(t: TokenEntry, token: string): { clientToken: string; accessor: string } {
    let ids = this.#ids.get(t.salted);
    if (!ids) setBounded(this.#ids, TOKEN_HASH_CACHE, t.salted, (ids = { clientToken: this.#id(token), accessor: this.#id(t.accessor, this.#opts.hmacAccessor) }));
    return ids;
  }

  /** Vault's auth object for the caller's token; absent fields are left out (its JSON omits empty values). */
  #authJson(rec: AuditRecord): string {
    const t = rec.token;
    if (!t) return JSON.stringify({ client_token: rec.request.token ? this.#id(rec.request.token) : undefined });
    let json = this.#auth.get(t);
    if (json === undefined) {
      const ids = this.#tokenIds(t, rec.request.token!);
      json = JSON.stringify({
        client_token: ids.clientToken,
        accessor: ids.accessor,
        display_name: t.displayName,
        policies: t.policies,
        token_policies: t.policies,
        metadata: nonEmpty(t.meta),
        entity_id: t.entityId || undefined,
        remaining_uses: t.numUses > 0 ? t.numUses : undefined,
        token_type: 'service',
        token_ttl: t.ttl,
        token_issue_time: rfc3339(t.creationTime),
      });
      this.#auth.set(t, json);
    }
    return json;
  }

  #request(rec: AuditRecord): Record<string, unknown> {
    const { request: req, token } = rec;
    const ids = token && this.#tokenIds(token, req.token!);
    return {
      id: rec.id,
      operation: rec.operation,
      ...mountFields(rec),
      client_token: ids?.clientToken ?? (req.token ? this.#id(req.token) : undefined),
      client_token_accessor: ids?.accessor,
      namespace: { id: 'root' },
      path: rec.path,
      data: this.#data(rec.data, rec.mount?.config.audit_non_hmac_request_keys, rec.fields),
      remote_address: req.remoteAddress,
      remote_port: req.remotePort,
    };
  }

  #response(rec: AuditRecord): Record<string, unknown> {
    const env = rec.envelope;
    let data = (env?.data ?? undefined) as Record<string, unknown> | undefined;
    if (data && this.#opts.elideListResponses && rec.operation === 'list') data = elided(data);
    const warnings = env?.warnings as string[] | null | undefined;
    return {
      ...mountFields(rec),
      auth: this.#issuedAuth(env?.auth as Record<string, unknown> | null | undefined),
      secret: env?.lease_id ? { lease_id: env.lease_id } : undefined,
      // A response field named like a request field declared secret (a password echoed back) is secret too.
      data: this.#data(data, rec.mount?.config.audit_non_hmac_response_keys, rec.fields, rec.secretResponseKeys),
      warnings: warnings ?? undefined,
      wrap_info: this.#wrapInfo(env?.wrap_info as Record<string, unknown> | null | undefined),
    };
  }

  /** A wrapped answer's wrap_info as Vault's audit shows it: the wrapping token hashed, its accessors as the device says. */
  #wrapInfo(info: Record<string, unknown> | null | undefined): Record<string, unknown> | undefined {
    if (!info) return undefined;
    const id = (v: unknown, hmac: boolean) => this.#optionalId(v, hmac);
    return {
      token: id(info.token, true),
      accessor: id(info.accessor, this.#opts.hmacAccessor),
      ttl: info.ttl,
      creation_time: info.creation_time,
      creation_path: info.creation_path,
      wrapped_accessor: id(info.wrapped_accessor, this.#opts.hmacAccessor),
    };
  }

  /** The auth block of a login or token creation, as Vault's audit shows it (its own field names, token hashed). */
  #issuedAuth(block: Record<string, unknown> | null | undefined): Record<string, unknown> | undefined {
    if (!block) return undefined;
    const id = (v: unknown, hmac: boolean) => this.#optionalId(v, hmac);
    return {
      client_token: id(block.client_token, true),
      accessor: id(block.accessor, this.#opts.hmacAccessor),
      policies: block.policies,
      token_policies: block.token_policies,
      metadata: block.metadata ?? undefined,
      entity_id: block.entity_id || undefined,
      num_uses: block.num_uses || undefined,
      token_type: block.token_type,
      token_ttl: block.lease_duration,
    };
  }

  #data(data: Record<string, unknown> | undefined, exempt: string[] | undefined, fields: Fields | undefined, secret?: readonly string[]): Record<string, unknown> | undefined {
    if (!data || Object.keys(data).length === 0) return undefined;
    if (this.#opts.logRaw) return data;
    return hashValues(data, { hash: (s) => this.#salt.hash(s), exempt: exemptKeys(exempt, fields, secret), left: MAX_VALUES }, '', 0) as Record<string, unknown>;
  }
}

function mountFields(rec: AuditRecord): Record<string, unknown> {
  const m = rec.mount;
  return m ? { mount_point: m.path, mount_type: m.type, mount_accessor: m.accessor, mount_class: m.class } : {};
}

/** Vault's elide_list_responses: a list answer's keys (and key_info) become their count. */
function elided(data: Record<string, unknown>): Record<string, unknown> {
  const out = { ...data };
  if (Array.isArray(out.keys)) out.keys = out.keys.length;
  if (out.key_info && typeof out.key_info === 'object') out.key_info = Object.keys(out.key_info).length;
  return out;
}

/** The errors the client was told, which is all the entry says of a failure (an internal error's detail stays in the server log). */
export function errorOf(res: CoreResponse): string | undefined {
  if (res.status < 400 || typeof res.body !== 'string' || !res.body.startsWith('{"errors"')) return undefined;
  const errors = (JSON.parse(res.body) as { errors?: unknown }).errors;
  return Array.isArray(errors) && errors.length ? errors.join('; ') : undefined;
}
