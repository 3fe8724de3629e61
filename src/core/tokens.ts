import { createHmac, randomUUID } from 'node:crypto';
import { z } from 'zod';
import { setBounded } from './bounded-map.ts';
import { ConflictError } from './errors.ts';
import { randomBase62 } from './ids.ts';
import type { StorageCondition, StorageOp } from './storage/types.ts';
import type { PreparedWrite, StorageView } from './storage/view.ts';
import type { Clock } from './clock.ts';

const TOKEN_PREFIX = 'hvs.';
/** The length of a token Strongroom makes (as Vault's: the prefix and 24 base62 characters), the OTP length of sys/generate-root. */
export const TOKEN_LENGTH = TOKEN_PREFIX.length + 24;

/**
 * Service tokens. The raw token is returned once and never stored: every key and reference uses
 * `h` + HMAC-SHA256(salt, token), so reading the database yields nothing usable.
 */
export const tokenEntrySchema = z.object({
  salted: z.string(),
  accessor: z.string(),
  parent: z.string().default(''),
  policies: z.array(z.string()),
  path: z.string(),
  meta: z.record(z.string(), z.string()).default({}),
  displayName: z.string(),
  numUses: z.number().default(0),
  creationTime: z.number(),
  lastRenewal: z.number().default(0),
  ttl: z.number(),
  explicitMaxTtl: z.number().default(0),
  period: z.number().default(0),
  renewable: z.boolean(),
  entityId: z.string().default(''),
  boundCidrs: z.array(z.string()).default([]),
  mountAccessor: z.string().default(''),
  internal: z.record(z.string(), z.unknown()).default({}),
});
export type TokenEntry = z.infer<typeof tokenEntrySchema>;

/** A token's expiry lease: `<login path>/<salted token>`. */
export function tokenLeaseId(entry: TokenEntry): string {
  return `${entry.path}/${entry.salted}`;
}

export type NewToken = Omit<TokenEntry, 'salted' | 'accessor' | 'creationTime' | 'lastRenewal'> & { id?: string };

export class TokenStore {
  readonly #view: StorageView;
  readonly #clock: Clock;
  #salt = '';
  /**
   * Every request looks its token up, so on a store of its own (one node: every write to it is this process's, and
   * goes through the methods below, which refresh the cache) parsed entries are cached. On a shared store there is
   * none (`cache: false`): a token another node revoked must be refused here on the very next request, which no
   * notice can promise, so every lookup reads the store (docs/ha.md).
   */
  readonly #cache: Map<string, TokenEntry | null> | undefined;
  static readonly CACHE_LIMIT = 10_000;

  /** The responses wrapping tokens hold, by salted token (src/core/wrapping.ts); `remove` deletes a token's with it. */
  readonly wrapped: StorageView;

  constructor(view: StorageView, clock: Clock, options: { cache: boolean } = { cache: true }) {
    this.#view = view;
    this.wrapped = view.sub('wrapped/');
    this.#clock = clock;
    this.#cache = options.cache ? new Map() : undefined;
  }

