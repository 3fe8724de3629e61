import { z } from 'zod';
import { BadRequestError, ConflictError, invalidField, PermissionDeniedError } from './errors.ts';
import { newUuid, randomHex } from './ids.ts';
import type { Barrier } from './barrier.ts';
import type { PreparedWrite } from './storage/view.ts';

/** One row of the mount table; secrets engines live at `<path>`, auth methods at `auth/<path>`. */
export const mountEntrySchema = z.object({
  path: z.string(),
  type: z.string(),
  class: z.enum(['secret', 'auth']),
  description: z.string(),
  accessor: z.string(),
  uuid: z.string(),
  local: z.boolean().default(false),
  options: z.record(z.string(), z.string()).default({}),
  config: z.object({
    default_lease_ttl: z.number().default(0),
    max_lease_ttl: z.number().default(0),
    identity_token_key: z.string().optional(),
    listing_visibility: z.string().optional(),
    /** Keys whose values audit devices write in the clear (Vault's tune options of the same names). */
    audit_non_hmac_request_keys: z.array(z.string()).optional(),
    audit_non_hmac_response_keys: z.array(z.string()).optional(),
  }),
});
export type MountEntry = z.infer<typeof mountEntrySchema>;

export const MOUNT_TABLE_KEY = 'core/mounts';
/** Paths the core owns; nothing may be mounted on or under them. */
const PROTECTED = ['sys/', 'auth/', 'audit/', 'cubbyhole/', 'identity/'];
const SINGLETONS = new Set(['system', 'token', 'identity']);

/** `fieldName` is the request field the path came in, for the message (sys/remount has two). */
export function normalizeMountPath(path: string, fieldName = 'path'): string {
  const p = path.replace(/^\/+/, '').replace(/\/+$/, '');
  if (p === '') throw new BadRequestError(`invalid value for field "${fieldName}": a mount path must not be empty`);
  if (!/^[\w.\-/]+$/.test(p) || p.split('/').some((s) => s === '' || s === '.' || s === '..')) {
    throw new BadRequestError(`invalid value for field "${fieldName}": a mount path may only hold letters, digits, "_", "-", "." and "/" separated segments`);
  }
  return `${p}/`;
}

/** How often a table change is prepared again when other nodes keep changing the table under it. */
const TABLE_RACES = 10;

/**
 * The mount table: in memory for routing, stored as one entry. Every change is a compare-and-set on the table as
 * stored, re-read first, so a change another node made meanwhile is kept (and a path it took is refused here).
 */
export class MountTable {
  readonly #barrier: Barrier;
  #entries: MountEntry[] = [];

  constructor(barrier: Barrier) {
    this.#barrier = barrier;
  }

  async load(): Promise<void> {
    this.#entries = (await this.#stored()).entries;
  }

