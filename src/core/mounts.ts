import { z } from 'zod';
import { BadRequestError, ConflictError, PermissionDeniedError } from './errors.ts';
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

const TABLE_KEY = 'core/mounts';
/** Paths the core owns; nothing may be mounted on or under them. */
const PROTECTED = ['sys/', 'auth/', 'audit/', 'cubbyhole/', 'identity/'];
const SINGLETONS = new Set(['system', 'token', 'identity']);

/** `fieldName` is the request field the path came in, for the message (sys/remount has two). */
export function normalizeMountPath(path: string, fieldName = 'path'): string {
  const p = path.replace(/^\/+/, '').replace(/\/+$/, '');
  if (p === '') throw new BadRequestError(`invalid value for field "${fieldName}": a mount path must not be empty`);
  if (!/^[\w.\-/]+$/.test(p) || p.split('/').some((s) => s === '' || s === '.' || s === '..')) {
    throw new BadRequestError(`invalid value for field "${fieldName}": "${p}" may only hold letters, digits, "_", "-", "." and "/" separated segments`);
  }
  return `${p}/`;
}

export class MountTable {
  readonly #barrier: Barrier;
  #entries: MountEntry[] = [];

  constructor(barrier: Barrier) {
    this.#barrier = barrier;
  }

  async load(): Promise<void> {
    const raw = await this.#barrier.get(TABLE_KEY);
    this.#entries = raw ? z.array(mountEntrySchema).parse(JSON.parse(raw.toString())) : [];
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
    for (const e of this.#entries) {
      if (e.path.startsWith(fullPath) || fullPath.startsWith(e.path)) throw new ConflictError(`path is already in use at ${e.path}`);
    }
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
  checkMove(from: string, to: string): MountEntry {
    const current = this.get(from);
    if (!current) throw new BadRequestError(`invalid value for field "from": no mount at "${from}"`);
    if (SINGLETONS.has(current.type)) throw new BadRequestError(`invalid value for field "from": "${from}" is a built-in mount and cannot be moved`);
    const cls = to.startsWith('auth/') ? 'auth' : 'secret';
    if (cls !== current.class) {
      throw new BadRequestError(`invalid value for field "to": ${current.class === 'auth' ? 'an auth method moves to another auth/ path' : 'a secrets engine cannot move under auth/'}`);
    }
    const relative = cls === 'auth' ? to.slice('auth/'.length) : to;
    if (cls === 'secret' ? PROTECTED.some((p) => relative.startsWith(p) || p.startsWith(relative)) : relative === 'token/') {
      throw new BadRequestError(`invalid value for field "to": "${to}" is a protected path`);
    }
    const taken = this.#entries.find((e) => e.path.startsWith(to) || to.startsWith(e.path));
    if (taken) throw new ConflictError(`invalid value for field "to": path is already in use at ${taken.path}`);
    return { ...current, path: to };
  }

  /** The table write that moves a mount (see checkMove), guarded on the table as stored now. */
  async prepareMove(from: string, to: string): Promise<{ entry: MountEntry; write: PreparedWrite }> {
    const moved = this.checkMove(from, to);
    const table = this.#entries.map((e) => (e.path === from ? moved : e));
    // Another table change landing after this read would be lost: the commit fails and the move is prepared again.
    const stored = await this.#barrier.get(TABLE_KEY);
    return {
      entry: moved,
      write: {
        ops: [{ type: 'put', key: TABLE_KEY, value: Buffer.from(JSON.stringify(table)) }],
        conditions: [{ key: TABLE_KEY, expected: stored }],
        committed: () => {
          this.#entries = this.#entries.map((e) => (e.path === from ? moved : e));
        },
      },
    };
  }

  async add(entry: MountEntry): Promise<void> {
    this.#entries.push(entry);
    await this.#save();
  }

  async remove(fullPath: string): Promise<void> {
    this.#entries = this.#entries.filter((e) => e.path !== fullPath);
    await this.#save();
  }

  async update(entry: MountEntry): Promise<void> {
    this.#entries = this.#entries.map((e) => (e.path === entry.path ? entry : e));
    await this.#save();
  }

  async #save(): Promise<void> {
    await this.#barrier.put(TABLE_KEY, Buffer.from(JSON.stringify(this.#entries)));
  }
}

export function storagePrefix(entry: MountEntry): string {
  return `${entry.class === 'auth' ? 'auth' : 'logical'}/${entry.uuid}/`;
}