  /** Of nodes starting together on a new store, the first salt stored is everyone's. */
  async load(): Promise<void> {
    if (!(await this.#view.get('salt'))) await this.#view.transaction([{ type: 'put', key: 'salt', value: Buffer.from(randomUUID()) }], [{ key: 'salt', expected: undefined }]);
    this.#salt = (await this.#view.get('salt'))!.toString();
  }

  /** Drops what is remembered of tokens (the node is being sealed); the store is read again after the unseal. */
  forget(): void {
    this.#cache?.clear();
    this.#salted.clear();
  }

  /**
   * Every request salts its token, and an HMAC object costs more than the rest of a cached lookup; recent
   * results are remembered (the process holds the salt and keyring anyway, so this exposes nothing new).
   */
  readonly #salted = new Map<string, string>();

  salt(token: string): string {
    let salted = this.#salted.get(token);
    if (salted === undefined) {
      salted = `h${createHmac('sha256', this.#salt).update(token).digest('hex')}`;
      setBounded(this.#salted, TokenStore.CACHE_LIMIT, token, salted);
    }
    return salted;
  }

  /** A new token and the writes that store it; it exists once `write` is committed (see `create`). */
  prepare(spec: NewToken): { token: string; entry: TokenEntry; write: PreparedWrite } {
    const token = spec.id ?? `${TOKEN_PREFIX}${randomBase62(TOKEN_LENGTH - TOKEN_PREFIX.length)}`;
    const { id: _ignored, ...rest } = spec;
    const entry: TokenEntry = { ...rest, salted: this.salt(token), accessor: randomBase62(24), creationTime: this.#clock.now(), lastRenewal: 0 };
    const ops: Array<{ type: 'put'; key: string; value: Buffer }> = [
      { type: 'put', key: `id/${entry.salted}`, value: Buffer.from(JSON.stringify(entry)) },
      { type: 'put', key: `accessor/${this.salt(entry.accessor)}`, value: Buffer.from(entry.salted) },
    ];
    if (entry.parent) ops.push({ type: 'put', key: `parent/${entry.parent}/${entry.salted}`, value: Buffer.alloc(0) });
    // A child lands only while its parent is not being revoked: the revocation lists children after its mark.
    const conditions = entry.parent ? [this.notRevoking(entry.parent)] : [];
    return { token, entry, write: { ops: this.#view.qualify(ops), conditions, committed: () => this.#remember(entry.salted, entry) } };
  }

  async create(spec: NewToken): Promise<{ token: string; entry: TokenEntry }> {
    const { token, entry, write } = this.prepare(spec);
    await this.#view.commit([write]);
    return { token, entry };
  }

  async lookupSalted(salted: string): Promise<TokenEntry | undefined> {
    const cached = this.#cache?.get(salted);
    if (cached !== undefined) return cached ?? undefined;
    const entry = await this.#view.getJson(`id/${salted}`, (raw) => tokenEntrySchema.parse(raw));
    this.#remember(salted, entry ?? null);
    return entry;
  }

  #remember(salted: string, entry: TokenEntry | null): void {
    if (this.#cache) setBounded(this.#cache, TokenStore.CACHE_LIMIT, salted, entry);
  }

  /**
   * Returns the live entry for a presented token. Expired, used-up and revoking tokens count as absent, and so
   * does a token with such an ancestor: revoking a token refuses its whole tree at once, before the tree is walked.
   */
  lookup(token: string): Promise<TokenEntry | undefined> {
    return this.lookupLive(this.salt(token));
  }

  /**
   * `lookup` by salted id, for callers that reach a token through its accessor. A token whose records are all cached
   * is answered without a storage read or an async step (every request looks its token up); otherwise the missing
   * records are read one by one and the same walk runs again.
   */
  lookupLive(salted: string): Promise<TokenEntry | undefined> {
    const cache = this.#cache;
    if (!cache) return this.#lookupStored(salted);
    const known = this.#walk(salted, cache);
    return typeof known === 'string' ? this.#lookupStored(salted) : Promise.resolve(known?.entry);
  }

  async #lookupStored(salted: string): Promise<TokenEntry | undefined> {
    const read = new Map<string, TokenEntry | null>();
    // Each turn reads one more record of the chain, which #walk bounds by MAX_DEPTH.
    for (;;) {
      const walked = this.#walk(salted, read);
      if (typeof walked !== 'string') return walked?.entry;
      read.set(walked, (await this.lookupSalted(walked)) ?? null);
    }
  }

  /**
   * The live entry for `salted` from the records `known` holds (null: known absent), undefined when it is not live,
   * or the salted id of the first record of its chain that `known` lacks.
   */
  #walk(salted: string, known: ReadonlyMap<string, TokenEntry | null>): { entry: TokenEntry } | undefined | string {
    const entry = known.get(salted);
    if (entry === undefined) return salted;
    if (!entry || !this.#live(entry)) return undefined;
    for (let parent = entry.parent, depth = 0; parent !== ''; depth++) {
      // A missing ancestor means its revocation is under way or was interrupted: fail closed.
      if (depth >= TokenStore.MAX_DEPTH) return undefined;
      const ancestor = known.get(parent);
      if (ancestor === undefined) return parent;
      if (!ancestor || !this.#live(ancestor)) return undefined;
      parent = ancestor.parent;
    }
    return { entry };
  }

  /** Token trees deeper than this are refused at creation and at lookup. */
  static readonly MAX_DEPTH = 64;

  #live(entry: TokenEntry): boolean {
    if (entry.numUses < 0) return false;
    const expires = this.expireTime(entry);
    return expires === 0 || expires > this.#clock.now();
  }

  /**
   * The first step of a revocation, durable before anything else happens: the token (and through `lookup` its
   * descendants) is refused from now on, and no child token or lease can be stored for it any more (see
   * `notRevoking`), so listing its children and leases afterwards finds all there will ever be.
   */
  async markRevoking(entry: TokenEntry): Promise<void> {
    const marked = { ...entry, numUses: -1 };
    await this.#view.transaction([
      { type: 'put', key: `revoking/${entry.salted}`, value: Buffer.alloc(0) },
      { type: 'put', key: `id/${entry.salted}`, value: Buffer.from(JSON.stringify(marked)) },
    ]);
    this.#remember(entry.salted, marked);
  }

  /** A guard for writes that attach something to a token (a child, a lease): it holds while no revocation has begun. */
  notRevoking(salted: string): StorageCondition {
    return { key: `${this.#view.prefix}revoking/${salted}`, expected: undefined };
  }

  /** How many ancestors a token has (its children would be one deeper). */
  async depth(entry: TokenEntry): Promise<number> {
    let depth = 0;
    for (let parent = entry.parent; parent !== '' && depth <= TokenStore.MAX_DEPTH; depth++) parent = (await this.lookupSalted(parent))?.parent ?? '';
    return depth;
  }

  async lookupAccessor(accessor: string): Promise<TokenEntry | undefined> {
    const salted = await this.#view.get(`accessor/${this.salt(accessor)}`);
    return salted ? this.lookupSalted(salted.toString()) : undefined;
  }

  /** 0 means the token never expires (root tokens). */
  expireTime(entry: TokenEntry): number {
    if (entry.ttl === 0) return 0;
    return (entry.lastRenewal || entry.creationTime) + entry.ttl * 1000;
  }

  /**
   * Spends one use of a limited-use token, so two requests (on two nodes) never spend the same one: the uses left
   * after it, or undefined when none was left. The last use marks the token used up at once (-1), so lookups refuse
   * it while its revocation runs.
   */
  async useOnce(salted: string): Promise<number | undefined> {
    let left: number | undefined;
    const used = await this.update(salted, (entry) => {
      if (entry.numUses <= 0) return undefined;
      left = entry.numUses - 1;
      return { ...entry, numUses: left === 0 ? -1 : left };
    });
    return used && left;
  }

  /**
   * Changes a token's entry by compare-and-set on its stored bytes: `change` gets the entry as stored now and returns
   * the new one (undefined leaves it). A write over a stale read could bring back a token another node is revoking or
   * has removed; this never does. Undefined when the token is gone or being revoked, or `change` declined.
   */
  async update(salted: string, change: (entry: TokenEntry) => TokenEntry | undefined): Promise<TokenEntry | undefined> {
    for (let attempt = 0; attempt < 16; attempt++) {
      const raw = await this.#view.get(`id/${salted}`);
      const entry = raw && tokenEntrySchema.parse(JSON.parse(raw.toString('utf8')));
      const next = entry && entry.numUses >= 0 ? change(entry) : undefined;
      if (!next) return undefined;
      if (await this.#view.transaction([{ type: 'put', key: `id/${salted}`, value: Buffer.from(JSON.stringify(next)) }], [{ key: `id/${salted}`, expected: raw }])) {
        this.#remember(salted, next);
        return next;
      }
    }
    throw new ConflictError('the token is being changed by too many requests at once; try again');
  }

  async children(salted: string): Promise<string[]> {
    return this.#view.list(`parent/${salted}/`);
  }

  /** Removes one token's records; the caller revokes children and leases first. */
  async remove(entry: TokenEntry): Promise<void> {
    const ops: Array<{ type: 'delete'; key: string }> = [
      { type: 'delete', key: `id/${entry.salted}` },
      { type: 'delete', key: `accessor/${this.salt(entry.accessor)}` },
    ];
    if (entry.parent) ops.push({ type: 'delete', key: `parent/${entry.parent}/${entry.salted}` });
    ops.push({ type: 'delete', key: `revoking/${entry.salted}` });
    // A wrapping token's response (src/core/wrapping.ts) goes with it: expired or revoked, nothing of it stays.
    ops.push({ type: 'delete', key: `wrapped/${entry.salted}` });
    this.#cache?.delete(entry.salted);
    await this.#view.transaction(ops);
    this.#cache?.delete(entry.salted);
  }

  /** Makes a child an orphan (revoke-orphan). */
  async detach(parent: string, child: string): Promise<void> {
    await this.#view.delete(`parent/${parent}/${child}`);
    await this.update(child, (entry) => ({ ...entry, parent: '' }));
  }

  /**
   * The writes that move the creation path of these tokens from below `from` to below `to` (sys/remount moving the
   * auth method that logged them in), each guarded on the entry as read: a revocation mark or a use counted
   * meanwhile is never overwritten (the commit fails and the move is prepared again).
   */
  async prepareRepath(salted: string[], from: string, to: string): Promise<PreparedWrite> {
    const ops: StorageOp[] = [];
    const conditions: StorageCondition[] = [];
    const updated: TokenEntry[] = [];
    for (const id of salted) {
      const raw = await this.#view.get(`id/${id}`);
      const entry = raw && tokenEntrySchema.parse(JSON.parse(raw.toString('utf8')));
      if (!entry || !entry.path.startsWith(from)) continue;
      const next = { ...entry, path: to + entry.path.slice(from.length) };
      ops.push({ type: 'put', key: `id/${id}`, value: Buffer.from(JSON.stringify(next)) });
      conditions.push({ key: `${this.#view.prefix}id/${id}`, expected: raw });
      updated.push(next);
    }
    return { ops: this.#view.qualify(ops), conditions, committed: () => updated.forEach((e) => this.#remember(e.salted, e)) };
  }

  /**
   * Removes index entries whose token is gone (auth/token/tidy): accessor entries, parent index entries of a
   * missing child and revocation markers. Token writes keep them together, so these are leftovers of a crash or an
   * older version; each delete is guarded on the token still being absent.
   */
  async tidy(): Promise<{ accessors: number; parents: number; revoking: number }> {
    const remove = async (key: string, salted: string): Promise<boolean> =>
      (await this.#view.get(`id/${salted}`)) === undefined && this.#view.transaction([{ type: 'delete', key }], [{ key: `id/${salted}`, expected: undefined }]);
    const counts = { accessors: 0, parents: 0, revoking: 0 };
    for (const key of await this.#view.list('accessor/')) {
      const salted = (await this.#view.get(`accessor/${key}`))?.toString();
      if (salted !== undefined && (await remove(`accessor/${key}`, salted))) counts.accessors++;
    }
    for (const parent of await this.#view.list('parent/')) {
      for (const child of await this.#view.list(`parent/${parent}`)) if (await remove(`parent/${parent}${child}`, child)) counts.parents++;
    }
    for (const salted of await this.#view.list('revoking/')) if (await remove(`revoking/${salted}`, salted)) counts.revoking++;
    return counts;
  }

  async accessors(): Promise<string[]> {
    const out: string[] = [];
    for (const key of await this.#view.list('id/')) {
      const entry = await this.lookupSalted(key);
      if (entry) out.push(entry.accessor);
    }
    return out;
  }
}