  async #stored(): Promise<{ entries: MountEntry[]; raw: Buffer | undefined }> {
    const raw = await this.#barrier.get(MOUNT_TABLE_KEY);
    return { entries: raw ? z.array(mountEntrySchema).parse(JSON.parse(raw.toString())) : [], raw };
  }

  /** Applies `edit` to the table as stored (it may throw to refuse), guarded on what it read. */
  async #change(edit: (entries: MountEntry[]) => MountEntry[]): Promise<void> {
    for (let race = 0; race < TABLE_RACES; race++) {
      const { entries, raw } = await this.#stored();
      const next = edit(entries);
      if (await this.#barrier.transaction([{ type: 'put', key: MOUNT_TABLE_KEY, value: Buffer.from(JSON.stringify(next)) }], [{ key: MOUNT_TABLE_KEY, expected: raw }])) {
        this.#entries = next;
        return;
      }
    }
    throw new ConflictError('the mount table kept changing while this change was made; try again');
  }

  all(): MountEntry[] {
    return [...this.#entries];
  }

  /** Longest mount-path prefix of a request path. */
  match(path: string): MountEntry | undefined {
    let best: MountEntry | undefined;
    for (const e of this.#entries) {
      // The second test: the mount path itself without its trailing slash (`kv` for `kv/`).
      const hit = path.startsWith(e.path) || (e.path.length === path.length + 1 && e.path.startsWith(path));
      if (hit && (!best || e.path.length > best.path.length)) best = e;
    }
    return best;
  }

  get(fullPath: string): MountEntry | undefined {
    return this.#entries.find((e) => e.path === fullPath);
  }

  /** Builds an entry for `fullPath` (already prefixed with `auth/` for auth methods) and checks conflicts. */
  prepare(fullPath: string, type: string, cls: 'secret' | 'auth', description: string, config: MountEntry['config'], builtin = false): MountEntry {
    if (!builtin) {
      const relative = cls === 'auth' ? fullPath.slice('auth/'.length) : fullPath;
      if (SINGLETONS.has(type)) throw new PermissionDeniedError(`mount type of "${type}" is not mountable`);
      if (cls === 'secret' && PROTECTED.some((p) => relative.startsWith(p) || p.startsWith(relative))) throw new PermissionDeniedError(`cannot mount "${relative}"`);
      if (cls === 'auth' && relative === 'token/') throw new PermissionDeniedError(`cannot mount "${relative}"`);
    }
    refuseOverlap(this.#entries, fullPath);
    let accessor: string;
    do accessor = `${cls === 'auth' ? 'auth_' : ''}${type}_${randomHex(4)}`;
    while (this.#entries.some((e) => e.accessor === accessor));
    return { path: fullPath, type, class: cls, description, accessor, uuid: newUuid(), local: false, options: {}, config };
  }

  /**
   * The entry the mount at `from` becomes at `to` (sys/remount), or the reason it cannot move. A built-in mount (sys/,
   * identity/, auth/token/) never moves; the destination follows the rules of a new mount of the same class and may
   * not overlap any mount, the moving one included.
   */
  checkMove(from: string, to: string, entries = this.#entries): MountEntry {
    const current = entries.find((e) => e.path === from);
    if (!current) throw invalidField('from', 'nothing is mounted there');
    if (SINGLETONS.has(current.type)) throw invalidField('from', 'a built-in mount cannot be moved');
    const cls = to.startsWith('auth/') ? 'auth' : 'secret';
    if (cls !== current.class) {
      throw new BadRequestError(`invalid value for field "to": ${current.class === 'auth' ? 'an auth method moves to another auth/ path' : 'a secrets engine cannot move under auth/'}`);
    }
    const relative = cls === 'auth' ? to.slice('auth/'.length) : to;
    if (cls === 'secret' ? PROTECTED.some((p) => relative.startsWith(p) || p.startsWith(relative)) : relative === 'token/') {
      throw invalidField('to', 'a protected path');
    }
    const taken = entries.find((e) => e.path.startsWith(to) || to.startsWith(e.path));
    if (taken) throw new ConflictError(`invalid value for field "to": path is already in use at ${taken.path}`);
    return { ...current, path: to };
  }

  /** The table write that moves a mount (see checkMove), guarded on the table as stored now. */
  async prepareMove(from: string, to: string): Promise<{ entry: MountEntry; write: PreparedWrite }> {
    // From the table as stored: another table change landing after this read fails the commit, and the move is
    // prepared again.
    const { entries, raw } = await this.#stored();
    const moved = this.checkMove(from, to, entries);
    const table = entries.map((e) => (e.path === from ? moved : e));
    return {
      entry: moved,
      write: {
        ops: [{ type: 'put', key: MOUNT_TABLE_KEY, value: Buffer.from(JSON.stringify(table)) }],
        conditions: [{ key: MOUNT_TABLE_KEY, expected: raw }],
        committed: () => {
          this.#entries = table;
        },
      },
    };
  }

  /** Adds an entry; a ConflictError when its path overlaps one in the table as stored (another node may have taken it). */
  async add(entry: MountEntry): Promise<void> {
    await this.#change((entries) => {
      refuseOverlap(entries, entry.path);
      return [...entries, entry];
    });
  }

  async remove(fullPath: string): Promise<void> {
    await this.#change((entries) => entries.filter((e) => e.path !== fullPath));
  }

  async update(entry: MountEntry): Promise<void> {
    await this.#change((entries) => entries.map((e) => (e.uuid === entry.uuid ? entry : e)));
  }
}

function refuseOverlap(entries: MountEntry[], fullPath: string): void {
  for (const e of entries) {
    if (e.path.startsWith(fullPath) || fullPath.startsWith(e.path)) throw new ConflictError(`path is already in use at ${e.path}`);
  }
}

export function storagePrefix(entry: MountEntry): string {
  return `${entry.class === 'auth' ? 'auth' : 'logical'}/${entry.uuid}/`;
}
