/**
 * Applying a loaded bootstrap file through the core's own request pipeline, as an operator's calls would be (same
 * validation, canonicalisation and audit), under a short-lived root token of its own that is revoked afterwards.
 *
 * What "changed" means (docs/bootstrap.md): for each object the server keeps, under `sys/bootstrap/`, a keyed hash
 * of every field the file last applied and of every field the server's read showed right after. An object is
 * written again when the file's value of a field differs from the last applied one, or when a field the read shows
 * differs from what it showed then (changed behind the file's back). Write-only fields (bind passwords, client
 * secrets) are sent only when the file changed them: re-sending an unchanged bind password would undo a rotate-root.
 * The first apply after the records are lost writes every object once.
 *
 * A seed, not a time machine: an object the records say was applied, now gone (deleted, disabled, revoked or
 * expired outside the file) while the file's declaration of it is unchanged, is skipped and reported, not made
 * again; what lives under a skipped mount is skipped with it. A declared token's record (keyed by a keyed hash of
 * its id, never the id) is its tombstone: once it is gone that id is never minted again, whatever else the file
 * changes, until the file gives another id. An audit device is replaced without a moment of no device.
 *
 * Objects are applied in order and the apply stops at the first failure: what was applied before stays applied
 * (and recorded); the error names the object, its YAML path and line.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type { Core } from '../core/core.ts';
import type { StorageView } from '../core/storage/view.ts';
import { issueToken } from '../core/token-issue.ts';
import { replaceValues } from '../lib/redact.ts';
import { registeredType } from './endpoints.ts';
import { formatPath, type LoadedFile } from './load.ts';
import { BUILTIN_POLICIES, BUILTIN_TYPES, declaredObjects, pruneScopes, type Declared, type PruneScope } from './plan.ts';
import type { Body } from './schema.ts';

export interface BootstrapReport {
  created: string[];
  changed: string[];
  unchanged: string[];
  removed: string[];
  /** Declared objects gone since the last apply and not changed in the file since: left gone. */
  skipped: Array<{ name: string; reason: string }>;
  /** Audit devices disabled to be replaced by the file's version (pruned ones are in `removed`). */
  disabled: string[];
}

type Outcome = 'created' | 'changed' | 'unchanged' | { skipped: string };

export class BootstrapApplyError extends Error {
  readonly report: BootstrapReport;
  constructor(message: string, report: BootstrapReport) {
    super(message);
    this.report = report;
  }
}

/** How long the bootstrap's own token lives if it is never revoked (the process died mid-apply). */
const BOOTSTRAP_TOKEN_TTL = 15 * 60;
const RECORD_KEY = 'bootstrap/applied';
/** Where a changed audit device's new version is enabled first, beside the old one (`sys/audit/file-bootstrap-new`). */
const TEMPORARY_DEVICE_SUFFIX = '-bootstrap-new';

interface MountEntry {
  type?: string;
  accessor?: string;
}

interface ObjectRecord {
  /** Keyed hash of each field as the file last applied it. */
  fields: Record<string, string>;
  /** Keyed hash of each of those fields as the server's read showed it right after. */
  observed: Record<string, string>;
}
interface Records {
  /** The hashes' key: the hashes of secrets must not be checkable against guesses by whoever reads the store. */
  key: string;
  objects: Record<string, ObjectRecord>;
}

interface ApiResult {
  status: number;
  data: Record<string, unknown> | undefined;
  errors: string[];
}

class ApiFailure extends Error {}

export async function applyBootstrap(core: Core, loaded: LoadedFile): Promise<BootstrapReport> {
  const report: BootstrapReport = { created: [], changed: [], unchanged: [], removed: [], skipped: [], disabled: [] };
  const store = core.systemView;
  const records = await readRecords(store);
  const issued = await issueToken(core, {
    policies: ['root'], path: 'auth/token/bootstrap', displayName: 'bootstrap', ttl: BOOTSTRAP_TOKEN_TTL, parent: '', renewable: false,
    mountAccessor: core.mounts.get('auth/token/')?.accessor ?? '',
  });
  const api = new InternalApi(core, issued.token);
  const applier = new Applier(api, records, report);
  let current: Declared | undefined;
  try {
    for (const d of declaredObjects(loaded.spec, loaded.fromReference)) {
      current = d;
      await applier.apply(d);
    }
    current = undefined;
    for (const scope of pruneScopes(loaded.spec)) await applier.prune(scope);
  } catch (err) {
    if (!(err instanceof ApiFailure)) throw err;
    const where = current ? `${formatPath(current.at)} (line ${loaded.lineOf(current.at)}), ${current.name}: ` : '';
    // Defence in depth behind the server's own cleaning (sent-values.ts): a message that still holds what a reference
    // resolved to (a directory echoing a stored bind DN that is really a password) names the reference instead.
    throw new BootstrapApplyError(replaceValues(`${where}${err.message}`, loaded.resolved), report);
  } finally {
    try {
      await store.putJson(RECORD_KEY, records);
    } finally {
      // Revoked even when the records could not be written: a root token must not outlive the apply.
      const revoked = await api.call('POST', 'auth/token/revoke-self').then((r) => r.status < 300, () => false);
      if (!revoked) core.logger.warn(`the bootstrap's own root token could not be revoked; it expires within ${BOOTSTRAP_TOKEN_TTL / 60} minutes`);
    }
  }
  return report;
}

