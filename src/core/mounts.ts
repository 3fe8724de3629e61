import { z } from 'zod';
import { BadRequestError, ConflictError, PermissionDeniedError } from './errors.ts';
import { newUuid, randomHex } from './ids.ts';
import type { Barrier } from './barrier.ts';

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
  }),
});
export type MountEntry = z.infer<typeof mountEntrySchema>;

const TABLE_KEY = 'core/mounts';
/** Paths the core owns; nothing may be mounted on or under them. */
const PROTECTED = ['sys/', 'auth/', 'audit/', 'cubbyhole/', 'identity/'];
const SINGLETONS = new Set(['system', 'token', 'identity']);

export function normalizeMountPath(path: string): string {
  const p = path.replace(/^\/+/, '').replace(/\/+$/, '');
  if (p === '') throw new BadRequestError('invalid value for field "path": a mount path must not be empty');
  if (!/^[\w.\-/]+$/.test(p) || p.split('/').some((s) => s === '' || s === '.' || s === '..')) {
    throw new BadRequestError(`invalid value for field "path": "${p}" may only hold letters, digits, "_", "-", "." and "/" separated segments`);
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
