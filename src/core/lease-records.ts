/**
 * A lease as stored: its record `id/<lease id>` (JSON, checked against the schema when read) and the index entries
 * pointing at it: `time/<minute>/<hash>` (when it falls due; the expiry scheduler arms its timers from these),
 * `token/<salted token>/<hash>` (the secret leases a token issued), `moved/<hash>` (the id it was issued under, after a
 * remount), `irrevocable/<hash>`, and on a shared store the revocation's `claim/<hash>`. The life cycle that writes
 * them is `leases.ts`.
 */
import { hash } from 'node:crypto';
import { z } from 'zod';
import { setBounded } from './bounded-map.ts';
import { bucketName, dueAt } from './lease-expiry.ts';
import type { KeyOp, StorageCondition } from './storage/types.ts';
import type { StorageView } from './storage/view.ts';

export const leaseEntrySchema = z.object({
  id: z.string(),
  kind: z.enum(['secret', 'token']),
  mountPath: z.string(),
  secretType: z.string().default(''),
  internal: z.record(z.string(), z.unknown()).default({}),
  issueTime: z.number(),
  expireTime: z.number(),
  lastRenewal: z.number().default(0),
  ttl: z.number(),
  maxTtl: z.number().default(0),
  renewable: z.boolean(),
  tokenSalted: z.string().default(''),
  attempts: z.number().default(0),
  nextAttempt: z.number().default(0),
  irrevocable: z.boolean().default(false),
  revokeError: z.string().default(''),
  /** The id the lease was issued under, once a remount has moved it (see `prepareMove`); empty until then. */
  issuedAs: z.string().default(''),
});
export type LeaseEntry = z.infer<typeof leaseEntrySchema>;
export type NewLease = Omit<LeaseEntry, 'attempts' | 'nextAttempt' | 'irrevocable' | 'revokeError' | 'lastRenewal' | 'issuedAs'>;

// The one-shot hash: 1.0–1.5 µs a key here, against 2.7–4.0 for a Hash object (four keys a dynamic credential).
const leaseKey = (id: string) => hash('sha256', id, 'hex').slice(0, 32);
/** An index of the irrevocable leases, so counting them is one listing (leases marked before it existed are not in it). */
export const irrevocableKey = (id: string) => `irrevocable/${leaseKey(id)}`;
/** Where the lease's entry in the time index lies, by when it falls due. */
export const timeKey = (entry: LeaseEntry) => `time/${bucketName(dueAt(entry))}/${leaseKey(entry.id)}`;
/** A shared store's claim of the lease's revocation by one node (see LeaseManager). */
export const claimKey = (id: string) => `claim/${leaseKey(id)}`;
/** Where a moved lease's id is found by the id it was issued under. */
export const movedKey = (issuedAs: string) => `moved/${leaseKey(issuedAs)}`;

/** The record of a lease and its index entries (expiry time, issuing token, the id it was issued under). */
export function recordOps(entry: LeaseEntry, raw = Buffer.from(JSON.stringify(entry))): KeyOp[] {
  const ops: KeyOp[] = [{ type: 'put', key: `id/${entry.id}`, value: raw }];
  // An irrevocable lease waits for an operator, not a time (see LeaseManager #failed).
  if (!entry.irrevocable) ops.push({ type: 'put', key: timeKey(entry), value: Buffer.from(entry.id) });
  else ops.push({ type: 'put', key: irrevocableKey(entry.id), value: Buffer.from(entry.id) });
  if (entry.tokenSalted && entry.kind === 'secret') ops.push({ type: 'put', key: `token/${entry.tokenSalted}/${leaseKey(entry.id)}`, value: Buffer.from(entry.id) });
  if (entry.issuedAs) ops.push({ type: 'put', key: movedKey(entry.issuedAs), value: Buffer.from(entry.id) });
  return ops;
}

/** The deletes of everything `recordOps` wrote for the lease, and its revocation's claim on a shared store. */
export function deletionOps(entry: LeaseEntry, claims: boolean): KeyOp[] {
  const ops: KeyOp[] = [{ type: 'delete', key: `id/${entry.id}` }, { type: 'delete', key: timeKey(entry) }];
  if (entry.tokenSalted && entry.kind === 'secret') ops.push({ type: 'delete', key: `token/${entry.tokenSalted}/${leaseKey(entry.id)}` });
  if (entry.issuedAs) ops.push({ type: 'delete', key: movedKey(entry.issuedAs) });
  if (entry.irrevocable) ops.push({ type: 'delete', key: irrevocableKey(entry.id) });
  if (claims) ops.push({ type: 'delete', key: claimKey(entry.id) });
  return ops;
}

/** Every lease id under the prefix's mount whose remainder starts with the prefix's, ignoring case. */
export async function foldedIds(view: StorageView, prefix: string, foldFrom: number): Promise<string[]> {
  const mount = prefix.slice(0, foldFrom);
  const tail = prefix.slice(foldFrom).toLowerCase();
  return (await view.listRecursive(`id/${mount}`)).map((k) => k.slice('id/'.length)).filter((id) => id.slice(foldFrom).toLowerCase().startsWith(tail));
}

/** Ids of the secret leases issued with a token (its `token/` index). */
export async function tokenLeaseIds(view: StorageView, salted: string): Promise<string[]> {
  const ids: string[] = [];
  for (const key of await view.list(`token/${salted}/`)) {
    const id = (await view.get(`token/${salted}/${key}`))?.toString();
    if (id) ids.push(id);
  }
  return ids;
}

/** Leases registered lately whose stored bytes are remembered (see LeaseRecords #recent). */
const RECENT_LIMIT = 1024;

/** Reads lease records, and remembers which bytes each entry came from. */
export class LeaseRecords {
  readonly #view: StorageView;
  /**
   * The bytes each entry read was parsed from: a change of a lease (a renewal, a failure recorded) is written over
   * exactly them, so it never lands on a lease another node revoked or changed meanwhile.
   */
  readonly #stored = new WeakMap<LeaseEntry, Buffer>();
  /**
   * Leases this node registered lately, with the bytes stored for each: a read that finds exactly those bytes (a CI
   * job revoking its credential) takes the entry as registered instead of parsing it. The read itself still happens:
   * the stored record is the truth (another node may have renewed, revoked or moved the lease).
   */
  readonly #recent = new Map<string, { raw: Buffer; entry: LeaseEntry }>();

  constructor(view: StorageView) {
    this.#view = view;
  }

  async read(id: string): Promise<LeaseEntry | undefined> {
    const raw = await this.#view.get(`id/${id}`);
    if (raw === undefined) return undefined;
    const recent = this.#recent.get(id);
    const entry = recent?.raw.equals(raw) ? { ...recent.entry } : leaseEntrySchema.parse(JSON.parse(raw.toString('utf8')));
    this.#stored.set(entry, raw);
    return entry;
  }

  /** Guard of a change of `entry`: the lease is still stored exactly as it was read. */
  unchanged(entry: LeaseEntry): StorageCondition {
    return { key: `id/${entry.id}`, expected: this.#stored.get(entry) };
  }

  /** A lease this node has just stored as `raw`. */
  remember(entry: LeaseEntry, raw: Buffer): void {
    setBounded(this.#recent, RECENT_LIMIT, entry.id, { raw, entry });
  }

  forget(id: string): void {
    this.#recent.delete(id);
  }
}