async function readRecords(store: StorageView): Promise<Records> {
  const stored = await store.getJson<Records>(RECORD_KEY);
  return stored ?? { key: randomBytes(32).toString('base64'), objects: {} };
}

/** Requests through Core.handle, as the HTTP layer makes them, with the bootstrap's token. */
class InternalApi {
  readonly #core: Core;
  readonly #token: string;
  constructor(core: Core, token: string) {
    this.#core = core;
    this.#token = token;
  }

  async call(method: string, path: string, body?: Record<string, unknown>): Promise<ApiResult> {
    const res = await this.#core.handle({ method, path, query: {}, body, token: this.#token, remoteAddress: '127.0.0.1' });
    const parsed = res.body ? JSON.parse(res.body.toString()) as { data?: Record<string, unknown>; errors?: string[] } : {};
    return { status: res.status, data: parsed.data, errors: parsed.errors ?? [] };
  }

  /** The object's data, undefined when it does not exist. */
  async read(path: string): Promise<Record<string, unknown> | undefined> {
    const r = await this.call('GET', path);
    if (r.status === 404) return undefined;
    return this.#ok('GET', path, r).data ?? {};
  }

  async write(method: 'POST' | 'DELETE', path: string, body?: Record<string, unknown>): Promise<Record<string, unknown> | undefined> {
    return this.#ok(method, path, await this.call(method, path, body)).data;
  }

  async list(path: string): Promise<string[]> {
    const r = await this.call('LIST', path);
    if (r.status === 404) return [];
    return (this.#ok('LIST', path, r).data?.keys as string[] | undefined) ?? [];
  }

  #ok(method: string, path: string, r: ApiResult): ApiResult {
    // The server's messages never carry a secret (docs/security.md); a body or a value is never added here.
    if (r.status >= 300) throw new ApiFailure(`${method} ${path}: ${r.status} ${r.errors.join('; ') || 'no message'}`);
    return r;
  }
}

class Applier {
  readonly #api: InternalApi;
  readonly #records: Records;
  readonly #report: BootstrapReport;
  /** Mounts as sys/mounts and sys/auth showed them, read once. */
  #mountTables: Map<string, Record<string, MountEntry>> = new Map();
  /** Path prefixes of the skipped mounts' objects (`ldap/`, `sys/mounts/ldap/`): skipped with them. */
  #skippedMounts: string[] = [];

  constructor(api: InternalApi, records: Records, report: BootstrapReport) {
    this.#api = api;
    this.#records = records;
    this.#report = report;
  }

  async apply(d: Declared): Promise<void> {
    const name = d.partOf ?? d.name;
    if (this.#skippedMounts.some((p) => d.path.startsWith(p))) {
      if (!d.partOf) this.#report.skipped.push({ name, reason: 'its mount was disabled outside the file' });
      return;
    }
    const outcome = d.kind === 'mount' ? await this.#mount(d) : d.kind === 'token' ? await this.#token(d) : await this.#object(d);
    if (typeof outcome === 'object') this.#report.skipped.push({ name, reason: outcome.skipped });
    else this.#note(name, outcome);
  }

