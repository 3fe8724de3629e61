/**
 * Creation write-ahead log. Before the first Azure write of a multi-step creation (a dynamic
 * principal, a persisted role's app, a password on an existing app, a new root password) an entry
 * names everything the creation may produce; it is updated as object ids become known and deleted
 * once the result is owned by something else (a lease, a role, the config). A failure part-way is
 * compensated at once from the entry; an entry that outlives its request (crash, or a compensation
 * that itself failed) is rolled back by the leader's sweep (when it takes over, and on a shared store every
 * minute) and by a retry timer on the leader, unless it names a lease that was stored: then the lease owns the
 * objects and only the entry goes.
 */
import { z } from 'zod';
import type { Logger } from 'pino';
import type { Clock } from '../../core/clock.ts';
import type { SystemView } from '../../core/framework.ts';
import { newUuid } from '../../core/ids.ts';
import type { StorageOp } from '../../core/storage/types.ts';
import type { StorageView } from '../../core/storage/view.ts';
import type { AzureClients } from '../../providers/azure/clients.ts';
import { removePasswordsNamed, removePrincipal } from './revoke.ts';

/** The lease a credential will be handed out under; the entry is released when that lease is stored. */
const leaseId = z.string().optional();

const principalEntrySchema = z.object({
  kind: z.literal('principal'),
  created_at: z.number(),
  lease_id: leaseId,
  /** Unique display name of the application, so it can be recognised. */
  display_name: z.string(),
  permanently_delete: z.boolean(),
  app_object_id: z.string(),
  app_id: z.string(),
  sp_object_id: z.string(),
  /** Pre-computed before the PUTs (the assignment name is chosen by us), so a crash mid-PUT is covered. */
  role_assignment_ids: z.array(z.string()),
  group_ids: z.array(z.string()),
});

const passwordEntrySchema = z.object({
  kind: z.literal('password'),
  created_at: z.number(),
  lease_id: leaseId,
  app_object_id: z.string(),
  /** Unique display name of the password: a rollback removes exactly the passwords carrying it. */
  display_name: z.string(),
});

const walEntrySchema = z.discriminatedUnion('kind', [principalEntrySchema, passwordEntrySchema]);
export type WalEntry = z.infer<typeof walEntrySchema>;
export type PrincipalWalEntry = z.infer<typeof principalEntrySchema>;

const walKey = (id: string) => `wal/${id}`;

/** Time before a failed compensation is tried again (the sweep at start-up also covers it). */
const RETRY_MS = 60_000;
/** Older than any creation can run (several calls, each bounded by the retry deadline). */
const STALE_MS = 5 * 60_000;

export interface WalDeps {
  storage: StorageView;
  clock: Clock;
  logger: Logger;
  /** Clients for the current config; undefined when the engine is not configured. */
  clients(): Promise<AzureClients | undefined>;
  leaseExists(leaseId: string): Promise<boolean>;
  /** Whether this node leads, whether the store is shared, and the leader's fence. */
  system: Pick<SystemView, 'leading' | 'shared' | 'fence'>;
}

export class CreationWal {
  readonly #d: WalDeps;
  #cancelRetry: (() => void) | undefined;

  constructor(deps: WalDeps) {
    this.#d = deps;
  }

  /** Stamps the entry's created_at and stores it; returns the entry id. */
  async begin(entry: WalEntry): Promise<string> {
    const id = newUuid();
    entry.created_at = this.#d.clock.now();
    await this.#put(id, entry);
    // If the lease is never stored (the request failed after issuing), no one else will look at this entry.
    if (entry.lease_id) this.#scheduleRetry();
    return id;
  }

  async update(id: string, entry: WalEntry): Promise<void> {
    await this.#put(id, entry);
  }

  /** The created objects now belong to a lease, role or config. */
  async commit(id: string): Promise<void> {
    await this.#d.storage.delete(walKey(id));
  }

  /** The write that releases entry `id`, committed in one transaction with the record that now owns what it names. */
  releaseOp(id: string): StorageOp {
    return { type: 'delete', key: walKey(id) };
  }