  /** A mount's tuning reports under the mount: created stays created, and a changed tuning changes the mount. */
  #note(name: string, outcome: 'created' | 'changed' | 'unchanged'): void {
    const r = this.#report;
    if (r.created.includes(name) || (r.changed.includes(name) && outcome === 'unchanged')) return;
    if (r.unchanged.includes(name)) r.unchanged.splice(r.unchanged.indexOf(name), 1);
    r[outcome].push(name);
  }

  /**
   * A mount's record holds its declaration and the accessor it had: a mount found with another accessor was disabled
   * and enabled again since, so the records of what the file put under it describe nothing there now.
   */
  async #mount(d: Declared): Promise<Outcome> {
    const table = d.path.startsWith('sys/auth/') ? 'sys/auth' : 'sys/mounts';
    const key = `mount:${d.path}`;
    const under = [`${d.path}/`, d.name];
    const existing = (await this.#mountTable(table))[`${d.path.slice(table.length + 1)}/`];
    const type = String(d.body.type);
    if (!existing) {
      if (this.#records.objects[key] && !this.#difference(key, d.body, {})) {
        this.#skippedMounts.push(...under);
        return { skipped: 'disabled outside the file' };
      }
      await this.#api.write('POST', d.path, d.body);
      this.#mountTables.delete(table);
      this.#forgetUnder(under);
      this.#recordMount(key, d, (await this.#mountTable(table))[`${d.path.slice(table.length + 1)}/`]);
      return 'created';
    }
    const cls = table === 'sys/auth' ? 'auth' : 'secret';
    if (registeredType(cls, String(existing.type)) !== registeredType(cls, type)) {
      throw new ApiFailure(`mounted with type "${existing.type}", not "${type}": a mount's type does not change in place (remove it, or prune mounts)`);
    }
    const accessor = this.#records.objects[key]?.observed.accessor;
    if (accessor !== undefined && accessor !== this.#hash(existing.accessor)) this.#forgetUnder(under);
    this.#recordMount(key, d, existing);
    return 'unchanged';
  }

  #recordMount(key: string, d: Declared, entry: MountEntry | undefined): void {
    this.#records.objects[key] = { fields: this.#fieldHashes(d.body), observed: entry ? { accessor: this.#hash(entry.accessor) } : {} };
  }

  /** Drops the records of every object under these path prefixes: they are applied as if for the first time. */
  #forgetUnder(prefixes: string[]): void {
    for (const key of Object.keys(this.#records.objects)) {
      if (prefixes.some((p) => key.startsWith(`object:${p}`))) delete this.#records.objects[key];
    }
  }

  async #mountTable(path: string): Promise<Record<string, MountEntry>> {
    let table = this.#mountTables.get(path);
    if (!table) {
      table = (await this.#api.read(path) ?? {}) as Record<string, MountEntry>;
      this.#mountTables.set(path, table);
    }
    return table;
  }

  /** Tuning, policies, configs and roles: read, compared with the records, written where they differ. */
  async #object(d: Declared): Promise<Outcome> {
    const key = `object:${d.path}`;
    const before = d.kind === 'audit' ? await this.#auditDevice(d.path) : await this.#api.read(d.path);
    if (before === undefined) {
      if (this.#records.objects[key] && !this.#difference(key, d.body, {})) return { skipped: `${d.kind === 'audit' ? 'disabled' : 'deleted'} outside the file` };
      await this.#write(d, d.body);
      await this.#record(key, d);
      return 'created';
    }
    const diff = this.#difference(key, d.body, before);
    if (!diff) return 'unchanged';
    if (d.kind === 'audit') {
      await this.#replaceDevice(d);
    } else {
      await this.#write(d, Object.fromEntries(Object.entries(d.body).filter(([k]) => k in before || diff.has(k))));
    }
    await this.#record(key, d);
    return 'changed';
  }

  async #write(d: Declared, body: Body): Promise<void> {
    await this.#api.write('POST', d.path, body);
  }

  /**
   * A device cannot be changed in place, and a change must never leave the server without one: the file's version is
   * enabled first beside the old one (under a temporary path: two devices cannot share one), the old one is disabled
   * only once the new one opened, then the new one takes the path and the temporary one goes. A version that cannot
   * be enabled leaves the old device as it was; a failure later leaves the temporary one enabled.
   */
  async #replaceDevice(d: Declared): Promise<void> {
    const temporary = `${d.path}${TEMPORARY_DEVICE_SUFFIX}`;
    // Left by an apply cut short: this apply enables it again with the file's version.
    if (await this.#auditDevice(temporary)) await this.#api.write('DELETE', temporary);
    const trial = await this.#api.call('POST', temporary, d.body);
    if (trial.status >= 300) {
      throw new ApiFailure(`POST ${d.path}: ${trial.status} ${trial.errors.join('; ') || 'no message'} (the file's version could not be enabled; the device enabled before is kept, nothing was disabled)`);
    }
    await this.#api.write('DELETE', d.path);
    this.#report.disabled.push(d.path);
    await this.#write(d, d.body);
    await this.#api.write('DELETE', temporary);
  }

  async #auditDevice(path: string): Promise<Record<string, unknown> | undefined> {
    const devices = (await this.#api.read('sys/audit') ?? {}) as Record<string, Record<string, unknown>>;
    return devices[`${path.slice('sys/audit/'.length)}/`];
  }

  /**
   * The fields to write again, or undefined when nothing differs: those whose file value is not the one last applied,
   * and those the read shows otherwise than right after that apply. Without a record every field differs.
   */
  #difference(key: string, body: Body, read: Record<string, unknown>): Set<string> | undefined {
    const rec = this.#records.objects[key];
    const changed = new Set<string>();
    for (const [k, v] of Object.entries(body)) {
      if (!rec || rec.fields[k] !== this.#hash(v)) changed.add(k);
      else if (k in read && rec.observed[k] !== this.#hash(read[k])) changed.add(k);
    }
    if (rec && Object.keys(rec.fields).some((k) => !(k in body))) for (const k of Object.keys(rec.fields)) changed.add(k);
    return changed.size ? changed : undefined;
  }

  async #record(key: string, d: Declared): Promise<void> {
    const after = d.kind === 'audit' ? await this.#auditDevice(d.path) : await this.#api.read(d.path);
    const observed = Object.fromEntries(Object.keys(d.body).filter((k) => after && k in after).map((k) => [k, this.#hash(after![k])]));
    this.#records.objects[key] = { fields: this.#fieldHashes(d.body), observed };
  }

  /**
   * A token exists while its id looks up; it is created again when missing (expired, revoked) or when the file's
   * fields differ from those it was created with (revoked first, with its children and leases). Its record is keyed
   * by a hash of the id, which is a secret.
   */
  async #token(d: Declared): Promise<Outcome> {
    const id = String(d.body.id);
    const key = `token:${this.#hash(id)}`;
    const lookup = await this.#api.call('POST', 'auth/token/lookup', { token: id });
    const exists = lookup.status === 200;
    // The tombstone: a credential whose id leaked is revoked; a re-apply must not hand the same id back.
    if (!exists && this.#records.objects[key]) return { skipped: 'revoked or expired outside the file: its id is never used again; give the file another id to create one' };
    if (exists && !this.#difference(key, d.body, {})) return 'unchanged';
    if (exists) {
      // Revoked by the file itself: if the creation below fails, the next apply creates it rather than skip it.
      delete this.#records.objects[key];
      await this.#api.write('POST', 'auth/token/revoke', { token: id });
    }
    await this.#api.write('POST', d.path, d.body);
    this.#records.objects[key] = { fields: this.#fieldHashes(d.body), observed: {} };
    return exists ? 'changed' : 'created';
  }

  async prune(scope: PruneScope): Promise<void> {
    const table = ['sys/mounts', 'sys/auth', 'sys/audit'].includes(scope.list);
    const found = table
      ? Object.entries((await this.#api.read(scope.list)) ?? {}).filter(([, v]) => !BUILTIN_TYPES.has(String((v as { type?: unknown }).type))).map(([k]) => k)
      : (await this.#api.list(scope.list)).filter((k) => !k.endsWith('/'));
    for (const name of found) {
      const compared = scope.caseInsensitive ? name.toLowerCase() : name;
      if (scope.keep.has(compared) || (scope.list.startsWith('sys/policies/acl') && BUILTIN_POLICIES.has(compared))) continue;
      const path = `${scope.prefix}${name.replace(/\/$/, '')}`;
      await this.#api.write('DELETE', path);
      delete this.#records.objects[`object:${path}`];
      // Records of what a pruned mount held: declared again later, it is created, not skipped.
      if (table && scope.list !== 'sys/audit') {
        delete this.#records.objects[`mount:${path}`];
        this.#forgetUnder([`${path}/`, scope.list === 'sys/auth' ? `auth/${name}` : name]);
      }
      this.#report.removed.push(scope.list === 'sys/auth' ? `auth/${name}` : table ? name : path);
    }
  }

  /** The keyed hash of each of the body's fields, as a record keeps them. */
  #fieldHashes(body: Body): Record<string, string> {
    return Object.fromEntries(Object.entries(body).map(([k, v]) => [k, this.#hash(v)]));
  }

  #hash(value: unknown): string {
    return createHmac('sha256', Buffer.from(this.#records.key, 'base64')).update(canonicalJson(value)).digest('base64url').slice(0, 22);
  }
}

/** JSON with object keys sorted, so one value always hashes the same. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