  /**
   * Undoes what the entry names right away. When that fails too the entry stays and a timer retries,
   * so the request's own error is what the caller sees.
   */
  async compensate(id: string, clients: AzureClients): Promise<void> {
    const entry = await this.#read(id);
    if (!entry) return;
    try {
      await rollback(clients, entry);
      await this.commit(id);
    } catch (err) {
      this.#d.logger.warn({ wal: id, err: (err as Error).message }, 'compensation failed; the write-ahead log entry stays for a later sweep');
      this.#scheduleRetry();
    }
  }

  /**
   * Rolls back the entries left behind (leader work). On a store of its own it runs when the mount starts, when no
   * creation can be in flight, so every entry is an orphan regardless of its age; on a shared store other nodes may be
   * creating right now, so only entries older than any creation can run are.
   */
  async sweep(): Promise<void> {
    const ids = await this.#d.storage.list('wal/');
    if (ids.length === 0) return;
    const clients = await this.#d.clients();
    if (!clients) return;
    let failed = false;
    for (const id of ids) {
      const entry = await this.#read(id);
      if (!entry || (this.#d.system.shared && this.#d.clock.now() - entry.created_at < STALE_MS)) continue;
      try {
        if (await this.#settle(clients, id, entry)) this.#d.logger.info({ wal: id, kind: entry.kind }, 'rolled back an interrupted creation');
      } catch (err) {
        failed = true;
        this.#d.logger.warn({ wal: id, err: (err as Error).message }, 'rollback of an interrupted creation failed; will retry');
      }
    }
    if (failed) this.#scheduleRetry();
  }

  stop(): void {
    this.#cancelRetry?.();
    this.#cancelRetry = undefined;
  }

  /** Retries only entries old enough that no request can still be working on them; on the leader (elsewhere its sweep does). */
  #scheduleRetry(): void {
    if (this.#cancelRetry || !this.#d.system.leading()) return;
    this.#cancelRetry = this.#d.clock.setTimer(RETRY_MS, () => {
      this.#cancelRetry = undefined;
      void this.#retryStale().catch((err) => this.#d.logger.warn({ err: (err as Error).message }, 'write-ahead log retry failed'));
    });
  }

  async #retryStale(): Promise<void> {
    const clients = await this.#d.clients();
    if (!clients) return;
    let left = false;
    for (const id of await this.#d.storage.list('wal/')) {
      const entry = await this.#read(id);
      if (!entry || this.#d.clock.now() - entry.created_at < STALE_MS) {
        left ||= entry !== undefined;
        continue;
      }
      try {
        await this.#settle(clients, id, entry);
      } catch {
        left = true;
      }
    }
    if (left) this.#scheduleRetry();
  }

  /** Releases an entry whose lease was stored, else rolls its objects back; true when it rolled back. */
  async #settle(clients: AzureClients, id: string, entry: WalEntry): Promise<boolean> {
    const owned = entry.lease_id !== undefined && (await this.#d.leaseExists(entry.lease_id));
    if (!owned) await rollback(clients, entry);
    await this.#d.storage.transaction([{ type: 'delete', key: walKey(id) }], [], [this.#d.system.fence()]);
    return !owned;
  }

  async #read(id: string): Promise<WalEntry | undefined> {
    return this.#d.storage.getJson(walKey(id), (raw) => walEntrySchema.parse(raw));
  }

  async #put(id: string, entry: WalEntry): Promise<void> {
    await this.#d.storage.putJson(walKey(id), walEntrySchema.parse(entry));
  }
}

async function rollback(clients: AzureClients, entry: WalEntry): Promise<void> {
  if (entry.kind === 'password') {
    await removePasswordsNamed(clients, entry.app_object_id, entry.display_name);
    return;
  }
  if (!entry.app_object_id) {
    // The application may exist without its id recorded (the entry's update after creating it failed or
    // never ran); its display name is unique to this creation. Deleting it also deletes its principal.
    for (const app of await clients.graph.findApplicationsByDisplayName(entry.display_name)) {
      await clients.graph.deleteApplication(app.id, { permanently: entry.permanently_delete });
    }
  }
  await removePrincipal(clients, {
    appObjectId: entry.app_object_id,
    spObjectId: entry.sp_object_id,
    roleAssignmentIds: entry.role_assignment_ids,
    groupIds: entry.group_ids,
    permanentlyDelete: entry.permanently_delete,
  });
}
